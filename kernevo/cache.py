"""The loader's disk cache of champion kernels, so the loader works without the service.

Layout under the cache root, one folder per (GPU key, path, dtype)::

    <root>/<gpu>/<path>/<dtype>/<shape_bucket>.json   metadata + the sha256 of that metadata
    <root>/<gpu>/<path>/<dtype>/<cubin_sha256>.cubin  the verified cubin, named by its hash
    <root>/<gpu>/<path>/<dtype>/<shape_bucket>.absent the service (its id) had no champion (404)

(and ``<root>/warm-start/``, the loader's warm-start memo, :mod:`kernevo.warm_start`, which
records which of these files a decision read; :meth:`ChampionCache.stored_keys` never sees it).

The ``.absent`` marker is a negative entry (DNS's negative caching, RFC 2308): its modification
time says when the service last answered "no champion" for the key, so that a loader starting
within ``KERNEVO_CACHE_MAX_AGE_S`` of that answer does not ask again (:mod:`kernevo.resolver`).
It holds only the service's id (below), nothing that can run; at worst an edited date or id
makes the loader skip one question to the service for a while and use cuBLAS or the cached
champion, never run a kernel. Storing a champion for the key removes it.

Both are bound to the service that answered: an entry records ``"service"`` beside its payload
and a marker holds it as its text, the service URL without its user part
(:func:`kernevo.environment.service_id`: no credentials on disk). A cache is opened for one
service (:attr:`ChampionCache.service`); the resolver uses an entry or a marker as fresh only
when it records that service (:attr:`CacheLookup.service`, :meth:`ChampionCache.absent_service`),
so that a 404 from a wrong ``KERNEVO_API_URL`` is not remembered once the URL is fixed, and a
champion cached from one service is not served as fresh to a loader pointed at another. An
entry or marker written before the field existed records no service: another service's.

Both files are written to a temporary file in the same folder and then ``os.replace``d into
place, so a reader sees the old file or the new one, never half of one (CuPy's compiler cache
does the same). Every read re-checks both hashes: a torn, truncated or edited file is a miss
with a reason, never a crash and never a kernel that was not verified. Whatever else lies
there is a miss too, read without waiting and within a bound (:func:`read_regular_file`): a
symbolic link is not followed (one to ``/dev/zero`` would never end), a FIFO or device is not
read (a FIFO would wait for a writer forever), a file over its cap (:data:`MAX_ENTRY_BYTES`,
:data:`kernevo.client.MAX_CUBIN_BYTES`) is not loaded, and JSON nested past the parser's
recursion limit is a corrupt entry. These hashes only catch
corruption (anyone who can edit the entry can re-hash it): the resolver checks the champion's
signature again on every read (``kernevo.trust``), so an entry changed after it was written is
refused even when its hashes agree. Only champions that passed those checks are stored.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kernevo.client import (
    MAX_CUBIN_BYTES,
    MAX_METADATA_BYTES,
    ChampionKernel,
    ChampionKey,
    Sha256MismatchError,
    UnusableMetadataError,
)
from kernevo.files import read_regular_file, write_atomically

FORMAT = 1
# fullmatch throughout: "$" would also accept a name ending in a line break.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")

MAX_ENTRY_BYTES = MAX_METADATA_BYTES
"""The largest entry file read: the metadata (the cubin is a file of its own)."""


@dataclass(frozen=True)
class CacheLookup:
    """A cache read: the champion on a hit, ``None`` on a miss; ``detail`` says which and why;
    ``service`` the service id the entry records (``None``: none, an entry of an older loader,
    or a miss)."""

    champion: ChampionKernel | None
    detail: str
    service: str | None = None


def payload_sha256(payload: dict[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of ``payload`` (sorted keys, no spaces, UTF-8).

    Raises:
        UnicodeEncodeError: a string holds a lone surrogate (a ``ValueError``).
        RecursionError: ``payload`` nests past the encoder's recursion limit.
    """
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


MAX_MARKER_BYTES = 8192
"""The largest negative entry read: a service id (a URL of at most
:data:`kernevo.environment.URL_MAX` characters)."""


class ChampionCache:
    """Content-addressed champion store rooted at ``root`` (created on first write), whose
    writes record ``service`` (the id of the service the answers come from,
    :func:`kernevo.environment.service_id`; ``""`` for a cache used without one)."""

    def __init__(self, root: Path, service: str = "") -> None:
        self.root = Path(root).expanduser()
        self.service = service

    def folder(self, key: ChampionKey) -> Path:
        """The folder holding ``key``'s entries: ``<root>/<gpu>/<path>/<dtype>``.

        Raises:
            ValueError: a key part is not a plain name (letters, digits, ``._-``).
        """
        for part in (key.gpu, key.path, key.dtype, key.shape_bucket):
            if not _NAME.fullmatch(part):
                raise ValueError(f"cache key part {part!r} is not a plain name")
        return self.root / key.gpu / key.path / key.dtype

    def entry_file(self, key: ChampionKey) -> Path:
        """The metadata file of ``key``: ``<folder>/<shape_bucket>.json``."""
        return self.folder(key) / f"{key.shape_bucket}.json"

    def cubin_file(self, key: ChampionKey, cubin_sha256: str) -> Path:
        """The cubin of ``key`` whose sha256 is ``cubin_sha256``: ``<folder>/<sha256>.cubin``."""
        return self.folder(key) / f"{cubin_sha256}.cubin"

    def entry_age_s(self, key: ChampionKey, now: float | None = None) -> float | None:
        """Seconds since ``key``'s entry file was last written (``now``, default
        ``time.time()``, less its modification time; negative when that time lies ahead of
        ``now``), or ``None`` when there is no entry or it cannot be looked at. The file is not
        read here (:meth:`load` checks it); a symbolic link's own time is given, and
        :meth:`load` refuses the link. Every :meth:`store` rewrites the entry, so this is the
        time since the champion was last fetched from the service.

        Raises:
            ValueError: a key part is not a plain name (a bug in the caller).
        """
        return _age_s(self.entry_file(key), now)

    def absent_file(self, key: ChampionKey) -> Path:
        """The negative entry of ``key``: ``<folder>/<shape_bucket>.absent`` (module doc)."""
        return self.folder(key) / f"{key.shape_bucket}.absent"

    def absent_age_s(self, key: ChampionKey, now: float | None = None) -> float | None:
        """Seconds since the service last answered that it has no champion for ``key``
        (:meth:`remember_absent`; negative when the marker is dated ahead of ``now``), or
        ``None`` when no such answer is remembered.

        Raises:
            ValueError: a key part is not a plain name (a bug in the caller).
        """
        return _age_s(self.absent_file(key), now)

    def absent_service(self, key: ChampionKey) -> str | None:
        """The service id ``key``'s negative entry records, or ``None`` when there is none or
        it cannot be read (a symbolic link, a FIFO, oversized, not UTF-8: no service's). An
        empty marker, of a loader before markers named their service, is ``""``.

        Raises:
            ValueError: a key part is not a plain name (a bug in the caller).
        """
        try:
            return read_regular_file(self.absent_file(key), MAX_MARKER_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def remember_absent(self, key: ChampionKey) -> Path:
        """Record, dated now, that :attr:`service` has no champion for ``key``; returns the
        marker.

        Raises:
            OSError: the cache folder cannot be created or written.
            ValueError: a key part is not a plain name.
        """
        marker = self.absent_file(key)
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(marker, self.service.encode("utf-8"))
        return marker

    def load(self, key: ChampionKey) -> CacheLookup:
        """The cached champion for ``key``, checked end to end, or a miss with its reason.

        A hit needs: the entry parses, its payload hashes to the recorded ``payload_sha256``,
        the payload is a champion for ``key``, and ``<cubin_sha256>.cubin`` hashes to
        ``cubin_sha256`` (and the source to ``source_sha256``).

        Raises:
            ValueError: a key part is not a plain name (a bug in the caller).
        """
        entry = self.entry_file(key)
        try:
            raw = read_regular_file(entry, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return CacheLookup(None, "disk cache: no entry")
        except OSError as error:
            return CacheLookup(None, f"disk cache: unreadable entry ({_why(error)})")
        try:
            record = json.loads(raw)
        except ValueError:
            return CacheLookup(None, "disk cache: torn or corrupt entry (not JSON)")
        except RecursionError:
            return CacheLookup(None, "disk cache: corrupt entry (JSON nested too deep)")
        if not (
            isinstance(record, dict)
            and record.get("format") == FORMAT
            and isinstance(record.get("payload"), dict)
            and isinstance(record.get("payload_sha256"), str)
        ):
            return CacheLookup(None, "disk cache: corrupt entry (unexpected structure)")
        payload: dict[str, Any] = record["payload"]
        try:
            digest = payload_sha256(payload)
        except (ValueError, RecursionError) as error:
            # A lone surrogate (UnicodeEncodeError) or nesting the encoder cannot follow: no
            # store of this loader wrote it.
            return CacheLookup(None, f"disk cache: corrupt entry ({type(error).__name__})")
        if digest != record["payload_sha256"]:
            return CacheLookup(None, "disk cache: payload sha256 mismatch (torn or tampered)")
        cubin_sha = payload.get("cubin_sha256")
        if not isinstance(cubin_sha, str) or not _SHA256.fullmatch(cubin_sha):
            return CacheLookup(None, "disk cache: corrupt entry (no cubin_sha256)")
        try:
            cubin = read_regular_file(self.cubin_file(key, cubin_sha), MAX_CUBIN_BYTES)
        except OSError as error:
            return CacheLookup(None, f"disk cache: cubin missing or unreadable ({_why(error)})")
        try:
            champion = ChampionKernel.from_payload(payload, cubin)
        except Sha256MismatchError as error:
            return CacheLookup(None, f"disk cache: {error} (torn or tampered)")
        except UnusableMetadataError as error:
            return CacheLookup(None, f"disk cache: corrupt entry ({error})")
        except ValidationError as error:
            return CacheLookup(None, f"disk cache: corrupt entry ({error.error_count()} errors)")
        got = ChampionKey(champion.gpu, champion.path, champion.dtype, champion.shape_bucket)
        if got != key:
            return CacheLookup(None, "disk cache: entry belongs to another key")
        service = record.get("service")
        return CacheLookup(
            champion,
            f"champion program {champion.program_id} from disk cache",
            service if isinstance(service, str) else None,
        )

    def stored_keys(self) -> list[ChampionKey]:
        """Every key with an entry file under the root (``<gpu>/<path>/<dtype>/<bucket>.json``),
        sorted; entries are not read here (:meth:`load` checks each)."""
        found = []
        for entry in sorted(self.root.glob("*/*/*/*.json")):
            gpu, path, dtype = entry.parent.relative_to(self.root).parts
            parts = (gpu, path, dtype, entry.stem)
            if all(_NAME.fullmatch(part) for part in parts):
                found.append(ChampionKey(*parts))
        return found

    def store(self, champion: ChampionKernel) -> Path:
        """Write ``champion`` (cubin first, then metadata, recording :attr:`service`) atomically
        and drop the key's negative entry (the service has a champion now); returns the entry
        file.

        Raises:
            OSError: the cache folder cannot be created or written.
            ValueError: a key part of the champion is not a plain name.
        """
        key = ChampionKey(champion.gpu, champion.path, champion.dtype, champion.shape_bucket)
        self.folder(key).mkdir(parents=True, exist_ok=True)
        cubin_file = self.cubin_file(key, champion.cubin_sha256)
        if not _holds(cubin_file, champion.cubin_sha256):
            write_atomically(cubin_file, champion.cubin)
        payload = champion.to_payload()
        record = {
            "format": FORMAT,
            "payload_sha256": payload_sha256(payload),
            "payload": payload,
            "service": self.service,
        }
        entry = self.entry_file(key)
        write_atomically(entry, json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))
        self.absent_file(key).unlink(missing_ok=True)
        return entry


def _age_s(path: Path, now: float | None) -> float | None:
    """``now`` (default ``time.time()``) less ``path``'s modification time (a symbolic link's
    own), or ``None`` when it cannot be looked at."""
    try:
        written = path.stat(follow_symlinks=False).st_mtime
    except OSError:
        return None
    return (time.time() if now is None else now) - written


def _why(error: OSError) -> str:
    """``error`` as a short reason; a symbolic link refused by ``O_NOFOLLOW`` says so."""
    if error.errno == errno.ELOOP:
        return f"{Path(error.filename or '').name} is a symbolic link, not followed"
    return str(error)


def _holds(path: Path, sha256: str) -> bool:
    """Whether ``path`` is a regular file whose bytes hash to ``sha256``."""
    try:
        return hashlib.sha256(read_regular_file(path, MAX_CUBIN_BYTES)).hexdigest() == sha256
    except OSError:
        return False
