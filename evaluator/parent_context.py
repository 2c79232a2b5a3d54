"""The parent of the candidate this process is evaluating, when the evolver knows it.

OpenEvolve calls ``evaluate(program_path)`` with the child alone; the parent is known one frame
up, in its worker's iteration. The evolver wraps that iteration
(``evolver.openevolve_host``) to set the parent here for its duration, and the evaluation
(``evaluator.openevolve_entry``) times the child against it in the same rounds, so that a child
counts as faster than its parent only beyond the noise floor (issue 6). A plain module global,
not a context variable: OpenEvolve may run the evaluation in an executor thread, and a worker
process runs one iteration at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Parent:
    """A parent program: its stored source and the ``combined_score`` it was given."""

    source: str
    combined_score: float


_current: Parent | None = None


def current_parent() -> Parent | None:
    """The parent set by :func:`evaluating_children_of`, or None outside it."""
    return _current


@contextmanager
def evaluating_children_of(parent: Parent | None) -> Iterator[None]:
    """Within the block, :func:`current_parent` is ``parent``; None again afterwards."""
    global _current
    _current = parent
    try:
        yield
    finally:
        _current = None
