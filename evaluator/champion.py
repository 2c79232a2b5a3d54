"""The checks a program must pass before it becomes a champion (docs/DESIGN.md step 7).

On top of the full evaluation: held-out shapes never used in scoring, repeated runs on the same
input that must give bit-identical X (a race shows as a moving result), and compute-sanitizer's
memcheck (at the ragged shape and the largest timed shape, as before a new job best:
``evaluator.new_best``), racecheck, synccheck and initcheck (at the ragged shape).

The report also records what the champion's certificate states and only this verification
knows (:class:`ChampionReport`): the champion checks that ran and passed, the NVIDIA driver and
compute-sanitizer versions, the shapes each sanitizer tool ran on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from evaluator.new_best import memcheck_shapes
from evaluator.pipeline import FULL_TIMEOUT_S, Evaluator, fresh_seeds
from evaluator.report import CheckFailure, EvaluationReport
from evaluator.tools import find_tool, nvidia_driver_version, run_sanitizer, sanitizer_version
from evaluator.worker import TaskError, WorkerFault, WorkerTimeout

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# Seconds one sanitizer run may take (racecheck and initcheck slow a kernel the most).
SANITIZER_TIMEOUT_S = 300.0
HELD_OUT_SEED_COUNT = 3
DETERMINISM_REPEATS = 5


@dataclass
class ChampionReport(EvaluationReport):
    """An evaluation report plus what champion verification alone records.

    ``champion_checks``: the champion-only checks that ran and passed, in order
    (``held_out_shapes``, ``determinism``, ``sanitizer_<tool>``). ``sanitizer_shapes``: tool →
    the shapes it ran clean on. ``sanitizer_version``: ``compute-sanitizer --version``'s
    (``""``: unknown). ``nvidia_driver_version``: the NVIDIA kernel driver's (``"580.95.05"``;
    ``""``: unknown).
    """

    champion_checks: list[str] = field(default_factory=list)
    sanitizer_shapes: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    sanitizer_version: str = ""
    nvidia_driver_version: str = ""

    @classmethod
    def of(cls, report: EvaluationReport) -> ChampionReport:
        """``report``'s fields in a champion report with nothing champion-only recorded yet."""
        return cls(**{f.name: getattr(report, f.name) for f in fields(EvaluationReport)})


def sanitizer_plan(evaluator: Evaluator) -> list[tuple[str, tuple[int, int]]]:
    """(tool, shape) pairs in the order they run: memcheck at :func:`memcheck_shapes`, the
    other tools at the ragged shape."""
    plan = [("memcheck", shape) for shape in memcheck_shapes(evaluator.spec)]
    ragged = tuple(evaluator.spec.sanitizer_shape)
    return plan + [(tool, ragged) for tool in SANITIZER_TOOLS if tool != "memcheck"]


def _sanitize(evaluator: Evaluator, cubin: bytes, report: ChampionReport) -> CheckFailure | None:
    """Run the sanitizer plan; record each tool that ran clean on all its shapes in ``report``.
    First finding, or ``sanitizer_missing`` (the tool's absence, which also refuses promotion);
    None when every tool ran clean."""
    tool = find_tool("compute-sanitizer")
    if tool is None:
        return CheckFailure(
            "sanitizer_missing", detail="compute-sanitizer not found: a champion must pass it"
        )
    assert evaluator.gpu_index is not None
    report.sanitizer_version = sanitizer_version(tool) or ""
    for name, shape in sanitizer_plan(evaluator):
        failure = run_sanitizer(
            tool, name, cubin, evaluator.spec.path_id, evaluator.dtype, shape,
            evaluator.gpu_index, SANITIZER_TIMEOUT_S, repeat=2,
        )  # fmt: skip
        if failure is not None:
            return failure
        report.sanitizer_shapes.setdefault(name, []).append(shape)
    report.champion_checks += [f"sanitizer_{name}" for name in report.sanitizer_shapes]
    return None


def verify_champion(
    source: str,
    path_id: str,
    dtype: str,
    gpu_index: int,
    rival_cubin: bytes | None = None,
    bucket: str | None = None,
) -> ChampionReport:
    """Full evaluation plus the champion-only checks; ``status == "ok"`` means fully verified.
    ``bucket``: the path's shape bucket whose shapes are checked and timed (``None``: its first;
    ``seeds.spec.PathSpec.for_bucket``).

    ``rival_cubin`` (the current champion's cubin, when there is one) is timed in the same
    rounds as the candidate, so the report's ``rival_timings`` say whether the candidate is
    faster than the champion beyond this evaluation's noise floor (``evaluator.timing``).

    ``source`` is the stored program text, verified as it is: it is canonical because the
    evaluator refused it otherwise (``non_canonical_text``), and normalizing it here would
    verify bytes other than the ones stored and served.

    Raises:
        UnknownPathError, UnknownBucketError, UnknownDtypeError: bad ``path_id``, ``bucket`` or
            ``dtype``.
    """
    evaluator = Evaluator(path_id, dtype, gpu_index, bucket=bucket)
    try:
        evaluated, cubin = evaluator.stage1(source)
        if evaluated.passed:
            evaluated = evaluator.stage2(evaluated, cubin, rival_cubin)
        report = ChampionReport.of(evaluated)
        report.nvidia_driver_version = nvidia_driver_version() or ""
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
            "determinism_shapes": [spec.timed_shapes[-1], spec.sanitizer_shape],
            "repeats": DETERMINISM_REPEATS,
        }
        try:
            result = evaluator.worker.run(task, FULL_TIMEOUT_S)
        except (WorkerTimeout, WorkerFault, TaskError) as exc:
            report.fail("fault", CheckFailure("champion_checks", detail=str(exc)[:500]))
            return report
        if result["failure"]:
            f = result["failure"]
            f["shape"] = tuple(f["shape"]) if f["shape"] else None
            report.fail("wrong", CheckFailure(**f))
            return report
        report.verified_shapes += [tuple(s) for s in result["verified_shapes"]]
        report.champion_checks += ["held_out_shapes", "determinism"]
        if sanitized := _sanitize(evaluator, cubin, report):
            status = "infra_error" if sanitized.check == "sanitizer_missing" else "wrong"
            report.fail(status, sanitized)
            return report
        report.notes.append("compute-sanitizer: " + ", ".join(SANITIZER_TOOLS) + " clean")
        return report
    finally:
        evaluator.close()
