"""``POST /v1/jobs`` (queue a job), ``GET /v1/jobs``, ``GET /v1/jobs/{id}`` and
``PATCH /v1/jobs/{id}`` (cancel): every route needs a ``read`` token, and the writes (create,
cancel) a ``write`` token (``api.deps``).

A job created here waits in the queue (``db.queue``) until a ``kernevo worker`` claims it; the
service itself never runs it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.exceptions import RequestValidationError

from api.deps import JobId, ReadScope, SessionDep, WriteScope, WriteSessionDep
from api.gpu_names import gpu_key_of
from api.key_filters import FilterError, check_dtype_filter
from api.pagination import TOTAL_HEADER, Limit, Offset, total_header
from api.responses import BODY_ERRORS, CONFLICT, FORBIDDEN, NOT_FOUND, READ_ERRORS
from api.schemas import JobCreate, JobOut, JobPatch
from api.schemas_jobs import JobCancelOut, JobCreatedOut, worker_endpoint_note
from db.heartbeat import database_now
from db.listing import list_jobs_page
from db.queue import ANY_GPU, NO_GPU, cancel_job, enqueue_job
from db.repository import count_programs, get_job
from db.states import JobState
from evolver.job_config import JobConfig
from seeds.hardware import normalize_gpu_name
from seeds.registry import UnknownPathError, get_path
from seeds.spec import UnknownDtypeError

router = APIRouter(
    prefix="/v1/jobs", tags=["jobs"], dependencies=[ReadScope], responses=READ_ERRORS
)

# Path and dtype filters are identifiers (``trsm_small``, ``complex128``): anything else matches
# no job, and a NUL would not even reach PostgreSQL (its text cannot hold one: a 500).
NAME = r"^[A-Za-z0-9_.-]+$"


# How every CUDA device's GPU key begins (``seeds.hardware.normalize_gpu_name`` of "NVIDIA …").
GPU_KEY_PREFIX = "nvidia-"


def _queue_gpu_key(body: JobCreate) -> str:
    """The GPU key workers must have: ``none`` for a compile-only job, ``any`` when no GPU is
    named, else the named GPU's key.

    Raises:
        HTTPException: 422 for a GPU name with no letter or digit, a name that means no GPU,
            one that is no CUDA device's (not starting "NVIDIA"), or a GPU named for a
            compile-only job.
    """
    if body.compile_only:
        if body.gpu is not None:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT,
                detail="a compile_only job runs on no GPU: leave gpu out",
            )
        return NO_GPU
    if body.gpu is None:
        return ANY_GPU
    try:
        key = normalize_gpu_name(body.gpu)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
    if key == NO_GPU:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail="gpu 'none' is no GPU: set compile_only to true instead",
        )
    # Workers take their keys from CUDA device names, which all start "NVIDIA": "H200" (the
    # key "h200") matched no worker and its job waited forever (a trial's finding).
    if not key.startswith(GPU_KEY_PREFIX):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            detail=f"gpu {key!r} is no CUDA device's key: they start with {GPU_KEY_PREFIX!r} "
            f"(e.g. 'NVIDIA H200' or 'nvidia-h200')",
        )
    return key


def _refuse_key_variable(body: JobCreate) -> None:
    """A queued job may not name the variable that holds the LLM key: the worker running it
    would send that variable's value to the job's endpoint (``evolver.queued_llm``).

    Raises:
        RequestValidationError: 422 at ``["body", "llm", "api_key_env"]``.
    """
    if body.llm.api_key_env is None:
        return
    message = (
        "a job queued through the API cannot choose the variable holding the LLM key: the "
        "worker's KERNEVO_LLM_API_KEY_ENV decides; leave llm.api_key_env out"
    )
    raise RequestValidationError(
        [{"loc": ("body", "llm", "api_key_env"), "msg": message, "type": "value_error"}]
    )


@router.post(
    "",
    response_model=JobCreatedOut,
    status_code=status.HTTP_201_CREATED,
    dependencies=[WriteScope],
    responses={**FORBIDDEN, **BODY_ERRORS},
)
def create_job(body: JobCreate, s: WriteSessionDep, response: Response) -> JobCreatedOut:
    """Queue a job for the workers; 201 with the job (``waiting``), where its LLM endpoint will
    come from (``llm_endpoint``, with a ``note`` for ``llm`` keys given without
    ``llm.base_url``: the claiming worker's ``KERNEVO_LLM_BASE_URL`` decides, as for any queued
    job) and its ``Location``.

    The body is validated as ``kernevo evolve``'s job configuration (``evolver.job_config``):
    an unknown key, a value out of range, an unknown path or a dtype the path lacks is a 422
    naming the key; so is ``llm.api_key_env`` (the worker's own setting decides the key
    variable, and its operator the endpoints it sends the key to: ``evolver.queued_llm``). 401
    without a valid token, 403 with a ``read`` one.
    """
    _refuse_key_variable(body)
    gpu_key = _queue_gpu_key(body)
    config = JobConfig.model_validate(body.model_dump(exclude={"gpu"}))
    job = enqueue_job(
        s,
        path=config.path,
        dtype=config.dtype,
        gpu_key=gpu_key,
        shape_bucket=get_path(config.path, config.bucket).shape_bucket,
        config=config.model_dump(mode="json"),
        model=config.llm.model,
    )
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    out = JobOut.from_job(job, 0, database_now(s))
    if config.llm.base_url is not None:
        return JobCreatedOut(**out.model_dump(), llm_endpoint="job")
    # No endpoint in the body is no refusal here (as kernevo evolve's is): the worker that
    # claims the job has one of its own (evolver.worker_child), which the service cannot see.
    given = sorted(body.llm.model_fields_set)
    note = worker_endpoint_note(given) if given else None
    return JobCreatedOut(**out.model_dump(), llm_endpoint="worker", note=note)


@router.get("", response_model=list[JobOut], responses=total_header("jobs"))
def jobs(
    s: SessionDep,
    response: Response,
    state: Annotated[
        JobState | None, Query(max_length=16, description="only jobs in this state")
    ] = None,
    path: Annotated[
        str | None, Query(max_length=64, pattern=NAME, description="only this path's")
    ] = None,
    dtype: Annotated[
        str | None, Query(max_length=16, pattern=NAME, description="only this dtype's")
    ] = None,
    gpu: Annotated[
        str | None, Query(max_length=256, description="only this GPU's (name or key; none)")
    ] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[JobOut]:
    """Jobs matching every filter, newest first, with their progress and whether a running one
    went stale; the total that match is the ``X-Total-Count`` header.

    422 for a GPU name with no letter or digit, or with a control character, for a path or
    dtype the registry does not know (``unknown path 'nope'; known paths: …``, ``unknown dtype
    'float16'; expected one of …``), and for a dtype the path does not implement (``path
    solve_tri does not implement solve_tri in float64 (it implements solve_tri in float32)``,
    ``api.key_filters``), as ``GET /v1/champions`` answers them: a typo or a pair no job can
    have is said, not answered with an empty list.
    """
    try:
        if path is not None:
            get_path(path)
        check_dtype_filter(dtype, None, path)
    except (UnknownPathError, UnknownDtypeError, FilterError) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
    gpu_key = gpu_key_of(gpu) if gpu is not None else None
    rows, total = list_jobs_page(
        s,
        state=state.value if state else None,
        path=path,
        dtype=dtype,
        gpu_key=gpu_key,
        limit=limit,
        offset=offset,
    )
    response.headers[TOTAL_HEADER] = str(total)
    counts = count_programs(s, (job.id for job in rows))
    now = database_now(s)
    return [JobOut.from_job(job, counts[job.id], now) for job in rows]


@router.get("/{job_id}", response_model=JobOut, responses=NOT_FOUND)
def job_detail(job_id: JobId, s: SessionDep) -> JobOut:
    """One job with its progress (404 when unknown)."""
    job = get_job(s, job_id)
    return JobOut.from_job(job, count_programs(s, [job.id])[job.id], database_now(s))


@router.patch(
    "/{job_id}",
    response_model=JobCancelOut,
    dependencies=[WriteScope],
    responses={**FORBIDDEN, **NOT_FOUND, **CONFLICT, **BODY_ERRORS},
)
def patch_job(job_id: JobId, body: JobPatch, s: WriteSessionDep) -> JobCancelOut:
    """Cancel a waiting or running job (``db.queue.cancel_job``); its process sees the state
    and stops after its iteration in flight. Needs a ``write`` token.

    200 with the job and ``outcome``: ``cancelled``, or ``already_cancelled`` when it was
    cancelled before (a no-op). 401 without a valid token, 403 with a ``read`` one, 404 for an
    unknown job, 409 for a job that ended ``complete`` or ``failed``, 422 for any body other
    than ``{"state": "cancelled"}``.
    """
    outcome = cancel_job(s, job_id)
    s.commit()
    job = get_job(s, job_id)
    out = JobOut.from_job(job, count_programs(s, [job.id])[job.id], database_now(s))
    return JobCancelOut(**out.model_dump(), outcome=outcome)
