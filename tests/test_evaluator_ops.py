"""The evaluator by op (issue 8, Build item 1): what depends on the op — inputs, checks, timing,
the sanitizer's launch — comes from the op's suite (``evaluator.op_suites``), the rest is the
pipeline's. A fake op, ``double`` (shapes (n, k)), with a fake path and a suite recording its
calls, runs through ``Evaluator`` and the GPU worker's own task code (``gpu_tasks.run``) in
this process; trsm's suite is the evaluator as it was (its tests: test_evaluator_pipeline,
test_path_parts, test_redteam)."""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from dataclasses import asdict
from typing import Any

import pytest

import evaluator.gpu_tasks as gpu_tasks
from evaluator import op_suites
from evaluator.checks import accuracy
from evaluator.new_best import memcheck_shapes
from evaluator.pipeline import NUMERIC_CHECKS, Evaluator
from evaluator.report import CheckFailure, EvaluationReport, GpuInfo, RivalTiming, ShapeTiming
from evaluator.tools import shape_arguments
from seeds import ops, registry
from seeds.ops.spec import OpSpec, ShapeParam
from seeds.trsm_small.spec import TRSM_SMALL

DOUBLE = OpSpec(
    name="double",
    params=(ShapeParam("n", 1, 1024, "rows of x"), ShapeParam("k", 1, 1024, "columns of x")),
    dtypes=("float64",),
    semantics="x <- 2 x in place",
    shape_words="x {n}x{k}",
    call_factory="_double_op:DoubleCall",
    fallback_library="NumPy on the host",
    fallback_route="host",
)


def timing(shape: tuple[int, ...]) -> ShapeTiming:
    """A timing of an op other than trsm: m, n 0 and the shape in ``shape``."""
    return ShapeTiming(0, 0, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0, 2.01, 0.02, 2.8, 3.1, True, 0.4, shape)


class DoubleSuite:
    """The fake op's suite: records every call; fails where ``failing`` says."""

    added_checks = ("doubling_exact", "double_twice_is_quadruple")
    log: list[tuple[Any, ...]] = []
    failing: dict[str, CheckFailure] = {}

    def verify(self, driver, spec, dtype, shapes, seeds, growth, check):
        self.log.append(("verify", driver.cubin, spec.path_id, dtype, list(shapes), growth))
        if "verify" in self.failing:
            return self.failing["verify"], []
        return None, [tuple(s) for s in shapes]

    def determinism(self, driver, spec, dtype, shapes, repeats):
        self.log.append(("determinism", list(shapes), repeats))
        return None

    def time(self, driver, spec, dtype, shape, baseline, check, rivals, settings):
        self.log.append(("time", shape, type(baseline).__name__, sorted(rivals), dict(settings)))
        against = [
            RivalTiming(name, 0, 0, 3.0, 2.0, 1.5, 1.2, 1.8, 0.02, True, shape)
            for name, rival in rivals.items()
        ]
        return timing(shape), against, None

    def input_scales(self, dtype, seed):
        return [0.5, 2.0]

    def run_once(self, driver, spec, dtype, shape, repeat):
        self.log.append(("run_once", shape, repeat))


class Driver:
    def __init__(self, cubin: bytes, dtype: str, spec: Any) -> None:
        self.cubin = cubin
        DoubleSuite.log.append(("driver", cubin, dtype))

    def close(self) -> None:
        DoubleSuite.log.append(("closed", self.cubin))


class Baseline:
    def __init__(self, dtype: str) -> None:
        DoubleSuite.log.append(("baseline", dtype))

    def close(self) -> None:
        DoubleSuite.log.append(("baseline_closed",))


class InProcessWorker:
    """The GPU worker's task loop in this process (``gpu_tasks.run`` itself)."""

    def run(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        if task["kind"] == "info":
            return {"gpu": asdict(GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "13.0"))}
        return gpu_tasks.run(task)


@pytest.fixture
def double_path(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake op, its suite, and a path of it whose parts live in a module of the seeds
    package; returns the path's spec."""
    monkeypatch.setitem(ops.OPS, "double", DOUBLE)
    parts = types.ModuleType(f"{registry.__package__}._double_path")
    parts.Driver, parts.Baseline = Driver, Baseline  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, parts.__name__, parts)
    suite = types.ModuleType("tests_double_suite")
    suite.SUITE = DoubleSuite()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, suite.__name__, suite)
    monkeypatch.setitem(op_suites.SUITES, "double", "tests_double_suite:SUITE")
    monkeypatch.setattr(DoubleSuite, "log", [])
    monkeypatch.setattr(DoubleSuite, "failing", {})
    spec = dataclasses.replace(
        TRSM_SMALL, path_id="double_path", op="double", dtypes=("float64",),
        shape_bucket="n64k8", envelope={"n_max": 64, "k_max": 8},
        quick_shapes=((3, 2),), verify_shapes=((64, 8), (7, 3)), timed_shapes=((64, 8), (16, 4)),
        held_out_shapes=((5, 5),), sanitizer_shape=(33, 7),
        driver_factory="_double_path:Driver", baseline_factory="_double_path:Baseline",
    )  # fmt: skip
    monkeypatch.setitem(registry.PATHS, spec.path_id, spec)
    return spec


def evaluator_of(path_id: str) -> Evaluator:
    evaluator = Evaluator(path_id, "float64", gpu_index=None)
    evaluator.worker = InProcessWorker()  # type: ignore[assignment]
    return evaluator


def test_the_pipeline_takes_inputs_checks_and_timing_from_the_ops_suite(double_path):
    evaluator = evaluator_of("double_path")
    report = evaluator.stage2(EvaluationReport("double_path", "float64"), b"cubin", b"rival")

    assert report.passed, report.failure
    log = DoubleSuite.log
    assert log[0] == ("driver", b"cubin", "float64")
    assert log[1] == ("verify", b"cubin", "double_path", "float64", [(64, 8), (7, 3)], True)
    assert ("driver", b"rival", "float64") in log and ("baseline", "float64") in log
    timed = [entry for entry in log if entry[0] == "time"]
    assert [entry[1] for entry in timed] == [(64, 8), (16, 4)]
    assert all(entry[2] == "Baseline" and entry[3] == ["champion"] for entry in timed)
    assert set(timed[0][4]) == {"seed"}  # the task's settings: its timing seed
    recheck = [entry for entry in log if entry[0] == "verify"][1]
    assert recheck[4] == [(64, 8), (16, 4), (3, 2)] and recheck[5] is False
    closed = [entry for entry in log if entry[0] in ("closed", "baseline_closed")]
    # The candidate's driver is loaded and closed by each task (verification, then timing).
    assert sorted(closed) == [
        ("baseline_closed",), ("closed", b"cubin"), ("closed", b"cubin"), ("closed", b"rival"),
    ]  # fmt: skip
    # The pipeline's own: the suite's added checks, its scales, its timings by shape.
    assert report.checks_run == ["doubling_exact", "double_twice_is_quadruple"]
    assert report.input_scales == [0.5, 2.0]
    assert [t.problem for t in report.timings] == [(64, 8), (16, 4)]
    assert report.combined_score > 0 and report.speedup_at_largest() == pytest.approx(3.0)
    assert [r.shape for r in report.rival_timings] == [(64, 8), (16, 4)]


def test_a_report_of_another_op_keeps_its_shapes_and_trsms_reads_as_before(double_path):
    evaluator = evaluator_of("double_path")
    report = evaluator.stage2(EvaluationReport("double_path", "float64"), b"cubin")
    assert json.loads(report.to_json())["timings"][0]["shape"] == [64, 8]
    assert EvaluationReport.from_json(report.to_json()).timings == report.timings

    trsm = EvaluationReport("trsm_small", "float64", timings=[ShapeTiming(16, 16, *[1.0] * 6)])
    assert "shape" not in trsm.to_dict()["timings"][0]
    assert EvaluationReport.from_json(trsm.to_json()).timings == trsm.timings


def test_a_failure_the_suite_finds_fails_the_report(double_path):
    DoubleSuite.failing["verify"] = CheckFailure("doubling_exact", (7, 3), 3.0, 0.0, "x[0] != 2")
    evaluator = evaluator_of("double_path")
    report = evaluator.stage2(EvaluationReport("double_path", "float64"), b"cubin")

    assert report.status == "wrong" and report.failure is not None
    assert (report.failure.check, report.failure.shape) == ("doubling_exact", (7, 3))
    assert not [entry for entry in DoubleSuite.log if entry[0] == "time"]


def test_the_champion_checks_and_the_sanitizers_launch_by_the_ops_shape(double_path):
    task = {"kind": "champion", "cubin": b"cubin", "path_id": "double_path", "dtype": "float64",
            "shapes": [(5, 5)], "seeds": [1], "growth": True,
            "determinism_shapes": [(16, 4), (33, 7)], "repeats": 5}  # fmt: skip
    result = gpu_tasks.run(task)

    assert result["failure"] is None and result["verified_shapes"] == [(5, 5)]
    assert ("determinism", [(16, 4), (33, 7)], 5) in DoubleSuite.log
    assert memcheck_shapes(double_path) == [(33, 7), (64, 8)]  # largest by n·k
    assert shape_arguments("double_path", (33, 7)) == ["--n", "33", "--k", "7"]
    assert shape_arguments("trsm_small", (33, 31)) == ["--m", "33", "--n", "31"]


def test_a_path_of_an_op_without_a_suite_cannot_be_evaluated(double_path, monkeypatch):
    monkeypatch.delitem(op_suites.SUITES, "double")
    with pytest.raises(op_suites.UnknownSuiteError, match="no suite for op 'double'"):
        Evaluator("double_path", "float64", gpu_index=None)


def test_trsms_suite_is_the_evaluator_as_it_was():
    suite = op_suites.suite_for("trsm")
    assert isinstance(suite, op_suites.TrsmSuite)
    assert suite.added_checks == NUMERIC_CHECKS
    assert Evaluator("trsm_small", "float64", gpu_index=None).suite.added_checks == NUMERIC_CHECKS
    assert accuracy.solution_check(TRSM_SMALL.reference_check) is accuracy.check_solution


def test_another_ops_report_reads_in_its_shapes(double_path):
    report = evaluator_of("double_path").stage2(
        EvaluationReport("double_path", "float64"), b"cubin", b"rival"
    )
    rows = report.artifacts()["timings"].splitlines()
    assert rows[0].startswith("shape  candidate_us") and rows[1].startswith("64 8 2.00±0.10 ")
    assert report.artifacts()["rivals"].startswith("vs champion at 64x8: 3.00 us")
    failure = CheckFailure("row_relative_error", (64, 6, 4, 2), 3.0, 1.0, "row 3 of batch (1, 0)")
    assert failure.describe().startswith("row_relative_error at shape (64, 6, 4, 2): 3 > bound 1")
    assert CheckFailure("scaled_residual", (33, 31)).describe() == "scaled_residual at m=33, n=31."
