"""NVRTC in a child process with an empty environment, an address-space limit and a CPU-time
limit: what a candidate's text can reach while it is compiled.

Why a child: NVRTC runs the candidate's preprocessor directives and template metaprograms in the
process that calls it. In the evaluator's own process that is the job's environment (API keys,
tokens: ``/proc/self/environ``) and all of its memory and time; one statement repeated 4⁷ times
through nested macros kept NVRTC busy for 8 minutes and 6.7 GB. Here:

* the child is started with ``env={}`` (nothing to read in ``/proc/self/environ``), in an empty
  temporary working directory, and finds its packages through the parent's ``sys.path`` sent on
  stdin (the device machine finds them through ``PYTHONPATH``, which an empty environment
  drops);
* it sets its own ``RLIMIT_AS`` (:data:`ADDRESS_SPACE_LIMIT_BYTES`) and ``RLIMIT_CORE`` = 0
  before importing NVRTC, so an allocation past the limit fails inside the child: NVRTC reports
  out of memory or the child dies, and either is a ``compile_memory_limit``;
* the parent kills the child (its whole process group) when a compile uses more than
  :data:`CPU_LIMIT_S` of CPU time, or, as a backstop, runs past :data:`WALL_LIMIT_S` of wall
  clock: a ``compile_time_limit`` either way. CPU time, not wall clock, is the limit because it
  does not depend on what else the machine runs (a verdict must not depend on the machine's
  load); the parent reads the child's CPU time from ``/proc/<pid>/stat`` (all its threads;
  NVRTC and its ptxas run inside the child's process and start no other) while it waits, and
  once more when the reply has come: a compile that used more than the limit is refused
  however its end fell between two reads, so the verdict does not depend on the poll's phase;
* it dies with the process that started it (``evaluator.parent_watch``);
* the child is long-lived (one per evaluating process; restarted after an overrun or a crash):
  a fresh Python with CuPy costs about 0.3 s of imports per compile, a request to a running
  child about 1 ms on top of NVRTC's own time (``tests/test_evaluator_sandbox.py`` measures it),
  which keeps a job at 30–50 candidates per minute.

Messages both ways are a 4-byte big-endian length and a UTF-8 JSON object (the cubin in base64):
the child compiles untrusted text, so the parent never unpickles what it sends.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import resource
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from evaluator.parent_watch import die_with_parent

# Limits and their sources. The trsm_small seed compiles in 0.07 s in each dtype and its compiler
# child peaks near 0.5 GB of address space (NVRTC 13.5, measured with the seed); the heaviest seed,
# trsm_small_batched (three fully unrolled row bounds), took 16-17 s in the CI run of 2026-11-30
# and 31-37 s in those of 2026-12-01 (32.6 s of CPU in float32 on the idle 2-core machine, NVRTC
# 13.5), past the 30 s wall-clock limit of then; a 4⁵-fold unrolled loop nest, far past anything a
# 64×64 TRSM kernel needs, compiles in 15 s within 0.45 GB. 60 s of CPU and 4 GiB stop the 4⁷
# macro bomb (8 minutes, 6.7 GB unbounded) within a minute of one evaluation and leave the
# heaviest seed 1.6 times headroom on the slower machine (a candidate that needs more is refused,
# which is the limit's job). The wall-clock backstop (a child that waits instead of
# computing) is 1.5 times the CPU limit: a compile sharing a core with two others still ends
# within it, and evolver.job_config.evaluator_hard_limit_s stays below the default evaluator
# timeout (900 s).
CPU_LIMIT_S = 60.0
WALL_LIMIT_S = 90.0
# How often the parent reads the child's CPU time while it waits for a reply (seconds).
CPU_POLL_S = 0.25
ADDRESS_SPACE_LIMIT_BYTES = 4 * 2**30
# Variables CuPy reads at import to find the CUDA toolkit (not secrets; passed on stdin).
# LD_LIBRARY_PATH cannot be passed that way (the loader reads it at exec): NVRTC must be
# findable from the wheel (nvidia-cuda-nvrtc), CUDA_PATH or the system's library paths.
_CUDA_LOCATION_NAMES = ("CUDA_PATH", "CUDA_HOME")
# Waiting for a fresh child's imports (CuPy, NVRTC) before calling the start itself a failure.
START_TIMEOUT_S = 120.0

# nvrtcResult's NVRTC_ERROR_OUT_OF_MEMORY (nvrtc.h); CuPy's bindings do not name it.
_NVRTC_ERROR_OUT_OF_MEMORY = 1
# A failed compile whose child came this close to the address-space limit is a memory overrun:
# ptxas says only "Ptx assembly aborted due to errors" when an allocation fails, and no
# compile that failed on its own merits comes within 10 % of the limit (the seed's peak is an
# eighth of it). The child is replaced afterwards, so its VmPeak never carries over.
_NEAR_LIMIT = 0.9
_HEADER = struct.Struct(">I")
# Run by ``python -I -c``: take sys.path from the first message, then hand over to _child_main.
_BOOTSTRAP = (
    "import json, struct, sys\n"
    "n = struct.unpack('>I', sys.stdin.buffer.read(4))[0]\n"
    "sys.path[:] = json.loads(sys.stdin.buffer.read(n))['sys_path']\n"
    "from evaluator.compile_sandbox import _child_main\n"
    "_child_main()\n"
)


class CompilerUnavailable(Exception):
    """The compiler child could not be started (an infrastructure fault, not a candidate's)."""


@dataclass(frozen=True)
class SandboxCompile:
    """What the compiler child answered for one source.

    ``limit`` is ``""`` when NVRTC finished within the limits (``ok`` says whether it compiled),
    ``"time"`` when the compile used more than the CPU-time limit (killed at a poll, or finished
    past it: ``cpu_seconds`` is then above the limit), ``"wall"`` when the wall-clock backstop
    stopped it first, ``"memory"`` when the address-space limit stopped NVRTC, and ``"crash"``
    when the child died otherwise (signal or exit) or raised. ``seconds`` is wall clock,
    ``cpu_seconds`` the child's CPU time over the request (0 where ``/proc`` cannot say).
    """

    ok: bool
    log: str
    cubin: bytes
    seconds: float
    limit: str = ""
    cpu_seconds: float = 0.0


def cpu_seconds_of(pid: int) -> float | None:
    """User plus system CPU seconds process ``pid`` has used, all its threads (``/proc/<pid>/stat``
    fields 14 and 15, in clock ticks), or None when that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _send(stream: IO[bytes], message: dict[str, Any]) -> None:
    data = json.dumps(message).encode()
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("compiler pipe closed")
        data += chunk
    return data


def _receive(stream: IO[bytes]) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_read_exact(stream, _HEADER.size))
    return json.loads(_read_exact(stream, size))


# -- the child ---------------------------------------------------------------------------------


def _child_main() -> None:
    """The compiler child: limits first, then NVRTC, then one reply per request until EOF."""
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints must not corrupt the protocol
    limits = _receive(requests)
    # A compile can outlive a killed job by its whole wall-clock limit otherwise; NVRTC releases
    # the GIL while it compiles, so the watchdog thread runs meanwhile.
    die_with_parent(int(limits["parent_pid"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    address_space = int(limits["address_space_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    # Where CUDA lives, for CuPy's import only: set after the start, so /proc/self/environ (the
    # environment at exec) stays empty.
    os.environ.update(limits.get("cuda_env", {}))
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
        # Load every library a compile needs (NVRTC's builtin headers, ptxas) before the file
        # system is closed: one empty kernel with the options every request carries.
        warm = _compile_in_child(nvrtc, {**_WARM_UP, "address_space_bytes": address_space})
    except Exception as exc:  # report why the child cannot compile, then stop
        _send(replies, {"error": f"{type(exc).__name__}: {exc}"})
        return
    if not warm.get("ok"):
        _send(replies, {"error": f"the warm-up compile failed: {warm.get('log', '')[:500]}"})
        return
    global _STATUS_FD
    _STATUS_FD = os.open("/proc/self/status", os.O_RDONLY)
    landlock = forbid_file_access()
    hello = {"version": f"{major}.{minor}", "landlock": landlock, "vm_peak": _vm_peak_bytes()}
    _send(replies, hello)
    while True:
        try:
            request = _receive(requests)
        except EOFError:
            return
        _send(replies, _compile_in_child(nvrtc, request))


_WARM_UP = {
    "source": 'extern "C" __global__ void kernevo_warm_up() {}\n',
    "name": "warm_up.cu",
    "options": ["-arch=sm_90", "-std=c++17", "--ptxas-options=-v"],
}
# /proc/self/status, opened before the file system is closed (read with pread afterwards).
_STATUS_FD: int | None = None


def _vm_peak_bytes() -> int:
    """This process's peak address-space size (``VmPeak`` of /proc/self/status), 0 if unknown."""
    try:
        if _STATUS_FD is not None:
            text = os.pread(_STATUS_FD, 1 << 16, 0).decode()
        else:
            with open("/proc/self/status") as status:
                text = status.read()
        for line in text.splitlines():
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


# <linux/landlock.h>, <linux/prctl.h>; x86-64 and arm64 share these syscall numbers.
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_PR_SET_NO_NEW_PRIVS = 38
# Filesystem access rights Landlock knows, by ABI version: 13 in ABI 1, REFER in 2, TRUNCATE in
# 3 (and 4), IOCTL_DEV in 5 and later.
_FS_RIGHT_BITS = {1: 13, 2: 14, 3: 15, 4: 15}


def forbid_file_access() -> int:
    """Close the file system to this process with Landlock: no file or directory may be opened,
    read, written, executed or created from now on (descriptors already open keep working).

    With no readable file, an ``#include`` that got past the screen — of ``/proc/<pid>/environ``
    of any process of this user, a key file, anything — fails with "cannot open source file".
    Returns the Landlock ABI version applied, or 0 where the kernel lacks Landlock (the child
    then runs with the empty environment and the limits only; the handshake says so).
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
        if abi <= 0:
            return 0
        handled = ctypes.c_uint64((1 << _FS_RIGHT_BITS.get(abi, 16)) - 1)
        ruleset = libc.syscall(
            _SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.sizeof(handled), 0
        )
        if ruleset < 0:
            return 0
        try:
            if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                return 0
            if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
                return 0
        finally:
            os.close(ruleset)
    except (OSError, AttributeError):
        return 0
    return int(abi)


def _compile_in_child(nvrtc: Any, request: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    try:
        prog = nvrtc.createProgram(request["source"], request["name"], [], [])
        try:
            try:
                nvrtc.compileProgram(prog, request["options"])
                ok = True
            except nvrtc.NVRTCError as exc:
                if exc.status == _NVRTC_ERROR_OUT_OF_MEMORY:
                    return {"limit": "memory", "log": str(exc)}
                ok = False
            log = nvrtc.getProgramLog(prog)
            cubin = nvrtc.getCUBIN(prog) if ok else b""
        finally:
            nvrtc.destroyProgram(prog)
        if not ok and _vm_peak_bytes() >= _NEAR_LIMIT * request["address_space_bytes"]:
            # ptxas reports a failed allocation as "Ptx assembly aborted due to errors" only.
            return {"limit": "memory", "log": log}
    except MemoryError:
        return {"limit": "memory", "log": "MemoryError"}
    except Exception as exc:  # NVRTC or CuPy raising on odd input: the candidate's fault
        return {"limit": "crash", "log": f"{type(exc).__name__}: {exc}"}
    return {
        "ok": ok,
        "log": log,
        "cubin_b64": base64.b64encode(cubin).decode("ascii"),
        "seconds": time.perf_counter() - start,
    }


# -- the parent --------------------------------------------------------------------------------


class CompilerProcess:
    """One long-lived compiler child; :meth:`compile` is serialized (one compile at a time).

    ``cpu_limit_s`` and ``wall_limit_s`` are seconds (positive, finite; a wall limit below the CPU
    limit makes the backstop the only limit that acts), ``address_space_bytes`` bytes (positive).

    Raises:
        ValueError: at construction, a limit that is not positive and finite (zero would refuse
            every compile, NaN or infinity none).
        CompilerUnavailable: from :meth:`compile` and :meth:`version`, the child does not
            start or does not load NVRTC.
    """

    def __init__(
        self,
        cpu_limit_s: float = CPU_LIMIT_S,
        wall_limit_s: float = WALL_LIMIT_S,
        address_space_bytes: int = ADDRESS_SPACE_LIMIT_BYTES,
    ) -> None:
        for what, value in (("cpu_limit_s", cpu_limit_s), ("wall_limit_s", wall_limit_s)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{what} must be a positive, finite number of seconds: {value!r}")
        # RLIMIT_AS of -1 is RLIM_INFINITY: a negative limit would mean none at all.
        if not address_space_bytes > 0:
            raise ValueError(f"address_space_bytes must be positive: {address_space_bytes!r}")
        self.cpu_limit_s = cpu_limit_s
        self.wall_limit_s = wall_limit_s
        self.address_space_bytes = address_space_bytes
        self.restarts = 0
        # Landlock ABI the running child closed its file system with (0: none, see
        # forbid_file_access).
        self.landlock_abi = 0
        # The running child's peak address space once NVRTC is loaded and warmed up: the floor
        # under any address-space limit.
        self.ready_vm_peak_bytes = 0
        self._warned = False
        self._warned_cpu = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._version = ""
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The running child's process id (None when none runs)."""
        return self._proc.pid if self._proc is not None else None

    def version(self) -> str:
        """NVRTC's ``"major.minor"`` as the child loaded it (starts the child if needed)."""
        with self._lock:
            self._ensure()
            return self._version

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._discard()
        self._workdir = tempfile.TemporaryDirectory(prefix="kernevo-nvrtc-")
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={},
            cwd=self._workdir.name,
            start_new_session=True,  # its own process group: a kill reaches anything it starts
        )
        self._proc = proc
        assert proc.stdin is not None
        try:
            _send(proc.stdin, {"sys_path": [p for p in sys.path if p]})
            cuda_env = {k: os.environ[k] for k in _CUDA_LOCATION_NAMES if k in os.environ}
            limits = {
                "address_space_bytes": self.address_space_bytes,
                "parent_pid": os.getpid(),
                "cuda_env": cuda_env,
            }
            _send(proc.stdin, limits)
            hello = self._reply(START_TIMEOUT_S)
        except (OSError, EOFError, ValueError) as exc:
            self._discard()
            raise CompilerUnavailable(f"compiler process did not start: {exc}") from None
        if hello is None or "version" not in hello:
            why = "no answer" if hello is None else hello.get("error", "unexpected answer")
            self._discard()
            raise CompilerUnavailable(f"compiler process did not start: {why}")
        self._version = str(hello["version"])
        self.landlock_abi = int(hello.get("landlock", 0))
        if self.landlock_abi == 0 and not self._warned:
            self._warned = True
            logging.getLogger(__name__).warning(
                "no Landlock in this kernel: the compiler child can open files; the screen is "
                "the only guard against an #include (its environment is still empty)"
            )
        self.ready_vm_peak_bytes = int(hello.get("vm_peak", 0))
        return proc

    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        """The child's next message, or None when none came within ``timeout_s``.

        Raises:
            EOFError: the child closed its end (it died).
        """
        assert self._proc is not None and self._proc.stdout is not None
        stream = self._proc.stdout
        with selectors.DefaultSelector() as sel:
            sel.register(stream, selectors.EVENT_READ)
            if not sel.select(timeout_s):
                return None
        # The child writes each reply in one piece right after it starts it; once the first
        # byte is here the rest follows without waiting on NVRTC.
        return _receive(stream)

    def compile(self, source: str, name: str, options: list[str]) -> SandboxCompile:
        """Compile ``source`` with NVRTC ``options`` in the child, within the limits."""
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None
            start = time.perf_counter()
            cpu_start = cpu_seconds_of(proc.pid)
            if cpu_start is None:
                self._warn_no_cpu_time(proc.pid)
            try:
                request = {"source": source, "name": name, "options": options}
                _send(proc.stdin, {**request, "address_space_bytes": self.address_space_bytes})
                reply, polled = self._await_reply(proc.pid, start, cpu_start)
            except (OSError, EOFError, ValueError):
                return self._died(start, cpu_start)
            seconds = time.perf_counter() - start
            cpu = _cpu_since(proc.pid, cpu_start, polled)
            if reply is not None and (limit := reply.get("limit")):
                self._discard()  # a child that ran out of memory may be in any state
                log = self._limit_log(limit, reply)
                return SandboxCompile(False, log, b"", seconds, limit, cpu)
            if cpu > self.cpu_limit_s:
                # Over the limit whether a poll saw it (the child is killed) or the reply came
                # before the next poll could (the child is sound; its result is refused all the
                # same, or the verdict would depend on where the compile ended between polls).
                first = f"NVRTC used more than its {self.cpu_limit_s:g} s CPU-time limit"
                if reply is None:
                    self._discard()
                    log = f"{first} ({cpu:.2f} s); the compiler process was killed"
                else:
                    log = f"{first} ({cpu:.2f} s); its result is refused\n{reply['log']}"
                return SandboxCompile(False, log, b"", seconds, "time", cpu)
            if reply is None:
                self._discard()
                used = "CPU time unknown" if cpu_start is None else f"{cpu:.2f} s of CPU"
                log = (
                    f"NVRTC ran past the {self.wall_limit_s:g} s wall-clock limit ({used}); the "
                    "compiler process was killed"
                )
                return SandboxCompile(False, log, b"", seconds, "wall", cpu)
            cubin = base64.b64decode(reply["cubin_b64"])
            return SandboxCompile(bool(reply["ok"]), str(reply["log"]), cubin, seconds, "", cpu)

    def _await_reply(
        self, pid: int, start: float, cpu_start: float | None
    ) -> tuple[dict[str, Any] | None, float]:
        """The child's reply to the request sent at ``start`` (None once it has used more than
        ``cpu_limit_s`` of CPU time since then or run past ``wall_limit_s``), and the CPU
        seconds it had used at the last poll (``cpu_start``: its CPU seconds at the request;
        None: unreadable, the wall clock alone bounds it and the CPU seconds are 0).

        Raises:
            EOFError: the child closed its end (it died).
        """
        used = 0.0
        while True:
            left = self.wall_limit_s - (time.perf_counter() - start)
            if left <= 0:
                return None, used
            reply = self._reply(min(CPU_POLL_S, left))
            if reply is not None:
                return reply, used
            now = cpu_seconds_of(pid)
            if cpu_start is not None and now is not None:
                used = _cpu_between(cpu_start, now)
                if used > self.cpu_limit_s:
                    return None, used

    def _warn_no_cpu_time(self, pid: int) -> None:
        if not self._warned_cpu:
            self._warned_cpu = True
            logging.getLogger(__name__).warning(
                "cannot read /proc/%d/stat: the compiler child's CPU time is unknown, so only "
                "the %g s wall-clock backstop bounds a compile",
                pid,
                self.wall_limit_s,
            )

    def _limit_log(self, limit: str, reply: dict[str, Any]) -> str:
        # The first line is ours alone (reports quote it); NVRTC's own log, which echoes what
        # the candidate made it read, follows on the next lines.
        if limit == "memory":
            gib = self.address_space_bytes / 2**30
            return f"NVRTC ran out of the {gib:.3g} GiB address-space limit\n{reply['log']}"
        return f"the compiler failed\n{reply['log']}"

    def _died(self, start: float, cpu_start: float | None) -> SandboxCompile:
        """The child closed its pipe mid-compile: reap it and say how it ended."""
        proc = self._proc
        assert proc is not None
        # Before the reap: a dead child's /proc/<pid>/stat keeps its CPU time until then.
        cpu = _cpu_since(proc.pid, cpu_start, 0.0)
        try:
            code = proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        self._discard()
        seconds = time.perf_counter() - start
        # Under RLIMIT_AS a failed allocation inside NVRTC ends in std::bad_alloc → abort
        # (SIGABRT) or a null dereference (SIGSEGV): both mean the limit stopped it.
        if code in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL):
            gib = self.address_space_bytes / 2**30
            log = f"the compiler process died ({_ended(code)}) under the {gib:.3g} GiB limit"
            return SandboxCompile(False, log, b"", seconds, "memory", cpu)
        log = f"the compiler process died ({_ended(code)})"
        return SandboxCompile(False, log, b"", seconds, "crash", cpu)

    def _discard(self) -> None:
        """Kill the child's process group (if any) and forget it; the next call starts one."""
        if self._proc is not None:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(5)
            self.restarts += 1
        if self._workdir is not None:
            self._workdir.cleanup()
        self._proc, self._workdir = None, None

    def stop(self) -> None:
        """Stop the child (the next compile starts a fresh one)."""
        with self._lock:
            self._discard()


def _cpu_since(pid: int, cpu_start: float | None, polled: float) -> float:
    """CPU seconds process ``pid`` used since ``cpu_start`` (read now; ``polled``, the last
    reading, where /proc cannot say), to the clock tick (0.01 s on Linux)."""
    now = cpu_seconds_of(pid)
    used = _cpu_between(cpu_start, now) if now is not None and cpu_start is not None else 0.0
    return max(used, polled)


def _cpu_between(start: float, now: float) -> float:
    """CPU seconds between two readings of :func:`cpu_seconds_of`, rounded to the millisecond.

    Why rounded here, once: the poll and the verdict must compare the same number with the
    limit. A difference of two tick readings is inexact (1.07 - 0.57 = 0.5000000000000001):
    the poll killed the child as over a 0.5 s limit, the verdict rounded it to 0.5, not over,
    and called the compile a wall-clock overrun after 1.4 s (seen in a CI-like run, 2026-12-02).
    """
    return round(now - start, 3)


def _ended(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit status {code}"


_SHARED: CompilerProcess | None = None
_SHARED_LOCK = threading.Lock()


def shared_compiler() -> CompilerProcess:
    """This process's compiler child (created on first use; stopped at interpreter exit)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            import atexit

            _SHARED = CompilerProcess()
            atexit.register(_SHARED.stop)
        return _SHARED
