"""The checks a program must pass before it becomes a champion (docs/DESIGN.md step 7).

On top of the full evaluation: held-out shapes never used in scoring, repeated runs on the same
input that must give bit-identical X (a race shows as a moving result), and compute-sanitizer's
memcheck, racecheck, synccheck and initcheck on a small ragged shape.
"""

from __future__ import annotations

import subprocess

from evaluator.pipeline import FULL_TIMEOUT_S, Evaluator, fresh_seeds
from evaluator.report import CheckFailure, EvaluationReport
from evaluator.tools import find_tool, run_candidate_under
from evaluator.worker import TaskError, WorkerFault, WorkerTimeout, gpu_lock

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SANITIZER_SHAPE = (33, 31)
HELD_OUT_SEED_COUNT = 3
DETERMINISM_REPEATS = 5


def _sanitize(evaluator: Evaluator, cubin: bytes) -> CheckFailure | None:
    """First sanitizer finding (or the tool's absence, which also refuses promotion); None when
    every tool ran clean."""
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return CheckFailure(
            "sanitizer_missing", detail="compute-sanitizer not found: a champion must pass it"
        )
    assert evaluator.gpu_index is not None
    for name in SANITIZER_TOOLS:
        argv = [tool, "--tool", name, "--error-exitcode", "97"]
        try:
            with gpu_lock(evaluator.gpu_index):
                done = run_candidate_under(
                    argv, cubin, evaluator.spec.path_id, evaluator.dtype, SANITIZER_SHAPE,
                    evaluator.gpu_index, 300.0, repeat=2,
                )  # fmt: skip
        except subprocess.TimeoutExpired:
            return CheckFailure(f"sanitizer_{name}", SANITIZER_SHAPE, detail="timed out")
        if done.returncode != 0:
            lines = [ln for ln in done.stdout.splitlines() if "=========" in ln][:3]
            detail = " | ".join(lines) or (done.stderr.strip().splitlines() or ["exit"])[-1]
            return CheckFailure(f"sanitizer_{name}", SANITIZER_SHAPE, detail=detail[:500])
    return None


def verify_champion(source: str, path_id: str, dtype: str, gpu_index: int) -> EvaluationReport:
    """Full evaluation plus the champion-only checks; ``status == "ok"`` means fully verified.

    ``source`` is the stored program text, verified as it is: it is canonical because the
    evaluator refused it otherwise (``non_canonical_text``), and normalizing it here would
    verify bytes other than the ones stored and served.

    Raises:
        UnknownPathError, UnknownDtypeError: bad ``path_id`` or ``dtype``.
    """
    evaluator = Evaluator(path_id, dtype, gpu_index)
    try:
        report, cubin = evaluator.evaluate_with_cubin(source)
        if not report.passed:
            return report
        assert evaluator.worker is not None
        spec = evaluator.spec
        held_out_seeds = fresh_seeds(HELD_OUT_SEED_COUNT)
        report.held_out_seeds = list(held_out_seeds)  # recorded, pass or fail, to reproduce
        task = {
            "kind": "champion",
            "cubin": cubin,
            "path_id": path_id,
            "dtype": dtype,
            "shapes": list(spec.held_out_shapes),
            "seeds": held_out_seeds,
            "growth": True,
            "determinism_shapes": [spec.timed_shapes[-1], SANITIZER_SHAPE],
            "repeats": DETERMINISM_REPEATS,
        }
        try:
            result = evaluator.worker.run(task, FULL_TIMEOUT_S)
        except (WorkerTimeout, WorkerFault, TaskError) as exc:
            return report.fail("fault", CheckFailure("champion_checks", detail=str(exc)[:500]))
        if result["failure"]:
            f = result["failure"]
            f["shape"] = tuple(f["shape"]) if f["shape"] else None
            return report.fail("wrong", CheckFailure(**f))
        report.verified_shapes += [tuple(s) for s in result["verified_shapes"]]
        if sanitized := _sanitize(evaluator, cubin):
            status = "infra_error" if sanitized.check == "sanitizer_missing" else "wrong"
            return report.fail(status, sanitized)
        report.notes.append("compute-sanitizer: " + ", ".join(SANITIZER_TOOLS) + " clean")
        return report
    finally:
        evaluator.close()
