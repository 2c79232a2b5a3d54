"""``GET /v1/programs/{id}`` and ``GET /v1/programs/{id}/lineage``."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import ProgramId, SessionDep
from api.schemas import ProgramDetail, ProgramSummary
from db.repository import get_program, lineage

router = APIRouter(prefix="/v1/programs", tags=["programs"])


@router.get("/{program_id}", response_model=ProgramDetail)
def program_detail(program_id: ProgramId, s: SessionDep) -> ProgramDetail:
    """A program with its source and evaluations (404 when unknown)."""
    program = get_program(s, program_id)
    return ProgramDetail.from_program(program, list(program.evaluations))


@router.get("/{program_id}/lineage", response_model=list[ProgramSummary])
def program_lineage(program_id: ProgramId, s: SessionDep) -> list[ProgramSummary]:
    """The program, then its parent, … back to the seed (404 when unknown)."""
    return [ProgramSummary.model_validate(p) for p in lineage(s, program_id)]
