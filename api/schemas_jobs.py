"""The answers of ``POST /v1/jobs`` (the queued job, and where its LLM endpoint will come from)
and of ``PATCH /v1/jobs/{id}`` (the job, and whether this request cancelled it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.schemas import JobOut


def worker_endpoint_note(keys: list[str]) -> str:
    """What a queued job's ``llm`` keys ``keys`` (given, no ``llm.base_url``) will do: the claiming
    worker resolves the backend (``evolver.worker_child``: the job's ``llm`` section, then the
    worker's ``KERNEVO_LLM_*``), so they go to the worker's endpoint; a worker without one fails
    a job naming ``llm.model`` (``evolver.queued_llm.queued_llm_problem``)."""
    named = ", ".join(f"llm.{key}" for key in keys)
    return (
        f"{named} without llm.base_url: the worker that claims this job sends its LLM requests to "
        "its own KERNEVO_LLM_BASE_URL; a worker without one fails a job naming llm.model (the "
        "offline mutator reads no llm key)"
    )


class JobCreatedOut(JobOut):
    """The job ``POST /v1/jobs`` queued, with ``llm_endpoint``: ``job`` when its body named
    ``llm.base_url``, else ``worker`` (the claiming worker's ``KERNEVO_LLM_BASE_URL``, or the
    offline mutator where it has none), and ``note`` saying so in words when the body set
    ``llm`` keys without a base URL (``llm.model`` alone is a model at the worker's endpoint)."""

    llm_endpoint: Literal["job", "worker"] = Field(
        description="job: the body's llm.base_url; worker: the claiming worker's "
        "KERNEVO_LLM_BASE_URL (none: the offline mutator)"
    )
    note: str | None = Field(
        default=None, description="llm keys given without llm.base_url: where they go, in words"
    )


class JobCancelOut(JobOut):
    """The job after a cancel request, with ``outcome``: ``cancelled`` when this request
    cancelled it, ``already_cancelled`` when it was cancelled before (nothing changed), so a
    client can say which (``kernevo cancel --api-url`` prints what ``kernevo cancel`` on the
    database prints)."""

    outcome: Literal["cancelled", "already_cancelled"] = Field(
        description="cancelled: this request cancelled the job; already_cancelled: a no-op"
    )
