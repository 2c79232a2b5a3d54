"""Writers that race or crash, committing for real on a fresh database per test."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, func, select

from db import repository as repo
from db.models import Champion, ChampionPromotion, Job, Program
from db.session import make_engine, session_scope

H200 = "nvidia-h200"
KEY = {"path": "trsm_small", "dtype": "float64", "gpu_key": H200, "shape_bucket": "m64n64"}
SOURCE = "// EVOLVE-BLOCK-START\n#define NB 32  // tune: 16 32 64\n// EVOLVE-BLOCK-END\n"
WRITERS = 8


@pytest.fixture
def engine(fresh_database_url: str) -> Iterator[Engine]:
    engine = make_engine(fresh_database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def _new_job(engine: Engine) -> int:
    with session_scope(engine) as s:
        return repo.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu=H200,
            shape_bucket="m64n64",
            config={},
            backend="offline",
            model=None,
        ).id


def _race(worker: Callable[[], object], n: int = WRITERS) -> list[object]:
    """Run ``worker`` in ``n`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    results: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            result = worker()
            with lock:
                results.append(result)
        except BaseException as exc:  # collected and re-raised in the test thread
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def test_concurrent_record_program_creates_one_row(engine: Engine) -> None:
    job_id = _new_job(engine)

    def record() -> tuple[int, bool]:
        with session_scope(engine) as s:
            program, created = repo.record_program(
                s,
                job_id=job_id,
                uid="raced-uid",
                source=SOURCE,
                parent_uid=None,
                island=0,
                generation=0,
                iteration=0,
                diff=None,
                backend="offline",
                model=None,
            )
            return program.id, created

    results = _race(record)
    assert len(results) == WRITERS
    assert sorted(created for _, created in results) == [False] * (WRITERS - 1) + [True]
    assert len({program_id for program_id, _ in results}) == 1
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Program)) == 1


def test_concurrent_promotions_keep_one_champion_and_every_history_row(
    engine: Engine, report_json: Callable[..., str]
) -> None:
    job_id = _new_job(engine)
    cubin = b"\x7fELF raced"
    with session_scope(engine) as s:
        program, _ = repo.record_program(
            s,
            job_id=job_id,
            uid="p",
            source=SOURCE,
            parent_uid=None,
            island=0,
            generation=0,
            iteration=0,
            diff=None,
            backend="offline",
            model=None,
        )
        evaluation_id = repo.record_evaluation(
            s,
            program_id=program.id,
            report_json=report_json(2.0, cubin=cubin),
            gpu_key=H200,
            gpu_name="NVIDIA H200",
            arch="sm_90",
            driver_version="580.65",
            nvrtc_version="13.0",
            score=2.0,
            state="verified",
            error_kind=None,
        ).id

    def promote() -> int:
        with session_scope(engine) as s:
            return repo.promote_champion(
                s,
                evaluation_id=evaluation_id,
                **KEY,
                cubin=cubin,
                launch={"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
                envelope={"m_max": 64, "n_max": 64},
                compile_options=["-arch=sm_90"],
            ).id

    champion_ids = _race(promote)
    assert len(set(champion_ids)) == 1
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Champion)) == 1
        assert s.scalar(select(func.count()).select_from(ChampionPromotion)) == WRITERS


def test_concurrent_progress_and_cancel_never_resurrect_a_cancelled_job(engine: Engine) -> None:
    job_id = _new_job(engine)
    with session_scope(engine) as s:
        repo.update_job_progress(s, job_id, state="running")
    outcomes: list[str] = []

    def worker_progress() -> None:
        for iteration in range(1, 30):
            try:
                with session_scope(engine) as s:
                    repo.update_job_progress(s, job_id, state="running", iteration=iteration)
            except repo.InvalidTransitionError:
                outcomes.append("stopped")
                return

    def cancel() -> None:
        with session_scope(engine) as s:
            repo.set_job_state(s, job_id, "cancelled")

    worker = threading.Thread(target=worker_progress)
    worker.start()
    cancel()
    worker.join(timeout=120)
    with session_scope(engine) as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state == "cancelled"
    # The worker either finished all its iterations before the cancel or was told to stop.
    assert outcomes in ([], ["stopped"])


def test_session_scope_rolls_back_when_the_block_raises(engine: Engine) -> None:
    with pytest.raises(RuntimeError, match="boom"), session_scope(engine) as s:
        repo.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu=H200,
            shape_bucket="m64n64",
            config={},
            backend="offline",
            model=None,
        )
        raise RuntimeError("boom")
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0


def test_a_writer_killed_mid_transaction_leaves_no_trace_and_no_lock(
    engine: Engine, fresh_database_url: str
) -> None:
    """A worker process dying with an open write transaction (os._exit: no rollback, no close)
    must not leave a half-written row or a held lock behind."""
    script = textwrap.dedent(
        f"""
        import os
        from db import repository as repo
        from db.session import make_engine, session_scope

        engine = make_engine({fresh_database_url!r})
        with session_scope(engine) as s:
            repo.create_job(s, path="trsm_small", dtype="float64", gpu="nvidia-h200",
                            shape_bucket="m64n64", config={{}}, backend="offline", model=None)
            s.flush()
            print("flushed", flush=True)
            os._exit(3)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == "flushed"
    with session_scope(engine) as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 0
    # The next writer gets the lock at once and commits.
    job_id = _new_job(engine)
    with session_scope(engine) as s:
        assert s.scalar(select(Job.id)) == job_id
