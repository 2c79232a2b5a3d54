"""``GET /v1/jobs``, ``GET /v1/jobs/{id}`` and ``PATCH /v1/jobs/{id}`` (cancel; needs the token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import JobId, SessionDep, TokenDep, WriteSessionDep
from api.schemas import JobOut, JobPatch
from db.heartbeat import database_now
from db.repository import count_programs, get_job, list_jobs, set_job_state
from db.states import JobState

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.get("", response_model=list[JobOut])
def jobs(
    s: SessionDep,
    state: Annotated[JobState | None, Query(description="only jobs in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[JobOut]:
    """Jobs, newest first, with their progress and whether a running one went stale."""
    rows = list_jobs(s, state=state.value if state else None, limit=limit)
    counts = count_programs(s, (job.id for job in rows))
    now = database_now(s)
    return [JobOut.from_job(job, counts[job.id], now) for job in rows]


@router.get("/{job_id}", response_model=JobOut)
def job_detail(job_id: JobId, s: SessionDep) -> JobOut:
    """One job with its progress (404 when unknown)."""
    job = get_job(s, job_id)
    return JobOut.from_job(job, count_programs(s, [job.id])[job.id], database_now(s))


@router.patch("/{job_id}", response_model=JobOut, dependencies=[TokenDep])
def patch_job(job_id: JobId, body: JobPatch, s: WriteSessionDep) -> JobOut:
    """Cancel a job; the worker sees the state and stops. Needs the bearer token.

    401 without a valid token, 404 for an unknown job, 409 when the job is already complete,
    422 for any body other than ``{"state": "cancelled"}``. Cancelling twice is a no-op.
    """
    job = set_job_state(s, job_id, body.state)
    s.commit()
    return JobOut.from_job(job, count_programs(s, [job.id])[job.id], database_now(s))
