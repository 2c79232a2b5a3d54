"""Starting a job on both store backends: a compile-only job runs end to end on SQLite and
PostgreSQL, and a work folder that cannot be written leaves no orphan job row behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from db import repository
from db.models import Evaluation, Job, Program
from db.session import make_engine, session_scope
from evolver.errors import WorkDirError
from evolver.job_config import JobConfig
from evolver.runner import start_job
from evolver.settings import EvolverSettings
from seeds.registry import get_path

ITERATIONS = 3


def _settings(work_dir: Path) -> EvolverSettings:
    return EvolverSettings(work_dir=work_dir, llm_base_url=None)  # the offline mutator


def _jobs(url: str) -> list[tuple[int, str, str | None]]:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return [(j.id, j.state, j.last_failure_kind) for j in repository.list_jobs(s)]
    finally:
        engine.dispose()


def test_a_compile_only_job_is_recorded_on_each_backend(
    fresh_database_url: str, tmp_path: Path
) -> None:
    job = JobConfig(
        path="trsm_small",
        dtype="float64",
        compile_only=True,
        iterations=ITERATIONS,
        checkpoint_interval=1,
    )
    lines: list[str] = []
    outcome = start_job(
        job,
        settings=_settings(tmp_path / "runs"),
        database_url=fresh_database_url,
        write=lines.append,
    )
    assert (outcome.state, outcome.iteration, outcome.signal) == ("complete", ITERATIONS, None)

    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            row = s.get(Job, outcome.job_id)
            assert row is not None
            assert (row.state, row.iteration, row.gpu_key) == ("complete", ITERATIONS, "none")
            assert (row.backend, row.model, row.last_failure_kind) == (
                "offline",
                "offline-mutator",
                None,
            )
            programs = list(s.scalars(select(Program).where(Program.job_id == outcome.job_id)))
            evaluations = list(s.scalars(select(Evaluation)))
            (seed,) = [p for p in programs if p.parent_id is None]
            assert seed.source == get_path("trsm_small").seed_source()
            children = [p for p in programs if p.backend == "offline"]
            assert {p.iteration for p in children} == set(range(1, ITERATIONS + 1))
            assert len(programs) == outcome.programs_recorded >= 1 + ITERATIONS
            # Every evaluated program compiled: scored 0, no failure, the compile report kept.
            evaluated = {e.program_id for e in evaluations}
            assert evaluated == {p.id for p in programs if p.backend != "migration"}
            assert {(e.state, e.error_kind, e.score, e.gpu_key) for e in evaluations} == {
                ("scored", None, 0.0, "none")
            }
            assert {e.report["status"] for e in evaluations} == {"compiled"}
            assert all("\x00" not in e.report["compile"]["log"] for e in evaluations)
    finally:
        engine.dispose()
    assert all(line.endswith("| last failure: -") for line in lines if " | iter " in line)


def test_an_unwritable_work_folder_creates_no_job(fresh_database_url: str, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    job = JobConfig(path="trsm_small", dtype="float32", compile_only=True, iterations=2)
    for _ in range(2):
        with pytest.raises(WorkDirError, match=r"^work folder .*a-file/runs cannot be created: "):
            start_job(
                job,
                settings=_settings(blocker / "runs"),
                database_url=fresh_database_url,
                write=lambda line: None,
            )
    assert _jobs(fresh_database_url) == []


def test_a_job_folder_that_cannot_be_made_marks_the_job_failed(
    fresh_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    key = "0123456789ab" + "c" * 20  # the job's work key, fixed so its folder can be blocked
    monkeypatch.setattr("db.models.new_work_key", lambda: key)
    (runs / "job-1-0123456789ab").write_text("in the way of job 1's folder")
    job = JobConfig(path="trsm_small", dtype="float32", compile_only=True, iterations=2)
    with pytest.raises(
        WorkDirError, match=r"^job 1: work folder .*job-1-0123456789ab cannot be created"
    ):
        start_job(job, settings=_settings(runs), database_url=fresh_database_url, write=print)
    assert _jobs(fresh_database_url) == [(1, "failed", "error")]
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            (row,) = repository.list_jobs(s)
            assert (row.failure_reason or "").startswith("work folder ")  # no "job 1: " twice
            assert "cannot be created or locked" in (row.failure_reason or "")
    finally:
        engine.dispose()
