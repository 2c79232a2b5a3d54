"""Filtered, paginated listings of programs and jobs, each with the total the filters match.

A program's ``state`` and ``score`` in a listing are those of its latest evaluation (highest
evaluation id: a champion's ``verified`` evaluation follows its ``scored`` one); a program with
no evaluation (a seed before it ran, a migrant copy) is ``unevaluated`` with no score.
Pagination is ``limit``/``offset`` over a stable order (programs by id, oldest first; jobs by
id, newest first), so a page never repeats or skips a row that existed when the first page was
read; rows added meanwhile shift later pages of the jobs listing by one (newest first).
Like ``db.repository``, functions take an open ``Session`` and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, defer

from db.errors import InvalidValueError
from db.models import Evaluation, Job, Program
from db.states import EvaluationState, JobState

__all__ = ["ProgramRow", "ProgramState", "list_jobs_page", "list_programs"]

ProgramState = Literal["scored", "failed", "verified", "unevaluated"]
UNEVALUATED = "unevaluated"


@dataclass(frozen=True)
class ProgramRow:
    """One program of a listing (its source not loaded) and its latest evaluation's id,
    ``state``, ``score`` (combined score, 0 on failure), ``gpu_key`` and ``error_kind``; all
    ``None`` but ``state`` (``unevaluated``) for a program never evaluated."""

    program: Program
    evaluation_id: int | None
    state: ProgramState
    score: float | None
    gpu_key: str | None
    error_kind: str | None


def _check_page(limit: int, offset: int) -> None:
    if limit < 1 or offset < 0:
        raise InvalidValueError(f"limit must be >= 1 and offset >= 0, got {limit}, {offset}")


def _total(s: Session, query: Select[tuple[object, ...]]) -> int:
    return int(s.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0)


def list_programs(
    s: Session,
    *,
    job_id: int | None = None,
    island: int | None = None,
    state: str | None = None,
    min_score: float | None = None,
    max_score: float | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[ProgramRow], int]:
    """Programs matching every filter given, oldest first: ``limit`` of them from ``offset``,
    and how many match in all.

    ``state`` is a latest evaluation's state (``scored``, ``failed``, ``verified``) or
    ``unevaluated``; ``min_score``/``max_score`` bound the latest evaluation's score inclusively
    (a program without one never matches a score bound).

    Raises:
        InvalidValueError: an unknown ``state``, ``min_score > max_score``, ``limit < 1`` or
            ``offset < 0``.
    """
    _check_page(limit, offset)
    known = [*(v.value for v in EvaluationState), UNEVALUATED]
    if state is not None and state not in known:
        raise InvalidValueError(f"unknown program state {state!r}; expected one of {known}")
    if min_score is not None and max_score is not None and min_score > max_score:
        raise InvalidValueError(f"min_score {min_score} is above max_score {max_score}")
    latest_query = select(
        Evaluation.program_id, func.max(Evaluation.id).label("evaluation_id")
    ).group_by(Evaluation.program_id)
    if job_id is not None:  # only this job's evaluations need grouping
        latest_query = latest_query.join(Program, Program.id == Evaluation.program_id).where(
            Program.job_id == job_id
        )
    latest = latest_query.subquery("latest")
    query = (
        select(
            Program,
            Evaluation.id,
            Evaluation.state,
            Evaluation.score,
            Evaluation.gpu_key,
            Evaluation.error_kind,
        )
        .outerjoin(latest, latest.c.program_id == Program.id)
        .outerjoin(Evaluation, Evaluation.id == latest.c.evaluation_id)
        .options(defer(Program.source))
        .order_by(Program.id)
    )
    if job_id is not None:
        query = query.where(Program.job_id == job_id)
    if island is not None:
        query = query.where(Program.island == island)
    if state == UNEVALUATED:
        query = query.where(Evaluation.id.is_(None))
    elif state is not None:
        query = query.where(Evaluation.state == state)
    if min_score is not None:
        query = query.where(Evaluation.score >= min_score)
    if max_score is not None:
        query = query.where(Evaluation.score <= max_score)
    total = _total(s, query)
    rows = [
        ProgramRow(
            program=program,
            evaluation_id=evaluation_id,
            state=evaluation_state or UNEVALUATED,
            score=score,
            gpu_key=gpu_key,
            error_kind=error_kind,
        )
        for program, evaluation_id, evaluation_state, score, gpu_key, error_kind in s.execute(
            query.limit(limit).offset(offset)
        )
    ]
    return rows, total


def list_jobs_page(
    s: Session,
    *,
    state: str | None = None,
    path: str | None = None,
    dtype: str | None = None,
    gpu_key: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> tuple[list[Job], int]:
    """Jobs matching every filter given, newest first: ``limit`` of them from ``offset``, and
    how many match in all. ``gpu_key`` is a normalized GPU key (``nvidia-h200``; ``none`` for
    compile-only jobs).

    Raises:
        InvalidValueError: an unknown ``state``, ``limit < 1`` or ``offset < 0``.
    """
    _check_page(limit, offset)
    query = select(Job).order_by(Job.id.desc())
    if state is not None:
        if state not in {v.value for v in JobState}:
            known = ", ".join(v.value for v in JobState)
            raise InvalidValueError(f"unknown job state {state!r}; expected one of {known}")
        query = query.where(Job.state == state)
    if path is not None:
        query = query.where(Job.path == path)
    if dtype is not None:
        query = query.where(Job.dtype == dtype)
    if gpu_key is not None:
        query = query.where(Job.gpu_key == gpu_key)
    total = _total(s, query)
    return list(s.scalars(query.limit(limit).offset(offset))), total
