"""The certificate a champion carries: what was verified, on what, and what was not.

Built at promotion (``evaluator.certificate.build_certificate``) from the champion's verified
report, stored with the champion, covered by its signature (``kernevo.signature``: the sha256
of :func:`canonical_json` of the certificate as served), returned by ``GET /v1/kernels/best``
and shown by ``kernevo best`` and the loader's ``explain()``.

Versions: ``cuda_driver_api_version`` is the CUDA driver API version the GPU worker reads
(``cudaDriverGetVersion``, e.g. ``"12.8"``), not the NVIDIA kernel driver's version
(``"580.95.05"``); ``nvidia_driver_version`` is that one and is ``None`` while the worker does not
record it. ``noise_floor_us`` is ``None`` while no evaluation measures one.

This module imports only pydantic, so the loader can parse a certificate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

CERTIFICATE_FORMAT = "kernevo.certificate.v1"


class ShapeTimingSummary(BaseModel):
    """Device time per call (µs) at one timed shape: medians and interquartile ranges."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    m: int
    n: int
    median_us: float
    iqr_us: float
    baseline_median_us: float
    baseline_iqr_us: float
    speedup: float


class Certificate(BaseModel):
    """What a champion's verification ran and found (see the module doc for the versions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["kernevo.certificate.v1"] = CERTIFICATE_FORMAT
    checks_passed: list[str]
    input_seeds: list[int]
    held_out_seeds: list[int]
    verified_shapes: list[tuple[int, int]]
    held_out_shapes: list[tuple[int, int]]
    determinism_shapes: list[tuple[int, int]]
    sanitizer_tools: list[str]
    sanitizer_version: str | None = None
    gpu_name: str
    gpu_key: str
    arch: str
    nvidia_driver_version: str | None = None
    cuda_driver_api_version: str | None = None
    cuda_runtime_version: str | None = None
    nvrtc_version: str | None = None
    timings: list[ShapeTimingSummary]
    noise_floor_us: float | None = None
    not_verified: list[str]

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document stored with the champion and served (tuples become lists)."""
        return self.model_dump(mode="json")

    def summary(self) -> list[str]:
        """A few lines for a terminal: checks, shapes, seeds, versions, what was not verified."""
        versions = (
            f"driver {self.nvidia_driver_version or 'not recorded'}, CUDA driver API "
            f"{self.cuda_driver_api_version or '?'}, runtime {self.cuda_runtime_version or '?'}, "
            f"NVRTC {self.nvrtc_version or '?'}"
        )
        noise = "not measured" if self.noise_floor_us is None else f"{self.noise_floor_us:.3g} us"
        return [
            f"certificate: passed {', '.join(self.checks_passed)}",
            f"  on {self.gpu_name} ({self.arch}); {versions}",
            f"  {len(self.verified_shapes)} verified shapes "
            f"({len(self.held_out_shapes)} held out), input seeds {self.input_seeds}, "
            f"held-out seeds {self.held_out_seeds}",
            f"  sanitizer: {', '.join(self.sanitizer_tools) or 'none'}; noise floor {noise}",
            *(
                f"  m={t.m} n={t.n}: median {t.median_us:.2f} us (IQR {t.iqr_us:.2f}), baseline "
                f"{t.baseline_median_us:.2f} us (IQR {t.baseline_iqr_us:.2f}), {t.speedup:.2f}x"
                for t in self.timings
            ),
            *(f"  not verified: {line}" for line in self.not_verified),
        ]


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


def environment_differences(
    document: Mapping[str, Any] | None, *, cuda_driver_api_version: str, nvrtc_version: str
) -> str:
    """What differs between the certificate's CUDA driver API and NVRTC versions and this
    device's (empty versions are unknown and not compared), as one clause; ``""`` when nothing
    does. A certificate that does not parse is said to be unreadable.
    """
    if document is None:
        return ""
    try:
        certificate = Certificate.model_validate(document)
    except ValueError:
        return "certificate unreadable: verification environment unknown"
    differences = [
        f"{what} {theirs} here, verified under {ours}"
        for what, theirs, ours in (
            ("CUDA driver API", cuda_driver_api_version, certificate.cuda_driver_api_version),
            ("NVRTC", nvrtc_version, certificate.nvrtc_version),
        )
        if theirs and ours and theirs != ours
    ]
    if not differences:
        return ""
    return "served not re-verified on this toolkit: " + ", ".join(differences)
