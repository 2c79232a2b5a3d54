"""Is a running job's process still alive? Its heartbeat's age, on the database clock.

A job's process takes a heartbeat (``update_job_progress``) after every iteration and, while an
evaluation runs, every 30 s (``evolver.progress.HEARTBEAT_INTERVAL_S``). A process that died
without a word (``kill -9``, a lost machine) leaves its row ``running`` forever; its heartbeat
ages instead, and a ``running`` job whose heartbeat is older than :data:`STALE_AFTER_S` is shown
as stale. Heartbeats come from the database clock, so the age is measured on it too: the
reader's own clock may be off.

Whoever beats for a job records how often (``job.heartbeat_interval_s``): a worker its
``--heartbeat-s`` when it claims the job (``db.queue.claim_job``), a process running a job no
worker holds its own interval (:func:`note_heartbeat_interval`). A job is stale, and the reaper
may requeue it, only once :data:`MISSED_BEATS` of those intervals went by without a beat
(:func:`stale_after_s`): a process that beats slowly is never mistaken for a dead one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from db.columns import UTCDateTime
from db.models import Job

# Three missed 30 s heartbeats: long enough that a slow database write or a busy host does not
# flag a healthy job, short enough that a dead one shows within a minute and a half.
STALE_AFTER_S = 90.0
# Missed beats after which a job's process counts as gone, whatever its interval (the same
# rule as the default: 3 × 30 s). The worker's grace period must hold as many of its own beats.
MISSED_BEATS = 3


def stale_after_s(job: Job, floor_s: float = STALE_AFTER_S) -> float:
    """Seconds without a heartbeat after which ``job``'s process counts as gone: ``floor_s``
    (the stale display's 90 s, or a reaping worker's grace period), or :data:`MISSED_BEATS`
    of the job's recorded heartbeat interval when that is longer."""
    return max(floor_s, MISSED_BEATS * (job.heartbeat_interval_s or 0.0))


def note_heartbeat_interval(s: Session, job_id: int, interval_s: float) -> bool:
    """Record that this process beats for job ``job_id`` every ``interval_s`` seconds, unless
    a worker holds the job (``claimed_by`` set: the worker's own beats keep it alive, and it
    recorded its interval at the claim). ``False`` when a worker holds it (nothing changed)."""
    done = s.execute(
        update(Job)
        .where(Job.id == job_id, Job.claimed_by.is_(None))
        .values(heartbeat_interval_s=interval_s)
        .execution_options(synchronize_session=False)
    )
    return bool(done.rowcount)


@dataclass(frozen=True)
class Liveness:
    """A job's heartbeat age in seconds (``None``: it never took one) and whether it is a
    ``running`` job that has stopped beating."""

    heartbeat_age_s: float | None
    stale: bool


def database_now(s: Session) -> datetime:
    """The database clock, in UTC (SQLite: whole seconds)."""
    now = s.scalar(select(func.now(type_=UTCDateTime())))
    assert now is not None
    return now


def liveness(job: Job, now: datetime) -> Liveness:
    """``job``'s heartbeat age at database time ``now`` (from :func:`database_now`).

    Stale: ``running`` with a heartbeat older than :func:`stale_after_s` (90 s, or three of
    the job's recorded heartbeat intervals when longer), or none at all. A negative age (the
    heartbeat was written after ``now`` was read) counts as 0.
    """
    if job.heartbeat_at is None:
        return Liveness(None, job.state == "running")
    age = max(0.0, (now - job.heartbeat_at).total_seconds())
    return Liveness(age, job.state == "running" and age > stale_after_s(job))
