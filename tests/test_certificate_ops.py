"""Certificates by op (issue 8, Build item 1): format v3 for a champion of an op other than
trsm — its op and shape parameters, shapes of that arity, timings by shape, the checks every op
runs — built by ``evaluator.certificate`` from the op's suite, checked by the loader against
the champion's path; trsm keeps format v2, byte for byte."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import types
from typing import Any

import pytest
from pydantic import ValidationError
from test_loader_resolver import certificate_json

from evaluator import op_suites
from evaluator.certificate import build_certificate
from evaluator.champion import ChampionReport
from evaluator.report import CompileInfo, GpuInfo, ShapeTiming
from kernevo.certificate import (
    CERTIFICATE_FORMAT,
    CERTIFICATE_V3,
    REQUIRED_CHECKS,
    Certificate,
    certified_metrics,
)
from kernevo.client import ChampionKernel, Envelope
from kernevo.trust import certificate_mismatch
from seeds import registry
from seeds.registry import Route, measured
from seeds.trsm_small.spec import TRSM_SMALL

TRI = dataclasses.replace(
    TRSM_SMALL, path_id="tri_fake", op="solve_tri", dtypes=("float32",), shape_bucket="n128",
    envelope={"n_max": 128, "k_max": 64, "b2_max": 64, "b3_max": 64},
    quick_shapes=((11, 5, 1, 1),), verify_shapes=((64, 6, 4, 2), (11, 5, 1, 1)),
    timed_shapes=((64, 6, 4, 2),), held_out_shapes=((33, 3, 2, 1),),
    sanitizer_shape=(70, 33, 3, 2),
)  # fmt: skip
V3_CHECKS = [*REQUIRED_CHECKS[CERTIFICATE_V3], "sanitizer_memcheck"]


class TriSuite:
    """The checks a solve_tri suite would name (no method runs here)."""

    problem_checks = ("launch_geometry", "out_of_bounds_write", "input_modified",
                      "row_relative_error", "ggml_nmse", "timed_output")  # fmt: skip
    added_checks = ("batch_isolation",)

    def not_verified(self, report: Any, spec: Any) -> list[str]:
        return ["ggml's inputs past n = 64 (X overflows float32 near n = 300)"]


@pytest.fixture
def tri_path(monkeypatch: pytest.MonkeyPatch) -> Any:
    for path_id, spec in list(registry.PATHS.items()):
        if spec.op == "solve_tri":
            monkeypatch.delitem(registry.PATHS, path_id)
    monkeypatch.setitem(registry.PATHS, TRI.path_id, TRI)
    module = types.ModuleType("tests_tri_suite")
    module.SUITE = TriSuite()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(op_suites.SUITES, "solve_tri", "tests_tri_suite:SUITE")
    return TRI


def v3(**changes: Any) -> dict[str, Any]:
    """A valid v3 document of solve_tri with ``changes``."""
    document = certificate_json(
        verified_shapes=[], held_out_shapes=[], determinism_shapes=[], sanitizer_shapes={}
    )
    document.update(
        format=CERTIFICATE_V3, op="solve_tri", shape_params=["n", "k", "b2", "b3"],
        checks_passed=V3_CHECKS, sanitizer_tools=["memcheck"],
        verified_shapes=[[64, 6, 4, 2]], held_out_shapes=[[33, 3, 2, 1]],
        determinism_shapes=[[64, 6, 4, 2]], sanitizer_shapes={"memcheck": [[70, 33, 3, 2]]},
        timings=[{"shape": [64, 6, 4, 2], "median_us": 7.5, "iqr_us": 0.1,
                  "baseline_median_us": 30.0, "baseline_iqr_us": 0.5, "speedup": 4.0,
                  "speedup_low": None, "speedup_high": None, "noise_floor": None,
                  "faster_than_baseline": None, "plausibility_floor_us": None}],
    )  # fmt: skip
    document.update(changes)
    return document


# --- the format -------------------------------------------------------------------------------


def test_a_v3_certificate_names_its_op_and_shapes_of_its_arity():
    certificate = Certificate.model_validate(v3())
    assert certificate.op_name == "solve_tri" and certificate.shape_params == ["n", "k", "b2", "b3"]
    assert (64, 6, 4, 2) in certificate.shapes() and (70, 33, 3, 2) in certificate.shapes()
    served = certificate.to_json_dict()
    assert served["op"] == "solve_tri" and served["timings"][0]["shape"] == [64, 6, 4, 2]
    assert "m" not in served["timings"][0] and "n" not in served["timings"][0]
    assert Certificate.model_validate(served) == certificate
    assert "  n=64 k=6 b2=4 b3=2: median 7.50 us" in "\n".join(certificate.summary())
    assert certificate.summary()[0].startswith("certificate (v3, solve_tri): passed screen")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"op": None}, "names its op and shape_params"),
        ({"shape_params": ["n", "n"]}, "names a parameter twice"),
        ({"verified_shapes": [[64, 6]]}, "are not of solve_tri's 4 parameters"),
        ({"timings": [{**v3()["timings"][0], "m": 64, "n": 6}]}, "names its shape of 4 values"),
        ({"timings": [{k: v for k, v in v3()["timings"][0].items() if k != "shape"}]},
         "names its shape of 4 values"),
        ({"checks_passed": ["screen", "compile", "held_out_shapes", "determinism"]},
         "lacks checks every verification runs"),
        ({"op": "Solve Tri"}, "String should match pattern"),
        ({"verified_shapes": [[64, 6, 4, 2, 1, 1, 1, 1, 1]]}, "at most 8 items"),
    ],
)  # fmt: skip
def test_a_v3_certificate_that_contradicts_its_op_is_refused(changes, message):
    with pytest.raises(ValidationError, match=message):
        Certificate.model_validate(v3(**changes))


@pytest.mark.parametrize(
    "changes",
    [{"op": "trsm"}, {"op": None}, {"shape_params": ["m", "n"]}, {"verified_shapes": [[1, 2, 3]]},
     {"timings": [{**v3()["timings"][0], "m": 64, "n": 64}]}],
)  # fmt: skip
def test_a_v2_certificate_stays_trsms(changes):
    """v2 is trsm's: no op (not even null), no shape parameters, (m, n) pairs, timings by m, n."""
    with pytest.raises(ValidationError):
        Certificate.model_validate({**certificate_json(), **changes})
    assert Certificate.model_validate(certificate_json()).op_name == "trsm"


def test_a_v2_certificate_serializes_as_before():
    document = certificate_json(
        timings=[{"m": 64, "n": 64, "median_us": 2.0, "iqr_us": 0.1, "baseline_median_us": 6.0,
                  "baseline_iqr_us": 0.2, "speedup": 3.0, "speedup_low": None,
                  "speedup_high": None, "noise_floor": None, "faster_than_baseline": None,
                  "plausibility_floor_us": None}],
    )  # fmt: skip
    served = Certificate.model_validate(document).to_json_dict()
    assert served == document
    assert not {"op", "shape_params"} & set(served) and "shape" not in served["timings"][0]


def test_the_metrics_a_v3_certificate_vouches_for_are_read_by_shape(tri_path):
    metrics = certified_metrics(v3())
    assert metrics["timings"] == [
        {"shape": [64, 6, 4, 2], "candidate_us": 7.5, "speedup": 4.0, "speedup_high": None,
         "noise_floor": None}
    ]  # fmt: skip
    assert measured(Route("tri_fake", "n128"), metrics, 64, 6, 4, 2).time_us == 7.5


# --- the loader -------------------------------------------------------------------------------


def champion(path: str, envelope: dict[str, int], certificate: dict[str, Any]) -> ChampionKernel:
    return ChampionKernel(
        path=path, dtype="float32", gpu="nvidia-h200", shape_bucket="n128", program_id=5,
        arch="sm_90", nvrtc_version="13.0", cubin_sha256=hashlib.sha256(b"").hexdigest(),
        source_sha256=hashlib.sha256(b"").hexdigest(), compile_options=(),
        kernel_name="k", config_kernel_name="c", envelope=Envelope(envelope),
        promoted_at=None, certificate=certificate,
    )  # fmt: skip


def test_the_loader_refuses_a_certificate_of_another_op(tri_path):
    own = champion("tri_fake", TRI.envelope, v3())
    assert certificate_mismatch(Certificate.model_validate(v3()), own) == ""
    trsms = Certificate.model_validate(certificate_json(verified_shapes=[[64, 6]]))
    assert certificate_mismatch(trsms, own).startswith("op trsm, champion of a path of solve_tri")
    renamed = Certificate.model_validate(v3(shape_params=["n", "k", "b3", "b2"]))
    assert "shape parameters (n, k, b3, b2), the op's (n, k, b2, b3)" in certificate_mismatch(
        renamed, own
    )
    trsm_champion = champion("trsm_small", {"m_max": 64, "n_max": 64}, v3())
    mismatch = certificate_mismatch(Certificate.model_validate(v3()), trsm_champion)
    assert mismatch.startswith("op solve_tri, champion of a path of trsm")
    outside = Certificate.model_validate(v3(verified_shapes=[[256, 6, 4, 2]]))
    assert "shapes [(256, 6, 4, 2)] outside the envelope n <= 128, k <= 64" in (
        certificate_mismatch(outside, own)
    )


# --- the evaluator ----------------------------------------------------------------------------


def report_of(path: Any, **changes: Any) -> ChampionReport:
    """A verify_champion report of a solve_tri kernel that passed everything."""
    fields: dict[str, Any] = dict(
        path_id=path.path_id, dtype="float32", status="ok", stage="time", combined_score=4.0,
        compile=CompileInfo(True, "", ("-arch=sm_90",), "sm_90", "13.0", 0.04, "a" * 64),
        gpu=GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "12.8"),
        timings=[ShapeTiming(0, 0, 7.5, 0.1, 30.0, 0.5, 9.0, 40.0, 7.6, 0.02, 3.6, 4.4, True,
                             0.9, (64, 6, 4, 2))],
        verified_shapes=[(64, 6, 4, 2), (11, 5, 1, 1), (33, 3, 2, 1)],
        input_seeds=[1, 2, 3], held_out_seeds=[4, 5, 6], checks_run=["batch_isolation"],
        champion_checks=["held_out_shapes", "determinism", "sanitizer_memcheck",
                         "sanitizer_racecheck"],
        sanitizer_shapes={"memcheck": [(70, 33, 3, 2), (64, 6, 4, 2)],
                          "racecheck": [(70, 33, 3, 2)]},
        sanitizer_version="2025.3.1.0", nvidia_driver_version="580.95.05",
    )  # fmt: skip
    fields.update(changes)
    return ChampionReport(**fields)


def test_a_champion_of_another_op_gets_a_v3_certificate_from_its_suite(tri_path):
    certificate = build_certificate(report_of(tri_path), tri_path)

    assert (certificate.format, certificate.op) == (CERTIFICATE_V3, "solve_tri")
    assert certificate.checks_passed == [
        "screen", "compile", "device_global_state", "launch_geometry", "out_of_bounds_write",
        "input_modified", "row_relative_error", "ggml_nmse", "timed_output",
        "recheck_after_timing", "batch_isolation", "noise_floor", "plausibility",
        "held_out_shapes", "determinism", "sanitizer_memcheck", "sanitizer_racecheck",
    ]  # fmt: skip
    assert certificate.timings[0].shape == [64, 6, 4, 2] and certificate.noise_floor == 0.02
    assert certificate.determinism_shapes == [(64, 6, 4, 2), (70, 33, 3, 2)]
    assert certificate.not_verified[0] == (
        "shapes other than the 3 verified ones; none outside the envelope n <= 128, k <= 64, "
        "b2 <= 64, b3 <= 64 (the loader dispatches only inside it)"
    )
    assert "other than n=70 k=33 b2=3 b3=2 (racecheck" in certificate.not_verified[4]
    assert certificate.not_verified[-1].startswith("ggml's inputs past n = 64")
    served = json.loads(json.dumps(certificate.to_json_dict()))
    own = champion("tri_fake", TRI.envelope, served)
    assert certificate_mismatch(Certificate.model_validate(served), own) == ""


def test_a_suite_without_the_memory_checks_gets_no_certificate(tri_path, monkeypatch):
    monkeypatch.setattr(TriSuite, "problem_checks", ("row_relative_error",))
    with pytest.raises(ValidationError, match="out_of_bounds_write"):
        build_certificate(report_of(tri_path), tri_path)


def test_trsm_champions_keep_format_v2():
    from test_certificate import _report

    certificate = build_certificate(_report(), TRSM_SMALL)
    assert certificate.format == CERTIFICATE_FORMAT and certificate.op is None
    assert not {"op", "shape_params"} & set(certificate.to_json_dict())
