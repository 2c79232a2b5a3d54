"""The sandboxed compiler child and the allow-listed GPU worker environment (no GPU needed).

The macro bomb is the issue's: one statement repeated 4⁷ times through nested macros (unbounded,
NVRTC ran for 8 minutes and took 6.7 GB). Tests use shorter limits than the production ones
(30 s, 4 GiB) so they stay quick; the mechanism is the same.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import statistics
import threading
import time
from pathlib import Path

import pytest

from evaluator import compile_sandbox
from evaluator.child_env import (
    ALLOWED_NAMES,
    WORKER_SETTINGS,
    allow_listed_environ,
    allowed_environment,
)
from evaluator.compile import compile_cubin
from evaluator.compile_sandbox import CompilerProcess
from evaluator.pipeline import Evaluator, compile_failure
from evaluator.screen import screen
from evaluator.worker import GpuWorker
from seeds.registry import get_path

SPEC = get_path("trsm_small")
SEED = SPEC.seed_source()
OPTIONS = [*SPEC.compile_options("float64", "sm_90"), "--ptxas-options=-v"]
MARKER_NAME = "KERNEVO_TEST_MARKER_SANDBOX"
MARKER_VALUE = "marker-value-91c2e5"


def macro_bomb(depth: int = 7) -> str:
    """The seed with one unrolled 64-step loop statement repeated 4**depth times."""
    statement = "KV_UNROLL(64) for (int q = 0; q < 64; ++q) acc = acc * acc + (real_t)q;"
    lines = [f"#define KV_B0 {{ {statement} }}"] + [
        f"#define KV_B{i} KV_B{i - 1} KV_B{i - 1} KV_B{i - 1} KV_B{i - 1}"
        for i in range(1, depth + 1)
    ]
    kernel = (
        'extern "C" __global__ void kv_bomb(real_t* out) '
        f"{{ real_t acc = out[0]; KV_B{depth} out[1] = acc; }}"
    )
    block = "\n".join([*lines, kernel]) + "\n"
    return SEED.replace("// EVOLVE-BLOCK-START\n", "// EVOLVE-BLOCK-START\n" + block)


def memory_hog(log2_bytes: int = 26) -> str:
    """The seed with an initialized 2**log2_bytes-byte ``__device__`` array: NVRTC writes every
    byte of it into the PTX, so its memory grows with the array on any machine (a macro bomb's
    peak depends on the machine: 4**4 loops fit in 64 MiB on the H200, not here)."""
    block = f"__device__ unsigned char kv_big[1u << {log2_bytes}] = {{1}};\n"
    return SEED.replace("// EVOLVE-BLOCK-START\n", "// EVOLVE-BLOCK-START\n" + block)


@pytest.fixture
def compiler() -> CompilerProcess:
    proc = CompilerProcess(cpu_limit_s=5.0)
    yield proc
    proc.stop()


def _environ_of(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def _wait_for_exec(pid: int) -> None:
    """Until the spawned child has exec'd: before that, /proc/<pid>/environ still shows the
    parent's own initial environment."""
    deadline = time.monotonic() + 30
    while b"spawn_main" not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the spawned worker never exec'd"
        time.sleep(0.01)


def test_the_macro_bomb_passes_the_screen_and_is_small():
    assert screen(macro_bomb(), SEED) is None
    assert len(macro_bomb()) - len(SEED) < 1024


def test_macro_bomb_hits_the_cpu_time_limit_and_the_seed_compiles_next(compiler):
    t0 = time.perf_counter()
    bomb = compiler.compile(macro_bomb(), "candidate.cu", OPTIONS)
    assert (bomb.ok, bomb.limit) == (False, "time")
    assert "5 s CPU-time limit" in bomb.log and bomb.cpu_seconds > 5.0
    assert time.perf_counter() - t0 < compiler.wall_limit_s
    seed = compiler.compile(SEED, "candidate.cu", OPTIONS)
    assert seed.ok and seed.cubin[:4] == b"\x7fELF" and compiler.restarts == 1
    assert 0 < seed.cpu_seconds < 5.0


def test_the_wall_clock_backstop_stops_a_compile_the_cpu_limit_has_not():
    proc = CompilerProcess(cpu_limit_s=60.0, wall_limit_s=2.0)
    try:
        bomb = proc.compile(macro_bomb(), "candidate.cu", OPTIONS)
        assert (bomb.ok, bomb.limit) == (False, "wall")
        assert "2 s wall-clock limit" in bomb.log and bomb.cpu_seconds < 60.0
        assert proc.compile(SEED, "candidate.cu", OPTIONS).ok and proc.restarts == 1
    finally:
        proc.stop()


@pytest.mark.parametrize("poll_s", [0.05, 30.0])
def test_a_compile_past_its_cpu_limit_is_refused_whatever_the_poll_phase(monkeypatch, poll_s):
    """The verdict is on the CPU time used, not on whether a poll saw it: with polls 30 s apart
    the 4**4 bomb (about 2.6 s of CPU here) replies before any poll, and was accepted with
    cpu_seconds past the limit; now it is refused as with frequent polls, but its child, sound,
    is kept. The first line is ours; NVRTC's log (which echoes the candidate) follows."""
    monkeypatch.setattr(compile_sandbox, "CPU_POLL_S", poll_s)
    proc = CompilerProcess(cpu_limit_s=0.5)
    try:
        done = proc.compile("#warning KV_LEAKED_LINE\n" + macro_bomb(4), "candidate.cu", OPTIONS)
        assert (done.ok, done.limit, done.cubin) == (False, "time", b"")
        assert done.cpu_seconds > 0.5
        first = done.log.splitlines()[0]
        assert first.startswith("NVRTC used more than its 0.5 s CPU-time limit (")
        if poll_s < 0.5:
            assert first.endswith("; the compiler process was killed") and proc.restarts == 1
        else:
            assert first.endswith("; its result is refused") and proc.restarts == 0
            assert "KV_LEAKED_LINE" in done.log
        assert "KV_LEAKED_LINE" not in first
        seed = proc.compile(SEED, "candidate.cu", OPTIONS)
        assert seed.ok and seed.limit == "" and seed.cpu_seconds <= 0.5
    finally:
        proc.stop()


def test_cpu_past_the_limit_at_the_backstop_is_a_cpu_overrun_and_says_so(monkeypatch, tmp_path):
    """The wall clock ran out with the last poll under the CPU limit and the reading after it
    over: the limit, the CPU seconds and the message all say CPU (the message said wall clock
    while the limit said CPU, so the report's value and bound contradicted its detail)."""
    readings = iter([0.0, 0.9, 1.2])  # at the request, the poll at the deadline, after it
    monkeypatch.setattr(compile_sandbox, "CPU_POLL_S", 30.0)
    monkeypatch.setattr(compile_sandbox, "cpu_seconds_of", lambda pid: next(readings))
    proc = CompilerProcess(cpu_limit_s=1.0, wall_limit_s=1.0)
    monkeypatch.setattr(compile_sandbox, "_SHARED", proc)
    try:
        bomb = compile_cubin(macro_bomb(), OPTIONS, "sm_90", cache_dir=tmp_path, compiler=proc)
        assert (bomb.limit, bomb.cpu_seconds) == ("time", 1.2)
        assert bomb.log == (
            "NVRTC used more than its 1 s CPU-time limit (1.20 s); the compiler process was killed"
        )
        failure = compile_failure(bomb)
        assert (failure.check, failure.value, failure.bound) == ("compile_time_limit", 1.2, 1.0)
        assert failure.detail == bomb.log
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("readings", "limit", "cpu", "first"),
    [
        # 1.07 - 0.57 = 0.5000000000000001: not over 0.5 (the kill came at the first poll and
        # the verdict, reading 1.07 again, said wall clock); the third poll's 0.51 is over.
        (
            [0.57, 1.07, 1.07, 1.08],
            "time",
            0.51,
            "NVRTC used more than its 0.5 s CPU-time limit (0.51 s)",
        ),
        ([0.0, 0.51], "time", 0.51, "NVRTC used more than its 0.5 s CPU-time limit (0.51 s)"),
        ([0.57, 1.07], "wall", 0.5, "NVRTC ran past the 1 s wall-clock limit (0.50 s of CPU)"),
    ],
)
def test_the_poll_and_the_verdict_read_the_cpu_limit_alike(
    monkeypatch, readings, limit, cpu, first
):
    """A poll that kills the child as over the CPU limit gives a CPU-time verdict, never a
    wall-clock one. The poll compared the raw difference of two tick readings with the limit and
    the verdict the rounded one: 0.5000000000000001 s was over a 0.5 s limit at the poll and not
    at the verdict, which named the 90 s wall clock after 1.4 s (a CI-like run, 2026-12-02).
    Both now compare the millisecond-rounded difference; exactly the limit is not over it."""
    more = iter(readings)  # at the request, then one per poll; the last one repeats
    monkeypatch.setattr(compile_sandbox, "CPU_POLL_S", 0.01)
    monkeypatch.setattr(compile_sandbox, "cpu_seconds_of", lambda pid: next(more, readings[-1]))
    proc = CompilerProcess(cpu_limit_s=0.5, wall_limit_s=1.0)
    try:
        bomb = proc.compile(macro_bomb(), "candidate.cu", OPTIONS)
        assert (bomb.ok, bomb.limit, bomb.cpu_seconds) == (False, limit, cpu), bomb.log
        assert bomb.log.splitlines()[0].startswith(first)
        assert (bomb.seconds >= 1.0) == (limit == "wall")  # what each verdict says is true
    finally:
        proc.stop()


def test_an_unreadable_proc_stat_leaves_the_wall_clock_backstop(monkeypatch, caplog):
    """No CPU time to read (/proc hidden): the CPU limit cannot act, the backstop still does,
    and the parent says once that it is the only limit left."""
    monkeypatch.setattr(compile_sandbox, "cpu_seconds_of", lambda pid: None)
    proc = CompilerProcess(cpu_limit_s=0.5, wall_limit_s=2.0)
    try:
        with caplog.at_level(logging.WARNING, logger=compile_sandbox.__name__):
            bomb = proc.compile(macro_bomb(), "candidate.cu", OPTIONS)
            assert (bomb.ok, bomb.limit, bomb.cpu_seconds) == (False, "wall", 0.0)
            assert bomb.seconds >= 2.0
            assert bomb.log.startswith("NVRTC ran past the 2 s wall-clock limit (CPU time unknown)")
            seed = proc.compile(SEED, "candidate.cu", OPTIONS)
            assert (seed.ok, seed.limit, seed.cpu_seconds) == (True, "", 0.0)
        warnings = [r.getMessage() for r in caplog.records if "wall-clock backstop" in r.message]
        assert len(warnings) == 1 and "CPU time is unknown" in warnings[0]
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"cpu_limit_s": 0.0}, "cpu_limit_s must be a positive, finite number of seconds: 0.0"),
        ({"cpu_limit_s": -1.0}, "cpu_limit_s must be a positive, finite number of seconds: -1.0"),
        ({"cpu_limit_s": math.nan}, "cpu_limit_s must be a positive, finite number of seconds"),
        ({"wall_limit_s": 0}, "wall_limit_s must be a positive, finite number of seconds: 0"),
        ({"wall_limit_s": math.nan}, "wall_limit_s must be a positive, finite number of seconds"),
        ({"wall_limit_s": math.inf}, "wall_limit_s must be a positive, finite number of seconds"),
        ({"address_space_bytes": -1}, "address_space_bytes must be positive: -1"),
        ({"address_space_bytes": 0}, "address_space_bytes must be positive: 0"),
    ],
)
def test_limits_that_would_refuse_every_compile_or_none_are_refused(limits, message):
    """Zero refused every compile (a 0 s wall limit even the seed's), a negative CPU limit let a
    compile through that finished before the first poll, NaN disabled a limit outright, and an
    address space of -1 is RLIM_INFINITY."""
    with pytest.raises(ValueError, match=f"^{message}"):
        CompilerProcess(**limits)


def test_a_compile_held_off_the_cpu_is_not_killed_by_its_cpu_limit():
    """The limit is on CPU time, so a busy machine does not turn a compile into an overrun:
    the child stopped (SIGSTOP) for 2 s, twice its CPU limit, still compiles the seed."""
    proc = CompilerProcess(cpu_limit_s=1.0, wall_limit_s=30.0)
    try:
        proc.version()
        pid = proc.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(2.0, os.kill, (pid, signal.SIGCONT)).start()
        t0 = time.perf_counter()
        seed = proc.compile(SEED, "candidate.cu", OPTIONS)
        assert seed.ok and seed.limit == "" and proc.restarts == 0
        assert time.perf_counter() - t0 >= 2.0 > seed.cpu_seconds
    finally:
        proc.stop()


def test_address_space_limit_stops_nvrtc_and_the_seed_compiles_next():
    probe = CompilerProcess()
    floor = (probe.version(), probe.ready_vm_peak_bytes)[1]
    probe.stop()
    # 64 MiB above what a warmed-up child holds: enough for the seed, not for a 64 MiB array.
    tight = CompilerProcess(wall_limit_s=60.0, address_space_bytes=floor + 64 * 2**20)
    try:
        assert tight.compile(SEED, "candidate.cu", OPTIONS).ok
        bomb = tight.compile("#warning KV_LEAKED_LINE\n" + memory_hog(), "candidate.cu", OPTIONS)
        assert (bomb.ok, bomb.limit) == (False, "memory"), bomb.log
        # Reports quote the first line: it must be ours, not NVRTC's echo of the candidate.
        assert "KV_LEAKED_LINE" not in bomb.log.splitlines()[0]
        assert tight.compile(SEED, "candidate.cu", OPTIONS).ok and tight.restarts == 1
    finally:
        tight.stop()


def test_a_compiler_killed_from_outside_is_a_crash_and_is_replaced(compiler):
    compiler.version()
    pid = compiler.pid
    assert pid is not None
    threading.Timer(0.5, os.kill, (pid, signal.SIGTERM)).start()
    killed = compiler.compile(macro_bomb(), "candidate.cu", OPTIONS)
    assert (killed.ok, killed.limit) == (False, "crash") and "SIGTERM" in killed.log
    assert killed.cpu_seconds > 0  # read from the dead child's /proc before it is reaped
    assert compiler.compile(SEED, "candidate.cu", OPTIONS).ok and compiler.pid != pid


def test_pipeline_reports_the_overrun_as_its_own_compile_error(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNEVO_COMPILE_CACHE", str(tmp_path))
    short = CompilerProcess(cpu_limit_s=5.0)
    monkeypatch.setattr(compile_sandbox, "_SHARED", short)
    evaluator = Evaluator("trsm_small", "float64", None)
    try:
        report = evaluator.evaluate(macro_bomb())
        assert report.status == "compile_error" and report.failure is not None
        assert report.failure.check == "compile_time_limit"
        assert report.failure.bound == 5.0 and report.failure.value >= 5.0  # CPU seconds
        assert report.compile is not None
        assert report.compile.log.startswith("NVRTC used more than its 5 s CPU-time limit")
        assert evaluator.evaluate(SEED).status == "compiled"
    finally:
        evaluator.close()
        short.stop()


def test_pipeline_reports_the_wall_clock_backstop_in_wall_seconds(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNEVO_COMPILE_CACHE", str(tmp_path))
    short = CompilerProcess(cpu_limit_s=60.0, wall_limit_s=2.0)
    monkeypatch.setattr(compile_sandbox, "_SHARED", short)
    evaluator = Evaluator("trsm_small", "float64", None)
    try:
        report = evaluator.evaluate(macro_bomb())
        assert report.status == "compile_error" and report.failure is not None
        assert report.failure.check == "compile_time_limit"
        assert report.failure.bound == 2.0 and report.failure.value >= 2.0  # wall seconds
        assert report.failure.detail.startswith("NVRTC ran past the 2 s wall-clock limit (")
        assert report.compile is not None and report.compile.limit == "wall"
    finally:
        evaluator.close()
        short.stop()


def test_compiler_child_starts_with_an_empty_environment(monkeypatch, compiler):
    monkeypatch.setenv(MARKER_NAME, MARKER_VALUE)
    compiler.version()
    assert compiler.pid is not None and _environ_of(compiler.pid) == b""


def test_compiler_child_opens_no_file(compiler, tmp_path):
    """Landlock: even an include the screen would refuse finds nothing to open."""
    compiler.version()
    if compiler.landlock_abi == 0:
        pytest.skip("this kernel has no Landlock; the child runs with env={} and limits only")
    header = tmp_path / "visible.h"
    header.write_text("#error HEADER_WAS_READ\n")
    source = SEED.replace(
        "// EVOLVE-BLOCK-START\n", f'// EVOLVE-BLOCK-START\n#include "{header}"\n'
    )
    done = compiler.compile(source, "candidate.cu", OPTIONS)
    assert not done.ok and "HEADER_WAS_READ" not in done.log
    assert "cannot open source file" in done.log


def test_per_compile_overhead_of_the_long_lived_child(compiler, tmp_path):
    """The round trip beyond NVRTC's own time (a fresh Python per compile would cost ~0.3 s)."""
    compiler.version()
    overheads = []
    for _ in range(5):
        t0 = time.perf_counter()
        done = compiler.compile(SEED, "candidate.cu", OPTIONS)
        overheads.append(time.perf_counter() - t0 - done.seconds)
    assert statistics.median(overheads) < 0.05, overheads


def test_compile_cubin_uses_the_cache_without_asking_nvrtc_again(tmp_path, compiler):
    opts = SPEC.compile_options("float32", "sm_90")
    first = compile_cubin(SEED, opts, "sm_90", cache_dir=tmp_path, compiler=compiler)
    compiler.stop()
    again = compile_cubin(SEED, opts, "sm_90", cache_dir=tmp_path, compiler=compiler)
    assert again.cached and again.cubin == first.cubin


# -- the GPU worker child's environment --------------------------------------------------------


def test_gpu_worker_child_starts_with_the_allow_list_only(monkeypatch):
    monkeypatch.setenv(MARKER_NAME, MARKER_VALUE)
    monkeypatch.setenv("OPENAI_API_KEY", MARKER_VALUE)
    monkeypatch.setenv("PATH", os.environ.get("PATH", "/usr/bin"))
    worker = GpuWorker(0)
    try:
        worker._start()  # starting needs no GPU; the child waits for its first task
        pid = worker._proc.pid
        _wait_for_exec(pid)
        environ = _environ_of(pid)
        assert MARKER_VALUE.encode() not in environ and MARKER_NAME.encode() not in environ
        names = {e.split(b"=", 1)[0].decode() for e in environ.split(b"\0") if e}
        assert names <= ALLOWED_NAMES | set(WORKER_SETTINGS) and "PATH" in names
    finally:
        worker.stop()
    assert os.environ[MARKER_NAME] == MARKER_VALUE  # the parent's environment is back


def test_allow_list_drops_credentials_even_under_an_allowed_name():
    env = {
        "PATH": "/usr/bin",
        "OPENAI_API_KEY": "k",
        "KERNEVO_API_TOKEN": "t",
        "CUDA_VISIBLE_DEVICES": "0",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    assert allowed_environment(env) == {
        "PATH": "/usr/bin",
        "CUDA_VISIBLE_DEVICES": "0",
        "HOME": "/root",
    }


def test_environment_swap_is_restored_after_an_error(monkeypatch):
    monkeypatch.setenv(MARKER_NAME, MARKER_VALUE)
    with pytest.raises(RuntimeError), allow_listed_environ():
        assert MARKER_NAME not in os.environ
        assert os.environ["OPENBLAS_NUM_THREADS"] == "1"  # tiny reference solves: one thread
        raise RuntimeError("spawn failed")
    assert os.environ[MARKER_NAME] == MARKER_VALUE
