"""The loader's warm-start memo (issue 11, Build item 4): how a process routes and launches a
shape as an earlier process decided it the full way, without importing pydantic,
pydantic-settings, cryptography, httpx or asyncio (about 220 ms of ``kernevo.load`` on the
H200 host; ``scripts/loader_startup.py``).

When the resolver has decided a shape the full way (:mod:`kernevo.resolver`: settings parsed,
every champion's trust checks passed or refused, the kernel or the fallback chosen) and that
decision rests on the disk cache alone, it records it here (:meth:`WarmStart.record`): the
route, path, bucket, reason, the paths compared, and for a kernel what its launch needs
(program id, arch, kernel names, the cubin file and its sha256). One memo file per (op, dtype,
GPU and secret) beside the disk cache::

    <cache root>/warm-start/<op>.<dtype>.<gpu key>.<secret id>.json

(the secret id, :func:`secret_id`: a short MAC of a fixed label under the secret below, so that
processes of two key folders sharing one disk cache each keep their own memo)

    {"format": "kernevo.warm-start.v1",
     "body": {"op", "dtype", "gpu", "fingerprint": {part: hex}, "written_at",
              "shapes": {"64,64": {route, reason, path, shape_bucket, fallback, decided_at,
                                   compared, kernel, files}}},
     "mac": "<HMAC-SHA256 of the body's canonical JSON>"}

The MAC's key is a random 32-byte secret, ``<key folder>/warm-start.secret`` (the local key
pair's folder, ``KERNEVO_KEY_DIR``), created mode 0600 on the first memo write, exclusively:
written under a temporary name and hard-linked to its name, as ``kernevo.keys`` creates the
signing key, so of two processes creating it at once one wins and the other reads the
winner's. The secret is used only while it and its folder are this user's and private (the
folder not writable by group or others, the file neither readable nor writable by them).

A memo is used only if its MAC verifies (constant-time compare) and its **fingerprint** equals
this process's: each part an HMAC, under the secret, of what the full path's decisions depended
on, taken without pydantic (:func:`fingerprint_material`): ``environment`` (every ``KERNEVO_*``
variable, sorted ``[name, value]`` pairs as JSON), ``arguments`` (``load``'s keyword
arguments), ``trust`` (the sha256 of each trusted key file of ``KERNEVO_TRUSTED_KEYS``, each
entry stripped as :func:`kernevo.keys.trusted_keys` reads it, of the local public key with the
owner and mode of it and its folder, of ``KERNEVO_LOCK_FILE``), ``gpu`` (the identity
:func:`kernevo.device.current_gpu` reports but its index: decisions do not depend on which
device of a kind) and ``code`` (size and modification time of every ``.py`` of the loader and of
its path descriptions, a version that also follows an edited source tree). The full path
records its decisions under the fingerprint :meth:`WarmStart.open` took only while the inputs
it read itself (maybe much later: a :class:`kernevo.solver.WarmResolver` builds it on the first
shape the memo lacks) are still those (:meth:`WarmStart.inputs_unchanged`, the source files
looked at again); only shapes of integers are recorded. A memo'd shape is then replayed
(:meth:`WarmStart.decision`) only while the disk-cache files its decision read are unchanged
(inode, size, modification time in ns, or still absent), those it used as fresh (an entry
served without asking the service, a remembered 404) are there and younger than
``KERNEVO_CACHE_MAX_AGE_S`` as the full path requires, and, for a kernel, its cubin file hashes
to the memo'd sha256. Anything missing, stale, mismatched or unreadable is a miss: the full
path, as without a memo, with one DEBUG line on the ``"kernevo"`` logger; a MAC that does not
verify (compared as bytes, whatever the file holds) logs a WARNING once (the memo was tampered
with: a memo of another secret has another file name), and the full path rewrites the memo.
``KERNEVO_WARM_START=0`` turns the memo off: nothing read, nothing written.

Why this is as safe as the full path (docs/CONTRACTS.md, "Warm start"): someone who can write
the cache folder but not read the key folder cannot forge a memo (the MAC); someone who can read
the key folder could already sign champions with the local key, and where no local key is
trusted, reading this user's 0600 secret means being this user or root, who can change the
loader itself; revoking a key, editing the lock file or changing any ``KERNEVO_*`` variable
changes the fingerprint, and the next process decides the full way. The bytes launched are the
ones hashed, whose sha256 a full decision admitted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import hmac
import json
import logging
import math
import operator
import os
import re
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernevo.decision import Compared, Decision
from kernevo.device import GpuInfo
from kernevo.files import read_regular_file, write_atomically

log = logging.getLogger("kernevo")

FORMAT = "kernevo.warm-start.v1"
FOLDER = "warm-start"
"""The memo's folder under the disk cache's root (not a GPU key: those are lower case)."""
SECRET_FILE = "warm-start.secret"
SECRET_BYTES = 32
MAX_MEMO_BYTES = 2**20
"""The largest memo read: :data:`MAX_SHAPES` shapes of about 1 KiB each, well under."""
MAX_SHAPES = 256
"""Shapes a memo keeps (the oldest decided goes first): every load reads and MACs the whole
memo, so it stays small (256 shapes of one path: about 120 KiB, a few ms to parse)."""

# The defaults and caps of the full path's own modules, which import pydantic or cryptography
# and so cannot be imported here (tests/test_warm_start.py checks each against its source).
DEFAULT_CACHE_DIR = "~/.cache/kernevo"  # kernevo.settings.LoaderSettings.cache_dir
DEFAULT_KEY_DIR = "~/.config/kernevo/keys"  # kernevo.keys.DEFAULT_KEY_DIR
PUBLIC_KEY_FILE = "champion-signing.pub"  # kernevo.keys.PUBLIC_KEY_FILE
KEY_FILE_MAX_BYTES = 64 * 1024  # kernevo.keys.KEY_FILE_MAX_BYTES
LOCK_FILE_MAX_BYTES = 16 * 2**20  # kernevo.lockfile.LOCK_FILE_MAX_BYTES
MAX_CUBIN_BYTES = 16 * 2**20  # kernevo.client.MAX_CUBIN_BYTES
DEFAULT_MAX_AGE_S = 3600.0  # LoaderSettings.cache_max_age_s, and its bound below
MAX_AGE_LIMIT_S = 7 * 24 * 3600.0

PREFIX = "KERNEVO_"
SWITCH = "KERNEVO_WARM_START"
# kernevo.environment.BOOLEAN_FALSE and BOOLEAN_TRUE, the spellings every boolean KERNEVO_*
# variable takes (copied, not imported: that module costs the warm start ~5 ms).
_OFF = frozenset({"0", "false", "f", "no", "n", "off"})
_ON = frozenset({"1", "true", "t", "yes", "y", "on"})
# A plain name: a GPU key, op, dtype, path, bucket, or a part of a cache file's name.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_RAW_KEY_B64 = re.compile(r"^[A-Za-z0-9+/]{43}=$")  # kernevo.keys: base64 of 32 raw bytes
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class WarmSettings:
    """What the warm start reads of the loader's settings, from ``load``'s arguments and the
    raw ``KERNEVO_*`` variables, without pydantic (defaults as :class:`LoaderSettings`'):
    where the disk cache and the key folder are, the trust inputs, and the max age (seconds,
    ``> 0``: a max age of 0 asks the service first, which no memo can stand for)."""

    cache_dir: Path
    key_dir: Path
    lock_file: Path | None
    trusted_keys: tuple[str, ...]
    cache_max_age_s: float


@dataclass(frozen=True)
class CacheFile:
    """A disk-cache file a decision read, as it was before it was read: ``name`` relative to the
    cache's root (``/``-separated), ``version`` its (inode, size, modification time in ns) or
    ``None`` when there was none, and ``fresh`` whether the decision used it as younger than the
    max age (an entry served without asking the service, a remembered 404)."""

    name: str
    version: tuple[int, int, int] | None
    fresh: bool = False

    @classmethod
    def observe(cls, root: Path, path: Path, *, fresh: bool) -> CacheFile:
        """``path`` (under ``root``) as it is now; a file that cannot be looked at counts as
        absent, as the full path's read would find nothing there either."""
        return cls(path.relative_to(root).as_posix(), _version(path), fresh)

    def change(self, root: Path, now: float, max_age_s: float) -> str | None:
        """Why the file under ``root`` no longer is as the decision read it (replaced, removed,
        created, or, when ``fresh``, absent, ``max_age_s`` old or dated ahead of ``now``);
        ``None`` when it is."""
        if not _cache_name(self.name):
            return f"{self.name!r} is not a disk-cache file name"
        version = _version(root / self.name)
        if version != self.version:
            return f"{self.name} changed since the decision"
        if self.fresh:
            # Its date is what bounds the replay by the max age: a file the decision used as
            # fresh but that was gone when observed (removed between its age and its look by
            # a concurrent store) leaves nothing to date it, and would replay forever.
            if version is None:
                return f"{self.name} used as fresh but absent: nothing dates it"
            age = now - version[2] / 1e9
            if not 0 <= age < max_age_s:
                return f"{self.name} written {age:.0f} s ago, not within {max_age_s:g} s"
        return None


@dataclass(frozen=True)
class MemoKernel:
    """A memo'd champion: what :func:`kernevo.kernel.build_driver` and the solver read to launch
    it (path, dtype, arch, kernel names, the cubin and its sha256) and what ``explain()`` names
    (GPU key, bucket, program id). ``cubin`` is read from ``cubin_file`` (relative to the disk
    cache's root) and checked against ``cubin_sha256`` when a decision is replayed. The memo
    holds only champions built for the device's arch: ``source`` and ``compile_options``, which
    a recompile would read, stay empty."""

    path: str
    dtype: str
    gpu: str
    shape_bucket: str
    program_id: int
    arch: str
    cubin_sha256: str
    kernel_name: str
    config_kernel_name: str
    cubin_file: str
    cubin: bytes = field(default=b"", repr=False)
    source: str = field(default="", repr=False)
    compile_options: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The memo's record of it: every field but the bytes and the recompile's."""
        skip = {"cubin", "source", "compile_options"}
        fields = dataclasses.fields(self)
        return {f.name: getattr(self, f.name) for f in fields if f.name not in skip}


@dataclass(frozen=True)
class MemoEntry:
    """One shape's memo'd decision: what :class:`kernevo.decision.Decision` held (but the
    refusals, whose detail the reason carries), when it was decided (``time.time()``), its
    kernel (``route == "kernel"``) and the disk-cache files it read."""

    route: str
    reason: str
    path: str | None
    shape_bucket: str | None
    fallback: str
    decided_at: float
    compared: tuple[Compared, ...] = ()
    kernel: MemoKernel | None = None
    files: tuple[CacheFile, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The entry as the memo stores it (JSON values only)."""
        return {
            "route": self.route,
            "reason": self.reason,
            "path": self.path,
            "shape_bucket": self.shape_bucket,
            "fallback": self.fallback,
            "decided_at": self.decided_at,
            "compared": [dataclasses.asdict(item) for item in self.compared],
            "kernel": None if self.kernel is None else self.kernel.to_json(),
            "files": [
                {
                    "name": f.name,
                    "version": None if f.version is None else list(f.version),
                    "fresh": f.fresh,
                }
                for f in self.files
            ],  # fmt: skip
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoEntry:
        """The entry :meth:`to_json` wrote.

        Raises:
            KeyError, TypeError, ValueError: not such an entry (a memo of another format).
        """
        kernel = data["kernel"]
        return cls(
            route=str(data["route"]),
            reason=str(data["reason"]),
            path=data["path"],
            shape_bucket=data["shape_bucket"],
            fallback=str(data["fallback"]),
            decided_at=float(data["decided_at"]),
            compared=tuple(Compared(**item) for item in data["compared"]),
            kernel=None if kernel is None else MemoKernel(**kernel),
            files=tuple(
                CacheFile(str(f["name"]), _stored_version(f["version"]), bool(f["fresh"]))
                for f in data["files"]
            ),
        )


class WarmStart:
    """The warm-start memo of one (op, dtype, GPU) as one process sees it (module doc): the
    decisions it may replay (:meth:`decision`) and those it records (:meth:`record`). Built by
    :meth:`open`; safe to share between threads."""

    def __init__(
        self,
        op: str,
        dtype: str,
        gpu: GpuInfo,
        settings: WarmSettings,
        material: Mapping[str, str],
    ) -> None:
        self.op = op
        self.dtype = dtype
        self.gpu = gpu
        self.settings = settings
        # Named once the secret is known (memo_name): until then, a path no memo has.
        self.memo_file = settings.cache_dir / FOLDER / f"{op}.{dtype}.{gpu.key}.json"
        self._material = dict(material)
        self._lock = threading.Lock()
        self._secret: bytes | None = None
        self._entries: dict[tuple[int, ...], MemoEntry] = {}

    @classmethod
    def open(
        cls,
        op: str,
        dtype: str,
        gpu: object,
        arguments: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
    ) -> WarmStart | None:
        """The memo for ``op`` in ``dtype`` on ``gpu`` (a :class:`kernevo.device.GpuInfo`) under
        ``load``'s keyword ``arguments`` and ``environ`` (default ``os.environ``), its decisions
        read when the MAC and fingerprint hold (:meth:`holds_decisions`). ``None`` when the warm
        start is off (``KERNEVO_WARM_START=0``) or cannot stand for the full path: a
        ``KERNEVO_WARM_START`` that is not a boolean (the full path refuses it), a max age
        that is 0 or does not parse (the full path reports it), one ``KERNEVO_*`` variable set
        under two spellings, a name that is not plain. Never raises.
        """
        environ = os.environ if environ is None else environ
        variables = _variables(environ)
        # Off, or a value that is not a boolean: the full path's settings refuse that one.
        if variables is None or not _switched_on(variables.get(SWITCH)):
            return None
        if not isinstance(gpu, GpuInfo) or not all(
            _NAME.fullmatch(name) for name in (op, dtype, gpu.key)
        ):
            return None
        try:
            settings = read_settings(arguments, variables)
            if settings is None:
                return None
            memo = cls(op, dtype, gpu, settings, fingerprint_material(
                arguments, environ, gpu, settings
            ))  # fmt: skip
        except (OSError, ValueError, TypeError) as error:
            log.debug("kernevo: warm start off: %s", error)
            return None
        memo._read()
        return memo

    def holds_decisions(self) -> bool:
        """Whether the memo read at :meth:`open` holds decisions this process may replay."""
        return bool(self._entries)

    def agrees_with(self, settings: Any) -> bool:
        """Whether the full path's parsed settings (a :class:`kernevo.settings.LoaderSettings`)
        say what :attr:`settings` read without pydantic; a memo is written only then, so that a
        value read two ways can never point the two paths at different files."""
        mine = self.settings
        theirs = (settings.cache_dir, settings.key_dir, settings.lock_file,
                  tuple(settings.trusted_keys), float(settings.cache_max_age_s))  # fmt: skip
        agree = theirs == (mine.cache_dir, mine.key_dir, mine.lock_file, mine.trusted_keys,
                           mine.cache_max_age_s)  # fmt: skip
        if not agree:
            log.debug("kernevo: warm start off: the settings read two ways differ")
        return agree

    def inputs_unchanged(self, arguments: Mapping[str, Any]) -> bool:
        """Whether what decisions depend on is now what this memo was opened under
        (:func:`fingerprint_material` taken again from ``os.environ`` and ``load``'s keyword
        ``arguments``, the loader's source files looked at again). The full path asks it once
        it has read its settings and trust policy and imported its modules, which for a
        :class:`kernevo.solver.WarmResolver` may be long after :meth:`open` (the first shape the
        memo lacks): its decisions are recorded under :meth:`open`'s fingerprint, so a variable,
        key file, lock file or source file changed in between would bind decisions made under
        the new inputs to the old ones, for a later process under the old ones to replay."""
        try:
            now = fingerprint_material(arguments, os.environ, self.gpu, self.settings,
                                       code=_code_digest())  # fmt: skip
        except (OSError, ValueError, TypeError) as error:
            log.debug("kernevo: warm-start memo not written: %s", error)
            return False
        changed = sorted(name for name in now if now[name] != self._material.get(name))
        if changed:
            log.debug("kernevo: warm-start memo not written: %s changed since load", changed)
        return not changed

    def decision(self, shape: tuple[int, ...]) -> Decision | None:
        """The memo'd decision for ``shape`` if it still holds (module doc: its disk-cache files
        unchanged and fresh enough, its cubin hashing to the memo'd sha256), its reason saying it
        came from the memo; else ``None`` (and a DEBUG line): decide the full way."""
        with self._lock:
            entry = self._entries.get(shape)
        if entry is None:
            return None
        root, now = self.settings.cache_dir, time.time()
        for cache_file in entry.files:
            change = cache_file.change(root, now, self.settings.cache_max_age_s)
            if change is not None:
                return self._miss(shape, change)
        kernel = entry.kernel
        if entry.route == "kernel":
            if kernel is None or not _cache_name(kernel.cubin_file):
                return self._miss(shape, "no kernel recorded")
            try:
                cubin = read_regular_file(root / kernel.cubin_file, MAX_CUBIN_BYTES)
            except OSError as error:
                return self._miss(shape, f"cubin unreadable ({error})")
            if hashlib.sha256(cubin).hexdigest() != kernel.cubin_sha256:
                return self._miss(shape, f"{kernel.cubin_file} does not hash to its sha256")
            kernel = dataclasses.replace(kernel, cubin=cubin)
        reason = (
            f"warm-start memo (decided {max(now - entry.decided_at, 0.0):.0f} s ago by the full "
            "path; KERNEVO_* settings, trust inputs, GPU, loader code and disk-cache files "
            f"unchanged): {entry.reason}"
        )
        return Decision(
            shape,
            entry.route,
            reason,
            path=entry.path,
            shape_bucket=entry.shape_bucket,
            champion=kernel,
            compared=entry.compared,
            fallback=entry.fallback,
        )

    def record(
        self,
        shape: tuple[int, ...],
        decision: Decision,
        files: tuple[CacheFile, ...],
        cubin_file: Path | None,
    ) -> None:
        """Record ``decision``, made the full way for ``shape``, resting on the disk-cache
        ``files``; for a kernel, ``cubin_file`` is its cubin in the disk cache. A kernel built
        for another arch than the device's (recompiled on load) is not recorded. The memo is
        rewritten at once (the secret created first if there is none); a memo that cannot be
        written is a DEBUG line, never an error. A shape whose values are not integers
        (``explain(64.0, 64)``, NaN, an int too long to write) is not recorded: the memo could
        not read it back, and would be dropped whole."""
        if _shape_text(shape) is None:
            log.debug("kernevo: warm-start memo: shape %.80r not recorded (not integers)", shape)
            return
        shape = tuple(operator.index(value) for value in shape)
        kernel = None
        if decision.route == "kernel":
            champion = decision.champion
            if champion is None or cubin_file is None or champion.arch != self.gpu.arch:
                return
            kernel = MemoKernel(
                path=champion.path,
                dtype=champion.dtype,
                gpu=champion.gpu,
                shape_bucket=champion.shape_bucket,
                program_id=champion.program_id,
                arch=champion.arch,
                cubin_sha256=champion.cubin_sha256,
                kernel_name=champion.kernel_name,
                config_kernel_name=champion.config_kernel_name,
                cubin_file=cubin_file.relative_to(self.settings.cache_dir).as_posix(),
            )
        entry = MemoEntry(
            route=decision.route,
            reason=decision.reason,
            path=decision.path,
            shape_bucket=decision.shape_bucket,
            fallback=decision.fallback,
            decided_at=time.time(),
            compared=decision.compared,
            kernel=kernel,
            files=files,
        )
        with self._lock:
            try:
                secret = self._secret or _create_secret(self.settings.key_dir)
            except OSError as error:
                log.debug("kernevo: warm-start memo not written: no secret (%s)", error)
                return
            if secret is None:
                return
            self._secret = secret
            self.memo_file = self._memo_file(secret)
            self._entries[shape] = entry
            while len(self._entries) > MAX_SHAPES:
                oldest = min(self._entries, key=lambda s: self._entries[s].decided_at)
                del self._entries[oldest]
            try:
                self._write(secret)
            except (OSError, ValueError) as error:
                log.debug("kernevo: warm-start memo %s not written: %s", self.memo_file, error)

    def _memo_file(self, secret: bytes) -> Path:
        """The memo's file under ``secret``: ``<cache root>/warm-start/<op>.<dtype>.<gpu
        key>.<secret id>.json`` (:func:`secret_id`), so that two key folders sharing one disk
        cache keep a memo each instead of overwriting each other's (and a MAC that does not
        verify means the file was changed, not that another folder's secret wrote it)."""
        name = f"{self.op}.{self.dtype}.{self.gpu.key}.{secret_id(secret)}.json"
        return self.settings.cache_dir / FOLDER / name

    def _fingerprint(self, secret: bytes) -> dict[str, str]:
        """Each part of the material as an HMAC under ``secret`` (nothing of it, e.g. a token
        in ``KERNEVO_API_TOKEN``, is written in the clear)."""
        # surrogatepass: os.environ holds undecodable bytes as lone surrogates (surrogateescape),
        # which strict UTF-8 refuses; this encoding of them stays one-to-one.
        return {
            name: hmac.new(
                secret, f"{name}\0{text}".encode("utf-8", "surrogatepass"), hashlib.sha256
            ).hexdigest()
            for name, text in self._material.items()
        }

    def _read(self) -> None:
        """Read the memo: its decisions when its MAC and fingerprint hold, else none."""
        try:
            self._secret = _read_secret(self.settings.key_dir)
        except OSError as error:
            log.debug("kernevo: warm-start secret unusable: %s", error)
            return
        if self._secret is None:
            log.debug("kernevo: no warm-start secret yet in %s", self.settings.key_dir)
            return
        self.memo_file = self._memo_file(self._secret)
        try:
            record = json.loads(read_regular_file(self.memo_file, MAX_MEMO_BYTES))
        except FileNotFoundError:
            log.debug("kernevo: no warm-start memo at %s", self.memo_file)
            return
        except (OSError, ValueError, RecursionError) as error:
            log.debug("kernevo: warm-start memo %s unreadable: %s", self.memo_file, error)
            return
        if not (
            isinstance(record, dict)
            and record.get("format") == FORMAT
            and isinstance(record.get("body"), dict)
            and isinstance(record.get("mac"), str)
        ):
            log.debug("kernevo: warm-start memo %s of another format", self.memo_file)
            return
        body = record["body"]
        try:
            expected = _mac(self._secret, body)
        except (ValueError, RecursionError) as error:
            log.debug("kernevo: warm-start memo %s unreadable: %s", self.memo_file, error)
            return
        # Bytes: compare_digest raises TypeError on a str holding anything but ASCII.
        mac = record["mac"].encode("utf-8", "surrogatepass")
        if not hmac.compare_digest(expected.encode("ascii"), mac):
            _warn_once(
                "mac",
                str(self.memo_file),
                f"kernevo: the warm-start memo {self.memo_file} does not match its MAC (changed "
                "by someone else since this key folder's secret wrote it); deciding the full "
                "way and rewriting it",
            )
            return
        ours = self._fingerprint(self._secret)
        theirs = body.get("fingerprint")
        if theirs != ours:
            changed = sorted(name for name in ours if not isinstance(theirs, dict)
                             or theirs.get(name) != ours[name])  # fmt: skip
            log.debug("kernevo: warm-start memo %s is for other %s", self.memo_file, changed)
            return
        if (body.get("op"), body.get("dtype"), body.get("gpu")) != (
            self.op, self.dtype, self.gpu.key
        ):  # fmt: skip
            log.debug("kernevo: warm-start memo %s is another problem's", self.memo_file)
            return
        try:
            self._entries = {
                tuple(int(v) for v in key.split(",")): MemoEntry.from_json(value)
                for key, value in body["shapes"].items()
            }
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            log.debug("kernevo: warm-start memo %s unreadable: %s", self.memo_file, error)
            self._entries = {}

    def _write(self, secret: bytes) -> None:
        """Write the memo of :attr:`_entries` (its folder created), MAC'd under ``secret``."""
        body = {
            "op": self.op,
            "dtype": self.dtype,
            "gpu": self.gpu.key,
            "fingerprint": self._fingerprint(secret),
            "written_at": time.time(),
            "shapes": {
                _shape_text(shape): entry.to_json()
                for shape, entry in sorted(self._entries.items())
            },
        }
        record = {"format": FORMAT, "body": body, "mac": _mac(secret, body)}
        self.memo_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.memo_file, json.dumps(record, sort_keys=True).encode("utf-8"))

    def _miss(self, shape: tuple[int, ...], why: str) -> None:
        log.debug("kernevo: warm-start memo not used for %s: %s", shape, why)
        return None


def secret_id(secret: bytes) -> str:
    """A short id of ``secret`` for the memo's file name: the first 16 hex digits of the
    HMAC-SHA256, keyed by the secret, of a fixed label (64 bits tell a user's few key folders
    apart; the id says nothing of the secret, being a MAC under it)."""
    return hmac.new(secret, b"kernevo warm-start memo name", hashlib.sha256).hexdigest()[:16]


def read_settings(
    arguments: Mapping[str, Any], variables: Mapping[str, str]
) -> WarmSettings | None:
    """The :class:`WarmSettings` of ``load``'s keyword ``arguments`` (each overriding its
    variable) and the ``KERNEVO_*`` ``variables`` (upper-case names), or ``None`` when the max
    age is 0, out of range (``0 < s <= 604800``) or does not parse.

    Raises:
        ValueError, TypeError: a path that is no path (a NUL character, a value of another type).
    """

    def setting(name: str, default: Any) -> Any:
        if name in arguments:
            return arguments[name]
        return variables.get(PREFIX + name.upper(), default)

    lock = setting("lock_file", None)
    trusted = setting("trusted_keys", ())
    if isinstance(trusted, str):  # the variable: comma-separated, as LoaderSettings splits it
        trusted = [part.strip() for part in trusted.split(",") if part.strip()]
    try:
        max_age = float(setting("cache_max_age_s", DEFAULT_MAX_AGE_S))
    except (TypeError, ValueError):
        return None
    if not (math.isfinite(max_age) and 0 < max_age <= MAX_AGE_LIMIT_S):
        return None
    return WarmSettings(
        cache_dir=Path(setting("cache_dir", DEFAULT_CACHE_DIR)).expanduser(),
        key_dir=Path(setting("key_dir", DEFAULT_KEY_DIR)).expanduser(),
        lock_file=None if lock is None else Path(lock).expanduser(),
        trusted_keys=tuple(str(key) for key in trusted),
        cache_max_age_s=max_age,
    )


def fingerprint_material(
    arguments: Mapping[str, Any],
    environ: Mapping[str, str],
    gpu: GpuInfo,
    settings: WarmSettings,
    *,
    code: str | None = None,
) -> dict[str, str]:
    """What the full path's decisions depend on, part by part, as text (module doc): the
    ``KERNEVO_*`` ``environment``, ``load``'s ``arguments``, the ``trust`` inputs (file
    digests; a file missing or unreadable is named so), the ``gpu`` identity but its index,
    and the ``code`` of the loader and its path descriptions (default :func:`code_identity`,
    this process's)."""
    # JSON, not "name=value" lines: a value holding a line break ("t\nKERNEVO_LOCK_FILE=…")
    # would read as two variables, the same text as another environment.
    environment = json.dumps(
        [[name, environ[name]] for name in sorted(environ) if name.upper().startswith(PREFIX)]
    )
    plain = {name: _plain(value) for name, value in arguments.items()}
    public = settings.key_dir / PUBLIC_KEY_FILE
    digest = _digest(public, KEY_FILE_MAX_BYTES)
    # Whether the local key is trusted depends on the owner and mode of it and its folder; the
    # folder alone says nothing (the first memo write creates it to hold the secret).
    trust = ["no local key"] if digest == "missing" else [
        f"local key {_owner_mode(settings.key_dir)} {_owner_mode(public)} {digest}"
    ]  # fmt: skip
    # As kernevo.keys.trusted_keys reads them: each entry stripped, empty ones skipped (a path
    # given with a line break must be digested as the file the full path reads, not a missing one).
    for entry in filter(None, (text.strip() for text in settings.trusted_keys)):
        if not _RAW_KEY_B64.match(entry):  # a key file (a raw key is in the text already)
            trust.append(f"trusted {entry} {_digest(Path(entry).expanduser(), KEY_FILE_MAX_BYTES)}")
    if settings.lock_file is not None:
        trust.append(f"lock file {_digest(settings.lock_file, LOCK_FILE_MAX_BYTES)}")
    identity = {name: value for name, value in dataclasses.asdict(gpu).items() if name != "index"}
    return {
        "environment": environment,
        "arguments": json.dumps(plain, sort_keys=True),
        "trust": "\n".join(trust),
        "gpu": json.dumps(identity, sort_keys=True),
        "code": code_identity() if code is None else code,
    }


@functools.cache
def code_identity() -> str:
    """The sha256 of the name, size and modification time (ns) of every ``.py`` file of the
    ``kernevo`` package and of the path descriptions it launches through (``seeds``, or the
    light wheel's ``kernevo._seeds``): what an upgrade or an edit of the loader or of a path's
    spec changes. Computed once per process (the modules imported do not change either;
    :meth:`WarmStart.inputs_unchanged` looks again, :func:`_code_digest`)."""
    return _code_digest()


def _code_digest() -> str:
    """:func:`code_identity`, the files looked at now."""
    from kernevo.paths import package

    roots = {Path(__file__).resolve().parent}
    seeds = Path(package.__file__ or "").resolve().parent
    if not any(root in seeds.parents for root in roots):
        roots.add(seeds)
    digest = hashlib.sha256()
    for root in sorted(roots):
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
            for name in sorted(names):
                if name.endswith(".py"):
                    path = Path(folder, name)
                    info = path.stat()
                    digest.update(f"{path} {info.st_size} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _shape_text(shape: tuple[Any, ...]) -> str | None:
    """The memo's key of ``shape``: its values as decimal integers joined by ``,`` (what
    :meth:`WarmStart._read` parses back), or ``None`` when one is not an integer (a float, a
    NaN) or is too long to write as text (Python's ``int`` to ``str`` digit limit)."""
    try:
        return ",".join(str(operator.index(value)) for value in shape)
    except (TypeError, ValueError):
        return None


def _cache_name(name: str) -> bool:
    """Whether ``name`` is a file of the disk cache as the memo names one: plain names joined
    by ``/`` (no ``..``, no absolute path: the memo is MAC'd, this only keeps a bug inside)."""
    return all(_NAME.fullmatch(part) for part in name.split("/"))


def _stored_version(raw: Any) -> tuple[int, int, int] | None:
    """A :attr:`CacheFile.version` as the memo stores it (a list of three integers, or null).

    Raises:
        ValueError, TypeError: anything else.
    """
    if raw is None:
        return None
    inode, size, mtime_ns = (int(value) for value in raw)
    return (inode, size, mtime_ns)


def _variables(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The ``KERNEVO_*`` variables by upper-case name (pydantic-settings matches any case), or
    ``None`` when one is set under two spellings (which one the full path reads is unspecified).
    """
    found: dict[str, str] = {}
    for name, value in environ.items():
        upper = name.upper()
        if upper.startswith(PREFIX):
            if upper in found:
                return None
            found[upper] = value
    return found


def _switched_on(value: str | None) -> bool | None:
    """``KERNEVO_WARM_START``: unset or true (``1``, ``true``, ``yes``, ``on``, … any case)
    turns the warm start on, false (``0``, ``false``, ``no``, ``off``, …) off; ``None`` for
    any other value, which the full path's settings refuse (``SettingsError``), so the warm
    start declines rather than guess."""
    if value is None:
        return True
    lowered = value.lower()
    if lowered in _ON:
        return True
    if lowered in _OFF:
        return False
    return None


def _read_secret(key_dir: Path) -> bytes | None:
    """The secret in ``key_dir``, or ``None`` when there is none yet.

    Raises:
        OSError: the folder or file is not private to this user (a WARNING once, since someone
            else could then forge memos), not a regular file, or not :data:`SECRET_BYTES` long.
    """
    path = key_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        info = os.fstat(fd)
        problem = _not_private(key_dir, os.stat(key_dir), what="folder")
        problem = problem or _not_private(path, info, what="file")
        if problem is not None:
            _warn_once("secret", str(path), f"kernevo: warm start off: {problem}")
            raise OSError(problem)
        data = os.read(fd, SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != SECRET_BYTES:
        raise OSError(f"{path} holds {len(data)} bytes, not {SECRET_BYTES}")
    return data


def _create_secret(key_dir: Path) -> bytes | None:
    """The secret of ``key_dir``, created (file 0600; the folder 0700 if it is the default one)
    if there is none: written
    whole under a temporary name, then hard-linked to its name, which fails if another process
    linked its own first; that one is then read.

    Raises:
        OSError: the folder is missing and not the default, cannot be created or written, or
            the secret there is not usable.
    """
    import secrets  # only the process that creates the secret pays for it

    existing = _read_secret(key_dir)
    if existing is not None:
        return existing
    # Only the default folder is created: a KERNEVO_KEY_DIR that does not exist is likelier a
    # typo than a wish, and must not appear on disk holding a secret (a fresh user's re-trial).
    if not key_dir.is_dir() and key_dir != Path(DEFAULT_KEY_DIR).expanduser():
        raise OSError(f"key folder {key_dir} does not exist (only the default one is created)")
    key_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = _not_private(key_dir, os.stat(key_dir), what="folder")
    if problem is not None:
        _warn_once("secret", str(key_dir), f"kernevo: warm start off: {problem}")
        raise OSError(problem)
    import tempfile  # as secrets: a replaying start never writes (tempfile brings shutil, bz2)

    fd, tmp_name = tempfile.mkstemp(dir=key_dir, prefix=".warm-start.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(secrets.token_bytes(SECRET_BYTES))
        # FileExistsError: another process created it first; its secret is the one.
        with contextlib.suppress(FileExistsError):
            os.link(tmp_name, key_dir / SECRET_FILE)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return _read_secret(key_dir)


def _not_private(path: Path, info: os.stat_result, *, what: str) -> str | None:
    """Why ``info`` (of ``path``) is not private to this user, or ``None``: another owner, a
    folder writable by group or others, a file they can read or write, or not a regular file."""
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return f"{path} belongs to another user"
    if what == "folder" and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by others"
    if what == "file":
        if not stat.S_ISREG(info.st_mode):
            return f"{path} is not a regular file"
        if info.st_mode & 0o077:
            return f"{path} is readable or writable by others (mode {info.st_mode & 0o777:o})"
    return None


def _mac(secret: bytes, body: Mapping[str, Any]) -> str:
    """HMAC-SHA256 (hex) of the canonical JSON of ``body`` (sorted keys, no spaces, UTF-8: the
    disk cache's rule, ``kernevo.cache.payload_sha256``).

    Raises:
        ValueError, RecursionError: ``body`` holds what canonical JSON cannot encode.
    """
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hmac.new(secret, text.encode("utf-8"), hashlib.sha256).hexdigest()


def _version(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, modification time in ns) of ``path`` itself (a link's own), or ``None``."""
    try:
        info = path.stat(follow_symlinks=False)
    except (OSError, ValueError):
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _digest(path: Path, limit: int) -> str:
    """sha256 (hex) of the file at ``path`` (a link followed, as the full path reads key and
    lock files), or why there is none (``missing``, ``unreadable (…)``)."""
    try:
        return hashlib.sha256(read_regular_file(path, limit, follow_symlinks=True)).hexdigest()
    except FileNotFoundError:
        return "missing"
    except OSError as error:
        return f"unreadable ({errno.errorcode.get(error.errno or 0, error)})"


def _owner_mode(path: Path) -> str:
    """``uid:mode`` of ``path`` (a link followed, as ``kernevo.keys.local_public_key`` looks),
    which decide whether the local key is trusted; ``missing`` when it cannot be looked at."""
    try:
        info = path.stat()
    except OSError:
        return "missing"
    return f"{info.st_uid}:{info.st_mode:o}"


def _plain(value: Any) -> Any:
    """A keyword argument of ``load`` as JSON: paths as text, sequences as lists of text."""
    if isinstance(value, str | Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return repr(value)


def _warn_once(kind: str, about: str, message: str) -> None:
    if (kind, about) not in _warned:
        _warned.add((kind, about))
        log.warning("%s", message)
