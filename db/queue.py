"""The job queue: jobs created through the API wait in the ``job`` table until a worker claims one.

A queued job is a ``job`` row with ``queued_at`` set (``kernevo evolve`` leaves it ``None``: its
own process runs it, no worker may take it). A worker claims the oldest ``waiting`` job whose
GPU key it accepts (:func:`claim_job`): on PostgreSQL with ``SELECT … FOR UPDATE SKIP LOCKED``,
so claimers racing for the queue each lock a different row and never wait for one another; on
SQLite the writer's ``BEGIN IMMEDIATE`` (``db.session``) serializes them, which is correct but
serializes every writer of the file too, so the worker allows one worker process per SQLite file
(``evolver.worker``).

The claim moves the job to ``running`` and stamps ``claimed_by`` (the worker's id), ``claimed_at``
and ``heartbeat_at`` from the database clock, and counts the attempt. While the job runs its
worker beats (:func:`beat`) only while the row is still its own: a worker that finds its claim
gone (returned to the queue by another worker's reaper) must stop the job. Any worker reaps
(:func:`reap_stale`): a ``running`` queued job whose heartbeat is older than the grace period
goes back to ``waiting`` (its next worker resumes it from its checkpoint), or to ``failed``
(``last_failure_kind`` ``worker_lost``) once it was claimed ``max_attempts`` times. Every time
is the database's, so the hosts' clocks do not matter. A cancel (``repository.set_job_state``)
locks the row as well; whichever of cancel, claim and reap comes second sees the first's result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from db.errors import InvalidTransitionError, InvalidValueError, NotFoundError
from db.heartbeat import database_now, stale_after_s
from db.models import Job
from db.repository import create_job, set_job_state
from db.states import JobState

# GPU key of a queued job that any GPU model may run; the claiming worker writes its own key.
ANY_GPU = "any"
# GPU key of a compile-only job (no GPU: evaluations stop after compiling). The same key
# ``kernevo evolve --compile-only`` records (``evolver.runner.NO_GPU_KEY``).
NO_GPU = "none"
# ``job.backend`` of a queued job until its first worker resolves the LLM backend (its own
# ``KERNEVO_LLM_*`` settings may decide it) and records it.
PENDING_BACKEND = "pending"
# Failure kind of a job given up on after ``max_attempts`` claims whose workers all died.
WORKER_LOST = "worker_lost"

# The longest worker id stored (``job.claimed_by`` is 128 characters).
MAX_WORKER_ID = 128


def _check_worker(worker: str) -> str:
    if not worker or len(worker) > MAX_WORKER_ID:
        raise InvalidValueError(f"worker id must be 1..{MAX_WORKER_ID} characters")
    return worker


def enqueue_job(
    s: Session,
    *,
    path: str,
    dtype: str,
    gpu_key: str,
    shape_bucket: str,
    config: Mapping[str, Any],
    model: str | None = None,
) -> Job:
    """Insert a ``waiting`` job that workers may claim and return it (id, ``created_at`` and
    ``queued_at`` loaded, all from the database clock).

    ``gpu_key``: the GPU key workers must have (``seeds.hardware.normalize_gpu_name``),
    :data:`ANY_GPU`, or :data:`NO_GPU` for a compile-only job. ``config`` is the job's validated
    configuration (``evolver.job_config.JobConfig`` as JSON). The backend stays
    :data:`PENDING_BACKEND` until a worker resolves it (:func:`settle_backend`).
    """
    job = create_job(
        s,
        path=path,
        dtype=dtype,
        gpu=gpu_key,
        shape_bucket=shape_bucket,
        config=config,
        backend=PENDING_BACKEND,
        model=model,
    )
    job.queued_at = func.now()
    s.flush()
    s.refresh(job)
    return job


def claim_job(
    s: Session,
    *,
    worker: str,
    accepts: Sequence[str],
    gpu_key: str,
    gpu_index: int | None,
    heartbeat_s: float | None = None,
) -> Job | None:
    """Claim the oldest waiting queued job whose GPU key is in ``accepts``, or return ``None``.

    The job becomes ``running``, claimed by ``worker`` (at most :data:`MAX_WORKER_ID`
    characters) on device ``gpu_index`` (``None``: no GPU), with its heartbeat taken, the
    worker's ``heartbeat_s`` recorded as its heartbeat interval (``db.heartbeat``) and its
    ``attempts`` counted; a job queued for :data:`ANY_GPU` takes ``gpu_key``, the claiming
    device's key, so a later resume runs on the same GPU model. PostgreSQL: the row is chosen
    ``FOR UPDATE SKIP LOCKED``, so concurrent claimers never take the same job and never wait
    for each other's rows. The caller's transaction must commit for the claim to hold.

    Raises:
        InvalidValueError: an empty or over-long ``worker``, or an empty ``accepts``.
    """
    _check_worker(worker)
    if not accepts:
        raise InvalidValueError("a worker must accept at least one GPU key")
    job = s.scalars(
        select(Job)
        .where(
            Job.state == JobState.WAITING.value,
            Job.queued_at.is_not(None),
            Job.gpu_key.in_(list(accepts)),
        )
        .order_by(Job.queued_at, Job.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    ).first()
    if job is None:
        return None
    job.state = JobState.RUNNING.value  # WAITING → RUNNING is always allowed
    job.failure_reason = None
    if job.gpu_key == ANY_GPU:
        job.gpu_key = gpu_key
    job.claimed_by = worker
    job.claimed_gpu = gpu_index
    job.claimed_at = func.now()
    job.heartbeat_at = func.now()
    job.heartbeat_interval_s = heartbeat_s
    job.attempts = Job.attempts + 1
    s.flush()
    s.refresh(job)
    return job


def beat(s: Session, job_id: int, worker: str) -> bool:
    """Take the heartbeat of ``worker``'s job (database clock); ``False`` when the job is no
    longer ``worker``'s (another worker's reaper returned it to the queue, perhaps claimed it
    again): the caller must stop running it. A job cancelled meanwhile is still the worker's
    (it finishes the iteration in flight); its heartbeat is left as it was."""
    owned = s.execute(
        update(Job)
        .where(Job.id == job_id, Job.claimed_by == worker)
        .values(
            heartbeat_at=case(
                (Job.state == JobState.RUNNING.value, func.now()), else_=Job.heartbeat_at
            )
        )
        .execution_options(synchronize_session=False)
    )
    return bool(owned.rowcount)


Returned = Literal["requeued", "failed", "untouched"]


@dataclass(frozen=True)
class Reaped:
    """A job the reaper acted on: its id, the worker that held it, what it did (``requeued`` to
    ``waiting``, or ``failed`` as :data:`WORKER_LOST` after ``attempts`` claims) and the
    heartbeat's age in seconds (database clock)."""

    job_id: int
    claimed_by: str | None
    action: Literal["requeued", "failed"]
    attempts: int
    heartbeat_age_s: float


def _return(job: Job, max_attempts: int, *, count: bool = True) -> Literal["requeued", "failed"]:
    """Back to the queue, or failed for good after ``max_attempts`` claims (only when the
    attempt ``count``s: its worker died); the claim is cleared either way (``claimed_by``
    keeps the last holder only while it holds the job)."""
    if count and job.attempts >= max_attempts:
        job.state = JobState.FAILED.value
        job.last_failure_kind = WORKER_LOST
        job.failure_reason = (
            f"its workers died {job.attempts} time{'' if job.attempts == 1 else 's'} (max "
            f"attempts {max_attempts}): {WORKER_LOST}"
        )
        action: Literal["requeued", "failed"] = "failed"
    else:
        job.state = JobState.WAITING.value
        job.failure_reason = None
        job.queued_at = func.now()
        action = "requeued"
    job.claimed_by = None
    job.claimed_gpu = None
    return action


def reap_stale(s: Session, *, grace_s: float, max_attempts: int) -> list[Reaped]:
    """Return to the queue every ``running`` queued job whose heartbeat is older than
    ``grace_s`` seconds on the database clock (its worker died: SIGKILL, a lost host) and than
    three of the job's own recorded heartbeat intervals (``db.heartbeat.stale_after_s``: a
    ``kernevo evolve --resume`` of the job beats every 30 s, so a worker reaping with a 15 s
    grace leaves it alone); a job already claimed ``max_attempts`` times becomes ``failed``
    (:data:`WORKER_LOST`) instead of looping through dying workers. Rows another transaction
    holds are skipped (PostgreSQL ``SKIP LOCKED``), the next pass sees them.

    Raises:
        InvalidValueError: ``grace_s`` not > 0 or ``max_attempts`` < 1.
    """
    if not grace_s > 0:
        raise InvalidValueError(f"grace period must be > 0 s, not {grace_s}")
    if max_attempts < 1:
        raise InvalidValueError(f"max_attempts must be at least 1, not {max_attempts}")
    now = database_now(s)
    cutoff = now - timedelta(seconds=grace_s)
    stale = s.scalars(
        select(Job)
        .where(
            Job.state == JobState.RUNNING.value,
            Job.queued_at.is_not(None),
            Job.heartbeat_at < cutoff,
        )
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()
    reaped = []
    for job in stale:
        assert job.heartbeat_at is not None  # the WHERE compared it
        age = max(0.0, (now - job.heartbeat_at).total_seconds())
        if age <= stale_after_s(job, grace_s):
            continue  # its process beats more slowly than the grace period: not missed yet
        holder = job.claimed_by
        action = _return(job, max_attempts)
        reaped.append(Reaped(job.id, holder, action, job.attempts, age))
    s.flush()
    return reaped


def return_job(
    s: Session, job_id: int, worker: str, *, max_attempts: int, stopped: bool = False
) -> Returned:
    """``worker`` gives its job back: after stopping it on SIGTERM (the job then ``failed``,
    interrupted) or when its job process died without marking the row (``running``). The job
    goes back to ``waiting`` (or ``failed`` as :data:`WORKER_LOST` after ``max_attempts``
    claims); ``untouched`` when it is not ``worker``'s any more or is complete or cancelled.

    ``stopped``: the worker itself was asked to stop (SIGTERM, Ctrl-C) and stopped the job's
    process; no worker died, so the claim's attempt is not counted (as :func:`release_claim`)
    and the job always goes back to ``waiting``: a worker stopped any number of times never
    fails a job as :data:`WORKER_LOST`. Deaths (a job process killed by a signal the worker
    did not send, a crash, a reaped worker) count.

    Raises:
        NotFoundError: no such job.
    """
    job = s.scalar(select(Job).where(Job.id == job_id).with_for_update())
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    if job.claimed_by != worker or job.state not in (
        JobState.RUNNING.value,
        JobState.FAILED.value,
    ):
        return "untouched"
    if stopped:
        job.attempts = max(0, job.attempts - 1)
    action = _return(job, max_attempts, count=not stopped)
    s.flush()
    return action


def release_claim(s: Session, job_id: int, worker: str, *, holder_interval_s: float) -> bool:
    """``worker`` claimed a job that another process already runs (it holds the job's lock:
    ``kernevo evolve --resume``): give the claim up without touching the job. The state stays
    as the running process leaves it, the claim's attempt is not counted, and the heartbeat
    interval becomes at least ``holder_interval_s`` (the other process's, which could not
    record it while the claim stood), so no reaper takes the slower beats for a death. If that
    process dies, the reaper requeues the job as any other. ``False`` when the job is not
    ``worker``'s (nothing changed).

    Raises:
        NotFoundError: no such job.
    """
    job = s.scalar(select(Job).where(Job.id == job_id).with_for_update())
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    if job.claimed_by != worker:
        return False
    job.claimed_by = None
    job.claimed_gpu = None
    job.attempts = max(0, job.attempts - 1)
    job.heartbeat_interval_s = max(job.heartbeat_interval_s or 0.0, holder_interval_s)
    s.flush()
    return True


def settle_backend(
    s: Session, job_id: int, *, config: Mapping[str, Any], backend: str, model: str | None
) -> bool:
    """Record the LLM backend a worker resolved for a queued job still :data:`PENDING_BACKEND`
    (its ``config`` with the resolved ``llm`` section, ``backend`` and ``model``), so that every
    later attempt runs with the same endpoint whatever its worker's environment; ``False`` when
    an earlier attempt settled it already (nothing is changed).

    Raises:
        NotFoundError: no such job.
    """
    job = s.scalar(select(Job).where(Job.id == job_id).with_for_update())
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    if job.backend != PENDING_BACKEND:
        return False
    job.config = dict(config)
    job.backend = backend
    job.model = model
    s.flush()
    return True


CancelOutcome = Literal["cancelled", "already_cancelled"]

# What a cancel may stop: a job that waits or runs. A job that ended (complete, failed,
# cancelled) keeps the state it ended in, so its history says how it ended (a failed job's
# ``last_failure_kind`` stays readable); a second cancel is an explicit no-op.
CANCELLABLE = (JobState.WAITING.value, JobState.RUNNING.value)


def cancel_job(s: Session, job_id: int) -> CancelOutcome:
    """Cancel a waiting or running job (queued or not): a waiting job is never claimed
    afterwards, a running one stops after its iteration in flight (its process reads the
    state). ``already_cancelled`` when it was cancelled before: nothing changes.

    Raises:
        NotFoundError: no such job.
        InvalidTransitionError: the job ended ``complete`` or ``failed`` (``job N is failed;
            only a waiting or running job can be cancelled``); the CLI prints it as one line,
            the API answers 409.
    """
    job = s.scalar(select(Job).where(Job.id == job_id).with_for_update())
    if job is None:
        raise NotFoundError(f"job {job_id} not found")
    if job.state == JobState.CANCELLED.value:
        return "already_cancelled"
    if job.state not in CANCELLABLE:
        raise InvalidTransitionError(
            f"job {job_id} is {job.state}; only a waiting or running job can be cancelled"
        )
    set_job_state(s, job_id, JobState.CANCELLED.value)
    return "cancelled"
