"""The champion certificate (issue 6): its schema (v2, and stored v1 documents still read),
built from a verified report at promotion (claiming only the checks the report shows ran),
stored (migration up and down), covered by the signature, served by ``GET /v1/kernels/best``,
printed by ``kernevo best``, and compared by the loader with its own driver and toolkit."""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import fields, replace
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select

import evaluator.champion
import evaluator.compile
import kernevo.cli
import kernevo.cli.best
from db.migrate import downgrade, upgrade
from db.models import Program
from db.session import make_engine
from evaluator.certificate import PIPELINE_CHECKS, build_certificate
from evaluator.champion import ChampionReport
from evaluator.report import CompileInfo, EvaluationReport, GpuInfo, RivalTiming, ShapeTiming
from evolver.champion import promote_best
from kernevo.certificate import (
    CERTIFICATE_FORMAT,
    MAX_CHECKS,
    MAX_DIM,
    MAX_SCALES,
    MAX_SEEDS,
    MAX_SHAPES,
    MAX_STATEMENT_CHARS,
    MAX_STATEMENTS,
    MAX_TIMINGS,
    REQUIRED_CHECKS,
    SANITIZER_TOOL_NAMES,
    Certificate,
    ShapeTimingSummary,
    _timing_line,
    canonical_json,
    certificate_sha256,
    compare_toolkit,
    environment_differences,
)
from kernevo.client import ChampionKey, parse_champion
from kernevo.settings import LoaderSettings
from kernevo.trust import policy_from_settings
from seeds.registry import get_path

SPEC = get_path("trsm_small")
CUBIN = b"\x7fELF the certified cubin"
BEST = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": 64, "n": 64}


def _report(*_: Any) -> ChampionReport:
    """A verify_champion report of a kernel that passed everything (the promotion's fake), well
    faster than any champion it was timed against."""
    return ChampionReport(
        rival_timings=[RivalTiming("champion", 64, 64, 4.0, 2.0, 2.0, 1.9, 2.1, 0.02, True)],
        path_id=SPEC.path_id,
        dtype="float64",
        status="ok",
        stage="time",
        combined_score=3.0,
        compile=CompileInfo(
            ok=True,
            log="",
            options=("-arch=sm_90",),
            arch="sm_90",
            nvrtc_version="13.0",
            seconds=0.04,
            cubin_sha256=hashlib.sha256(CUBIN).hexdigest(),
        ),  # fmt: skip
        gpu=GpuInfo("NVIDIA H200", "nvidia-h200", "sm_90", "13.0", "12.8"),
        timings=[ShapeTiming(64, 64, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0)],
        verified_shapes=[(1, 1), (33, 7), (64, 64)],
        input_seeds=[11, 12, 13],
        held_out_seeds=[21, 22, 23],
        champion_checks=[
            "held_out_shapes", "determinism", "sanitizer_memcheck", "sanitizer_racecheck",
            "sanitizer_synccheck", "sanitizer_initcheck",
        ],
        sanitizer_shapes={
            "memcheck": [(33, 31), (64, 64)], "racecheck": [(33, 31)],
            "synccheck": [(33, 31)], "initcheck": [(33, 31)],
        },
        sanitizer_version="2025.3.1.0",
        nvidia_driver_version="580.95.05",
    )  # fmt: skip


def _measured_report() -> ChampionReport:
    """A champion report whose pipeline also ran issue 6's numerical checks and measured the
    noise floor and the plausibility floor."""
    report = _report()
    report.checks_run = ["scale_invariance", "nonfinite_containment", "metamorphic_linearity"]
    report.input_scales = [2.0**-100, 2.0**100]
    report.timings = [
        ShapeTiming(16, 16, 1.0, 0.05, 3.0, 0.1, 2.0, 6.0, 1.01, 0.02, 2.8, 3.1, True, 0.4),
        ShapeTiming(64, 64, 2.0, 0.1, 6.0, 0.2, 2.5, 7.0, 2.06, 0.03, 2.7, 3.2, True, 0.9),
    ]
    return report


def test_built_from_a_verified_report() -> None:
    cert = build_certificate(_report(), SPEC)

    assert cert.format == "kernevo.certificate.v2"
    assert cert.checks_passed == [
        *PIPELINE_CHECKS, "held_out_shapes", "determinism", "sanitizer_memcheck",
        "sanitizer_racecheck", "sanitizer_synccheck", "sanitizer_initcheck",
    ]  # fmt: skip
    assert cert.input_seeds == [11, 12, 13] and cert.held_out_seeds == [21, 22, 23]
    assert cert.held_out_shapes == list(SPEC.held_out_shapes)
    assert (cert.cuda_driver_api_version, cert.nvrtc_version) == ("13.0", "13.0")
    assert (cert.nvidia_driver_version, cert.sanitizer_version) == ("580.95.05", "2025.3.1.0")
    assert cert.sanitizer_shapes["memcheck"] == [(33, 31), (64, 64)]
    assert cert.noise_floor is None and cert.input_scales == []
    (timing,) = cert.timings
    assert (timing.median_us, timing.iqr_us, timing.baseline_median_us) == (2.0, 0.1, 6.0)
    assert timing.speedup == pytest.approx(3.0)
    assert (timing.speedup_low, timing.noise_floor, timing.faster_than_baseline) == (None,) * 3
    text = " ".join(cert.not_verified)
    assert "float64" in text and "sm_90" in text and "envelope m <= 64, n <= 64" in text
    assert "no scaled inputs checked" in text and "no noise floor measured" in text
    assert "NaN or Inf inputs (no containment check ran)" in text


def test_a_containment_check_below_the_envelope_is_said_to_cover_no_served_shape() -> None:
    # trsm_blocked serves m >= 128: the 64x8 containment inputs exercise its direct solve only.
    blocked = get_path("trsm_blocked")
    report = _measured_report()
    report.path_id = blocked.path_id

    served = " ".join(build_certificate(_measured_report(), SPEC).not_verified)
    below = " ".join(build_certificate(report, blocked).not_verified)

    assert "containment check at m=64 n=8" in served and "no shape the path serves" not in served
    assert "containment check at m=64 n=8" in below and "no shape the path serves" in below


def test_checks_are_claimed_only_when_the_report_shows_they_ran() -> None:
    report = _report()
    report.champion_checks = ["held_out_shapes", "determinism", "sanitizer_memcheck"]
    report.sanitizer_shapes = {"memcheck": [(33, 31)]}
    report.phase_seconds["memcheck"] = 4.2  # the job's memcheck ran before it became the best

    cert = build_certificate(report, SPEC)

    assert "sanitizer_racecheck" not in cert.checks_passed
    assert cert.sanitizer_tools == ["memcheck"]
    assert "memcheck_before_best" in cert.checks_passed
    for issue6 in ("scale_invariance", "noise_floor", "plausibility"):
        assert issue6 not in cert.checks_passed


def test_issue_6_checks_and_timing_fields_are_certified_when_measured() -> None:
    cert = build_certificate(_measured_report(), SPEC)

    assert {
        "scale_invariance", "nonfinite_containment", "metamorphic_linearity", "noise_floor",
        "plausibility",
    } <= set(cert.checks_passed)  # fmt: skip
    assert cert.noise_floor == pytest.approx(0.03)  # the worst shape's
    assert cert.input_scales == [2.0**-100, 2.0**100]
    small, large = cert.timings
    assert (small.speedup_low, small.speedup_high, small.noise_floor) == (2.8, 3.1, 0.02)
    assert large.faster_than_baseline is True and large.plausibility_floor_us == 0.9
    text = " ".join(cert.not_verified)
    assert (
        "scaled by 2^-100 (7.89e-31), 2^100 (1.27e+30)" in text
        and "beyond the containment check" in text
    )
    assert "no noise floor measured" not in text
    summary = "\n".join(cert.summary())
    assert "[2.70, 3.20], beats the noise floor" in summary and "noise floor 3.0%" in summary


@pytest.mark.parametrize(
    ("median", "low", "high", "faster", "verdict"),
    [
        (50.0, 1.9, 2.1, True, "beats the noise floor"),
        (100.0, 0.99, 1.01, False, "within the noise"),
        # RESULTS 22's 129 x 8192: 0.978x, interval up to 0.979, floor 0.2 %: the router sends
        # that shape to the library, so the summary must not call it "within the noise".
        (102.25, 0.977, 0.979, False, "slower beyond the noise (the library serves this shape)"),
    ],
)
def test_a_timing_line_says_faster_slower_or_within_the_noise(
    median: float, low: float, high: float, faster: bool, verdict: str
) -> None:
    timing = ShapeTimingSummary(
        m=129, n=8192, median_us=median, iqr_us=0.1, baseline_median_us=100.0,
        baseline_iqr_us=0.1, speedup=100.0 / median, speedup_low=low, speedup_high=high,
        noise_floor=0.002, faster_than_baseline=faster, plausibility_floor_us=1.0,
    )  # fmt: skip
    assert _timing_line(timing).endswith(f"[{low:.2f}, {high:.2f}], {verdict}")


def test_a_noise_floor_without_a_second_timing_is_not_certified() -> None:
    report = _measured_report()
    report.timings = [replace(t, candidate_again_us=0.0) for t in report.timings]

    cert = build_certificate(report, SPEC)

    assert "noise_floor" not in cert.checks_passed and cert.noise_floor is None
    assert all(t.noise_floor is None and t.faster_than_baseline is None for t in cert.timings)


def test_a_plain_evaluation_report_gets_no_certificate() -> None:
    plain = EvaluationReport(
        **{f.name: getattr(_report(), f.name) for f in fields(EvaluationReport)}
    )
    with pytest.raises(ValueError, match="verify_champion"):
        build_certificate(plain, SPEC)


def test_a_failed_report_has_no_certificate() -> None:
    report = _report()
    report.status = "wrong"
    with pytest.raises(ValueError, match="wrong"):
        build_certificate(report, SPEC)


def test_schema_round_trip_and_strictness() -> None:
    document = build_certificate(_report(), SPEC).to_json_dict()
    again = json.loads(json.dumps(document))

    assert Certificate.model_validate(again).to_json_dict() == document
    assert certificate_sha256(again) == certificate_sha256(document)
    with pytest.raises(ValidationError):
        Certificate.model_validate({**document, "unexpected": 1})
    with pytest.raises(ValidationError):
        Certificate.model_validate({**document, "format": "kernevo.certificate.v0"})
    missing = {k: v for k, v in document.items() if k != "nvidia_driver_version"}
    with pytest.raises(ValidationError):
        Certificate.model_validate(missing)  # v2 must say, even if only null
    assert certificate_sha256(None) is None


def _valid() -> dict[str, Any]:
    """A built, measured certificate as served (JSON types)."""
    return json.loads(json.dumps(build_certificate(_measured_report(), SPEC).to_json_dict()))


def _timing(**changes: Any) -> dict[str, Any]:
    """The first timing of :func:`_valid` with ``changes`` (speedup kept baseline / median)."""
    timing = {**_valid()["timings"][0], **changes}
    if "speedup" not in changes and timing["median_us"] > 0:
        timing["speedup"] = timing["baseline_median_us"] / timing["median_us"]
    return timing


NAN, INF = float("nan"), float("inf")
# Each a signed certificate the schema once accepted that says nothing or contradicts itself
# (red-team finding 6): field -> value that must be refused.
MEANINGLESS: dict[str, tuple[str, Any]] = {
    "no_checks": ("checks_passed", []),
    "core_checks_missing": ("checks_passed", ["screen", "compile", "held_out_shapes"]),
    "check_named_twice": ("checks_passed", [*PIPELINE_CHECKS, "held_out_shapes", "determinism",
                                            "determinism"]),
    "check_name_not_a_name": ("checks_passed", [*PIPELINE_CHECKS, "held_out_shapes",
                                                "determinism", "Everything!"]),
    "noise_floor_nan": ("noise_floor", NAN),
    "noise_floor_inf": ("noise_floor", INF),
    "noise_floor_not_the_worst_shapes": ("noise_floor", 0.01),
    "input_scale_nan": ("input_scales", [NAN]),
    "input_scale_negative": ("input_scales", [-1.0]),
    "input_scale_zero": ("input_scales", [0.0]),
    "input_scales_over_the_cap": ("input_scales", [2.0] * (MAX_SCALES + 1)),
    "shape_as_strings": ("verified_shapes", [["64", "64"]]),
    "shape_as_floats": ("verified_shapes", [[64.0, 64]]),
    "shape_as_booleans": ("verified_shapes", [[True, True]]),
    "shape_negative": ("verified_shapes", [[-1, 64]]),
    "shape_zero": ("held_out_shapes", [[0, 64]]),
    "shape_huge": ("determinism_shapes", [[10**30, 64]]),
    "shape_over_max_dim": ("verified_shapes", [[MAX_DIM + 1, 1]]),
    "shape_of_three": ("verified_shapes", [[1, 2, 3]]),
    "shapes_over_the_cap": ("verified_shapes", [[1, 1]] * (MAX_SHAPES + 1)),
    "seeds_as_booleans": ("input_seeds", [True, False]),
    "seed_as_string": ("held_out_seeds", ["21"]),
    "seed_as_float": ("input_seeds", [11.0]),
    "seed_negative": ("input_seeds", [-1]),
    "seeds_two_million": ("input_seeds", list(range(2_000_000))),
    "seeds_over_the_cap": ("held_out_seeds", [1] * (MAX_SEEDS + 1)),
    "sanitizer_tool_unknown": ("sanitizer_tools", ["valgrind"]),
    "sanitizer_tool_twice": ("sanitizer_tools", ["memcheck", "memcheck"]),
    "sanitizer_shapes_of_another_tool": ("sanitizer_shapes", {"leakcheck": [[1, 1]]}),
    "sanitizer_tools_not_those_of_the_shapes": ("sanitizer_shapes", {"memcheck": [[33, 31]]}),
    "gpu_key_with_blanks": ("gpu_key", "NVIDIA H200 "),
    "arch_not_an_sm": ("arch", "compute_90"),
    "gpu_name_empty": ("gpu_name", ""),
    "version_with_blanks_inside": ("nvrtc_version", "13.0 beta"),
    "not_verified_statement_too_long": ("not_verified", ["x" * (MAX_STATEMENT_CHARS + 1)]),
    "timing_median_negative": ("timings", [_timing(median_us=-1.0, speedup=0.0)]),
    "timing_iqr_nan": ("timings", [_timing(iqr_us=NAN)]),
    "timing_speedup_not_the_ratio": ("timings", [_timing(speedup=1e308)]),
    "timing_interval_reversed": ("timings", [_timing(speedup_low=5.0, speedup_high=1.0)]),
    "timing_speedup_outside_interval": ("timings", [_timing(speedup_low=3.5, speedup_high=4.0,
                                                           faster_than_baseline=False)]),
    "timing_faster_without_interval": ("timings", [_timing(speedup_low=None)]),
    "timing_faster_within_noise": ("timings", [_timing(speedup_low=1.01, noise_floor=0.03)]),
    "timing_below_plausibility_floor": ("timings", [_timing(plausibility_floor_us=5.0)]),
    "timing_noise_floor_negative": ("timings", [_timing(noise_floor=-3.0)]),
    "timing_m_as_boolean": ("timings", [_timing(m=True)]),
    "timing_faster_as_string": ("timings", [_timing(faster_than_baseline="yes")]),
}  # fmt: skip


def test_the_measured_fixture_is_valid() -> None:
    """The base every MEANINGLESS case changes one field of, and which must itself pass."""
    assert Certificate.model_validate(_valid()).timings[0].faster_than_baseline is True


@pytest.mark.parametrize(("name", "value"), MEANINGLESS.values(), ids=MEANINGLESS.keys())
def test_a_certificate_that_says_nothing_or_contradicts_itself_is_refused(
    name: str, value: Any
) -> None:
    with pytest.raises(ValidationError):
        Certificate.model_validate({**_valid(), name: value})


def test_input_scales_without_their_check_are_refused() -> None:
    document = _valid()
    document["checks_passed"].remove("scale_invariance")
    with pytest.raises(ValidationError, match="scale_invariance"):
        Certificate.model_validate(document)


def test_a_sanitizer_tool_without_its_check_is_refused() -> None:
    document = _valid()
    document["checks_passed"].remove("sanitizer_racecheck")
    with pytest.raises(ValidationError, match="racecheck"):
        Certificate.model_validate(document)


@pytest.mark.parametrize("blank", ["", " ", "\t \n"])
def test_a_blank_version_is_not_recorded(blank: str) -> None:
    cert = Certificate.model_validate({**_valid(), "nvidia_driver_version": blank})

    assert cert.nvidia_driver_version is None
    here = {"nvidia_driver_version": "580.95.05", "cuda_driver_api_version": "13.0"}
    assert compare_toolkit(cert, **here, nvrtc_version="13.0").refused_reason() == (
        "not re-verified on this toolkit: NVIDIA driver: not recorded at verification"
    )
    padded = Certificate.model_validate({**_valid(), "nvrtc_version": " 13.0 "})
    assert padded.nvrtc_version == "13.0"


def test_no_certificate_that_parses_holds_a_value_json_cannot_carry() -> None:
    """canonical_json refuses NaN and Infinity, as the API's response encoder does, instead of
    writing ``NaN`` a stored certificate could not be served with."""
    with pytest.raises(ValueError):
        canonical_json({"noise_floor": NAN})
    with pytest.raises(ValueError):
        certificate_sha256({"timings": [{"speedup_high": INF}]})
    cert = Certificate.model_validate(_valid())
    assert json.loads(canonical_json(cert.to_json_dict())) == cert.to_json_dict()


def _largest() -> dict[str, Any]:
    """The largest certificate the schema accepts: every list at its cap, every string at its
    longest, every number at its bound."""
    shape = [MAX_DIM, MAX_DIM]
    timing = {
        "m": MAX_DIM, "n": MAX_DIM, "median_us": 2.0, "iqr_us": 0.1, "baseline_median_us": 6.0,
        "baseline_iqr_us": 0.2, "speedup": 3.0, "speedup_low": 2.5, "speedup_high": 3.5,
        "noise_floor": 0.03, "faster_than_baseline": True, "plausibility_floor_us": 0.5,
    }  # fmt: skip
    checks = [
        *REQUIRED_CHECKS[CERTIFICATE_FORMAT], "scale_invariance",
        *(f"sanitizer_{tool}" for tool in SANITIZER_TOOL_NAMES),
    ]  # fmt: skip
    checks += [f"check_{i}" for i in range(MAX_CHECKS - len(checks))]
    return {
        **_valid(),
        "checks_passed": checks,
        "input_seeds": [2**63 - 1] * MAX_SEEDS,
        "held_out_seeds": [2**63 - 1] * MAX_SEEDS,
        "verified_shapes": [shape] * MAX_SHAPES,
        "held_out_shapes": [shape] * MAX_SHAPES,
        "determinism_shapes": [shape] * MAX_SHAPES,
        "sanitizer_tools": list(SANITIZER_TOOL_NAMES),
        "sanitizer_shapes": {tool: [shape] * MAX_SHAPES for tool in SANITIZER_TOOL_NAMES},
        "gpu_name": "N" * 256,
        "timings": [timing] * MAX_TIMINGS,
        "noise_floor": 0.03,
        "input_scales": [2.0**100] * MAX_SCALES,
        "not_verified": ["x" * MAX_STATEMENT_CHARS] * MAX_STATEMENTS,
    }


def test_the_largest_certificate_parses_in_milliseconds() -> None:
    """About 0.3 MB; parsed in about 2 ms on the CI machine (a 2,000,000-seed list, refused now,
    took 2.1 s to read before the caps). The bound is 50x that, for a loaded machine."""
    document = _largest()
    assert len(canonical_json(document)) < 2**19  # inside the loader's 1 MiB metadata cap
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        Certificate.model_validate(document)
        seconds.append(time.perf_counter() - start)
    assert min(seconds) < 0.1, seconds
    huge = {**document, "input_seeds": list(range(2_000_000))}
    start = time.perf_counter()
    with pytest.raises(ValidationError):
        Certificate.model_validate(huge)
    assert time.perf_counter() - start < 0.1


def test_a_degenerate_interval_builds_a_certificate() -> None:
    """evaluator.noise gives +inf for a degenerate floor or interval end: stated as null."""
    report = _measured_report()
    report.timings[0] = replace(report.timings[0], noise_floor=INF, faster_than_baseline=False)
    report.timings[1] = replace(report.timings[1], speedup_high=INF)

    cert = build_certificate(report, SPEC)

    assert cert.timings[0].noise_floor is None and cert.timings[1].speedup_high is None


# A certificate as promotions stored it before issue 6 (format v1), field for field.
V1_DOCUMENT: dict[str, Any] = {
    "format": "kernevo.certificate.v1",
    "checks_passed": [
        "screen", "compile", "contract", "quick", "verify", "time", "held_out_shapes",
        "determinism", "sanitizer_memcheck", "sanitizer_racecheck", "sanitizer_synccheck",
        "sanitizer_initcheck",
    ],
    "input_seeds": [11, 12, 13], "held_out_seeds": [21, 22, 23],
    "verified_shapes": [[1, 1], [64, 64]], "held_out_shapes": [[5, 3]],
    "determinism_shapes": [[64, 64], [33, 31]],
    "sanitizer_tools": ["memcheck", "racecheck", "synccheck", "initcheck"],
    "sanitizer_version": None, "gpu_name": "NVIDIA H200", "gpu_key": "nvidia-h200",
    "arch": "sm_90", "nvidia_driver_version": None, "cuda_driver_api_version": "13.0",
    "cuda_runtime_version": "12.8", "nvrtc_version": "13.0",
    "timings": [{
        "m": 64, "n": 64, "median_us": 2.0, "iqr_us": 0.1, "baseline_median_us": 6.0,
        "baseline_iqr_us": 0.2, "speedup": 3.0,
    }],
    "noise_floor_us": None,
    "not_verified": ["dtypes other than float64"],
}  # fmt: skip


def test_a_stored_v1_certificate_still_reads() -> None:
    before = certificate_sha256(V1_DOCUMENT)

    cert = Certificate.model_validate(V1_DOCUMENT)

    assert cert.format == "kernevo.certificate.v1"
    assert cert.nvidia_driver_version is None and cert.noise_floor is None
    assert cert.sanitizer_shapes == {} and cert.timings[0].speedup_low is None
    assert cert.summary()[0].startswith("certificate (v1): passed screen, compile")
    assert certificate_sha256(V1_DOCUMENT) == before  # the stored document is not touched
    with pytest.raises(ValidationError):
        Certificate.model_validate({**V1_DOCUMENT, "noise_floor_us": 1.5})
    with pytest.raises(ValidationError):  # a v2 document is not read as v1 with fields missing
        Certificate.model_validate({**V1_DOCUMENT, "format": "kernevo.certificate.v2"})


def test_a_v1_document_as_the_first_v1_model_wrote_it_still_reads() -> None:
    """v1's model gave the two versions and ``noise_floor_us`` defaults: a document without
    them reads too."""
    document = {
        k: v
        for k, v in V1_DOCUMENT.items()
        if k not in ("sanitizer_version", "nvidia_driver_version", "noise_floor_us")
    }
    assert Certificate.model_validate(document).nvidia_driver_version is None


@pytest.mark.parametrize(
    "changes",
    [
        {"noise_floor": None},
        {"sanitizer_shapes": {}},
        {"input_scales": []},
        {"timings": [{**V1_DOCUMENT["timings"][0], "speedup_low": None}]},
        {"checks_passed": [*PIPELINE_CHECKS, "held_out_shapes", "determinism"]},  # v2's names
        {"checks_passed": []},
        {"input_seeds": [True]},
        {"timings": [{**V1_DOCUMENT["timings"][0], "speedup": 9.0}]},
    ],
    ids=["v2 noise_floor", "v2 sanitizer_shapes", "v2 input_scales", "v2 timing field",
         "v2 check names", "no checks", "bool seed", "speedup not the ratio"],
)  # fmt: skip
def test_a_v1_document_is_held_to_v1(changes: dict[str, Any]) -> None:
    """A v1 document carrying a v2 field (even null or empty), or meaningless as v1, is refused:
    v1 documents are read as v1 wrote them, not as a looser v2."""
    with pytest.raises(ValidationError, match="v1 certificate|checks"):
        Certificate.model_validate({**V1_DOCUMENT, **changes})


def test_driver_or_toolkit_differences_are_stated() -> None:
    document = build_certificate(_report(), SPEC).to_json_dict()
    here = {"nvidia_driver_version": "580.95.05", "cuda_driver_api_version": "13.0"}

    assert environment_differences(document, **here, nvrtc_version="13.0") == ""
    unknown = environment_differences(document, cuda_driver_api_version="", nvrtc_version="")
    assert unknown == ""
    other = environment_differences(
        document, nvidia_driver_version="575.57.08", cuda_driver_api_version="12.9",
        nvrtc_version="13.0",
    )  # fmt: skip
    assert other == (
        "served not re-verified on this toolkit: NVIDIA driver 575.57.08 here, verified under "
        "580.95.05, CUDA driver API 12.9 here, verified under 13.0"
    )
    bad = environment_differences({"x": 1}, cuda_driver_api_version="1", nvrtc_version="1")
    assert "unreadable" in bad
    v1 = compare_toolkit(
        Certificate.model_validate(V1_DOCUMENT), **here, nvrtc_version="13.0"
    )  # fmt: skip
    assert v1.served_reason() == ""
    assert v1.refused_reason() == (
        "not re-verified on this toolkit: NVIDIA driver: not recorded at verification"
    )


def _promote(seeded, url: str, monkeypatch, tmp_path, report=_report) -> Any:
    """The seeded child promoted with a faked verification (``report``, no GPU), signed by a
    local key; the loader's trust policy for that key."""
    monkeypatch.setattr(evaluator.champion, "verify_champion", report)
    monkeypatch.setattr(
        evaluator.compile,
        "compile_cubin",
        lambda *_: SimpleNamespace(ok=True, cubin=CUBIN, log=""),
    )
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.delenv("KERNEVO_SIGNING_KEY", raising=False)
    engine = make_engine(url)
    with engine.connect() as conn:
        uid, source = conn.execute(
            select(Program.uid, Program.source).where(Program.id == seeded.child_id)
        ).one()
    outcome = promote_best(
        engine, spec=SPEC, dtype="float64", gpu_index=0, gpu_key="nvidia-h200", uid=uid,
        source=source,
    )  # fmt: skip
    engine.dispose()
    assert outcome.promoted, outcome.reason
    return policy_from_settings(LoaderSettings(key_dir=tmp_path / "keys"))


@pytest.fixture
def promoted(seeded, fresh_database_url, monkeypatch, tmp_path) -> Any:
    """The seeded child promoted with a faked verification (no GPU), signed by a local key."""
    return _promote(seeded, fresh_database_url, monkeypatch, tmp_path)


def test_a_certificate_with_integral_floats_is_stored_as_signed(
    seeded, fresh_database_url, monkeypatch, tmp_path, api_client: TestClient
) -> None:
    # float64's input scales 2^±900: PostgreSQL's JSONB gave 2^900 back as an integer, the
    # canonical JSON changed and promotion refused its own signature (migration b6d41e8a3f92).
    def report(*_: Any) -> ChampionReport:
        measured = _measured_report()
        measured.input_scales = [2.0**-900, 2.0**60, 2.0**900]
        return measured

    policy = _promote(seeded, fresh_database_url, monkeypatch, tmp_path, report)

    body = api_client.get("/v1/kernels/best", params=BEST).json()
    assert body["certificate"]["input_scales"] == [2.0**-900, 2.0**60, 2.0**900]
    fetched = parse_champion(body, ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64"))
    assert fetched.champion is not None and policy.check(fetched.champion) is None


def test_served_and_signed_a_tampered_certificate_is_refused(
    promoted: Any, api_client: TestClient
) -> None:
    body = api_client.get("/v1/kernels/best", params=BEST).json()
    assert body["certificate"] == build_certificate(_report(), SPEC).to_json_dict()
    key = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")
    fetched = parse_champion(body, key)
    assert fetched.champion is not None and promoted.check(fetched.champion) is None

    for change in (
        lambda c: c["not_verified"].pop(),
        lambda c: c["timings"][0].update(speedup=9.0),
        lambda c: c.update(nvrtc_version="12.0"),
    ):
        tampered = json.loads(json.dumps(body))
        change(tampered["certificate"])
        champion = parse_champion(tampered, key).champion
        assert champion is not None
        refusal = promoted.check(champion)
        assert refusal is not None and refusal.check == "bad_signature"
    stripped = parse_champion({**body, "certificate": None}, key).champion
    assert stripped is not None and promoted.check(stripped).check == "bad_signature"


def test_kernevo_best_prints_the_certificate(
    promoted: Any, api_client: TestClient, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(
        kernevo.cli.best, "_get_json", lambda url, params: api_client.get(url, params=params).json()
    )
    args = ["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu", "nvidia-h200"]
    assert kernevo.cli.main([*args, "--api-url", "http://testserver"]) == 0
    out = capsys.readouterr().out
    assert "certificate: passed screen, compile" in out
    assert "held-out seeds [21, 22, 23]" in out
    assert "driver 580.95.05, CUDA driver API 13.0" in out
    assert "compute-sanitizer 2025.3.1.0" in out
    assert "not verified: dtypes other than float64" in out


def test_migration_adds_and_drops_the_certificate_column(empty_database_url: str) -> None:
    def columns() -> set[str]:
        engine = make_engine(empty_database_url)
        try:
            return {c["name"] for c in sa.inspect(engine).get_columns("champion")}
        finally:
            engine.dispose()

    upgrade(empty_database_url)
    assert "certificate" in columns()
    downgrade(empty_database_url, "7c1e5a9d2b30")
    assert "certificate" not in columns()
    upgrade(empty_database_url)
    assert "certificate" in columns()


def test_an_interval_that_misses_its_estimate_is_widened_to_hold_it() -> None:
    """A percentile bootstrap interval need not contain the ratio of medians; the certificate
    widens it (never narrows) and judges "faster" on the widened low end."""
    report = _measured_report()
    timing = report.timings[1]  # speedup 3.0
    report.timings[1] = replace(timing, speedup_low=3.05, speedup_high=3.2)

    cert = build_certificate(report, SPEC)

    summary = cert.timings[1]
    assert (summary.speedup_low, summary.speedup_high) == (timing.speedup, 3.2)
    assert summary.faster_than_baseline is True


def test_certified_metrics_are_the_signed_timings_and_their_geometric_mean() -> None:
    """What the loader compares paths on (kernevo.resolver): the certificate's figures."""
    from kernevo.certificate import certified_metrics

    cert = build_certificate(_measured_report(), SPEC).to_json_dict()
    got = certified_metrics(cert)
    speedups = [t["speedup"] for t in cert["timings"]]
    assert got["combined_score"] == pytest.approx(math.prod(speedups) ** (1 / len(speedups)))
    assert got["timings"] == [
        {
            "m": t["m"], "n": t["n"], "candidate_us": t["median_us"], "speedup": t["speedup"],
            "speedup_high": t["speedup_high"], "noise_floor": t["noise_floor"],
        }
        for t in cert["timings"]
    ]  # fmt: skip
    assert certified_metrics(None) == {} and certified_metrics({"format": "nonsense"}) == {}
