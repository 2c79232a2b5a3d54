"""NVRTC compilation of a candidate to a cubin for the GPU's real architecture.

Compiling needs no GPU: CuPy's `cupy.cuda.nvrtc` bindings drive the NVRTC library of the
`nvidia-cuda-nvrtc` wheel, so this stage runs on CPU workers and the GPU worker only loads the
cubin. NVRTC itself runs in a sandboxed child process (``evaluator.compile_sandbox``: empty
environment, CPU-time, wall-clock and address-space limits); a compile that overruns a limit is
a result with ``limit`` set, never an exception, and the next compile gets a fresh child (one
that finished past the CPU-time limit keeps its child). Results are cached content-addressed
(sha256 over source, options, NVRTC version, arch), written to a temporary file and
`os.replace`d into place; a torn or tampered entry is a miss. Compile logs are capped
(:func:`cap_log`): they go to the LLM, the reports and the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evaluator.compile_sandbox import CompilerProcess, shared_compiler

# ptxas -v lines, e.g. "Used 40 registers, used 1 barriers, 8 bytes cmem[0]" and
# "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads".
_ENTRY_RE = re.compile(r"Function properties for (\w+)")
_REGS_RE = re.compile(r"Used (\d+) registers")
_SPILL_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_SMEM_RE = re.compile(r"(\d+) bytes smem")

# A compile log is kept whole up to 16 KiB (the seed's ptxas -v log is about 1 KiB; a page of
# errors about 10 KiB); past that its first and last 8 KiB are kept, the first errors and the
# ptxas summary, with a line saying how much was cut. A candidate can make NVRTC print a lot
# (one error per line of a repeated macro), and every log is stored and sent to the LLM.
MAX_LOG_CHARS = 16 * 1024


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one entry function."""

    registers: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    static_shared_bytes: int = 0


@dataclass(frozen=True)
class CompileResult:
    """The outcome of one compilation; ``ok`` False means ``log`` holds the compiler's errors.

    ``limit`` is empty unless the sandbox stopped NVRTC: ``"time"`` (CPU-time limit), ``"wall"``
    (the wall-clock backstop), ``"memory"`` (address-space limit) or ``"crash"`` (the compiler
    child died or raised). ``seconds`` is wall clock, ``cpu_seconds`` NVRTC's CPU time (0 for
    a cached result written before it was recorded, or where ``/proc`` cannot say).
    """

    ok: bool
    log: str
    options: tuple[str, ...]
    arch: str
    nvrtc_version: str
    seconds: float
    cubin: bytes = b""
    cubin_sha256: str = ""
    resources: dict[str, KernelResources] = field(default_factory=dict)
    cached: bool = False
    limit: str = ""
    cpu_seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        """JSON-able metadata (everything but the cubin bytes)."""
        data = asdict(self)
        data.pop("cubin")
        return data


def nvrtc_version(compiler: CompilerProcess | None = None) -> str:
    """The NVRTC library version as ``"major.minor"``, e.g. ``"13.0"``, as the compiler child
    loaded it.

    Raises:
        CompilerUnavailable: the compiler child does not start.
    """
    return (compiler or shared_compiler()).version()


def parse_resources(log: str) -> dict[str, KernelResources]:
    """Per-entry registers, stack, spills and static shared memory from a ``ptxas -v`` log."""
    found: dict[str, KernelResources] = {}
    entry: str | None = None
    values: dict[str, int] = {}
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            if entry:
                found[entry] = KernelResources(**values)
            entry, values = m.group(1), {}
        elif entry and (m := _SPILL_RE.search(line)):
            values["stack_bytes"] = int(m.group(1))
            values["spill_store_bytes"] = int(m.group(2))
            values["spill_load_bytes"] = int(m.group(3))
        elif entry and (m := _REGS_RE.search(line)):
            values["registers"] = int(m.group(1))
            if s := _SMEM_RE.search(line):
                values["static_shared_bytes"] = int(s.group(1))
    if entry:
        found[entry] = KernelResources(**values)
    return found


def cap_log(log: str, limit: int = MAX_LOG_CHARS) -> str:
    """``log`` without NUL bytes (NVRTC ends its log in one; PostgreSQL text and jsonb refuse
    them), cut to its first and last ``limit // 2`` characters when longer than ``limit``."""
    log = log.replace("\x00", "")
    if len(log) <= limit:
        return log
    half = limit // 2
    cut = len(log) - 2 * half
    return f"{log[:half]}\n[... {cut} characters of the compile log cut ...]\n{log[-half:]}"


def default_cache_dir() -> Path:
    """``$KERNEVO_COMPILE_CACHE`` or ``~/.cache/kernevo/cubin``."""
    env = os.environ.get("KERNEVO_COMPILE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kernevo" / "cubin"


# Bumped whenever CompileResult's stored fields change, so old entries are misses, not errors.
_CACHE_SCHEMA = "2"


def _cache_key(source: str, options: tuple[str, ...], version: str, arch: str) -> str:
    h = hashlib.sha256()
    for part in (_CACHE_SCHEMA, source, "\0".join(options), version, arch):
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


def _read_cache(path: Path) -> CompileResult | None:
    """A cached result, or None when missing, torn or tampered (its cubin hash must match)."""
    try:
        meta = json.loads(path.with_suffix(".json").read_text())
        cubin = path.with_suffix(".cubin").read_bytes()
        if hashlib.sha256(cubin).hexdigest() != meta["cubin_sha256"]:
            return None
        meta["resources"] = {k: KernelResources(**v) for k, v in meta["resources"].items()}
        meta["options"] = tuple(meta["options"])
        result = CompileResult(**meta, cubin=cubin, cached=True)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, torn, tampered or from another schema: compile again
    if not (isinstance(result.ok, bool) and isinstance(result.log, str) and result.ok):
        return None
    return result


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def compile_cubin(
    source: str,
    options: list[str] | tuple[str, ...],
    arch: str,
    *,
    cache_dir: Path | None = None,
    name: str = "candidate.cu",
    compiler: CompilerProcess | None = None,
) -> CompileResult:
    """Compile CUDA C++ ``source`` with NVRTC to a cubin for ``arch`` (e.g. ``"sm_90"``).

    ``options`` must name the same architecture (``-arch=sm_90``); ``--ptxas-options=-v`` is
    added so registers, spills and shared memory come back in ``resources``. NVRTC runs in
    ``compiler`` (default: this process's sandboxed child). A failed compile, or one the sandbox
    stopped (``limit``), is a result with ``ok=False`` and the capped log, never an exception.

    Raises:
        ValueError: ``options`` do not target ``arch`` (an infrastructure bug, not a candidate's).
        CompilerUnavailable: the compiler child cannot start (infrastructure).
    """
    opts = tuple(options)
    if f"-arch={arch}" not in opts:
        raise ValueError(f"compile options {list(opts)} do not target -arch={arch}")
    opts = (*opts, "--ptxas-options=-v")
    compiler = compiler or shared_compiler()
    version = compiler.version()
    cache = (cache_dir or default_cache_dir()) / _cache_key(source, opts, version, arch)
    if (hit := _read_cache(cache)) is not None:
        return hit

    done = compiler.compile(source, name, list(opts))
    log = cap_log(done.log)
    if not done.ok:
        return CompileResult(
            False, log, opts, arch, version, done.seconds, limit=done.limit,
            cpu_seconds=done.cpu_seconds,
        )  # fmt: skip
    cubin = done.cubin
    result = CompileResult(
        ok=True,
        log=log,
        options=opts,
        arch=arch,
        nvrtc_version=version,
        seconds=done.seconds,
        cpu_seconds=done.cpu_seconds,
        cubin=cubin,
        cubin_sha256=hashlib.sha256(cubin).hexdigest(),
        resources=parse_resources(log),
    )
    meta = result.summary()
    meta.pop("cached")
    try:
        _atomic_write(cache.with_suffix(".cubin"), cubin)
        _atomic_write(cache.with_suffix(".json"), json.dumps(meta).encode())
    except OSError:
        pass  # the cache only saves time: an unwritable entry leaves the result as good
    return result
