"""A job's row as tests read and set it directly in the store, and the small offline job they
start (compile-only trsm_small float32, two iterations, a checkpoint after each), shared by the
work-folder and resume tests."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, update
from sqlalchemy.orm import Session

from db.models import Job
from evolver.job_config import JobConfig
from evolver.settings import EvolverSettings


def job_row(url: str, job_id: int = 1) -> Job:
    """Job ``job_id`` of the database at ``url``, detached (its attributes loaded)."""
    engine = create_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job
    finally:
        engine.dispose()


def set_job_state(url: str, state: str, job_id: int = 1, **values: object) -> None:
    """Set job ``job_id``'s ``state`` (and any other ``values``) as a stopped run leaves it."""
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            s.execute(update(Job).where(Job.id == job_id).values(state=state, **values))
            s.commit()
    finally:
        engine.dispose()


def offline_settings(root: Path) -> EvolverSettings:
    """Evolver settings with work root ``root`` and the offline mutator."""
    return EvolverSettings(work_dir=root, llm_base_url=None)


def small_job(**changes: object) -> JobConfig:
    """The small compile-only job, with ``changes`` to its configuration."""
    values: dict[str, object] = {
        "path": "trsm_small",
        "dtype": "float32",
        "compile_only": True,
        "iterations": 2,
        "checkpoint_interval": 1,
    }
    return JobConfig.model_validate(values | changes)


def enqueue_jobs(session: Session, count: int, iterations: int = 4) -> None:
    """Queue ``count`` trsm_small float64 jobs of ``iterations`` on ``session`` (no GPU key:
    any worker may take them), as ``POST /v1/jobs`` queues them."""
    from db import queue

    for _ in range(count):
        queue.enqueue_job(
            session,
            path="trsm_small",
            dtype="float64",
            gpu_key=queue.NO_GPU,
            shape_bucket="m64n64",
            config={"path": "trsm_small", "dtype": "float64", "iterations": iterations},
        )
