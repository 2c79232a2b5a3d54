"""Bodies of the lineage routes (``api.routes.lineage``): a job's programs as a tree, the best
score over iterations, and one edge's diff.

The tree is a flat list of nodes, each with its ``parent_id`` and its ``children`` ids, not
nested objects: a lineage is as deep as a job has generations (thousands), deeper than JSON
parsers nest (the loader's limit is 32 levels, Python's recursion about 1,000), and a flat list
is what a client indexes by id anyway. Scores are combined scores (geometric-mean speedup over
the vendor library, 0 when a check failed) of each program's latest evaluation
(``db.listing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from db.listing import ProgramRow

ProgramState = Literal["scored", "failed", "verified", "unevaluated"]


class LineageNode(BaseModel):
    """One program of a job's lineage, without its source.

    ``score_delta`` is the change along the edge from the parent: this program's score minus
    its parent's (``null`` for a root, or when either has no evaluation). ``children`` are the
    ids of the programs bred from it that the answer holds, oldest first. ``rerun``: a program
    of an iteration that ran again after a resume (the first run's program keeps its row)."""

    id: int
    uid: str
    parent_id: int | None
    iteration: int
    generation: int
    island: int
    state: ProgramState
    score: float | None
    score_delta: float | None
    error_kind: str | None
    backend: str | None
    rerun: bool
    children: list[int]


class BestPoint(BaseModel):
    """The best score of the job's programs up to and including ``iteration``
    (``program_id`` holds it: the first to reach it)."""

    iteration: int
    best_score: float
    program_id: int


class LineageOut(BaseModel):
    """``GET /v1/jobs/{id}/lineage``: the job's programs as a tree.

    ``nodes``: the job's first ``limit`` programs by id, oldest first. A parent is always
    recorded before its children (``db.repository.record_program`` refuses an unknown parent),
    so a parent precedes its children and a truncated answer is still a closed tree.
    ``programs``: how many the job has in all; ``truncated``: ``nodes`` holds fewer.
    ``roots``: nodes whose parent is not among the nodes (the seeds). ``best_program_id``: the
    highest-scoring node (the oldest of equals; ``null`` when none has a score).
    ``best_by_iteration``: the best score so far, one point per iteration that has a scored
    node, iterations ascending (the job's progress curve)."""

    job_id: int
    programs: int
    truncated: bool
    nodes: list[LineageNode]
    roots: list[int]
    best_program_id: int | None
    best_by_iteration: list[BestPoint]

    @classmethod
    def build(cls, job_id: int, rows: Sequence[ProgramRow], total: int) -> LineageOut:
        """The tree of ``rows`` (``db.listing.list_programs`` of the job, by id) out of
        ``total`` programs."""
        by_id = {row.program.id: row for row in rows}
        children: dict[int, list[int]] = {row.program.id: [] for row in rows}
        roots: list[int] = []
        for row in rows:
            parent = row.program.parent_id
            if parent is not None and parent in children:
                children[parent].append(row.program.id)
            else:
                roots.append(row.program.id)
        nodes = [
            LineageNode(
                id=row.program.id,
                uid=row.program.uid,
                parent_id=row.program.parent_id,
                iteration=row.program.iteration,
                generation=row.program.generation,
                island=row.program.island,
                state=row.state,
                score=row.score,
                score_delta=_delta(row, by_id.get(row.program.parent_id or 0)),
                error_kind=row.error_kind,
                backend=row.program.backend,
                rerun=row.program.rerun,
                children=children[row.program.id],
            )
            for row in rows
        ]
        scored = [node for node in nodes if node.score is not None]
        best = max(scored, key=lambda node: (node.score, -node.id), default=None)
        return cls(
            job_id=job_id,
            programs=total,
            truncated=len(rows) < total,
            nodes=nodes,
            roots=roots,
            best_program_id=best.id if best is not None else None,
            best_by_iteration=best_so_far(scored),
        )


def _delta(row: ProgramRow, parent: ProgramRow | None) -> float | None:
    if parent is None or row.score is None or parent.score is None:
        return None
    return row.score - parent.score


def best_so_far(nodes: Sequence[LineageNode]) -> list[BestPoint]:
    """The running maximum of the scored ``nodes`` over iterations: for each iteration that has
    a scored node, ascending, the best score of any node of that iteration or an earlier one,
    and the oldest node holding it."""
    best: tuple[float, int] | None = None  # (score, -id): a higher score, then the older node
    points: list[BestPoint] = []
    scored = sorted(
        (node for node in nodes if node.score is not None), key=lambda n: (n.iteration, n.id)
    )
    for node in scored:
        assert node.score is not None
        candidate = (node.score, -node.id)
        if best is None or candidate > best:
            best = candidate
        point = BestPoint(iteration=node.iteration, best_score=best[0], program_id=-best[1])
        if points and points[-1].iteration == node.iteration:
            points[-1] = point
        else:
            points.append(point)
    return points


class ProgramDiffOut(BaseModel):
    """``GET /v1/programs/{id}/diff``: the edge from a program's parent to it.

    ``diff``: the unified diff (``diff -u`` format, 3 lines of context) of the parent's source
    into this program's, ``""`` when they are equal, ``null`` for a seed (no parent) or when not
    computed (``diff_note`` says why: a source longer than ``api.source_diff.MAX_DIFF_LINES``
    lines). ``mutation_diff``: the diff the mutator proposed, as recorded with the program (an
    LLM's SEARCH/REPLACE blocks or the offline mutator's edit; ``null`` for a seed).
    ``score_delta``: ``score - parent_score`` (latest evaluations; ``null`` when either is
    missing)."""

    program_id: int
    job_id: int
    parent_id: int | None
    iteration: int
    state: ProgramState
    score: float | None
    parent_state: ProgramState | None
    parent_score: float | None
    score_delta: float | None
    diff: str | None
    diff_note: str | None
    lines_added: int
    lines_removed: int
    mutation_diff: str | None
