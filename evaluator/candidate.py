"""One candidate through the pipeline, timed against its parent: the part of an evaluation that
runs where the GPU is.

``evaluator.openevolve_entry.evaluate`` calls :func:`evaluate_candidate` with its own
``Evaluator`` (the local GPU worker); a Dask worker of the distributed backend
(``evaluator.dask_plugin``) calls it with the evaluator its worker plugin holds. What follows
it — memcheck before a new job best, the profile, the report file — belongs to the job's host,
where the job-wide best is kept (``evaluator.new_best``).
"""

from __future__ import annotations

from evaluator.parent_context import Parent
from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from evaluator.score import held_to_parent


def hold_to_parent(report: EvaluationReport, parent: Parent) -> None:
    """Hold ``report``'s score at its parent's unless it was faster than the parent beyond noise
    when both were timed in the same rounds (``evaluator.score.held_to_parent``), saying so."""
    held = held_to_parent(report.combined_score, parent.combined_score, report.rival_timings)
    if held != report.combined_score:
        report.notes.append(
            f"not faster than its parent beyond the noise floor when timed in the same rounds: "
            f"score held at the parent's {held:.4f} (measured {report.combined_score:.4f})"
        )
        report.combined_score = held


def evaluate_candidate(
    evaluator: Evaluator, source: str, parent: Parent | None
) -> tuple[EvaluationReport, bytes]:
    """Stage 1 (screen, compile, contract, quick check) then, when it passed, stage 2 (full
    verification, timing, re-check) of ``source``, with ``parent`` (a program that passed, of
    other text) compiled and timed in the same rounds and the score held to it
    (:func:`hold_to_parent`). Returns the report and the candidate's cubin (empty when
    compilation produced none). Failures are the report's status, never exceptions.
    """
    report, cubin = evaluator.stage1(source)
    if report.passed:
        rival = None
        if parent is not None and parent.combined_score > 0 and parent.source != source:
            rival = evaluator.compile_rival(parent.source, report)
        report = evaluator.stage2(report, cubin, rival, rival_name="parent")
        if report.passed and rival is not None and parent is not None:
            hold_to_parent(report, parent)
    return report, cubin
