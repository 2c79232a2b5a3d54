"""The certificate a champion carries: what was verified, on what, and what was not.

Built at promotion (``evaluator.certificate.build_certificate``) from the champion's verified
report, stored with the champion, covered by its signature (``kernevo.signature``: the sha256
of :func:`canonical_json` of the certificate as served), returned by ``GET /v1/kernels/best``
and shown by ``kernevo best`` and the loader's ``explain()``. The loader runs no champion
without one (``kernevo.trust``: ``no_certificate``).

Versions: ``nvidia_driver_version`` is the NVIDIA kernel driver's (``"580.95.05"``, from
``/proc/driver/nvidia/version`` or ``nvidia-smi``); ``cuda_driver_api_version`` is the CUDA
driver API version that driver offers (``cudaDriverGetVersion``, e.g. ``"13.0"``);
``cuda_runtime_version`` CuPy's CUDA runtime; ``nvrtc_version`` the compiler's. ``None`` is
"not recorded".

Format ``kernevo.certificate.v2`` (written now) differs from ``v1`` (promotions before issue 6):
``noise_floor`` (relative, 0.03 = 3 %) replaces v1's ``noise_floor_us`` (always null), and v2
adds ``sanitizer_shapes``, ``input_scales``, per-shape speedup interval, noise floor,
faster-than-baseline verdict and plausibility floor. A v1 document still parses, as a
certificate whose v2-only fields are ``None`` or empty (not recorded); hash the document as
served (:func:`certificate_sha256`), never a parsed certificate re-serialized, since a parsed v1
document re-serializes in the v2 layout.

This module imports only pydantic and the standard library, so the loader can parse a
certificate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

CERTIFICATE_FORMAT = "kernevo.certificate.v2"
CERTIFICATE_V1 = "kernevo.certificate.v1"

# The v2 fields a v1 document lacks, with what they read as (not recorded).
_V2_ONLY: dict[str, Any] = {
    "sanitizer_shapes": {},
    "input_scales": [],
    "noise_floor": None,
}
_V2_TIMING_ONLY = (
    "speedup_low", "speedup_high", "noise_floor", "faster_than_baseline", "plausibility_floor_us"
)  # fmt: skip


class ShapeTimingSummary(BaseModel):
    """Device time per call (µs) at one timed shape: medians and interquartile ranges, the
    speedup (baseline median / candidate median) and, where the evaluation measured them, its
    interval, the relative noise floor (0.03 = two timings of one kernel disagree by 3 %),
    whether the speedup beats that floor, and the plausibility floor (the least time per call
    the GPU allows for this shape). ``None``: not measured (every v1 certificate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    m: int
    n: int
    median_us: float
    iqr_us: float
    baseline_median_us: float
    baseline_iqr_us: float
    speedup: float
    speedup_low: float | None
    speedup_high: float | None
    noise_floor: float | None
    faster_than_baseline: bool | None
    plausibility_floor_us: float | None


class Certificate(BaseModel):
    """What a champion's verification ran and found (see the module doc for versions and
    formats).

    ``checks_passed`` names only checks that ran and passed (built from the report, never a
    fixed list). ``input_seeds`` are the seeds of the evaluation's random inputs in the order
    drawn (quick check, the verification seeds, timing); ``held_out_seeds`` those of the
    held-out shapes, drawn after scoring. ``sanitizer_shapes`` maps each compute-sanitizer tool
    to the shapes it ran on; ``input_scales`` the factors s of the scaled inputs
    (A = s·A0, B = s·B0) the evaluation checked, empty when none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["kernevo.certificate.v1", "kernevo.certificate.v2"] = CERTIFICATE_FORMAT
    checks_passed: list[str]
    input_seeds: list[int]
    held_out_seeds: list[int]
    verified_shapes: list[tuple[int, int]]
    held_out_shapes: list[tuple[int, int]]
    determinism_shapes: list[tuple[int, int]]
    sanitizer_tools: list[str]
    sanitizer_version: str | None
    sanitizer_shapes: dict[str, list[tuple[int, int]]]
    gpu_name: str
    gpu_key: str
    arch: str
    nvidia_driver_version: str | None
    cuda_driver_api_version: str | None
    cuda_runtime_version: str | None
    nvrtc_version: str | None
    timings: list[ShapeTimingSummary]
    noise_floor: float | None
    input_scales: list[float]
    not_verified: list[str]

    @model_validator(mode="before")
    @classmethod
    def _read_v1(cls, data: Any) -> Any:
        """A v1 document as a certificate: its always-null ``noise_floor_us`` dropped, the v2
        fields it lacks set to "not recorded". A v2 document must carry every field."""
        if not isinstance(data, Mapping) or data.get("format") != CERTIFICATE_V1:
            return data
        if data.get("noise_floor_us") is not None:
            raise ValueError("a v1 certificate's noise_floor_us is always null")
        upgraded = {k: v for k, v in data.items() if k != "noise_floor_us"}
        for name, value in _V2_ONLY.items():
            upgraded.setdefault(name, value)
        for name in ("sanitizer_version", "nvidia_driver_version"):
            upgraded.setdefault(name, None)
        timings = upgraded.get("timings")
        if isinstance(timings, list):
            upgraded["timings"] = [
                {**{name: None for name in _V2_TIMING_ONLY}, **t} if isinstance(t, Mapping) else t
                for t in timings
            ]
        return upgraded

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document stored with the champion and served (tuples become lists)."""
        return self.model_dump(mode="json")

    def summary(self) -> list[str]:
        """A few lines for a terminal: checks, versions, seeds, timings, what was not verified."""
        versions = (
            f"driver {self.nvidia_driver_version or 'not recorded'}, CUDA driver API "
            f"{self.cuda_driver_api_version or '?'}, runtime {self.cuda_runtime_version or '?'}, "
            f"NVRTC {self.nvrtc_version or '?'}"
        )
        noise = "not measured" if self.noise_floor is None else f"{self.noise_floor:.1%}"
        sanitizer = ", ".join(self.sanitizer_tools) or "none"
        if self.sanitizer_version:
            sanitizer += f" (compute-sanitizer {self.sanitizer_version})"
        version = " (v1)" if self.format == CERTIFICATE_V1 else ""
        return [
            f"certificate{version}: passed {', '.join(self.checks_passed)}",
            f"  on {self.gpu_name} ({self.arch}); {versions}",
            f"  {len(self.verified_shapes)} verified shapes "
            f"({len(self.held_out_shapes)} held out), input seeds {self.input_seeds}, "
            f"held-out seeds {self.held_out_seeds}",
            f"  sanitizer: {sanitizer}; noise floor {noise}",
            *(_timing_line(t) for t in self.timings),
            *(f"  not verified: {line}" for line in self.not_verified),
        ]


def _timing_line(t: ShapeTimingSummary) -> str:
    line = (
        f"  m={t.m} n={t.n}: median {t.median_us:.2f} us (IQR {t.iqr_us:.2f}), baseline "
        f"{t.baseline_median_us:.2f} us (IQR {t.baseline_iqr_us:.2f}), {t.speedup:.2f}x"
    )
    if t.speedup_low is not None and t.speedup_high is not None:
        line += f" [{t.speedup_low:.2f}, {t.speedup_high:.2f}]"
    if t.faster_than_baseline is not None:
        line += ", beats the noise floor" if t.faster_than_baseline else ", within the noise"
    return line


def canonical_json(document: Mapping[str, Any]) -> bytes:
    """``document`` as canonical JSON: sorted keys, no spaces, UTF-8."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def certificate_sha256(document: Mapping[str, Any] | None) -> str | None:
    """The sha256 (hex) of :func:`canonical_json` of a certificate as served; ``None`` for none.

    Raises:
        TypeError, ValueError: ``document`` holds a value that is not JSON.
    """
    if document is None:
        return None
    return hashlib.sha256(canonical_json(document)).hexdigest()


@dataclass(frozen=True)
class ToolkitComparison:
    """The certificate's driver and toolkit against the loading device's.

    ``differences``: versions known on both sides that differ, each a clause
    (``"NVIDIA driver 575.57.08 here, verified under 580.95.05"``). ``unknown``: versions one
    side does not know (``"NVIDIA driver: not recorded at verification"``, ``"NVRTC: unknown
    here"``), which cannot show the toolkit is the same.
    """

    differences: tuple[str, ...]
    unknown: tuple[str, ...]

    def served_reason(self) -> str:
        """The clause ``explain()`` adds to a kernel served anyway; ``""`` when nothing differs."""
        if not self.differences:
            return ""
        return "served not re-verified on this toolkit: " + ", ".join(self.differences)

    def refused_reason(self) -> str:
        """Why a loader requiring the same toolkit does not serve it; ``""`` when it may."""
        if not self.differences and not self.unknown:
            return ""
        return "not re-verified on this toolkit: " + ", ".join(self.differences + self.unknown)


def compare_toolkit(
    certificate: Certificate,
    *,
    nvidia_driver_version: str,
    cuda_driver_api_version: str,
    nvrtc_version: str,
) -> ToolkitComparison:
    """Compare the certificate's NVIDIA driver, CUDA driver API and NVRTC versions with this
    device's (``""``: unknown here)."""
    differences: list[str] = []
    unknown: list[str] = []
    for what, here, verified in (
        ("NVIDIA driver", nvidia_driver_version, certificate.nvidia_driver_version),
        ("CUDA driver API", cuda_driver_api_version, certificate.cuda_driver_api_version),
        ("NVRTC", nvrtc_version, certificate.nvrtc_version),
    ):
        if not verified:
            unknown.append(f"{what}: not recorded at verification")
        elif not here:
            unknown.append(f"{what}: unknown here")
        elif here != verified:
            differences.append(f"{what} {here} here, verified under {verified}")
    return ToolkitComparison(tuple(differences), tuple(unknown))


def environment_differences(
    document: Mapping[str, Any] | None,
    *,
    nvidia_driver_version: str = "",
    cuda_driver_api_version: str,
    nvrtc_version: str,
) -> str:
    """What differs between the certificate's NVIDIA driver, CUDA driver API and NVRTC versions
    and this device's (versions unknown on either side are not compared), as one clause; ``""``
    when nothing does. A certificate that does not parse is said to be unreadable.
    """
    if document is None:
        return ""
    try:
        certificate = Certificate.model_validate(document)
    except ValueError:
        return "certificate unreadable: verification environment unknown"
    return compare_toolkit(
        certificate,
        nvidia_driver_version=nvidia_driver_version,
        cuda_driver_api_version=cuda_driver_api_version,
        nvrtc_version=nvrtc_version,
    ).served_reason()
