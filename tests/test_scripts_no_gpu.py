"""Every script of ``scripts/`` that needs a GPU says so in one line and exits 1 before any long
work, in ``kernevo bench-loader``'s words (``scripts/needs_gpu.py``: the loader's
``kernevo.device.gpu_info``). Fresh-user trial: ``bench_batched_loader.py`` ended in a
``CUDARuntimeError: cudaErrorInsufficientDriver`` traceback and an "Exception ignored in:
Stream.__del__" line; ``bench_band_bidiag.py`` ran LAPACK on one core for over 10 minutes
without saying it had found no GPU. Runs only where no CUDA device is usable (CI)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernevo.device import NoGpuError, gpu_info

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

# Each GPU script with the least arguments its parser needs.
GPU_SCRIPTS: dict[str, list[str]] = {
    "bench_band_bidiag.py": [],
    "bench_batched_loader.py": [],
    "bench_blocked.py": ["--shapes", "64x64"],
    "check_costs.py": [],
    "diagnose_blocked.py": ["--shapes", "64x64"],
    "loader_demo.py": ["--api", "http://127.0.0.1:9", "--cache", "cache"],
    "loader_startup.py": [],
    "profile_blocked.py": [],
    "redteam_table.py": ["table.md"],
    "trsm_sweep.py": ["--api", "http://127.0.0.1:9", "--cache", "cache"],
}
# Scripts that touch the GPU but are not checked at the start, with why.
NOT_CHECKED = {
    # Asks the service first (its one-line errors are tested without a GPU), then kernevo.load,
    # whose refusal without a GPU is one line too (tests/test_ops_serve_load_script.py).
    "ops_serve_load.py",
}
# What marks a script as doing GPU work: CuPy, the evaluator's GPU stages, the loader.
_GPU_USE = re.compile(
    r"\bimport cupy\b|evaluator\.(gpu_tasks|timing|new_best|pipeline)|kernevo\.load\(|bench_loader"
)


def _gpu_usable() -> bool:
    try:
        gpu_info(0)
    except NoGpuError:
        return False
    return True


def test_every_script_doing_gpu_work_is_checked() -> None:
    found = {p.name for p in SCRIPTS.glob("*.py") if _GPU_USE.search(p.read_text())}
    assert found == set(GPU_SCRIPTS) | NOT_CHECKED


@pytest.mark.skipif(_gpu_usable(), reason="a CUDA device is usable here")
@pytest.mark.parametrize("script", sorted(GPU_SCRIPTS))
def test_a_gpu_script_without_a_gpu_says_so_in_one_line(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *GPU_SCRIPTS[script]],
        capture_output=True,
        text=True,
        timeout=60,  # the check comes before any work: seconds (bench_band_bidiag ran > 10 min)
        cwd=tmp_path,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"{script} needs a GPU: no CUDA GPU found: "), line
    if script == "bench_band_bidiag.py":
        assert line.endswith("; --lapack-only times LAPACK ?gbbrd alone")
    assert list(tmp_path.iterdir()) == []  # nothing written (redteam_table's table.md)


def test_bench_band_bidiag_lapack_only_says_what_it_does_first(tmp_path: Path) -> None:
    """Without a GPU, LAPACK alone is asked for, and said on stderr before the first row."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "bench_band_bidiag.py"), "--lapack-only", "--n", "64",
         "--bw", "4", "--dtype", "float32"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "bench_band_bidiag.py: timing LAPACK ?gbbrd alone (--lapack-only) at 1 (n, BW, dtype) "
        "in 1 CPU process(es), largest first (n = 16384, BW = 32 takes 30 to 45 s)"
    ]
    assert "| 64 | 4 | float32 |" in done.stdout
