"""Running NVIDIA's command-line tools (Nsight Compute, compute-sanitizer) on one candidate."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evaluator.child_env import allowed_environment
from evaluator.parent_watch import arm_pdeathsig


def find_tool(name: str) -> str | None:
    """Path of ``name`` on PATH or under /usr/local/cuda/bin, else None."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")


def run_candidate_under(
    tool_argv: list[str],
    cubin: bytes,
    path_id: str,
    dtype: str,
    shape: tuple[int, int],
    gpu_index: int,
    timeout_s: float,
    repeat: int = 1,
) -> subprocess.CompletedProcess[str]:
    """Run ``tool_argv + [python -m evaluator.run_once ...]`` on ``gpu_index``.

    Raises:
        subprocess.TimeoutExpired: the tool ran past ``timeout_s``.
    """
    with tempfile.TemporaryDirectory() as tmp:
        cubin_path = Path(tmp) / "candidate.cubin"
        cubin_path.write_bytes(cubin)
        argv = [
            *tool_argv, sys.executable, "-m", "evaluator.run_once", "--cubin", str(cubin_path),
            "--path", path_id, "--dtype", dtype, "--m", str(shape[0]), "--n", str(shape[1]),
            "--repeat", str(repeat),
        ]  # fmt: skip
        # Like the GPU worker: the candidate runs with the allow-listed environment only.
        env = {**allowed_environment(), "CUDA_VISIBLE_DEVICES": str(gpu_index)}
        # subprocess.run blocks this thread until the tool exits, so the kernel's parent-death
        # signal (tied to the creating thread) fires only if this process dies: a kill -9 of the
        # job takes the tool with it.
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
            preexec_fn=arm_pdeathsig,
        )
