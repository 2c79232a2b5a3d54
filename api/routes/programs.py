"""``GET /v1/programs`` (filtered, paginated), ``GET /v1/programs/{id}`` and
``GET /v1/programs/{id}/lineage``: every one needs a ``read`` token (sources, reports and
compile logs are not public)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from api.deps import MAX_ID, ProgramId, ReadScope, SessionDep
from api.pagination import TOTAL_HEADER, Limit, Offset, total_header
from api.query_params import DecimalFloatOnly, DecimalOnly
from api.responses import NOT_FOUND, READ_ERRORS
from api.schemas import ProgramDetail, ProgramListItem, ProgramSummary
from db.listing import list_programs
from db.repository import get_program, lineage

router = APIRouter(
    prefix="/v1/programs", tags=["programs"], dependencies=[ReadScope], responses=READ_ERRORS
)

# Islands are few (evolver.job_config caps them at 64); the bound only keeps the integer small.
MAX_ISLAND = 1_000_000


@router.get("", response_model=list[ProgramListItem], responses=total_header("programs"))
def programs(
    s: SessionDep,
    response: Response,
    job_id: Annotated[
        int | None, DecimalOnly, Query(ge=1, le=MAX_ID, description="only this job's")
    ] = None,
    island: Annotated[
        int | None, DecimalOnly, Query(ge=0, le=MAX_ISLAND, description="only this one")
    ] = None,
    state: Annotated[
        Literal["scored", "failed", "verified", "unevaluated"] | None,
        Query(max_length=16, description="the latest evaluation's state; unevaluated: none yet"),
    ] = None,
    min_score: Annotated[
        float | None,
        DecimalFloatOnly,
        Query(allow_inf_nan=False, description="latest evaluation's score at least this"),
    ] = None,
    max_score: Annotated[
        float | None,
        DecimalFloatOnly,
        Query(allow_inf_nan=False, description="latest evaluation's score at most this"),
    ] = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[ProgramListItem]:
    """Programs matching every filter, oldest first, without their sources; the total that
    match is the ``X-Total-Count`` header. A program's ``state`` and ``score`` are its latest
    evaluation's (``db.listing``).

    422 for ``min_score`` above ``max_score``, an unknown state, or a bound out of range.
    """
    rows, total = list_programs(
        s,
        job_id=job_id,
        island=island,
        state=state,
        min_score=min_score,
        max_score=max_score,
        limit=limit,
        offset=offset,
    )
    response.headers[TOTAL_HEADER] = str(total)
    return [ProgramListItem.from_row(row) for row in rows]


@router.get("/{program_id}", response_model=ProgramDetail, responses=NOT_FOUND)
def program_detail(program_id: ProgramId, s: SessionDep) -> ProgramDetail:
    """A program with its source and evaluations, their reports and compile logs included
    (404 when unknown)."""
    program = get_program(s, program_id)
    return ProgramDetail.from_program(program, list(program.evaluations))


@router.get("/{program_id}/lineage", response_model=list[ProgramSummary], responses=NOT_FOUND)
def program_lineage(program_id: ProgramId, s: SessionDep) -> list[ProgramSummary]:
    """The program, then its parent, … back to the seed (404 when unknown)."""
    return [ProgramSummary.model_validate(p) for p in lineage(s, program_id)]
