"""OpenEvolve evaluation file: ``evaluate(program_path)`` plus the cascade stages.

OpenEvolve imports this file by path in each of its worker processes. The job context comes from
the environment the evolver sets before OpenEvolve starts (docs/CONTRACTS.md):
KERNEVO_EVAL_PATH, KERNEVO_EVAL_BUCKET (the path's shape bucket; unset or empty: its first),
KERNEVO_EVAL_DTYPE, KERNEVO_EVAL_GPU (device index, or "none" to stop after compiling),
KERNEVO_REPORT_DIR (full reports, one JSON per program source sha256, read by the
lineage recorder; and ``job-best.json``, the job's best passing score, see
``evaluator.new_best``), KERNEVO_JOB_PID (which run of the job that record belongs to).
With KERNEVO_EVAL_SCHEDULER set (a Dask scheduler's address; KERNEVO_EVAL_GPU_KEY, the GPU key
whose workers may run the job's candidates; KERNEVO_EVAL_WAIT_S, the longest one ``evaluate``
waits), ``evaluate`` sends the candidate to a Dask worker of that key instead of the local GPU
worker (``evaluator.dask_client``); the job-wide best, memcheck's gate and the report file stay
here. ``evaluate_stage1`` always runs locally.

The evolver calls ``evaluate`` with OpenEvolve's own cascade off: ``evaluate`` runs the same
cascade internally (cheap rejections first), and OpenEvolve's cascade would, on its own stage-2
timeout, keep stage-1 metrics — a timed-out candidate must score 0, never positive.
``evaluate_stage1`` (screen, compile, quick check; ``combined_score`` 0, ``passed`` says whether
it got through) and ``evaluate_stage2`` (the full evaluation) serve callers who cascade
themselves.

The program file is read as the exact bytes OpenEvolve wrote (UTF-8, no newline translation):
OpenEvolve stores its own in-memory text as the program's code, and the lineage recorder stores
that; reading with universal newlines would screen and compile an LF copy of a CR LF text that
is then stored unchanged. The text is canonical when it came through the evolver's intake
(``seeds.canonical``); the screen refuses it (``non_canonical_text``) when it is not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from openevolve.evaluation_result import EvaluationResult

from evaluator.candidate import evaluate_candidate, hold_to_parent
from evaluator.ncu_profile import attach_profile
from evaluator.new_best import JobBest, gate_new_best, memcheck
from evaluator.parent_context import current_parent
from evaluator.pipeline import Evaluator
from evaluator.report import CheckFailure, EvaluationReport

__all__ = ["evaluate", "evaluate_stage1", "evaluate_stage2", "hold_to_parent", "read_program"]

# Set by the evolver when the job evaluates on a Dask cluster (evaluator.dask_client).
SCHEDULER_VARIABLE = "KERNEVO_EVAL_SCHEDULER"
_EVALUATOR: Evaluator | None = None
_JOB_BEST: JobBest | None = None


def _evaluator() -> Evaluator:
    """This process's Evaluator, built once from the job environment."""
    global _EVALUATOR
    if _EVALUATOR is None:
        gpu = os.environ.get("KERNEVO_EVAL_GPU", "0")
        _EVALUATOR = Evaluator(
            os.environ["KERNEVO_EVAL_PATH"],
            os.environ["KERNEVO_EVAL_DTYPE"],
            None if gpu == "none" else int(gpu),
            compile_arch=os.environ.get("KERNEVO_EVAL_ARCH", "sm_90"),
            bucket=os.environ.get("KERNEVO_EVAL_BUCKET") or None,
        )
    return _EVALUATOR


# The check an infra_error report names when the new-best gate (memcheck, then the profile)
# raised instead of returning.
NEW_BEST_ERROR = "new_best_gate_error"


def _job_best() -> JobBest:
    """The job-wide record of the best passing score, built once from the job environment."""
    global _JOB_BEST
    if _JOB_BEST is None:
        _JOB_BEST = JobBest.from_environment()
    return _JOB_BEST


def _finish(source: str, report: EvaluationReport) -> EvaluationResult:
    report_dir = os.environ.get("KERNEVO_REPORT_DIR")
    if report_dir:
        sha = hashlib.sha256(source.encode()).hexdigest()
        path = Path(report_dir) / f"{sha}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(report.to_json())
        os.replace(tmp, path)
    return EvaluationResult(metrics=report.metrics(), artifacts=report.artifacts())


def read_program(program_path: str) -> str:
    """The program text exactly as OpenEvolve wrote it (UTF-8, line endings untouched)."""
    with open(program_path, encoding="utf-8", newline="") as fh:
        return fh.read()


def evaluate(program_path: str) -> EvaluationResult:
    """Full evaluation of the candidate at ``program_path``; ``combined_score`` 0 on failure.

    When the evolver set the candidate's parent (``evaluator.parent_context``), the parent is
    timed in the same rounds, and a child that is not faster beyond the noise floor scores no
    more than its parent (:func:`hold_to_parent`).

    A passing candidate that beats the job's best runs compute-sanitizer memcheck before it
    becomes that best (``evaluator.new_best``; a finding fails it as ``sanitizer_memcheck``),
    and is then profiled with Nsight Compute.
    """
    source = read_program(program_path)
    if os.environ.get(SCHEDULER_VARIABLE):  # the Dask backend (issue 10); Dask imported only here
        from evaluator.dask_client import remote_evaluations

        return _finish(source, remote_evaluations().evaluate(source, current_parent(), _job_best()))
    evaluator = _evaluator()
    report, cubin = evaluate_candidate(evaluator, source, current_parent())
    gpu_index = evaluator.gpu_index
    if report.passed and gpu_index is not None:
        spec, dtype = evaluator.spec, evaluator.dtype
        # An exception here would reach OpenEvolve as a result without the job's feature
        # metrics, which fails the whole job (the H200's first solve_tri job died at its first
        # new best this way): our fault, not the candidate's, so it is reported and the job
        # goes on. The gate failing: an infra_error candidate (score 0, the error in its
        # report). The profile failing after the gate let it in: a note; it stays the best.
        try:
            became_best = gate_new_best(
                report, _job_best(), lambda: memcheck(cubin, spec, dtype, gpu_index)
            )
        except Exception as exc:  # noqa: BLE001
            report.fail("infra_error", CheckFailure(NEW_BEST_ERROR, detail=f"{exc!r}"))
            became_best = False
        if became_best:
            try:
                attach_profile(evaluator, cubin, report)
            except Exception as exc:  # noqa: BLE001
                report.notes.append(f"no profile: attach_profile raised {exc!r}")
    return _finish(source, report)


def evaluate_stage1(program_path: str) -> EvaluationResult:
    """Screen, compile and the quick check only; never a positive ``combined_score``."""
    source = read_program(program_path)
    report, _ = _evaluator().stage1(source)
    return _finish(source, report)


def evaluate_stage2(program_path: str) -> EvaluationResult:
    """The full evaluation (stage 1 again from the compile cache, then verify, time, re-check)."""
    return evaluate(program_path)
