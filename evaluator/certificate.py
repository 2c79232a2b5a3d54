"""Build a champion's certificate (``kernevo.certificate.Certificate``) from its verified
report: format v2 for trsm (its op's suite says so: ``evaluator.op_suites.TrsmSuite``), format
v3 for any other op (its ``op`` and ``shape_params``, shapes of the op's arity, the pipeline's
checks with the suite's ``problem_checks``, the suite's ``not_verified`` statements).

Every statement comes from the report of ``evaluator.champion.verify_champion`` (a
:class:`~evaluator.champion.ChampionReport`): ``checks_passed`` lists only checks the report
shows ran and passed (:func:`checks_passed`), never a fixed list that could claim one that did
not run; ``not_verified`` states what no check covered, naming the input ranges that were drawn
and the scales that were checked.

The timing fields come from ``ShapeTiming`` (``candidate_again_us``, ``noise_floor``,
``speedup_low``, ``speedup_high``, ``faster_than_baseline``, ``plausibility_floor_us``; 0 or
False in reports from before they were measured, which the certificate states as null). The
report's ``checks_run`` names the checks the full verification ran beyond
:data:`PIPELINE_CHECKS` (issue 6's ``scale_invariance``, ``nonfinite_containment``,
``metamorphic_*``: ``evaluator.pipeline.NUMERIC_CHECKS``) and ``input_scales`` the factors s of
the scaled inputs A = s·A0, B = s·B0 that were checked.
"""

from __future__ import annotations

import math
from typing import Any

from evaluator.champion import SANITIZER_TOOLS, ChampionReport
from evaluator.inputs import CONTAINMENT_SHAPE, SCALE_EXPONENTS, SWEEP_SHAPE, describe_kinds
from evaluator.op_suites import OpSuite, suite_for
from evaluator.report import EvaluationReport, ShapeTiming
from kernevo.certificate import CERTIFICATE_V3, Certificate, ShapeTimingSummary
from kernevo.client import describe_envelope
from seeds.ops import get_op
from seeds.spec import PathSpec

# The checks the pipeline runs on every candidate whose report reaches status "ok" at the timing
# stage (docs/EVALUATOR.md, "Pipeline" and "Checks and thresholds"), by the names their failures
# carry: a passing report ran each of them.
PIPELINE_CHECKS = (
    "screen", "compile", "device_global_state", "launch_geometry", "non_finite_output",
    "out_of_bounds_write", "input_modified", "scaled_residual", "forward_error",
    "replayed_result", "timed_output", "recheck_after_timing",
)  # fmt: skip


def _positive(value: float) -> float | None:
    """``value`` when positive and finite, else ``None`` (0: not measured; +inf: an unbounded
    interval end or a degenerate floor of ``evaluator.noise``, which JSON cannot carry)."""
    return value if 0 < value < math.inf else None


def _noise_measured(t: ShapeTiming) -> bool:
    """Whether the evaluation timed the candidate twice at this shape (the noise floor is only
    as real as that second timing)."""
    return t.candidate_again_us > 0


def checks_passed(report: ChampionReport) -> list[str]:
    """The names of the checks ``report`` (status ok) shows ran and passed, in pipeline order:
    :data:`PIPELINE_CHECKS`; the report's ``checks_run`` (issue 6's numerical checks:
    ``scale_invariance``, ``nonfinite_containment``, ``metamorphic_*``); ``noise_floor`` when
    every timed shape was timed twice with a noise floor; ``plausibility`` when every timed
    shape has a plausibility floor (a report that passed was above it); ``memcheck_before_best``
    when the job's memcheck ran (``phase_seconds["memcheck"]``); then the champion checks."""
    names = [*PIPELINE_CHECKS, *report.checks_run]
    timings = report.timings
    if timings and all(_noise_measured(t) for t in timings):
        names.append("noise_floor")
    if timings and all(t.plausibility_floor_us > 0 for t in timings):
        names.append("plausibility")
    if "memcheck" in report.phase_seconds:
        names.append("memcheck_before_best")
    names += report.champion_checks
    return list(dict.fromkeys(names))


def timing_summary(t: ShapeTiming) -> ShapeTimingSummary:
    """One timed shape of the report for the certificate (``None`` where not measured)."""
    return ShapeTimingSummary(m=t.m, n=t.n, **_measured(t))


def _measured(t: ShapeTiming) -> dict[str, Any]:
    """What the certificate states of one timed shape but the shape itself."""
    floor = t.noise_floor if _noise_measured(t) and math.isfinite(t.noise_floor) else None
    low, high = _positive(t.speedup_low), _positive(t.speedup_high)
    # A percentile-bootstrap interval need not hold the point estimate (the ratio of the two
    # medians); the certificate widens it to do so, which only makes "faster" harder.
    low = min(low, t.speedup) if low is not None else None
    high = max(high, t.speedup) if high is not None else None
    faster = None if floor is None or low is None else low > 1 + floor
    return dict(
        median_us=t.candidate_us,
        iqr_us=t.candidate_spread_us,
        baseline_median_us=t.baseline_us,
        baseline_iqr_us=t.baseline_spread_us,
        speedup=t.speedup,
        speedup_low=low,
        speedup_high=high,
        noise_floor=floor,
        faster_than_baseline=faster,
        plausibility_floor_us=_positive(t.plausibility_floor_us),
    )


def _power_of_two(scale: float) -> str:
    """``2^900 (8.45e+270)`` for an exact power of two (the scalings are), else ``%g``."""
    mantissa, exponent = math.frexp(scale)
    return f"2^{exponent - 1} ({scale:.3g})" if mantissa == 0.5 else f"{scale:g}"


def _scales_in_words(scales: list[float], dtype: str) -> str:
    """``scales`` ascending, a run of three or more consecutive powers of two as one range
    (``2^60 to 2^64 (every power of two between: 1.15e+18 to 1.84e+19)``), and where they were
    checked when the list holds more than the per-shape extremes
    (``evaluator.inputs.SCALE_EXPONENTS``, at every shape; the rest at ``SWEEP_SHAPE``)."""
    words: list[str] = []
    run: list[tuple[int, float]] = []  # consecutive exact powers of two: (exponent, scale)

    def close_run() -> None:
        if len(run) >= 3:
            (low, s_low), (high, s_high) = run[0], run[-1]
            words.append(
                f"2^{low} to 2^{high} (every power of two between: {s_low:.3g} to {s_high:.3g})"
            )
        else:
            words.extend(_power_of_two(scale) for _, scale in run)
        run.clear()

    for scale in sorted(scales):
        mantissa, exponent = math.frexp(scale)
        if run and (mantissa != 0.5 or exponent - 1 != run[-1][0] + 1):
            close_run()
        if mantissa == 0.5:
            run.append((exponent - 1, scale))
        else:
            words.append(f"{scale:g}")
    close_run()
    text = ", ".join(words)
    extremes = sorted(SCALE_EXPONENTS.get(dtype, ()))
    if {2.0**e for e in extremes} < set(scales):
        m, n = SWEEP_SHAPE
        text += (
            f" (2^{extremes[0]} and 2^{extremes[-1]} at every verified shape, the others at "
            f"m={m} n={n})"
        )
    return text


def not_verified(report: ChampionReport, spec: PathSpec, checks: list[str]) -> list[str]:
    """Plain statements of what the verification in ``report`` did not cover."""
    assert report.gpu is not None
    gpu = report.gpu
    envelope = describe_envelope(spec.envelope)
    scales = [float(s) for s in report.input_scales]
    if "scale_invariance" in checks and scales:
        scaled = "magnitudes other than those distributions scaled by " + _scales_in_words(
            scales, report.dtype
        )
    else:
        scaled = "the same distributions scaled to other magnitudes (no scaled inputs checked)"
    if "nonfinite_containment" in checks:
        m, n = CONTAINMENT_SHAPE
        nonfinite = (
            f"NaN or Inf inputs beyond the containment check at m={m} n={n} (rows that do not "
            "depend on a non-finite entry must come out as without it)"
        )
        if not spec.serves(m, n):
            # trsm_blocked: 64×8 is its direct solve; its blocked GEMMs multiply the zeros of an
            # inverted diagonal block into a non-finite entry, so the check says nothing there.
            nonfinite += (
                f"; that shape is outside the envelope {envelope}, so no shape the path serves"
            )
    else:
        nonfinite = "NaN or Inf inputs (no containment check ran)"
    kinds = describe_kinds(spec.verify_kinds, report.dtype)
    statements = [
        f"shapes other than the {len(report.verified_shapes)} verified ones; none outside "
        f"the envelope {envelope} (the loader dispatches only inside it)",
        f"dtypes other than {report.dtype}",
        f"GPUs other than {gpu.name} ({gpu.key}) and architectures other than {gpu.arch}",
        f"inputs outside the drawn distributions ({kinds}); {scaled}",
        nonfinite,
        "NVIDIA drivers, CUDA driver API and NVRTC versions other than those recorded here "
        "(the loader states a difference, or routes to cuBLAS with "
        "KERNEVO_REQUIRE_SAME_TOOLKIT)",
        "races, synchronization and uninitialized reads at shapes other than "
        f"m={spec.sanitizer_shape[0]} n={spec.sanitizer_shape[1]} (racecheck, synccheck, "
        "initcheck); out-of-bounds accesses at shapes memcheck did not run",
    ]
    if "noise_floor" not in checks:
        statements.append("a speedup beyond timing noise (no noise floor measured)")
    return statements


def build_certificate(report: EvaluationReport, spec: PathSpec) -> Certificate:
    """The certificate of a fully verified champion report (``verify_champion``'s, status ok):
    v2 for trsm, v3 (:func:`build_certificate_v3`) for an op whose suite does not say v2.

    Raises:
        ValueError: the report did not pass, has no GPU identity, or is not a champion
            verification's (a plain evaluation ran no champion checks to certify); for v3,
            pydantic's ``ValidationError`` when the suite's checks lack the required ones.
    """
    if not isinstance(report, ChampionReport):
        raise ValueError("a certificate needs verify_champion's report (a ChampionReport)")
    if not report.passed or report.gpu is None:
        raise ValueError(f"no certificate for a report that is {report.status} or has no GPU")
    suite = suite_for(spec.op)
    if getattr(suite, "certificate_format", CERTIFICATE_V3) == CERTIFICATE_V3:
        return build_certificate_v3(report, spec, suite)
    gpu = report.gpu
    checks = checks_passed(report)
    timings = [timing_summary(t) for t in report.timings]
    floors = [t.noise_floor for t in timings if t.noise_floor is not None]
    scales = report.input_scales if "scale_invariance" in checks else ()
    return Certificate(
        checks_passed=checks,
        input_seeds=list(report.input_seeds),
        held_out_seeds=list(report.held_out_seeds),
        verified_shapes=list(report.verified_shapes),
        held_out_shapes=list(spec.held_out_shapes),
        determinism_shapes=[spec.timed_shapes[-1], spec.sanitizer_shape],
        sanitizer_tools=[tool for tool in SANITIZER_TOOLS if tool in report.sanitizer_shapes],
        sanitizer_version=report.sanitizer_version or None,
        sanitizer_shapes=report.sanitizer_shapes,
        gpu_name=gpu.name,
        gpu_key=gpu.key,
        arch=gpu.arch,
        nvidia_driver_version=report.nvidia_driver_version or None,
        cuda_driver_api_version=gpu.driver_version or None,
        cuda_runtime_version=gpu.runtime_version or None,
        nvrtc_version=report.compile.nvrtc_version if report.compile else None,
        timings=timings,
        # The certificate's floor is the worst shape's, and only when every shape has one.
        noise_floor=max(floors) if timings and len(floors) == len(timings) else None,
        input_scales=[float(s) for s in scales],
        not_verified=not_verified(report, spec, checks),
    )


def checks_passed_v3(report: ChampionReport, suite: OpSuite) -> list[str]:
    """:func:`checks_passed` for an op other than trsm: the pipeline's ``screen compile
    device_global_state``, the suite's ``problem_checks``, ``recheck_after_timing``, then as
    for trsm (the report's ``checks_run``, ``noise_floor``, ``plausibility``,
    ``memcheck_before_best``, the champion checks)."""
    pipeline = ("screen", "compile", "device_global_state", *suite.problem_checks)
    names = [*pipeline, "recheck_after_timing", *report.checks_run]
    timings = report.timings
    if timings and all(_noise_measured(t) for t in timings):
        names.append("noise_floor")
    if timings and all(t.plausibility_floor_us > 0 for t in timings):
        names.append("plausibility")
    if "memcheck" in report.phase_seconds:
        names.append("memcheck_before_best")
    names += report.champion_checks
    return list(dict.fromkeys(names))


def build_certificate_v3(report: ChampionReport, spec: PathSpec, suite: OpSuite) -> Certificate:
    """A v3 certificate (``kernevo.certificate.CERTIFICATE_V3``) of a champion of an op other
    than trsm: its op and shape parameters, shapes in the op's parameter order, timings by
    shape, the checks of :func:`checks_passed_v3`, and what was not verified — the pipeline's
    statements in the op's words, then the suite's (``not_verified(report, spec)``, when it
    has one).

    Raises:
        pydantic.ValidationError: the checks lack those every v3 certificate needs, or a shape
            is not of the op's arity (the suite's bug: no champion without a true certificate).
    """
    assert report.gpu is not None
    gpu, op = report.gpu, get_op(spec.op)
    checks = checks_passed_v3(report, suite)
    timings = [ShapeTimingSummary(shape=list(t.problem), **_measured(t)) for t in report.timings]
    floors = [t.noise_floor for t in timings if t.noise_floor is not None]
    scales = report.input_scales if "scale_invariance" in checks else ()
    envelope = describe_envelope(spec.envelope, spec.params)
    statements = [
        f"shapes other than the {len(report.verified_shapes)} verified ones; none outside "
        f"the envelope {envelope} (the loader dispatches only inside it)",
        f"dtypes other than {report.dtype}",
        f"GPUs other than {gpu.name} ({gpu.key}) and architectures other than {gpu.arch}",
        "NVIDIA drivers, CUDA driver API and NVRTC versions other than those recorded here "
        "(the loader states a difference, or routes to its fallback with "
        "KERNEVO_REQUIRE_SAME_TOOLKIT)",
        "races, synchronization and uninitialized reads at shapes other than "
        f"{op.assignments(spec.sanitizer_shape)} (racecheck, synccheck, initcheck); "
        "out-of-bounds accesses at shapes memcheck did not run",
    ]
    if "noise_floor" not in checks:
        statements.append("a speedup beyond timing noise (no noise floor measured)")
    own = getattr(suite, "not_verified", None)
    statements += list(own(report, spec)) if callable(own) else []
    # Validated field by field so that a v3 timing carries its shape and not m, n.
    document = {
        "format": CERTIFICATE_V3, "op": spec.op, "shape_params": list(spec.params),
        "checks_passed": checks, "input_seeds": list(report.input_seeds),
        "held_out_seeds": list(report.held_out_seeds),
        "verified_shapes": [list(s) for s in report.verified_shapes],
        "held_out_shapes": [list(s) for s in spec.held_out_shapes],
        "determinism_shapes": [list(spec.timed_shapes[-1]), list(spec.sanitizer_shape)],
        "sanitizer_tools": [tool for tool in SANITIZER_TOOLS if tool in report.sanitizer_shapes],
        "sanitizer_version": report.sanitizer_version or None,
        "sanitizer_shapes": {
            tool: [list(s) for s in shapes] for tool, shapes in report.sanitizer_shapes.items()
        },
        "gpu_name": gpu.name, "gpu_key": gpu.key, "arch": gpu.arch,
        "nvidia_driver_version": report.nvidia_driver_version or None,
        "cuda_driver_api_version": gpu.driver_version or None,
        "cuda_runtime_version": gpu.runtime_version or None,
        "nvrtc_version": report.compile.nvrtc_version if report.compile else None,
        "timings": [t.model_dump(exclude={"m", "n"}) for t in timings],
        "noise_floor": max(floors) if timings and len(floors) == len(timings) else None,
        "input_scales": [float(s) for s in scales],
        "not_verified": statements,
    }  # fmt: skip
    return Certificate.model_validate(document)
