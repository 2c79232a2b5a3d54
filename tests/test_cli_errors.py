"""Bad input and missing infrastructure end the ``kernevo`` command with one line on stderr and
a non-zero exit, never a traceback."""

from __future__ import annotations

import os
import signal
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


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--resume", "99999999999999999999"),  # past a 32-bit database id
        ("--resume", "0"),
        ("--seed", "-1"),
        ("--seed", "99999999999999999999999"),  # past OpenEvolve's 32-bit seed
        ("--iterations", "0"),
        ("--islands", "0"),
    ],
)
def test_out_of_range_numbers_are_usage_errors_before_any_job(
    tmp_path: Path, option: str, value: str
) -> None:
    done = _kernevo(
        "evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only",
        option, value, tmp_path=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert _one_line_error(done).startswith(f"kernevo evolve: error: argument {option}: ")
    assert not list(tmp_path.glob("*.db"))


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
    assert row.split()[:5] == ["1", "trsm_small", "complex64", "none", "complete"]
    assert row.split()[5].endswith(("s", "m")) and row.split()[6] == "2/2"  # heartbeat age, iter
    assert row.split()[-1] == "offline/offline-mutator"


def test_an_unwritable_work_folder_is_one_line_and_leaves_no_job(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    args = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
    for _ in range(2):
        done = _kernevo(*args, "--work-dir", str(blocker / "runs"), tmp_path=tmp_path)
        assert done.returncode == 1
        line = _one_line_error(done)
        assert line == f"kernevo: work folder {blocker / 'runs'} cannot be created: Not a directory"
    assert not (tmp_path / "lineage.db").exists()  # no job row, not even a database


def test_serve_port_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    for port in ("99999", "0", "http"):
        done = _kernevo("serve", "--port", port, tmp_path=tmp_path)
        assert done.returncode == 2
        assert _one_line_error(done).startswith("kernevo serve: error: argument --port: ")
    assert not (tmp_path / "lineage.db").exists()


def test_serve_on_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _kernevo("serve", "--port", str(port), tmp_path=tmp_path)
    assert done.returncode == 1
    assert (
        _one_line_error(done)
        == f"kernevo: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_a_yaml_syntax_error_names_its_line(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("path: trsm_small\ndtype: [float32\nislands: 4\n")
    done = _kernevo("evolve", "--config", str(job), tmp_path=tmp_path)
    assert done.returncode == 1
    assert _one_line_error(done) == (
        f"kernevo: {job}: invalid YAML at line 3, column 8: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence at line 2, column 8)"
    )


def test_read_only_commands_create_no_database_or_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "dir" / "x.db"
    done = _kernevo("jobs", "--database-url", f"sqlite:///{missing}", tmp_path=tmp_path)
    assert done.returncode == 1
    assert _one_line_error(done) == (
        f"kernevo: database sqlite:///{missing}: no such file {missing} "
        "('kernevo evolve' or 'kernevo serve' creates and migrates it)"
    )
    assert not (tmp_path / "no").exists()
    done = _kernevo("jobs", tmp_path=tmp_path)  # KERNEVO_DATABASE_URL: tmp_path/lineage.db
    assert "no such file" in _one_line_error(done)
    done = _kernevo(
        "best",
        "--dtype",
        "float64",
        "--m",
        "8",
        "--n",
        "8",
        "--gpu",
        "nvidia-h200",
        tmp_path=tmp_path,
    )
    assert "unreachable" in _one_line_error(done)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ctrl_c_stops_a_job_cleanly_and_exits_130(tmp_path: Path) -> None:
    from sqlalchemy import create_engine, func, select, text
    from sqlalchemy.orm import Session

    from db.models import Job, Program

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    job = subprocess.Popen(
        [sys.executable, "-m", "kernevo.cli", "evolve", "--path", "trsm_small"]
        + ["--dtype", "float32", "--compile-only", "--iterations", "1000"]
        + ["--database-url", url, "--work-dir", str(tmp_path / "runs")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
    )
    engine = create_engine(url)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert job.poll() is None, job.communicate()
            try:
                with Session(engine) as s:
                    s.execute(text("SELECT 1 FROM alembic_version"))
                    if (s.scalar(select(func.count(Program.id))) or 0) >= 5:
                        break
            except Exception:  # not created or migrated yet
                pass
            time.sleep(0.05)
        else:
            pytest.fail("the job recorded too few programs in time")
        os.killpg(job.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 130, out[-2000:] + err
    assert err == ""  # no traceback, neither from the job nor from its pool workers
    last = out.splitlines()[-1]
    assert last.startswith("job 1 stopped by SIGINT at iteration ")
    assert "resume with 'kernevo evolve --resume 1'" in last
    with Session(engine) as s:
        row = s.get(Job, 1)
        assert row is not None
        assert (row.state, row.last_failure_kind) == ("failed", "interrupted")
        assert 1 <= row.iteration < 1000
    engine.dispose()
