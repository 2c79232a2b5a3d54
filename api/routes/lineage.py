"""``GET /v1/jobs/{id}/lineage`` (a job's programs as a tree, with its best score over
iterations) and ``GET /v1/programs/{id}/diff`` (one edge of the tree: the program's source
against its parent's, and the score change). Both need a ``read`` token: lineage and sources
are not public (issue 9).

``GET /v1/programs/{id}/lineage`` (``api.routes.programs``) is the other direction: one
program's ancestry back to the seed.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.deps import JobId, ProgramId, ReadScope, SessionDep
from api.query_params import DecimalOnly
from api.responses import NOT_FOUND, READ_ERRORS
from api.schemas_lineage import LineageOut, ProgramDiffOut, ProgramState
from api.source_diff import SourceDiff, source_diff
from db.listing import UNEVALUATED, list_programs
from db.models import Evaluation
from db.repository import get_job, get_program

router = APIRouter(tags=["lineage"], dependencies=[ReadScope], responses=READ_ERRORS)

# Nodes per answer: a node is about 250 bytes of JSON, so the default is about 1 MB.
DEFAULT_NODES = 5_000
MAX_NODES = 100_000


@router.get("/v1/jobs/{job_id}/lineage", response_model=LineageOut, responses=NOT_FOUND)
def job_lineage(
    job_id: JobId,
    s: SessionDep,
    limit: Annotated[
        int,
        DecimalOnly,
        Query(ge=1, le=MAX_NODES, description=f"programs at most, oldest first (1..{MAX_NODES})"),
    ] = DEFAULT_NODES,
) -> LineageOut:
    """The job's programs (its first ``limit`` by id, without sources) as a tree: each node's
    parent, children, iteration, island, latest state and score, and the score change from its
    parent; the roots, the best program and the best score over iterations (404 for an unknown
    job)."""
    get_job(s, job_id)
    rows, total = list_programs(s, job_id=job_id, limit=limit, offset=0)
    return LineageOut.build(job_id, rows, total)


def _latest(s: Session, program_id: int) -> tuple[ProgramState, float | None]:
    """The state and score of the program's latest evaluation (highest id, as ``db.listing``
    reads it), without loading its report; ``("unevaluated", None)`` when it has none."""
    row = s.execute(
        select(Evaluation.state, Evaluation.score)
        .where(Evaluation.program_id == program_id)
        .order_by(Evaluation.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return UNEVALUATED, None
    return row.state, row.score


@router.get("/v1/programs/{program_id}/diff", response_model=ProgramDiffOut, responses=NOT_FOUND)
def program_diff(program_id: ProgramId, s: SessionDep) -> ProgramDiffOut:
    """The unified diff of the program's parent's source into its own, the mutator's recorded
    diff, and both latest scores with their difference (404 for an unknown program)."""
    program = get_program(s, program_id)
    state, score = _latest(s, program.id)
    parent_state: ProgramState | None = None
    parent_score: float | None = None
    if program.parent_id is None:
        computed = SourceDiff(None, 0, 0, note="a seed: no parent to diff against")
    else:
        parent = get_program(s, program.parent_id)
        parent_state, parent_score = _latest(s, parent.id)
        computed = source_diff(
            parent.source,
            program.source,
            before_name=f"program-{parent.id}.cu",
            after_name=f"program-{program.id}.cu",
        )
    delta = score - parent_score if score is not None and parent_score is not None else None
    return ProgramDiffOut(
        program_id=program.id,
        job_id=program.job_id,
        parent_id=program.parent_id,
        iteration=program.iteration,
        state=state,
        score=score,
        parent_state=parent_state,
        parent_score=parent_score,
        score_delta=delta,
        diff=computed.text,
        diff_note=computed.note,
        lines_added=computed.added,
        lines_removed=computed.removed,
        mutation_diff=program.diff,
    )
