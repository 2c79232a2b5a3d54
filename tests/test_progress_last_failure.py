"""``kernevo evolve``'s progress line says when the last failure was, not only its kind: a
failure from long ago read as the job's present state."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from evolver.progress import ProgressReporter


def _record(iteration: int, error_kind: str | None = None, check: str = "compile") -> Any:
    return SimpleNamespace(
        iteration=iteration,
        kind="child",
        rerun=False,
        score=0.0 if error_kind else 1.5,
        status="scored",
        error_kind=error_kind,
        check=check if error_kind else None,
        new=True,
        source=None,
        uid=None,
        speedup=1.0,
    )


def test_the_last_failure_says_its_iteration_and_how_long_ago() -> None:
    lines: list[str] = []
    reporter = ProgressReporter(None, 4, 20, write=lines.append, stop=lambda: None)  # type: ignore[arg-type]
    reporter.heartbeat = lambda **_: None  # type: ignore[method-assign]  # no database here
    reporter(_record(1))
    reporter(_record(3, "compile_error"))
    reporter(_record(15))
    assert [line.rsplit(" | ", 1)[1] for line in lines] == [
        "last failure: -",
        "last failure: compile_error (iteration 3, this iteration)",
        "last failure: compile_error (iteration 3, 12 ago)",
    ]


def test_a_failure_that_is_its_own_check_is_named_once() -> None:
    """A trial read ``no program: diff_error (diff_error)``; a check that differs from the kind
    still says which one refused."""
    lines: list[str] = []
    reporter = ProgressReporter(None, 4, 20, write=lines.append, stop=lambda: None)  # type: ignore[arg-type]
    reporter.heartbeat = lambda **_: None  # type: ignore[method-assign]  # no database here
    reporter(_record(1, "diff_error", check="diff_error"))
    reporter(_record(2, "wrong", check="ill_conditioned"))
    assert [line.split(" | ")[2] for line in lines] == [
        "child: diff_error",
        "child: wrong (ill_conditioned)",
    ]
