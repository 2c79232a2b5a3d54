"""Bad input and missing infrastructure end the ``kernevo`` command with one line on stderr and
a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolver.errors import NoGpuError
from evolver.gpu import query_gpu


def _kernevo(*args: str, tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    env["KERNEVO_DATABASE_URL"] = f"sqlite:///{tmp_path / 'lineage.db'}"
    env["KERNEVO_WORK_DIR"] = str(tmp_path / "runs")
    env["KERNEVO_API_URL"] = f"http://127.0.0.1:{_closed_port()}"
    return subprocess.run(
        [sys.executable, "-m", "kernevo.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


def _closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _has_gpu() -> bool:
    try:
        query_gpu(0)
    except NoGpuError:
        return False
    return True


@pytest.mark.skipif(_has_gpu(), reason="a CUDA GPU is present")
def test_no_gpu_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(
        _kernevo("evolve", "--path", "trsm_small", "--dtype", "float64", tmp_path=tmp_path)
    )
    assert line.startswith("kernevo: no CUDA GPU found")
    assert not (tmp_path / "lineage.db").exists()  # nothing was created


def test_missing_device_index_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(
        _kernevo(
            "evolve",
            "--path",
            "trsm_small",
            "--dtype",
            "float64",
            "--gpu",
            "97",
            tmp_path=tmp_path,
        )
    )
    assert line.startswith("kernevo: no CUDA GPU found")


def test_unknown_path_and_dtype_are_one_line(tmp_path: Path) -> None:
    line = _one_line_error(
        _kernevo("evolve", "--path", "trsm_tiny", "--dtype", "float64", tmp_path=tmp_path)
    )
    assert line == "kernevo: job config: path: unknown path 'trsm_tiny'; known paths: trsm_small"
    line = _one_line_error(
        _kernevo("evolve", "--path", "trsm_small", "--dtype", "float16", tmp_path=tmp_path)
    )
    assert "unknown dtype 'float16'" in line and "complex128" in line


def test_misspelt_config_key_is_one_line(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("path: trsm_small\ndtype: float32\nislandz: 4\n")
    line = _one_line_error(_kernevo("evolve", "--config", str(job), tmp_path=tmp_path))
    assert line == f"kernevo: {job}: unknown key 'islandz'; did you mean 'islands'?"


def test_unreachable_llm_endpoint_is_one_line_and_fast(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    start = time.monotonic()
    line = _one_line_error(
        _kernevo(
            "evolve",
            "--path",
            "trsm_small",
            "--dtype",
            "float64",
            "--compile-only",
            "--llm-base-url",
            base,
            "--llm-model",
            "some-model",
            tmp_path=tmp_path,
        )
    )
    assert time.monotonic() - start < 60
    assert line.startswith(f"kernevo: LLM endpoint {base} is unreachable (ConnectError")


def test_llm_endpoint_without_model_or_key_is_one_line(tmp_path: Path) -> None:
    args = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
    line = _one_line_error(
        _kernevo(*args, "--llm-base-url", "http://127.0.0.1:9/v1", tmp_path=tmp_path)
    )
    assert "configured without a model" in line
    line = _one_line_error(
        _kernevo(
            *args,
            "--llm-base-url",
            "http://127.0.0.1:9/v1",
            "--llm-model",
            "m",
            "--llm-api-key-env",
            "KERNEVO_TEST_UNSET_KEY",
            tmp_path=tmp_path,
        )
    )
    assert line == (
        "kernevo: the LLM API key variable KERNEVO_TEST_UNSET_KEY is not set in the environment"
    )


def test_wrong_database_url_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(
        _kernevo(
            "evolve",
            "--path",
            "trsm_small",
            "--dtype",
            "float64",
            "--compile-only",
            "--database-url",
            "nosuchdb://localhost/x",
            tmp_path=tmp_path,
        )
    )
    assert line.startswith("kernevo: database nosuchdb://localhost/x:")
    line = _one_line_error(
        _kernevo(
            "jobs", "--database-url", "postgresql+psycopg://u@127.0.0.1:1/x", tmp_path=tmp_path
        )
    )
    assert line.startswith("kernevo: database postgresql+psycopg://u@127.0.0.1:1/x:")


def test_resume_of_an_unknown_job_is_one_line(tmp_path: Path) -> None:
    line = _one_line_error(_kernevo("evolve", "--resume", "41", tmp_path=tmp_path))
    assert line == "kernevo: job 41 not found"
    line = _one_line_error(
        _kernevo(
            "evolve", "--resume", "--path", "trsm_small", "--dtype", "float64", tmp_path=tmp_path
        )
    )
    assert line == "kernevo: no unfinished trsm_small float64 job to resume"


def test_usage_errors_and_unreachable_service_are_one_line(tmp_path: Path) -> None:
    line = _one_line_error(_kernevo("evolve", "--iterations", "many", tmp_path=tmp_path))
    assert line.startswith("kernevo evolve: error: argument --iterations")
    line = _one_line_error(
        _kernevo(
            "best",
            "--dtype",
            "float64",
            "--m",
            "64",
            "--n",
            "64",
            "--gpu",
            "NVIDIA H200",
            tmp_path=tmp_path,
        )
    )
    assert line.startswith("kernevo: service at http://127.0.0.1:") and "unreachable" in line


def test_jobs_lists_a_finished_compile_only_job(tmp_path: Path) -> None:
    done = _kernevo(
        "evolve",
        "--path",
        "trsm_small",
        "--dtype",
        "complex64",
        "--compile-only",
        "--iterations",
        "2",
        tmp_path=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    listing = _kernevo("jobs", tmp_path=tmp_path)
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()
    assert header.split()[:3] == ["id", "path", "dtype"]
    assert row.split()[:6] == ["1", "trsm_small", "complex64", "none", "complete", "2/2"]
    assert row.split()[-1] == "offline/offline-mutator"
