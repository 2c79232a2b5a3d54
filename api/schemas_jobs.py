"""The answer of ``PATCH /v1/jobs/{id}``: the job, and whether this request cancelled it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.schemas import JobOut


class JobCancelOut(JobOut):
    """The job after a cancel request, with ``outcome``: ``cancelled`` when this request
    cancelled it, ``already_cancelled`` when it was cancelled before (nothing changed), so a
    client can say which (``kernevo cancel --api-url`` prints what ``kernevo cancel`` on the
    database prints)."""

    outcome: Literal["cancelled", "already_cancelled"] = Field(
        description="cancelled: this request cancelled the job; already_cancelled: a no-op"
    )
