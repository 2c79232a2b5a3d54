"""A job cancelled through the API (``PATCH /v1/jobs/{id}``) stops gracefully: the iteration in
flight finishes and is recorded, the job stays ``cancelled``, the lineage stays whole."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from api.app import create_app
from db.models import Job, Program
from evolver.job_config import JobConfig
from evolver.runner import start_job
from evolver.settings import EvolverSettings

ITERATIONS = 400
TOKEN = "test-token-0123456789-abcdefghijklmn"


def _programs(url: str) -> int:
    try:
        with Session(create_engine(url)) as s:
            return int(s.scalar(select(func.count(Program.id))) or 0)
    except Exception:  # tables not created yet
        return 0


def test_patch_cancelled_stops_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", TOKEN)
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    answers: list[int] = []

    def cancel_when_running() -> None:
        deadline = time.monotonic() + 120
        while _programs(url) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        with TestClient(create_app(url)) as client:
            response = client.patch(
                "/v1/jobs/1",
                json={"state": "cancelled"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            answers.append(response.status_code)

    canceller = threading.Thread(target=cancel_when_running, daemon=True)
    canceller.start()
    lines: list[str] = []
    outcome = start_job(
        JobConfig(path="trsm_small", dtype="float32", compile_only=True, iterations=ITERATIONS),
        settings=EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None),
        database_url=url,
        write=lines.append,
    )
    canceller.join(30)

    assert answers == [200]
    assert outcome.state == "cancelled"
    assert 6 <= outcome.iteration < ITERATIONS
    assert any("cancelled: finishing the iteration in flight" in line for line in lines)
    with Session(create_engine(url)) as s:
        job = s.get(Job, 1)
        assert job is not None and job.state == "cancelled"
        programs = list(s.scalars(select(Program)))
        ids = {p.id for p in programs}
        assert all(p.parent_id in ids for p in programs if p.parent_id is not None)
        assert len(programs) == outcome.programs_recorded
