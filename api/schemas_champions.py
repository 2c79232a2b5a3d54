"""Bodies of ``GET /v1/champions`` (``api.routes.champions``): each champion with its speedups,
its verification facts and its promotion history, without cubin or source (the best-kernel
query and the manifest serve those).

The service holds no key and verifies nothing (docs/CONTRACTS.md): ``facts`` repeats what the
stored certificate *says*, field by field, each field kept only when it has the JSON type the
certificate schema (``kernevo.certificate.Certificate``) gives it; ``signed`` says a signature is
stored, not that it checks — the loader checks it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from db.models import Champion, ChampionPromotion


class ShapeSpeedup(BaseModel):
    """The champion's timing at one shape when it was evaluated: median µs per call of the
    kernel and of the vendor library, and their ratio ``speedup`` (baseline / kernel)."""

    m: int
    n: int
    speedup: float | None
    candidate_us: float | None
    baseline_us: float | None

    @classmethod
    def of(cls, timing: Mapping[str, Any]) -> ShapeSpeedup:
        """From one entry of a champion's ``metrics["timings"]`` (the evaluator's
        ``ShapeTiming``, whose speedup is not stored: it is ``baseline_us / candidate_us``)."""
        candidate = _number(timing.get("candidate_us"))
        baseline = _number(timing.get("baseline_us"))
        stored = _number(timing.get("speedup"))
        ratio = baseline / candidate if candidate and baseline is not None else None
        return cls(
            m=timing["m"],
            n=timing["n"],
            speedup=stored if stored is not None else ratio,
            candidate_us=candidate,
            baseline_us=baseline,
        )


class CertifiedTiming(BaseModel):
    """One timed shape as the certificate states it: ``speedup`` with its interval
    (``speedup_low``..``speedup_high``, null when not measured) and whether it beat the
    vendor library beyond the noise floor (null: not timed twice)."""

    m: int
    n: int
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    faster_than_baseline: bool | None


class VerificationFacts(BaseModel):
    """What the champion's certificate says verification ran and did not cover (docs/
    CONTRACTS.md, Certificate): the checks passed, the shapes verified, held out and repeated,
    the compute-sanitizer tools that ran clean, the GPU and the driver and toolkit versions, the
    relative noise floor (0.03 = 3 %), the input scales checked, the seeds drawn (counted), the
    certified timings, and the plain statements of what was not verified. A field the stored
    document lacks or holds with another type is null (or empty)."""

    format: str | None
    checks_passed: list[str]
    verified_shapes: list[list[int]]
    held_out_shapes: list[list[int]]
    determinism_shapes: list[list[int]]
    sanitizer_tools: list[str]
    sanitizer_version: str | None
    gpu_name: str | None
    gpu_key: str | None
    arch: str | None
    nvidia_driver_version: str | None
    cuda_driver_api_version: str | None
    cuda_runtime_version: str | None
    nvrtc_version: str | None
    noise_floor: float | None
    input_scales: list[float]
    input_seeds: int
    held_out_seeds: int
    timings: list[CertifiedTiming]
    not_verified: list[str]

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> VerificationFacts:
        """The facts of a stored certificate document (never raises on a malformed one)."""
        timings = [
            CertifiedTiming(
                m=t["m"],
                n=t["n"],
                speedup=_number(t.get("speedup")),
                speedup_low=_number(t.get("speedup_low")),
                speedup_high=_number(t.get("speedup_high")),
                faster_than_baseline=_bool(t.get("faster_than_baseline")),
            )
            for t in _list(document.get("timings"))
            if isinstance(t, dict) and _is_int(t.get("m")) and _is_int(t.get("n"))
        ]
        return cls(
            format=_text(document.get("format")),
            checks_passed=_texts(document.get("checks_passed")),
            verified_shapes=_shapes(document.get("verified_shapes")),
            held_out_shapes=_shapes(document.get("held_out_shapes")),
            determinism_shapes=_shapes(document.get("determinism_shapes")),
            sanitizer_tools=_texts(document.get("sanitizer_tools")),
            sanitizer_version=_text(document.get("sanitizer_version")),
            gpu_name=_text(document.get("gpu_name")),
            gpu_key=_text(document.get("gpu_key")),
            arch=_text(document.get("arch")),
            nvidia_driver_version=_text(document.get("nvidia_driver_version")),
            cuda_driver_api_version=_text(document.get("cuda_driver_api_version")),
            cuda_runtime_version=_text(document.get("cuda_runtime_version")),
            nvrtc_version=_text(document.get("nvrtc_version")),
            noise_floor=_number(document.get("noise_floor")),
            input_scales=[
                x
                for x in (_number(v) for v in _list(document.get("input_scales")))
                if x is not None
            ],
            input_seeds=len(_list(document.get("input_seeds"))),
            held_out_seeds=len(_list(document.get("held_out_seeds"))),
            timings=timings,
            not_verified=_texts(document.get("not_verified")),
        )


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _texts(value: object) -> list[str]:
    return [v for v in _list(value) if isinstance(v, str)]


def _shapes(value: object) -> list[list[int]]:
    return [
        list(shape)
        for shape in _list(value)
        if isinstance(shape, list) and len(shape) == 2 and all(_is_int(d) for d in shape)
    ]


class PromotionOut(BaseModel):
    """One promotion of the key, from ``champion_promotion``: the program (and its job) that
    became champion, the evaluation that verified it, its score, cubin digest and signing key,
    and when."""

    program_id: int
    job_id: int | None
    evaluation_id: int
    score: float
    cubin_sha256: str
    signing_key_id: str | None
    promoted_at: datetime

    @classmethod
    def from_row(cls, row: ChampionPromotion, job_id: int | None) -> PromotionOut:
        """Build from the history row and its program's job id."""
        return cls(
            program_id=row.program_id,
            job_id=job_id,
            evaluation_id=row.evaluation_id,
            score=row.score,
            cubin_sha256=row.cubin_sha256,
            signing_key_id=row.signing_key_id,
            promoted_at=row.promoted_at,
        )


class ChampionSummary(BaseModel):
    """One champion (the key: ``gpu``, ``op``, ``path``, ``dtype``, ``shape_bucket``) without its
    bytes.

    ``score``: the combined score it was promoted with (geometric-mean speedup over the vendor
    library at its timed shapes); ``speedups``: its timed shapes from that evaluation;
    ``signed``: a signature is stored (the service does not check it; the loader does);
    ``facts``: what its certificate says (``null``: promoted before certificates);
    ``promotions``: every promotion of the key, newest first (the current champion's first)."""

    gpu: str
    op: str | None
    path: str
    dtype: str
    shape_bucket: str
    program_id: int
    program_uid: str
    job_id: int
    evaluation_id: int
    score: float | None
    speedups: list[ShapeSpeedup]
    arch: str
    nvrtc_version: str | None
    cubin_sha256: str
    source_sha256: str
    envelope: dict[str, Any]
    promoted_at: datetime
    signed: bool
    signing_key_id: str | None
    facts: VerificationFacts | None
    promotions: list[PromotionOut]

    @classmethod
    def build(
        cls,
        champion: Champion,
        *,
        op: str | None,
        promotions: list[PromotionOut],
    ) -> ChampionSummary:
        """Build from the champion row (its program loaded), its path's op (``None`` for a
        path the registry no longer has) and its history."""
        metrics = champion.metrics if isinstance(champion.metrics, dict) else {}
        score = _number(metrics.get("combined_score"))
        if score is None:
            score = _number(metrics.get("score"))
        speedups = [
            ShapeSpeedup.of(t)
            for t in _list(metrics.get("timings"))
            if isinstance(t, dict) and _is_int(t.get("m")) and _is_int(t.get("n"))
        ]
        certificate = champion.certificate
        return cls(
            gpu=champion.gpu_key,
            op=op,
            path=champion.path,
            dtype=champion.dtype,
            shape_bucket=champion.shape_bucket,
            program_id=champion.program_id,
            program_uid=champion.program.uid,
            job_id=champion.program.job_id,
            evaluation_id=champion.evaluation_id,
            score=score,
            speedups=speedups,
            arch=champion.arch,
            nvrtc_version=champion.nvrtc_version,
            cubin_sha256=champion.cubin_sha256,
            source_sha256=champion.program.source_sha256,
            envelope=champion.envelope if isinstance(champion.envelope, dict) else {},
            promoted_at=champion.promoted_at,
            signed=champion.signature is not None,
            signing_key_id=champion.signing_key_id,
            facts=(
                VerificationFacts.from_document(certificate)
                if isinstance(certificate, dict)
                else None
            ),
            promotions=promotions,
        )
