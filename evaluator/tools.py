"""Running NVIDIA's command-line tools (Nsight Compute, compute-sanitizer) on one candidate, and
reading the versions a certificate records (compute-sanitizer's, the NVIDIA driver's)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from evaluator.child_env import allowed_environment
from evaluator.gpu_lock import gpu_lock
from evaluator.parent_watch import arm_pdeathsig, start_group_reaper
from evaluator.report import CheckFailure
from evaluator.visible_devices import physical_index
from kernevo.device import nvidia_driver_version as proc_driver_version

# compute-sanitizer exits with this status when it found an error (--error-exitcode), so a
# finding is told apart from the target's own failures.
SANITIZER_EXIT_CODE = 97
# Seconds a version query may take (a tool that hangs must not stall a promotion).
VERSION_TIMEOUT_S = 30.0
_SANITIZER_VERSION = re.compile(r"^Version\s+(\S+)", re.MULTILINE)


def find_tool(name: str) -> str | None:
    """Path of ``name`` on PATH or under /usr/local/cuda/bin, else None."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")


def shape_arguments(path_id: str, shape: tuple[int, ...]) -> list[str]:
    """``evaluator.run_once``'s shape arguments: the path's op's parameters by name, in order
    (trsm: ``--m 33 --n 31``)."""
    from seeds.registry import get_path

    pairs = zip(get_path(path_id).params, shape, strict=True)
    return [part for name, value in pairs for part in (f"--{name}", str(value))]


def run_candidate_under(
    tool_argv: list[str],
    cubin: bytes,
    path_id: str,
    dtype: str,
    shape: tuple[int, ...],
    gpu_index: int,
    timeout_s: float,
    repeat: int = 1,
) -> subprocess.CompletedProcess[str]:
    """Run ``tool_argv + [python -m evaluator.run_once ...]`` on this process's CUDA device
    ``gpu_index``, at ``shape`` (the path's op's parameters in order).

    Raises:
        subprocess.TimeoutExpired: the tool ran past ``timeout_s``.
        VisibleDevicesError: ``CUDA_VISIBLE_DEVICES`` cannot say which device it is.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cubin_path = Path(tmp) / "candidate.cubin"
        cubin_path.write_bytes(cubin)
        argv = [
            *tool_argv, sys.executable, "-m", "evaluator.run_once", "--cubin", str(cubin_path),
            "--path", path_id, "--dtype", dtype,
            *shape_arguments(path_id, shape),
            "--repeat", str(repeat),
        ]  # fmt: skip
        # Like the GPU worker: the candidate runs with the allow-listed environment only.
        # Pinned to the physical device this process's index names (evaluator.visible_devices).
        env = {**allowed_environment(), "CUDA_VISIBLE_DEVICES": str(physical_index(gpu_index))}
        # This thread waits for the tool, so the kernel's parent-death signal (tied to the
        # creating thread) fires only if this process dies: a kill -9 of the job takes the tool
        # with it. The tool runs in a session of its own, so that its launcher (which
        # compute-sanitizer leaves behind when killed) and the target go as one group: on a
        # timeout here, or through the reaper when this process dies.
        with subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
            preexec_fn=arm_pdeathsig,
        ) as tool:
            reaper = start_group_reaper(tool.pid)
            try:
                stdout, stderr = tool.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(tool.pid, signal.SIGKILL)
                tool.communicate()
                raise
            finally:
                reaper.kill()
                reaper.wait()
        return subprocess.CompletedProcess(argv, tool.returncode, stdout, stderr)


def cubin_kernels(cubin: bytes) -> tuple[str, ...]:
    """The names of ``cubin``'s global functions (its kernels), sorted; ``()`` when it is not an
    ELF file pyelftools can read (the device-state check refuses such a cubin first)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        elf = ELFFile(io.BytesIO(cubin))
        names = {
            symbol.name
            for section in elf.iter_sections()
            if isinstance(section, SymbolTableSection)
            for symbol in section.iter_symbols()
            if symbol["st_info"]["type"] == "STT_FUNC" and symbol["st_info"]["bind"] == "STB_GLOBAL"
        }
    except (ELFError, ValueError, KeyError, OSError):
        return ()
    return tuple(sorted(name for name in names if _IDENTIFIER.fullmatch(name)))


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.cache
def sanitizer_filters_kernels(sanitizer: str) -> bool:
    """Whether this compute-sanitizer takes ``--kernel-name`` (its ``--help`` lists it)."""
    try:
        done = subprocess.run(
            [sanitizer, "--help"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--kernel-name" in done.stdout


def kernel_filter(kernels: tuple[str, ...]) -> list[str]:
    """compute-sanitizer arguments that instrument only ``kernels`` (a regex filter anchored on
    the whole name), ``[]`` for none. trsm_blocked's driver launches cuBLAS GEMMs between the
    candidate's launches: instrumented, they would multiply a sanitizer run's time by the
    tool's slowdown on vendor code we do not judge, and report the vendor's accesses as the
    candidate's."""
    if not kernels:
        return []
    return ["--kernel-name", "regex=^(" + "|".join(kernels) + ")$"]


def run_sanitizer(
    sanitizer: str,
    tool: str,
    cubin: bytes,
    path_id: str,
    dtype: str,
    shape: tuple[int, ...],
    gpu_index: int,
    timeout_s: float,
    repeat: int = 1,
) -> CheckFailure | None:
    """Run the candidate once (``repeat`` solves) at ``shape`` under compute-sanitizer's
    ``tool`` (``memcheck``, ``racecheck``, ``synccheck``, ``initcheck``), sharing the GPU lock.
    Only the cubin's own kernels are instrumented where the sanitizer can filter
    (:func:`kernel_filter`); vendor kernels the driver launches run uninstrumented.

    ``sanitizer`` is the compute-sanitizer executable (:func:`find_tool`). Returns ``None``
    when it ran clean, else ``CheckFailure("sanitizer_<tool>", shape, detail=...)``: the first
    three ``=========`` lines of its report, or the last line of stderr when the target failed
    otherwise, or ``"timed out"`` past ``timeout_s`` seconds.
    """
    argv = [sanitizer, "--tool", tool, "--error-exitcode", str(SANITIZER_EXIT_CODE)]
    only = kernel_filter(cubin_kernels(cubin)) if sanitizer_filters_kernels(sanitizer) else []
    try:
        # Shared: a sanitizer run times nothing, so it may overlap other jobs' verification
        # (never a timing, which holds the GPU alone).
        with gpu_lock(gpu_index, shared=True):
            done = run_candidate_under(
                argv + only, cubin, path_id, dtype, shape, gpu_index, timeout_s, repeat=repeat
            )
            if only and _refused_without_finding(done):
                # A filter syntax this version does not take fails before any kernel runs:
                # checked again instrumenting everything, rather than refusing the candidate.
                done = run_candidate_under(
                    argv, cubin, path_id, dtype, shape, gpu_index, timeout_s, repeat=repeat
                )
    except subprocess.TimeoutExpired:
        return CheckFailure(f"sanitizer_{tool}", shape, detail="timed out")
    if done.returncode == 0:
        return None
    lines = [ln for ln in done.stdout.splitlines() if "=========" in ln][:3]
    detail = " | ".join(lines) or (done.stderr.strip().splitlines() or ["exit"])[-1]
    return CheckFailure(f"sanitizer_{tool}", shape, detail=detail[:500])


def _refused_without_finding(done: subprocess.CompletedProcess[str]) -> bool:
    """A sanitizer run that failed with neither a finding's status nor a report line."""
    return done.returncode not in (0, SANITIZER_EXIT_CODE) and "=========" not in done.stdout


def sanitizer_version(sanitizer: str) -> str | None:
    """compute-sanitizer's version (``"2025.3.1.0"``, from the ``Version`` line of
    ``compute-sanitizer --version``), or ``None`` when it does not say."""
    try:
        done = subprocess.run(
            [sanitizer, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _SANITIZER_VERSION.search(done.stdout)
    return match.group(1) if match else None


def nvidia_driver_version() -> str | None:
    """The NVIDIA kernel driver's version (``"580.95.05"``), or ``None`` when nothing says.

    ``/proc/driver/nvidia/version`` first (the loader reads the same file, so a certificate and
    a loader compare like with like), else ``nvidia-smi --query-gpu=driver_version`` (one line
    per GPU, all the same driver). CuPy exposes no NVML to ask instead.
    """
    version = proc_driver_version()
    if version:
        return version
    smi = find_tool("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = done.stdout.strip().splitlines()[:1] if done.returncode == 0 else []
    return first[0].strip() if first else None
