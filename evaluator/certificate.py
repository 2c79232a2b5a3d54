"""Build a champion's certificate (``kernevo.certificate.Certificate``) from its verified report.

What ran is read from the report (stages passed, seeds, shapes, GPU, versions, timings) and from
``evaluator.champion`` (held-out shapes, determinism shapes, sanitizer tools); ``not_verified``
states plainly what no check covered.
"""

from __future__ import annotations

from evaluator.champion import SANITIZER_SHAPE, SANITIZER_TOOLS
from evaluator.report import EvaluationReport
from kernevo.certificate import Certificate, ShapeTimingSummary
from seeds.spec import PathSpec

STAGES = ("screen", "compile", "contract", "quick", "verify", "time")
CHAMPION_CHECKS = ("held_out_shapes", "determinism")


def build_certificate(report: EvaluationReport, spec: PathSpec) -> Certificate:
    """The certificate of a fully verified champion report (``verify_champion``'s, status ok).

    Raises:
        ValueError: the report did not pass, or has no GPU identity.
    """
    if not report.passed or report.gpu is None:
        raise ValueError(f"no certificate for a report that is {report.status} or has no GPU")
    gpu = report.gpu
    envelope = f"m <= {spec.envelope['m_max']}, n <= {spec.envelope['n_max']}"
    return Certificate(
        checks_passed=[
            *STAGES,
            *CHAMPION_CHECKS,
            *(f"sanitizer_{tool}" for tool in SANITIZER_TOOLS),
        ],
        input_seeds=list(report.input_seeds),
        held_out_seeds=list(report.held_out_seeds),
        verified_shapes=list(report.verified_shapes),
        held_out_shapes=list(spec.held_out_shapes),
        determinism_shapes=[spec.timed_shapes[-1], SANITIZER_SHAPE],
        sanitizer_tools=list(SANITIZER_TOOLS),
        gpu_name=gpu.name,
        gpu_key=gpu.key,
        arch=gpu.arch,
        cuda_driver_api_version=gpu.driver_version or None,
        cuda_runtime_version=gpu.runtime_version or None,
        nvrtc_version=report.compile.nvrtc_version if report.compile else None,
        timings=[
            ShapeTimingSummary(
                m=t.m,
                n=t.n,
                median_us=t.candidate_us,
                iqr_us=t.candidate_spread_us,
                baseline_median_us=t.baseline_us,
                baseline_iqr_us=t.baseline_spread_us,
                speedup=t.speedup,
            )
            for t in report.timings
        ],
        not_verified=[
            f"shapes other than the {len(report.verified_shapes)} verified ones; none outside "
            f"the envelope {envelope} (the loader dispatches only inside it)",
            f"dtypes other than {report.dtype}",
            f"GPUs other than {gpu.name} ({gpu.key}) and architectures other than {gpu.arch}",
            "inputs outside the drawn distributions (bounded: diagonal magnitudes in [1, 2], "
            "off-diagonals in [-1, 1]/sqrt(m); growth: diagonal in [0.5, 1]); NaN or Inf inputs",
            "NVIDIA drivers, CUDA driver API and NVRTC versions other than those recorded here",
        ],
    )
