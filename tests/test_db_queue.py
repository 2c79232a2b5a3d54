"""The job queue (``db.queue``): claims, heartbeats, the reaper and cancels, racing for real on a
fresh database per test (SQLite and PostgreSQL), each writer in its own committed transaction."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine, update

from db import queue
from db import repository as repo
from db.errors import InvalidTransitionError, InvalidValueError, NotFoundError
from db.heartbeat import database_now
from db.models import Job
from db.session import session_scope

H200 = "nvidia-h200"
GPU_ACCEPTS = (H200, queue.ANY_GPU, queue.NO_GPU)
CLAIMERS = 8


def _enqueue(engine: Engine, gpu_key: str = queue.ANY_GPU, dtype: str = "float64") -> int:
    with session_scope(engine) as s:
        return queue.enqueue_job(
            s,
            path="trsm_small",
            dtype=dtype,
            gpu_key=gpu_key,
            shape_bucket="m64n64",
            config={"path": "trsm_small", "dtype": dtype},
        ).id


def _claim(engine: Engine, worker: str, accepts: tuple[str, ...] = GPU_ACCEPTS) -> int | None:
    with session_scope(engine) as s:
        job = queue.claim_job(s, worker=worker, accepts=accepts, gpu_key=H200, gpu_index=0)
        return None if job is None else job.id


def _job(engine: Engine, job_id: int) -> Job:
    with session_scope(engine) as s:
        return repo.get_job(s, job_id)


def _age_heartbeat(engine: Engine, job_id: int, seconds: float) -> None:
    """Set the job's heartbeat ``seconds`` into the past, on the database clock."""
    with session_scope(engine) as s:
        then = database_now(s) - timedelta(seconds=seconds)
        s.execute(update(Job).where(Job.id == job_id).values(heartbeat_at=then))


def _race(work: Callable[[int], object], n: int = CLAIMERS) -> list[object]:
    """Run ``work(i)`` in ``n`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(n)
    results: list[object] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            result = work(i)
            with lock:
                results.append(result)
        except BaseException as exc:  # collected and re-raised in the test thread
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def test_enqueued_job_waits_with_queue_time_and_pending_backend(engine: Engine) -> None:
    job = _job(engine, _enqueue(engine))
    assert (job.state, job.backend, job.attempts, job.claimed_by) == (
        "waiting",
        queue.PENDING_BACKEND,
        0,
        None,
    )
    assert job.queued_at is not None and job.queued_at >= job.created_at


def test_racing_claimers_take_each_job_exactly_once(engine: Engine) -> None:
    jobs = [_enqueue(engine) for _ in range(5)]

    def claim_all(i: int) -> tuple[str, list[int]]:
        taken = []
        while (job_id := _claim(engine, f"worker-{i}")) is not None:
            taken.append(job_id)
        return f"worker-{i}", taken

    results: list[tuple[str, list[int]]] = _race(claim_all)  # type: ignore[assignment]
    claimed = [job_id for _, taken in results for job_id in taken]
    assert sorted(claimed) == jobs  # every job once, none twice
    for worker, taken in results:
        for job_id in taken:
            job = _job(engine, job_id)
            assert (job.state, job.attempts, job.claimed_by) == ("running", 1, worker)
            assert (job.gpu_key, job.claimed_gpu) == (H200, 0)
            assert job.heartbeat_at is not None


def test_claim_order_and_filters(engine: Engine) -> None:
    with session_scope(engine) as s:  # a job of ``kernevo evolve``: never in the queue
        local = repo.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu=H200,
            shape_bucket="m64n64",
            config={},
            backend="offline",
            model=None,
        ).id
    other_gpu = _enqueue(engine, gpu_key="nvidia-h100")
    compile_only = _enqueue(engine, gpu_key=queue.NO_GPU)
    first, second = _enqueue(engine), _enqueue(engine, gpu_key=H200)
    cancelled = _enqueue(engine)
    with session_scope(engine) as s:
        assert queue.cancel_job(s, cancelled) == "cancelled"

    # A compile-only worker takes compile-only jobs only.
    assert _claim(engine, "cpu", accepts=(queue.NO_GPU,)) == compile_only
    assert _claim(engine, "cpu", accepts=(queue.NO_GPU,)) is None
    # An H200 worker: oldest first, never another GPU's, a local or a cancelled job.
    assert _claim(engine, "gpu") == first
    assert _claim(engine, "gpu") == second
    assert _claim(engine, "gpu") is None
    assert _job(engine, local).state == "waiting"
    assert _job(engine, other_gpu).state == "waiting"
    assert _job(engine, cancelled).state == "cancelled"
    assert _job(engine, first).gpu_key == H200  # "any" became the claiming GPU's key


def test_claim_refuses_bad_worker_ids(engine: Engine) -> None:
    with session_scope(engine) as s, pytest.raises(InvalidValueError, match="worker id"):
        queue.claim_job(s, worker="", accepts=GPU_ACCEPTS, gpu_key=H200, gpu_index=0)
    with session_scope(engine) as s, pytest.raises(InvalidValueError, match="worker id"):
        queue.claim_job(s, worker="w" * 129, accepts=GPU_ACCEPTS, gpu_key=H200, gpu_index=0)
    with session_scope(engine) as s, pytest.raises(InvalidValueError, match="GPU key"):
        queue.claim_job(s, worker="w", accepts=(), gpu_key=H200, gpu_index=0)


def test_reaper_requeues_a_stale_job_and_fences_its_old_worker(engine: Engine) -> None:
    job_id = _enqueue(engine)
    fresh = _enqueue(engine)
    assert _claim(engine, "dead") == job_id
    assert _claim(engine, "alive") == fresh
    _age_heartbeat(engine, job_id, 120)
    with session_scope(engine) as s:
        reaped = queue.reap_stale(s, grace_s=60, max_attempts=3)
    assert [(r.job_id, r.claimed_by, r.action, r.attempts) for r in reaped] == [
        (job_id, "dead", "requeued", 1)
    ]
    assert reaped[0].heartbeat_age_s >= 119
    job = _job(engine, job_id)
    assert (job.state, job.claimed_by, job.attempts) == ("waiting", None, 1)
    assert _job(engine, fresh).state == "running"  # its heartbeat is young
    # The dead worker, should it come back, no longer holds the job.
    with session_scope(engine) as s:
        assert queue.beat(s, job_id, "dead") is False
        assert queue.beat(s, fresh, "alive") is True
    # Claimed again: a second attempt, by the new worker.
    assert _claim(engine, "next") == job_id
    job = _job(engine, job_id)
    assert (job.state, job.claimed_by, job.attempts) == ("running", "next", 2)


def test_reaper_gives_up_after_max_attempts(engine: Engine) -> None:
    job_id = _enqueue(engine)
    for attempt in (1, 2):
        assert _claim(engine, f"w{attempt}") == job_id
        _age_heartbeat(engine, job_id, 120)
        with session_scope(engine) as s:
            [reaped] = queue.reap_stale(s, grace_s=60, max_attempts=2)
        assert reaped.action == ("requeued" if attempt == 1 else "failed")
    job = _job(engine, job_id)
    assert (job.state, job.last_failure_kind, job.attempts) == ("failed", queue.WORKER_LOST, 2)
    assert _claim(engine, "w3") is None


def test_reaper_arguments_are_checked(engine: Engine) -> None:
    with session_scope(engine) as s, pytest.raises(InvalidValueError, match="grace"):
        queue.reap_stale(s, grace_s=0, max_attempts=1)
    with session_scope(engine) as s, pytest.raises(InvalidValueError, match="max_attempts"):
        queue.reap_stale(s, grace_s=1, max_attempts=0)


def test_beat_keeps_a_cancelled_jobs_claim_without_beating(engine: Engine) -> None:
    job_id = _enqueue(engine)
    assert _claim(engine, "w") == job_id
    _age_heartbeat(engine, job_id, 30)
    before = _job(engine, job_id).heartbeat_at
    with session_scope(engine) as s:
        queue.cancel_job(s, job_id)
    with session_scope(engine) as s:
        assert queue.beat(s, job_id, "w") is True  # still its job: it finishes the iteration
    assert _job(engine, job_id).heartbeat_at == before
    with session_scope(engine) as s:  # a cancelled job is never reaped nor requeued
        assert queue.reap_stale(s, grace_s=1, max_attempts=3) == []
        assert queue.return_job(s, job_id, "w", max_attempts=3) == "untouched"


def test_return_job_only_by_its_holder(engine: Engine) -> None:
    job_id = _enqueue(engine)
    assert _claim(engine, "w") == job_id
    with session_scope(engine) as s:
        assert queue.return_job(s, job_id, "other", max_attempts=3) == "untouched"
    with session_scope(engine) as s:  # stopped by SIGTERM: the runner left it failed
        repo.update_job_progress(s, job_id, state="failed", last_failure_kind="interrupted")
    with session_scope(engine) as s:
        assert queue.return_job(s, job_id, "w", max_attempts=3) == "requeued"
    assert _job(engine, job_id).state == "waiting"
    with session_scope(engine) as s, pytest.raises(NotFoundError):
        queue.return_job(s, 999, "w", max_attempts=3)


def test_cancel_outcomes(engine: Engine) -> None:
    job_id = _enqueue(engine)
    with session_scope(engine) as s:
        assert queue.cancel_job(s, job_id) == "cancelled"
    with session_scope(engine) as s:
        assert queue.cancel_job(s, job_id) == "already_cancelled"
    done = _enqueue(engine)
    assert _claim(engine, "w") == done
    with session_scope(engine) as s:
        repo.update_job_progress(s, done, state="complete")
    with session_scope(engine) as s, pytest.raises(InvalidTransitionError, match="complete"):
        queue.cancel_job(s, done)
    # A failed job ended too: it keeps its state and failure kind (a cancel overwrote them).
    failed = _enqueue(engine)
    assert _claim(engine, "w") == failed
    with session_scope(engine) as s:
        repo.update_job_progress(s, failed, state="failed", last_failure_kind="worker_error")
    with (
        session_scope(engine) as s,
        pytest.raises(
            InvalidTransitionError,
            match=f"job {failed} is failed; only a waiting or running job can be cancelled",
        ),
    ):
        queue.cancel_job(s, failed)
    assert (_job(engine, failed).state, _job(engine, failed).last_failure_kind) == (
        "failed",
        "worker_error",
    )
    with session_scope(engine) as s, pytest.raises(NotFoundError, match="job 999 not found"):
        queue.cancel_job(s, 999)


def test_cancel_racing_claimers_never_loses_the_cancel(engine: Engine) -> None:
    """Half the threads claim, half cancel, each job: whoever wins, every job ends cancelled,
    and no job is claimed twice."""
    jobs = [_enqueue(engine) for _ in range(4)]

    def work(i: int) -> list[int]:
        if i % 2:
            with session_scope(engine) as s:
                for job_id in jobs:
                    queue.cancel_job(s, job_id)
            return []
        taken = []
        while (job_id := _claim(engine, f"w{i}")) is not None:
            taken.append(job_id)
        return taken

    claimed = [job_id for taken in _race(work) for job_id in taken]  # type: ignore[attr-defined]
    assert len(claimed) == len(set(claimed))
    for job_id in jobs:
        job = _job(engine, job_id)
        assert job.state == "cancelled"
        assert job.attempts == (1 if job_id in claimed else 0)


def test_cancel_racing_the_reaper_ends_cancelled(engine: Engine) -> None:
    """A stale job reaped while it is cancelled: cancelled either way, never claimable."""
    jobs = [_enqueue(engine) for _ in range(4)]
    for job_id in jobs:
        assert _claim(engine, "dead") == job_id
        _age_heartbeat(engine, job_id, 120)

    def work(i: int) -> object:
        with session_scope(engine) as s:
            if i % 2:
                return [queue.cancel_job(s, job_id) for job_id in jobs]
            return queue.reap_stale(s, grace_s=60, max_attempts=3)

    _race(work, n=4)
    assert {_job(engine, job_id).state for job_id in jobs} == {"cancelled"}
    assert _claim(engine, "next") is None


def test_settle_backend_only_once(engine: Engine) -> None:
    job_id = _enqueue(engine)
    with session_scope(engine) as s:
        assert queue.settle_backend(
            s, job_id, config={"path": "trsm_small", "llm": {}}, backend="offline", model="m"
        )
    with session_scope(engine) as s:
        assert not queue.settle_backend(s, job_id, config={}, backend="other", model=None)
    job = _job(engine, job_id)
    assert (job.backend, job.model, job.config) == (
        "offline",
        "m",
        {"path": "trsm_small", "llm": {}},
    )


# --- who beats for a job, and how often (the tester's evolve --resume requeued by a 15 s grace) --


def test_the_reaper_waits_for_three_of_the_jobs_own_heartbeats(engine: Engine) -> None:
    """A queued job run by ``kernevo evolve --resume`` (no worker holds it) beats every 30 s;
    a worker reaping with a 15 s grace left it at 20 s old (the tester's case), and still
    leaves it at 80 s; at 91 s its process counts as gone."""
    from db.heartbeat import note_heartbeat_interval

    job_id = _enqueue(engine)
    with session_scope(engine) as s:  # what the runner does when it runs a job by itself
        repo.update_job_progress(s, job_id, state="running")
        assert note_heartbeat_interval(s, job_id, 30.0) is True
    for age in (20, 80):
        _age_heartbeat(engine, job_id, age)
        with session_scope(engine) as s:
            assert queue.reap_stale(s, grace_s=15, max_attempts=3) == []
        assert _job(engine, job_id).state == "running"
    _age_heartbeat(engine, job_id, 95)
    with session_scope(engine) as s:
        [reaped] = queue.reap_stale(s, grace_s=15, max_attempts=3)
    assert (reaped.job_id, reaped.action) == (job_id, "requeued")


def test_a_claim_records_the_workers_interval_and_a_worker_held_job_keeps_it(
    engine: Engine,
) -> None:
    from db.heartbeat import note_heartbeat_interval

    slow, fast = _enqueue(engine), _enqueue(engine)
    with session_scope(engine) as s:
        queue.claim_job(s, worker="slow", accepts=GPU_ACCEPTS, gpu_key=H200, gpu_index=0,
                        heartbeat_s=60.0)  # fmt: skip
    with session_scope(engine) as s:
        queue.claim_job(s, worker="fast", accepts=GPU_ACCEPTS, gpu_key=H200, gpu_index=1,
                        heartbeat_s=1.0)  # fmt: skip
        # The job process under a worker does not overwrite the worker's interval.
        assert note_heartbeat_interval(s, fast, 30.0) is False
    assert (_job(engine, slow).heartbeat_interval_s, _job(engine, fast).heartbeat_interval_s) == (
        60.0,
        1.0,
    )
    # Another worker with a 3 s grace: the 1 s beats are missed at 10 s, the 60 s ones are not.
    _age_heartbeat(engine, slow, 10)
    _age_heartbeat(engine, fast, 10)
    with session_scope(engine) as s:
        reaped = queue.reap_stale(s, grace_s=3, max_attempts=3)
    assert [r.job_id for r in reaped] == [fast]
    assert _job(engine, slow).state == "running"


def test_a_claim_on_a_job_another_process_runs_is_released_untouched(engine: Engine) -> None:
    job_id = _enqueue(engine)
    assert _claim(engine, "w") == job_id
    with session_scope(engine) as s:
        repo.update_job_progress(s, job_id, iteration=7)  # the other process's progress
    with session_scope(engine) as s:
        assert queue.release_claim(s, job_id, "other", holder_interval_s=30.0) is False
        assert queue.release_claim(s, job_id, "w", holder_interval_s=30.0) is True
    job = _job(engine, job_id)
    assert (job.state, job.claimed_by, job.attempts, job.iteration) == ("running", None, 0, 7)
    assert job.heartbeat_interval_s == 30.0
    # The process running it beats on; if it dies, the reaper requeues it as any other.
    _age_heartbeat(engine, job_id, 60)
    with session_scope(engine) as s:
        assert queue.reap_stale(s, grace_s=9, max_attempts=3) == []
    _age_heartbeat(engine, job_id, 100)
    with session_scope(engine) as s:
        [reaped] = queue.reap_stale(s, grace_s=9, max_attempts=3)
    assert (reaped.action, reaped.claimed_by) == ("requeued", None)
    with session_scope(engine) as s, pytest.raises(NotFoundError):
        queue.release_claim(s, 999, "w", holder_interval_s=30.0)


def test_a_slow_beating_job_is_not_shown_stale_before_three_of_its_beats() -> None:
    from datetime import UTC, datetime

    from db.heartbeat import STALE_AFTER_S, liveness

    now = datetime(2026, 12, 4, tzinfo=UTC)
    for interval, age, stale in ((None, 91, True), (10.0, 91, True), (60.0, 91, False),
                                 (60.0, 181, True)):  # fmt: skip
        job = Job(state="running", heartbeat_interval_s=interval)
        job.heartbeat_at = now - timedelta(seconds=age)
        assert liveness(job, now).stale is stale, (interval, age)
    assert STALE_AFTER_S == 90.0
