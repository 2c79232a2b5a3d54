"""``GET /v1/programs/{id}`` and ``GET /v1/programs/{id}/lineage``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.deps import ProgramId, SessionDep, require_token
from api.schemas import ProgramDetail, ProgramSummary
from db.repository import get_program, lineage

router = APIRouter(prefix="/v1/programs", tags=["programs"])


_bearer = HTTPBearer(auto_error=False, description="KERNEVO_API_TOKEN: also serves compile logs")


def logs_allowed(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> bool:
    """Whether this request may read compile logs: True only with the server's bearer token.

    No token: False (the rest of the response stays open). A token that is wrong, or any token
    on a server without one: 401, as for a write (``api.deps.require_token``).
    """
    if credentials is None:
        return False
    require_token(request, credentials)
    return True


@router.get("/{program_id}", response_model=ProgramDetail)
def program_detail(
    program_id: ProgramId, s: SessionDep, logs: Annotated[bool, Depends(logs_allowed)]
) -> ProgramDetail:
    """A program with its source and evaluations (404 when unknown). Compile logs are null
    (``compile_log_withheld``) unless the request carries the bearer token: a log echoes
    whatever NVRTC read while compiling."""
    program = get_program(s, program_id)
    return ProgramDetail.from_program(program, list(program.evaluations), include_logs=logs)


@router.get("/{program_id}/lineage", response_model=list[ProgramSummary])
def program_lineage(program_id: ProgramId, s: SessionDep) -> list[ProgramSummary]:
    """The program, then its parent, … back to the seed (404 when unknown)."""
    return [ProgramSummary.model_validate(p) for p in lineage(s, program_id)]
