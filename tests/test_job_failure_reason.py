"""Why a failed job failed is stored with it (``job.failure_reason``) and shown by ``kernevo
jobs`` and ``GET /v1/jobs/{id}``, not only on its worker's stderr; a job that runs again loses
the old reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import API_TOKEN, bearer
from fastapi.testclient import TestClient

from db import queue
from db import repository as repo
from db.session import make_engine, session_scope
from evolver.job_config import JobConfig
from kernevo.cli import main

_ENDPOINT = "http://127.0.0.1:9/v1"
_REASON = (
    f"llm.base_url {_ENDPOINT} is not an endpoint this worker sends its LLM key to: allow it "
    "with KERNEVO_LLM_BASE_URL or KERNEVO_LLM_ALLOWED_BASE_URLS on the worker"
)


def _enqueue(url: str, **config: object) -> int:
    engine = make_engine(url)
    body = JobConfig(path="trsm_small", dtype="float32", compile_only=True, **config)
    try:
        with session_scope(engine) as s:
            return queue.enqueue_job(
                s,
                path="trsm_small",
                dtype="float32",
                gpu_key=queue.NO_GPU,
                shape_bucket="m64n64",
                config=body.model_dump(mode="json"),
            ).id
    finally:
        engine.dispose()


def _job(url: str, job_id: int) -> tuple[str, str | None, str | None]:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            job = repo.get_job(s, job_id)
            return job.state, job.last_failure_kind, job.failure_reason
    finally:
        engine.dispose()


def test_a_queued_job_failing_in_a_worker_keeps_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    upgrade(url)
    job_id = _enqueue(url, llm={"base_url": _ENDPOINT, "model": "m"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    log = tmp_path / "worker.log"
    with log.open("wb") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "kernevo.cli", "worker", "--compile-only", "--poll-s", "0.2"]
            + ["--database-url", url, "--work-dir", str(tmp_path / "runs")],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:  # until the worker has settled the job (a SIGTERM before would return it to the queue)
        deadline = time.monotonic() + 120
        while f"job {job_id}: failed (exit 1)" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(60)
    assert _job(url, job_id) == ("failed", "worker_error", _REASON)
    assert f"kernevo worker: job {job_id}: {_REASON}" in log.read_text()  # stderr says it too

    assert main(["jobs", "--database-url", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"job {job_id} failed: {_REASON}"

    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    from api.app import create_app

    with TestClient(create_app(url)) as client:
        answer = client.get(f"/v1/jobs/{job_id}", headers=bearer(API_TOKEN))
        assert answer.status_code == 200
        assert answer.json()["failure_reason"] == _REASON
        listing = client.get("/v1/jobs", headers=bearer(API_TOKEN)).json()
        assert [row["failure_reason"] for row in listing] == [_REASON]


def test_the_reason_is_one_line_and_goes_when_the_job_runs_again(tmp_path: Path) -> None:
    from db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'q.db'}"
    upgrade(url)
    job_id = _enqueue(url)
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            assert queue.claim_job(
                s, worker="w", accepts=(queue.NO_GPU,), gpu_key=queue.NO_GPU, gpu_index=None
            )
            repo.update_job_progress(s, job_id, state="failed", failure_reason="a\n  b " * 2000)
        stored = _job(url, job_id)[2]
        assert stored is not None and "\n" not in stored
        assert len(stored) == repo.FAILURE_REASON_MAX and stored.startswith("a b a b")
        with session_scope(engine) as s:  # a reason is not written to a job that is not failed
            repo.update_job_progress(s, job_id, state="running")
        assert _job(url, job_id) == ("running", None, None)
        with session_scope(engine) as s:
            repo.update_job_progress(s, job_id, failure_reason="ignored")
        assert _job(url, job_id)[2] is None
    finally:
        engine.dispose()


def test_a_job_whose_workers_died_says_how_often(tmp_path: Path) -> None:
    from db.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'q.db'}"
    upgrade(url)
    job_id = _enqueue(url)
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            queue.claim_job(
                s, worker="w", accepts=(queue.NO_GPU,), gpu_key=queue.NO_GPU, gpu_index=None
            )
            assert queue.return_job(s, job_id, "w", max_attempts=1) == "failed"
    finally:
        engine.dispose()
    assert _job(url, job_id) == (
        "failed",
        "worker_lost",
        "its workers died 1 time (max attempts 1): worker_lost",
    )
