"""The lock file: the champion each key may load, pinned for reproducible deployments.

``KERNEVO_LOCK_FILE`` names a JSON file; with it set, the loader uses only the champions it
pins, in addition to checking their signatures::

    {"format": "kernevo.lock.v1",
     "champions": {"nvidia-h200/trsm_small/float64/m64n64":
                   {"cubin_sha256": "<hex>", "payload_sha256": "<hex>", "program_id": 17}}}

``payload_sha256`` is the sha256 of the champion's signed payload (``kernevo.signature``), so a
pin also fixes the envelope, launch and options, not only the cubin; ``program_id`` is for the
reader. :func:`write_lock_file` writes one from champions the loader holds (e.g.
``decision.champion`` of each key a deployment uses, after ``explain()``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernevo.client import ChampionKernel
from kernevo.files import read_regular_file, write_atomically
from kernevo.signature import champion_payload
from kernevo.text import printable

LOCK_FORMAT = "kernevo.lock.v1"
# About 300 bytes per pinned key: 16 MiB pins tens of thousands of keys and bounds a wrong file.
LOCK_FILE_MAX_BYTES = 16 * 2**20
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class LockFileError(ValueError):
    """A lock file that cannot be read or does not have the expected layout (one line)."""


@dataclass(frozen=True)
class LockEntry:
    """What one key is pinned to: the cubin's sha256 and the signed payload's sha256."""

    cubin_sha256: str
    payload_sha256: str
    program_id: int | None = None


def lock_key(champion: ChampionKernel) -> str:
    """The lock file's name for a champion's key: ``<gpu>/<path>/<dtype>/<shape_bucket>``."""
    return f"{champion.gpu}/{champion.path}/{champion.dtype}/{champion.shape_bucket}"


def entry_for(champion: ChampionKernel) -> LockEntry:
    """The pin of ``champion``, both digests computed from its bytes."""
    return LockEntry(
        cubin_sha256=hashlib.sha256(champion.cubin).hexdigest(),
        payload_sha256=hashlib.sha256(champion_payload(champion)).hexdigest(),
        program_id=champion.program_id,
    )


@dataclass(frozen=True)
class LockFile:
    """A parsed lock file: key (see :func:`lock_key`) → :class:`LockEntry`."""

    path: Path
    entries: Mapping[str, LockEntry]

    @classmethod
    def load(cls, path: Path, *, given: str | None = None) -> LockFile:
        """Read and check ``path``; messages name it as ``given`` (the text the user wrote,
        which a ``Path`` may have folded: ``a//b`` reads ``a/b``), default ``path``.

        Raises:
            LockFileError: unreadable, not JSON, another format, or an entry without two
                sha256 digests (the message names the file and the entry).
        """
        path = Path(path).expanduser()
        shown = printable(str(path) if given is None else given, 500)  # may hold anything
        try:
            document = json.loads(
                read_regular_file(path, LOCK_FILE_MAX_BYTES, follow_symlinks=True)
            )
        except OSError as error:
            raise LockFileError(
                f"lock file {shown}: cannot read ({error.strerror or error})"
            ) from None
        except (ValueError, RecursionError) as error:
            raise LockFileError(f"lock file {shown}: not JSON ({error})") from None
        if not isinstance(document, dict) or document.get("format") != LOCK_FORMAT:
            raise LockFileError(f"lock file {shown}: expected format {LOCK_FORMAT!r}")
        champions = document.get("champions")
        if not isinstance(champions, dict):
            raise LockFileError(f"lock file {shown}: 'champions' must be an object")
        entries: dict[str, LockEntry] = {}
        for key, pin in champions.items():
            digests = [pin.get(name) if isinstance(pin, dict) else None for name in _DIGESTS]
            if not all(isinstance(d, str) and _SHA256.match(d) for d in digests):
                raise LockFileError(
                    f"lock file {shown}: {printable(str(key))}: needs hex {' and '.join(_DIGESTS)}"
                )
            program_id = pin.get("program_id")
            entries[str(key)] = LockEntry(
                *digests, program_id=program_id if isinstance(program_id, int) else None
            )
        return cls(path, entries)

    def pinned(self, champion: ChampionKernel) -> LockEntry | None:
        """The pin for ``champion``'s key, ``None`` when the lock file does not name it."""
        return self.entries.get(lock_key(champion))


_DIGESTS = ("cubin_sha256", "payload_sha256")


def write_lock_file(path: Path, champions: Iterable[ChampionKernel]) -> Path:
    """Write a lock file pinning ``champions`` (one per key; a later one wins), atomically.

    Raises:
        OSError: the file cannot be written.
    """
    pins = {
        lock_key(champion): {
            "cubin_sha256": entry.cubin_sha256,
            "payload_sha256": entry.payload_sha256,
            "program_id": entry.program_id,
        }
        for champion in champions
        for entry in (entry_for(champion),)
    }
    document = {"format": LOCK_FORMAT, "champions": dict(sorted(pins.items()))}
    path = Path(path).expanduser()
    text = json.dumps(document, indent=1) + "\n"
    # 0644: a lock file is meant to be read and shipped with a deployment.
    write_atomically(path, text.encode("utf-8"), mode=0o644)
    return path
