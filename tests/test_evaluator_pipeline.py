"""What Evaluator.stage2 asks the GPU worker and what it records from the answer, with a fake
worker (no GPU): the numerical checks of the full verification and the scales they used are
listed in a passing report (the certificate's source), never in a failing one."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from evaluator.inputs import SCALE_EXPONENTS
from evaluator.pipeline import NUMERIC_CHECKS, Evaluator
from evaluator.report import EvaluationReport, RivalTiming, ShapeTiming

TIMING = ShapeTiming(64, 64, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0, 2.01, 0.02, 2.8, 3.1, True, 0.4)
RIVAL = RivalTiming("champion", 64, 64, 3.0, 2.0, 1.5, 1.4, 1.6, 0.02, True)


class FakeWorker:
    """Answers a ``full`` task as the GPU worker would, with ``failure`` as given."""

    def __init__(self, failure: dict[str, Any] | None) -> None:
        self.failure = failure
        self.tasks: list[dict[str, Any]] = []

    def run(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        self.tasks.append(task)
        return {
            "failure": self.failure,
            "verified_shapes": [[64, 64]],
            "phase_seconds": {"verify": 0.1, "time": 0.9},
            "timings": [asdict(TIMING)],
            "rival_timings": [asdict(RIVAL)] if "rival_cubin" in task else [],
        }


def _stage2(dtype: str, failure: dict[str, Any] | None, rival: bytes | None) -> tuple:
    evaluator = Evaluator("trsm_small", dtype, gpu_index=None)
    worker = FakeWorker(failure)
    evaluator.worker = worker  # type: ignore[assignment]
    report = evaluator.stage2(EvaluationReport("trsm_small", dtype), b"cubin", rival)
    return report, worker.tasks[0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_a_passing_report_lists_the_numerical_checks_and_the_scales_it_drew(dtype):
    report, task = _stage2(dtype, None, None)
    assert report.passed and task["growth"] is True and "rival_cubin" not in task
    assert report.checks_run == list(NUMERIC_CHECKS)
    assert report.input_scales == [2.0**e for e in SCALE_EXPONENTS[dtype]]
    assert report.rival_timings == []


def test_a_failing_report_claims_no_numerical_check():
    failure = {"check": "scale_invariance", "shape": [1, 1], "value": 1.0, "bound": 0.1,
               "detail": "forward_error at s = 2^67"}  # fmt: skip
    report, _ = _stage2("complex64", failure, None)
    assert report.status == "wrong" and report.failure.check == "scale_invariance"
    assert report.checks_run == [] and report.input_scales == []


def test_the_champion_cubin_is_timed_as_a_rival_and_its_comparison_kept():
    report, task = _stage2("float64", None, b"champion cubin")
    assert task["rival_cubin"] == b"champion cubin"
    assert report.rival_timings == [RIVAL]
    restored = EvaluationReport.from_json(report.to_json())
    assert restored.rival_timings == [RIVAL] and restored.checks_run == list(NUMERIC_CHECKS)
