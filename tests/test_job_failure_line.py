"""A failed job is said once as ``job N failed: <reason>``: the stored ``job.failure_reason`` is
the bare reason, so ``kernevo jobs``, ``GET /v1/jobs`` and ``GET /v1/jobs/{id}`` do not say
``job N failed: job N failed: …``; and OpenEvolve's own log records (its console handler's
``<time> - ERROR - ❌ …``, a spawned pool worker's bare ``LLM generation failed: …``) go to the
job's log file in its work folder, not to the user's stderr besides kernevo's line.

The trial's reproduction: an OpenAI-compatible stub that answers with no diff, one compile-only
iteration."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import API_TOKEN, bearer
from fastapi.testclient import TestClient
from http_stub import JSON, StubServer, reply
from openai_stub import serve_chat

from db import repository
from db.session import make_engine, session_scope
from evolver import runner
from evolver.job_config import JobConfig
from kernevo.cli import main

_REASON = (
    "Evolution failed: 0/1 iterations produced a candidate program. "
    "Last error: No valid diffs found in response"
)
# A line as OpenEvolve's handlers format it ("2026-12-02 05:15:39,011 - ERROR - …").
_OPENEVOLVE_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - ", re.MULTILINE)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}


def _evolve(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernevo.cli", "evolve", "--path", "trsm_small"]
        + ["--dtype", "float32", "--compile-only", "--iterations", "1", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _log_text(cwd: Path) -> str:
    """Every OpenEvolve log file of the one job in ``cwd/runs``."""
    return "".join(p.read_text() for p in sorted((cwd / "runs").rglob("openevolve_*.log")))


@pytest.fixture
def no_diff() -> Iterator[str]:
    with serve_chat("m", lambda body, headers: "The kernel looks fine as it is.") as url:
        yield url


def test_a_run_with_no_valid_diff_says_its_failure_once_everywhere(
    tmp_path: Path,
    no_diff: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done = _evolve(tmp_path, "--llm-base-url", no_diff, "--llm-model", "m")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == (
        f"job 1 failed: {_REASON}: best score 0.000 (speedup n/a), 2 programs recorded"
    )
    # quiet_console: OpenEvolve's console handler is gone; its record is in the job's log file.
    assert done.stderr == ""
    assert "ERROR - ❌ None of the 1 iterations produced a candidate program" in _log_text(tmp_path)

    url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    assert main(["jobs", "--database-url", url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"job 1 failed: {_REASON}"
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    from api.app import create_app

    with TestClient(create_app(url)) as client:
        one = client.get("/v1/jobs/1", headers=bearer(API_TOKEN))
        assert (one.status_code, one.json()["failure_reason"]) == (200, _REASON)
        listing = client.get("/v1/jobs", headers=bearer(API_TOKEN)).json()
        assert [row["failure_reason"] for row in listing] == [_REASON]


def test_a_pool_workers_log_records_go_to_the_job_log_not_to_stderr(tmp_path: Path) -> None:
    """An endpoint that refuses every completion: OpenEvolve's spawned pool worker logs
    ``LLM generation failed: …``; without a handler of its own Python's last-resort handler
    printed it bare on stderr (``openevolve_host._log_to_job_file`` gives it the job's file)."""

    def refuse(handler) -> None:  # type: ignore[no-untyped-def]
        if handler.command == "GET":
            models = {"object": "list", "data": [{"id": "m", "object": "model"}]}
            reply(handler, 200, json.dumps(models).encode(), JSON)
            return
        handler.rfile.read(int(handler.headers["Content-Length"]))
        reply(handler, 400, b'{"error": {"message": "no such model"}}', JSON)

    job = tmp_path / "job.yaml"
    with StubServer(refuse, methods=("GET", "POST")) as server:
        job.write_text(
            "path: trsm_small\ndtype: float32\ncompile_only: true\niterations: 1\n"
            f"llm:\n  base_url: {server.url}/v1\n  model: m\n  retries: 0\n"
        )
        done = subprocess.run(
            [sys.executable, "-m", "kernevo.cli", "evolve", "--config", str(job)],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 1, done.stdout + done.stderr
    failed = f"LLM generation failed: LLM endpoint {server.url}/v1 answered HTTP 400: no such model"
    reason = f"Evolution failed: 0/1 iterations produced a candidate program. Last error: {failed}"
    assert done.stdout.splitlines()[-1].startswith(f"job 1 failed: {reason}: best score ")
    assert done.stderr == ""
    log = _log_text(tmp_path)
    assert f"openevolve.process_parallel - ERROR - {failed}" in log
    assert _OPENEVOLVE_LINE.search(log) is not None


# --- every other way a job fails: its stored reason does not name the job again ----------------


@pytest.mark.parametrize(
    ("line", "stored"),
    [
        (
            "job 3: its seed s.cu fails the screen (include)",
            "its seed s.cu fails the screen (include)",
        ),
        ("job 3 failed: Evolution failed: none", "Evolution failed: none"),
        ("job 3 is running in another process", "job 3 is running in another process"),
        ("job 30: another job's line", "job 30: another job's line"),  # not this job's prefix
        ("its workers died 2 times", "its workers died 2 times"),
    ],
)
def test_stored_reason_drops_only_this_jobs_own_prefix(line: str, stored: str) -> None:
    assert runner.stored_reason(3, line) == stored


def _running_job(url: str) -> tuple[object, JobConfig]:
    from db.migrate import upgrade

    upgrade(url)
    job = JobConfig(path="trsm_small", dtype="float32", compile_only=True, iterations=5)
    engine = make_engine(url)
    with session_scope(engine) as s:
        row = repository.create_job(
            s,
            path="trsm_small",
            dtype="float32",
            gpu="none",
            shape_bucket="m64n64",
            config=job.model_dump(mode="json"),
            backend="offline",
            model="offline-mutator",
        )
        repository.update_job_progress(s, row.id, state="running")
    return engine, job


def _stored(engine: object) -> str | None:
    with session_scope(engine) as s:  # type: ignore[arg-type]
        return repository.get_job(s, 1).failure_reason


def _reporter(iteration: int) -> SimpleNamespace:
    """What ``runner._finish`` reads of a ``ProgressReporter``."""
    return SimpleNamespace(
        cancelled=False, iteration=iteration, best_score=0.0, best_speedup=0.0, speedup_at=""
    )


_RESUME = "resume with 'kernevo evolve --resume 1'"


@pytest.mark.parametrize(
    ("failure", "signum", "stored", "said"),
    [
        (None, signal.SIGTERM, f"stopped by SIGTERM at iteration 2 of 5; {_RESUME}", "job 1 "),
        (None, None, f"stopped at iteration 2 of 5; {_RESUME}", "job 1 "),
        (
            f"the Dask scheduler tcp://127.0.0.1:1 stopped answering; {_RESUME}",
            None,
            f"the Dask scheduler tcp://127.0.0.1:1 stopped answering; {_RESUME}",
            "job 1 failed: ",
        ),
    ],
)
def test_a_stopped_or_lost_run_stores_its_bare_reason(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failure: str | None,
    signum: int | None,
    stored: str,
    said: str,
) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    engine, job = _running_job(url)
    lines: list[str] = []
    try:
        outcome = runner._finish(engine, 1, job, _reporter(2), failure, lines.append, signum)
        assert (outcome.state, _stored(engine)) == ("failed", stored)
    finally:
        engine.dispose()  # type: ignore[attr-defined]
    assert outcome.message == f"{said}{stored}"  # the summary line names the job once
    assert lines[-1].startswith(f"{said}{stored}: best score 0.000")
    assert main(["jobs", "--database-url", url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"job 1 failed: {stored}"


def test_a_job_stopped_in_its_setup_stores_its_bare_reason(tmp_path: Path) -> None:
    engine, job = _running_job(f"sqlite:///{tmp_path / 'j.db'}")
    lines: list[str] = []
    try:
        outcome = runner._stopped(engine, 1, job, signal.SIGINT, lines.append)
        assert _stored(engine) == f"stopped by SIGINT in its setup; {_RESUME}"
    finally:
        engine.dispose()  # type: ignore[attr-defined]
    assert outcome.message == f"job 1 stopped by SIGINT at iteration 0 of 5; {_RESUME}"
