"""What Evaluator.stage2 asks the GPU worker and what it records from the answer, with a fake
worker (no GPU): the numerical checks of the full verification and the scales they used are
listed in a passing report (the certificate's source), never in a failing one; and how
``evaluate()`` times a child against its parent (``evaluator.parent_context``) and holds its
score at the parent's unless it is faster beyond noise."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

import evaluator.openevolve_entry as entry
from evaluator.inputs import scale_exponents
from evaluator.parent_context import Parent, evaluating_children_of
from evaluator.pipeline import NUMERIC_CHECKS, Evaluator
from evaluator.report import EvaluationReport, GpuInfo, RivalTiming, ShapeTiming
from seeds.registry import get_path

TIMING = ShapeTiming(64, 64, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0, 2.01, 0.02, 2.8, 3.1, True, 0.4)
RIVAL = RivalTiming("champion", 64, 64, 3.0, 2.0, 1.5, 1.4, 1.6, 0.02, True)


class FakeWorker:
    """Answers tasks as the GPU worker would: ``info`` with an H200, ``check`` with the
    verified shape, ``time`` with :data:`TIMING` and ``rival`` (renamed as the task names its
    rival) when a rival was sent; ``failure`` as given, from the kind named in ``failing``."""

    def __init__(
        self, failure: dict[str, Any] | None, rival: RivalTiming = RIVAL, failing: str = "check"
    ) -> None:
        self.failure, self.rival, self.failing = failure, rival, failing
        self.tasks: list[dict[str, Any]] = []
        self.last_lock_wait_s = 0.25

    def run(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if task["kind"] == "info":
            return {"gpu": asdict(GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "13.0"))}
        self.tasks.append(task)
        failure = self.failure if task["kind"] == self.failing else None
        if task["kind"] == "check":
            return {
                "failure": failure,
                "verified_shapes": [[64, 64]],
                "phase_seconds": {"verify": 0.1},
            }
        assert task["kind"] == "time", task["kind"]
        rival = replace(self.rival, name=task.get("rival_name", "champion"))
        return {
            "failure": failure,
            "phase_seconds": {"time": 0.9, "verify": 0.05},
            "timings": [asdict(TIMING)],
            "rival_timings": [asdict(rival)] if "rival_cubin" in task else [],
        }


def _stage2(
    dtype: str, failure: dict[str, Any] | None, rival: bytes | None, failing: str = "check"
) -> tuple[EvaluationReport, dict[str, Any], dict[str, Any] | None]:
    """stage2 on a fake worker: the report, the verification task and the timing task (None
    when none was sent)."""
    evaluator = Evaluator("trsm_small", dtype, gpu_index=None)
    worker = FakeWorker(failure, failing=failing)
    evaluator.worker = worker  # type: ignore[assignment]
    report = evaluator.stage2(EvaluationReport("trsm_small", dtype), b"cubin", rival)
    timed = worker.tasks[1] if len(worker.tasks) > 1 else None
    return report, worker.tasks[0], timed


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_a_passing_report_lists_the_numerical_checks_and_the_scales_it_drew(dtype):
    report, task, timed = _stage2(dtype, None, None)
    assert report.passed and task["kind"] == "check" and task["growth"] is True
    assert timed is not None and timed["kind"] == "time" and "rival_cubin" not in timed
    assert report.checks_run == list(NUMERIC_CHECKS)
    assert report.input_scales == [2.0**e for e in scale_exponents(dtype, task["seeds"][0])]
    assert report.rival_timings == []
    # The re-check after timing draws from the verification's seeds (each one on).
    assert timed["seeds"] == task["seeds"]
    assert report.verified_shapes == [(64, 64)] and report.timings == [TIMING]
    # Both tasks' phases add up; the lock waits of both are kept.
    assert report.phase_seconds["verify"] == pytest.approx(0.15)
    assert report.phase_seconds["time"] == pytest.approx(0.9)
    assert report.phase_seconds["gpu_lock_wait"] == pytest.approx(0.5)


def test_a_candidate_that_fails_verification_is_never_timed():
    failure = {"check": "forward_error", "shape": [64, 64], "value": 1.0, "bound": 0.1,
               "detail": ""}  # fmt: skip
    report, task, timed = _stage2("float32", failure, b"champion cubin")
    assert report.status == "wrong" and report.failure.check == "forward_error"
    assert task["kind"] == "check" and timed is None and report.timings == []


def test_a_failure_while_timed_is_the_report_s_failure_with_the_timings_kept():
    failure = {"check": "recheck_after_timing", "shape": [64, 64], "value": 1.0, "bound": 0.1,
               "detail": ""}  # fmt: skip
    report, _, timed = _stage2("float64", failure, None, failing="time")
    assert timed is not None and report.status == "wrong"
    assert report.failure.check == "recheck_after_timing" and report.checks_run == []
    assert report.verified_shapes == [(64, 64)] and report.timings == [TIMING]


def test_a_failing_report_claims_no_numerical_check():
    failure = {"check": "scale_invariance", "shape": [1, 1], "value": 1.0, "bound": 0.1,
               "detail": "forward_error at s = 2^67"}  # fmt: skip
    report, _, _ = _stage2("complex64", failure, None)
    assert report.status == "wrong" and report.failure.check == "scale_invariance"
    assert report.checks_run == [] and report.input_scales == []


def test_the_champion_cubin_is_timed_as_a_rival_and_its_comparison_kept():
    report, task, timed = _stage2("float64", None, b"champion cubin")
    assert "rival_cubin" not in task and timed is not None
    assert timed["rival_cubin"] == b"champion cubin"
    assert report.rival_timings == [RIVAL]
    restored = EvaluationReport.from_json(report.to_json())
    assert restored.rival_timings == [RIVAL] and restored.checks_run == list(NUMERIC_CHECKS)


SEED = get_path("trsm_small").seed_source()
# The seed scores 3.0 against cuBLAS (TIMING); a parent that scored 2.9 and one that scored 3.5.
WITHIN_NOISE = RivalTiming("parent", 64, 64, 2.02, 2.0, 1.01, 0.99, 1.03, 0.02, False)
CLEARLY_FASTER = RivalTiming("parent", 64, 64, 2.4, 2.0, 1.2, 1.15, 1.25, 0.02, True)


def _evaluate_child(tmp_path: Path, monkeypatch, parent: Parent | None, rival: RivalTiming):
    """``entry.evaluate`` on the seed as the child of ``parent``, on a fake worker (the seed
    compiles with NVRTC; no GPU). Returns the report written for it and the timing task sent."""
    evaluator = Evaluator("trsm_small", "float64", gpu_index=None)
    worker = FakeWorker(None, rival)
    evaluator.worker = worker  # type: ignore[assignment]
    monkeypatch.setattr(entry, "_EVALUATOR", evaluator)
    monkeypatch.setattr(evaluator, "compile_rival", lambda source, report: b"parent cubin")
    monkeypatch.setattr(entry, "gate_new_best", lambda *_: False)  # memcheck needs a GPU
    monkeypatch.setenv("KERNEVO_REPORT_DIR", str(tmp_path / "reports"))
    program = tmp_path / "child.cu"
    program.write_text(SEED)
    with evaluating_children_of(parent):
        result = entry.evaluate(str(program))
    [report_file] = (tmp_path / "reports").iterdir()
    [timed] = [task for task in worker.tasks if task["kind"] == "time"]
    return EvaluationReport.from_json(report_file.read_text()), timed, result


@pytest.mark.parametrize(
    ("parent_score", "rival", "score"),
    [
        (2.9, WITHIN_NOISE, 2.9),  # within noise of a lower-scored parent: held at the parent's
        (2.9, CLEARLY_FASTER, 3.0),  # faster beyond noise: its own score
        (3.5, WITHIN_NOISE, 3.0),  # below its parent's score already: unchanged
    ],
    ids=["held", "faster", "lower"],
)
def test_a_child_scores_above_its_parent_only_when_faster_beyond_noise(
    tmp_path, monkeypatch, parent_score, rival, score
):
    parent = Parent("parent", parent_score)
    report, task, result = _evaluate_child(tmp_path, monkeypatch, parent, rival)
    assert task["rival_cubin"] == b"parent cubin" and task["rival_name"] == "parent"
    assert [r.name for r in report.rival_timings] == ["parent"]
    assert report.combined_score == pytest.approx(score)
    assert result.metrics["combined_score"] == pytest.approx(score)
    held = [note for note in report.notes if note.startswith("not faster than its parent")]
    assert bool(held) == (score == parent_score)


@pytest.mark.parametrize(
    "parent", [None, Parent("parent", 0.0), Parent(SEED, 2.9)], ids=["none", "failed", "same"]
)
def test_no_parent_timing_without_a_passing_parent_of_other_text(tmp_path, monkeypatch, parent):
    report, task, _ = _evaluate_child(tmp_path, monkeypatch, parent, WITHIN_NOISE)
    assert "rival_cubin" not in task and report.rival_timings == []
    assert report.combined_score == pytest.approx(3.0)
