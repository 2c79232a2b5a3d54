"""Is a running job's process still alive? Its heartbeat's age, on the database clock.

A job's process takes a heartbeat (``update_job_progress``) after every iteration and, while an
evaluation runs, every 30 s (``evolver.progress.HEARTBEAT_INTERVAL_S``). A process that died
without a word (``kill -9``, a lost machine) leaves its row ``running`` forever; its heartbeat
ages instead, and a ``running`` job whose heartbeat is older than :data:`STALE_AFTER_S` is shown
as stale. Heartbeats come from the database clock, so the age is measured on it too: the
reader's own clock may be off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.columns import UTCDateTime
from db.models import Job

# Three missed 30 s heartbeats: long enough that a slow database write or a busy host does not
# flag a healthy job, short enough that a dead one shows within a minute and a half.
STALE_AFTER_S = 90.0


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

    Stale: ``running`` with a heartbeat older than :data:`STALE_AFTER_S`, or none at all. A
    negative age (the heartbeat was written after ``now`` was read) counts as 0.
    """
    if job.heartbeat_at is None:
        return Liveness(None, job.state == "running")
    age = max(0.0, (now - job.heartbeat_at).total_seconds())
    return Liveness(age, job.state == "running" and age > STALE_AFTER_S)
