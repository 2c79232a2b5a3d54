"""Running one red-team entry on a GPU the way its stage is reached in a job of the entry's path,
shared by ``tests/test_redteam_gpu.py`` and ``scripts/redteam_table.py`` so the table shows what
the test asserts.

* ``compile`` and ``pipeline``: ``Evaluator.evaluate`` (screen → compile → cubin check → quick
  check → verification → timing → re-check).
* ``new_best``: the same, then, for a passing report, ``evaluator.new_best.gate_new_best`` with
  an empty job record (so any score is a new best) and memcheck on the cubin just evaluated,
  exactly as ``evaluator.openevolve_entry.evaluate`` calls it.
* ``champion``: ``evaluator.champion.verify_champion`` (the pipeline first, then held-out shapes,
  bit-identical repeats and compute-sanitizer).

The only setting changed is the quick stage's time limit for an entry that asks for one (a
hang), restored afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from evaluator import pipeline
from evaluator.champion import verify_champion
from evaluator.new_best import JobBest, gate_new_best, memcheck
from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from redteam.entry import Entry


@dataclass(frozen=True)
class Outcome:
    """What refused an entry: the report's ``status`` and ``failure.check`` (None: it passed),
    the shape and detail the failure names, and the wall seconds the run took (worker start
    included)."""

    entry: Entry
    status: str
    check: str | None
    shape: tuple[int, int] | None
    detail: str
    seconds: float

    @property
    def as_expected(self) -> bool:
        """Refused with the entry's status and check, at its shape if it names one, the detail
        naming what it must name."""
        entry = self.entry
        return (
            (self.status, self.check) == (entry.status, entry.check)
            and (entry.shape is None or self.shape == entry.shape)
            and all(part in self.detail for part in entry.detail)
        )


@contextmanager
def quick_timeout(seconds: float | None) -> Iterator[None]:
    """``evaluator.pipeline.QUICK_TIMEOUT_S`` set to ``seconds`` inside the block (unchanged
    when None); the pipeline reads it at each quick stage."""
    if seconds is None:
        yield
        return
    saved = pipeline.QUICK_TIMEOUT_S
    pipeline.QUICK_TIMEOUT_S = seconds
    try:
        yield
    finally:
        pipeline.QUICK_TIMEOUT_S = saved


def evaluate_entry(
    entry: Entry, evaluator_for: Callable[[str, str], Evaluator], gpu_index: int
) -> Outcome:
    """Run ``entry`` through its stage on ``gpu_index``.

    ``evaluator_for(path, dtype)`` returns an :class:`Evaluator` of that path and dtype on
    ``gpu_index``, reused across entries (champion verification starts its own).
    """
    source = entry.source()
    t0 = time.perf_counter()
    with quick_timeout(entry.quick_timeout_s):
        report: EvaluationReport
        if entry.stage == "champion":
            report = verify_champion(source, entry.path, entry.dtype, gpu_index)
        else:
            evaluator = evaluator_for(entry.path, entry.dtype)
            report, cubin = evaluator.evaluate_with_cubin(source)
            if entry.stage == "new_best" and report.passed:
                spec, dtype = evaluator.spec, evaluator.dtype
                gate_new_best(
                    report, JobBest(None), lambda: memcheck(cubin, spec, dtype, gpu_index)
                )
    seconds = time.perf_counter() - t0
    failure = report.failure
    return Outcome(
        entry=entry,
        status=report.status,
        check=failure.check if failure else None,
        shape=(failure.shape[0], failure.shape[1]) if failure and failure.shape else None,
        detail=failure.detail if failure and failure.detail else "",
        seconds=seconds,
    )
