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

Format ``kernevo.certificate.v3`` is the certificate of a champion of an op other than trsm
(issue 8): it names its ``op`` and the op's ``shape_params``, its shapes hold one value per
parameter, its timings name their ``shape`` (no ``m``, ``n``), and the checks it must claim are
the pipeline's own for every op (``REQUIRED_CHECKS[v3]``: screen, compile, the cubin's contract,
the memory checks, the re-check after timing, held-out shapes, determinism), its op's suite
adding its own. v1 and v2 are trsm's (they predate other ops): ``op`` reads ``"trsm"``, shapes
are ``(m, n)`` pairs, and trsm's champions keep getting v2, byte for byte as before.

Format ``kernevo.certificate.v2`` (trsm's, written now) differs from ``v1`` (promotions before
issue 6):
``noise_floor`` (relative, 0.03 = 3 %) replaces v1's ``noise_floor_us`` (always null), and v2
adds ``sanitizer_shapes``, ``input_scales``, per-shape speedup interval, noise floor,
faster-than-baseline verdict and plausibility floor. A v1 document still parses, as a
certificate whose v2-only fields are ``None`` or empty (not recorded), but only as v1 was
written: a v1 document carrying a v2 field is refused. Hash the document as served
(:func:`certificate_sha256`), never a parsed certificate re-serialized, since a parsed v1
document re-serializes in the v2 layout.

A signed certificate is a statement, so the schema refuses one that says nothing or
contradicts itself (red-team finding 6): integers are integers (no ``"64"``, ``true`` or
``64.0``), numbers finite (JSON has no NaN; the API's response encoder raises on one), times and
ratios non-negative, each timing's ``speedup`` the ratio of its medians and inside its interval,
a "faster" verdict backed by that interval and floor, a median not below its plausibility
floor, the certificate's noise floor the worst shape's; shapes within 1..:data:`MAX_DIM`; every
list capped (:data:`MAX_SEEDS` …: a few times what a verification draws, so parsing the largest
allowed certificate stays in milliseconds); ``checks_passed`` must name the checks every
passing verification of its format runs (:data:`REQUIRED_CHECKS`), and each sanitizer tool and
input scale it lists must come with the check that ran it; a blank version reads as not
recorded.

This module imports only pydantic and the standard library, so the loader can parse a
certificate.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

CERTIFICATE_FORMAT = "kernevo.certificate.v2"
CERTIFICATE_V1 = "kernevo.certificate.v1"
CERTIFICATE_V3 = "kernevo.certificate.v3"

# The checks every verification that passed ran, by format: v2's are the pipeline's checks for
# a report that is ok (evaluator.certificate.PIPELINE_CHECKS, docs/CONTRACTS.md) and the two
# champion checks verify_champion always runs before the sanitizers; v1 named stages instead.
REQUIRED_CHECKS: dict[str, tuple[str, ...]] = {
    CERTIFICATE_FORMAT: (
        "screen", "compile", "device_global_state", "launch_geometry", "non_finite_output",
        "out_of_bounds_write", "input_modified", "scaled_residual", "forward_error",
        "replayed_result", "timed_output", "recheck_after_timing", "held_out_shapes",
        "determinism",
    ),
    CERTIFICATE_V1: (
        "screen", "compile", "contract", "quick", "verify", "time", "held_out_shapes",
        "determinism",
    ),
    # Any op's: the pipeline's stages and the memory checks every op's suite must run
    # (docs/CONTRACTS.md, "Adding an op"); the suite's own checks come on top.
    CERTIFICATE_V3: (
        "screen", "compile", "device_global_state", "out_of_bounds_write", "input_modified",
        "recheck_after_timing", "held_out_shapes", "determinism",
    ),
}  # fmt: skip
SANITIZER_TOOL_NAMES = ("memcheck", "racecheck", "synccheck", "initcheck")

# Bounds, each a few times what a verification produces, so that a signed document cannot make
# the loader spend seconds parsing it (2,000,000 seeds took 2.1 s before the caps):
MAX_DIM = 65536  # a TRSM dimension; trsm_small's envelope is 64, cuBLAS's int32 API far above
MAX_SEEDS = 256  # a verification draws about ten seeds (evaluator.pipeline, evaluator.champion)
MAX_SHAPES = 1024  # a verification runs tens; the largest certificate stays ~0.4 MB, inside
# the loader's 1 MiB metadata cap (kernevo.client.MAX_METADATA_BYTES) beside the source
MAX_TIMINGS = 256  # one per timed shape (trsm_small times 3)
MAX_CHECKS = 128  # about 25 check names exist
MAX_SCALES = 256  # up to 39 powers of two (complex128's swept bands, evaluator.inputs)
MAX_STATEMENTS = 64  # not_verified has about ten statements
MAX_STATEMENT_CHARS = 2000  # the longest statement is about 300 characters
MAX_SHAPE_VALUES = 8  # an op's shape parameters (solve_tri has 4)

Dim = Annotated[StrictInt, Field(ge=1, le=MAX_DIM)]
# A shape's value: 0 is an op's parameter value where the op allows it (band_bidiag's
# bandwidth 0, a diagonal); trsm's shapes are m, n >= 1 (v1 and v2: checked by format).
ShapeValue = Annotated[StrictInt, Field(ge=0, le=MAX_DIM)]
# v1 and v2 hold (m, n) pairs only (checked by format); v3 one value per shape parameter.
Shape = Annotated[tuple[ShapeValue, ...], Field(min_length=1, max_length=MAX_SHAPE_VALUES)]
Shapes = Annotated[list[Shape], Field(max_length=MAX_SHAPES)]
OpName = Annotated[StrictStr, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
ParamName = Annotated[StrictStr, Field(pattern=r"^[a-z][a-z0-9]{0,15}$")]
Seeds = Annotated[list[Annotated[StrictInt, Field(ge=0, lt=2**63)]], Field(max_length=MAX_SEEDS)]
NonNegative = Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)]
Positive = Annotated[StrictFloat, Field(gt=0, allow_inf_nan=False)]
CheckName = Annotated[StrictStr, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
SanitizerTool = Literal["memcheck", "racecheck", "synccheck", "initcheck"]
# A version as the tools print it ("580.95.05", "13.0", "2025.3.1.0"); blank reads as None.
Version = Annotated[StrictStr, Field(pattern=r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$")] | None
Statement = Annotated[StrictStr, Field(min_length=1, max_length=MAX_STATEMENT_CHARS)]

# The v2 fields a v1 document lacks, with what they read as (not recorded).
_V2_ONLY: dict[str, Any] = {
    "sanitizer_shapes": {},
    "input_scales": [],
    "noise_floor": None,
}
_VERSION_FIELDS = (
    "sanitizer_version", "nvidia_driver_version", "cuda_driver_api_version",
    "cuda_runtime_version", "nvrtc_version",
)  # fmt: skip


def _blank_is_none(value: Any) -> Any:
    """A version string stripped, and ``None`` when nothing is left (" " is not a version)."""
    if isinstance(value, str):
        return value.strip() or None
    return value


class _TimingBase(BaseModel):
    """The timing fields every format has, and how they must agree. ``m``, ``n``: trsm's shape
    (v1, v2); a v3 timing names its ``shape`` instead (:class:`ShapeTimingSummary`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    m: Dim | None = None
    n: Dim | None = None
    median_us: NonNegative
    iqr_us: NonNegative
    baseline_median_us: NonNegative
    baseline_iqr_us: NonNegative
    speedup: NonNegative

    @model_validator(mode="after")
    def _speedup_is_the_ratio(self) -> _TimingBase:
        """``speedup`` is baseline median / median (``evaluator.report.ShapeTiming.speedup``,
        0 for a zero median); JSON round-trips floats exactly, so equality up to rounding."""
        ratio = self.baseline_median_us / self.median_us if self.median_us > 0 else 0.0
        if not math.isclose(self.speedup, ratio, rel_tol=1e-12):
            raise ValueError(f"speedup {self.speedup} is not baseline / median = {ratio}")
        return self


class ShapeTimingSummary(_TimingBase):
    """Device time per call (µs) at one timed shape: medians and interquartile ranges, the
    speedup (baseline median / candidate median) and, where the evaluation measured them, its
    interval, the relative noise floor (0.03 = two timings of one kernel disagree by 3 %),
    whether the speedup beats that floor, and the plausibility floor (the least time per call
    the GPU allows for this shape). ``None``: not measured (every v1 certificate).

    Must hold: ``speedup_low <= speedup <= speedup_high`` where both ends are present;
    ``faster_than_baseline`` true only with ``speedup_low > 1 + noise_floor`` (its definition,
    ``evaluator.noise.is_faster``); ``median_us >= plausibility_floor_us`` (a report below it
    failed ``implausible_time``)."""

    speedup_low: Positive | None
    speedup_high: Positive | None
    noise_floor: NonNegative | None
    faster_than_baseline: StrictBool | None
    plausibility_floor_us: Positive | None
    shape: Annotated[list[ShapeValue], Field(min_length=1, max_length=MAX_SHAPE_VALUES)] | None = (
        None
    )

    @property
    def problem(self) -> tuple[int, ...]:
        """The timed shape: v3's ``shape``, or trsm's (m, n)."""
        return tuple(self.shape) if self.shape is not None else (self.m or 0, self.n or 0)

    @model_validator(mode="after")
    def _consistent(self) -> ShapeTimingSummary:
        low, high = self.speedup_low, self.speedup_high
        if low is not None and high is not None and not low <= self.speedup <= high:
            raise ValueError(f"speedup {self.speedup} outside its interval [{low}, {high}]")
        if self.faster_than_baseline and (
            low is None or self.noise_floor is None or not low > 1 + self.noise_floor
        ):
            raise ValueError("faster_than_baseline without speedup_low > 1 + noise_floor")
        floor = self.plausibility_floor_us
        if floor is not None and self.median_us < floor:
            raise ValueError(f"median {self.median_us} us below its plausibility floor {floor}")
        return self


class _TimingV1(_TimingBase):
    """A v1 timing: only the fields v1 had."""

    m: Dim
    n: Dim


class _CertificateBase(BaseModel):
    """The fields both formats have, with their bounds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checks_passed: Annotated[list[CheckName], Field(min_length=1, max_length=MAX_CHECKS)]
    input_seeds: Seeds
    held_out_seeds: Seeds
    verified_shapes: Shapes
    held_out_shapes: Shapes
    determinism_shapes: Shapes
    sanitizer_tools: Annotated[list[SanitizerTool], Field(max_length=len(SANITIZER_TOOL_NAMES))]
    gpu_name: Annotated[StrictStr, Field(pattern=r"^[^\x00-\x1f\x7f]{1,256}$")]
    gpu_key: Annotated[StrictStr, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    arch: Annotated[StrictStr, Field(pattern=r"^sm_[0-9]{2,3}[a-z]?$")]
    cuda_driver_api_version: Version
    cuda_runtime_version: Version
    nvrtc_version: Version
    not_verified: Annotated[list[Statement], Field(max_length=MAX_STATEMENTS)]

    _blank_versions = field_validator(*_VERSION_FIELDS, mode="before", check_fields=False)(
        _blank_is_none
    )


class _CertificateV1(_CertificateBase):
    """A v1 document exactly as v1 promotions wrote it (``model_dump`` of the v1 model: every
    field present, the two unrecorded versions and ``noise_floor_us`` null); no v2 field."""

    format: Literal["kernevo.certificate.v1"]
    sanitizer_version: Version = None
    nvidia_driver_version: Version = None
    timings: Annotated[list[_TimingV1], Field(max_length=MAX_TIMINGS)]
    noise_floor_us: None = None

    @model_validator(mode="after")
    def _pairs(self) -> _CertificateV1:
        """v1 is trsm's: every shape an (m, n) pair."""
        if bad := _not_pairs(self):
            raise ValueError(f"a v1 certificate's shapes are (m, n) pairs, m, n >= 1; got {bad}")
        return self


class Certificate(_CertificateBase):
    """What a champion's verification ran and found (see the module doc for versions, formats
    and what the schema refuses).

    ``checks_passed`` names only checks that ran and passed (built from the report, never a
    fixed list). ``input_seeds`` are the seeds of the evaluation's random inputs in the order
    drawn (quick check, the verification seeds, timing); ``held_out_seeds`` those of the
    held-out shapes, drawn after scoring. ``sanitizer_shapes`` maps each compute-sanitizer tool
    to the shapes it ran on; ``input_scales`` the factors s of the scaled inputs
    (A = s·A0, B = s·B0) the evaluation checked, empty when none.

    Raises (``model_validate``, construction):
        pydantic.ValidationError: a field missing, mistyped, out of its bounds, or fields that
            contradict each other (module doc).
    """

    format: Literal[
        "kernevo.certificate.v1", "kernevo.certificate.v2", "kernevo.certificate.v3"
    ] = CERTIFICATE_FORMAT
    sanitizer_version: Version
    sanitizer_shapes: dict[SanitizerTool, Shapes]
    nvidia_driver_version: Version
    timings: Annotated[list[ShapeTimingSummary], Field(max_length=MAX_TIMINGS)]
    noise_floor: NonNegative | None
    input_scales: Annotated[list[Positive], Field(max_length=MAX_SCALES)]
    # v3 only (absent from v1 and v2, which are trsm's): the op and its shape parameters.
    op: OpName | None = None
    shape_params: Annotated[list[ParamName], Field(min_length=1, max_length=MAX_SHAPE_VALUES)] | (
        None
    ) = None

    @model_validator(mode="before")
    @classmethod
    def _read_v1(cls, data: Any) -> Any:
        """A v1 document, checked as v1 (:class:`_CertificateV1`), as a certificate: its
        always-null ``noise_floor_us`` dropped, the v2 fields it lacks set to "not recorded".
        A v2 document must carry every field."""
        if not isinstance(data, Mapping) or data.get("format") != CERTIFICATE_V1:
            return data
        try:
            v1 = _CertificateV1.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"v1 certificate: {where}: {first['msg']}") from None
        upgraded = v1.model_dump(exclude={"noise_floor_us"})
        upgraded.update(_V2_ONLY)
        upgraded["timings"] = [
            {**t, "speedup_low": None, "speedup_high": None, "noise_floor": None,
             "faster_than_baseline": None, "plausibility_floor_us": None}
            for t in upgraded["timings"]
        ]  # fmt: skip
        return upgraded

    @model_validator(mode="after")
    def _consistent(self) -> Certificate:
        """The checks its format requires are claimed, each tool and scale comes with its
        check, and the noise floor is the worst shape's (module doc)."""
        self._shapes_of_the_format()
        claimed = set(self.checks_passed)
        if len(claimed) != len(self.checks_passed):
            raise ValueError("checks_passed names a check twice")
        if missing := [c for c in REQUIRED_CHECKS[self.format] if c not in claimed]:
            raise ValueError(f"checks_passed lacks checks every verification runs: {missing}")
        if len(set(self.sanitizer_tools)) != len(self.sanitizer_tools):
            raise ValueError("sanitizer_tools names a tool twice")
        if unclaimed := [t for t in self.sanitizer_tools if f"sanitizer_{t}" not in claimed]:
            raise ValueError(f"sanitizer_tools {unclaimed} without their sanitizer_ checks")
        if self.format != CERTIFICATE_V1 and set(self.sanitizer_tools) != set(
            self.sanitizer_shapes
        ):
            raise ValueError("sanitizer_tools and the tools of sanitizer_shapes differ")
        if self.input_scales and "scale_invariance" not in claimed:
            raise ValueError("input_scales without the scale_invariance check")
        floors = [t.noise_floor for t in self.timings if t.noise_floor is not None]
        worst = max(floors) if self.timings and len(floors) == len(self.timings) else None
        if self.noise_floor != worst:
            raise ValueError(f"noise_floor {self.noise_floor} is not the worst shape's ({worst})")
        return self

    def _shapes_of_the_format(self) -> None:
        """v1, v2 (trsm's): no ``op`` nor ``shape_params`` (not even null), (m, n) pairs and
        timings by ``m``, ``n``; v3: ``op``, ``shape_params``, every shape and timing of that
        arity, timings by ``shape`` only.

        Raises:
            ValueError: the first shape or field that breaks it.
        """
        given = self.model_fields_set
        if self.format != CERTIFICATE_V3:
            if extra := sorted({"op", "shape_params"} & given):
                raise ValueError(f"{extra} belong to a v3 certificate, not {self.format}")
            if bad := _not_pairs(self):
                raise ValueError(
                    f"a {self.format} certificate's shapes are (m, n) pairs, m, n >= 1: {bad}"
                )
            for t in self.timings:
                if "shape" in t.model_fields_set or t.m is None or t.n is None:
                    raise ValueError(f"a {self.format} certificate's timings name m and n")
            return
        if self.op is None or self.shape_params is None:
            raise ValueError("a v3 certificate names its op and shape_params")
        if len(set(self.shape_params)) != len(self.shape_params):
            raise ValueError("shape_params names a parameter twice")
        arity = len(self.shape_params)
        if bad := [shape for shape in self._listed_shapes() if len(shape) != arity]:
            raise ValueError(f"shapes {bad[:3]} are not of {self.op}'s {arity} parameters")
        for t in self.timings:
            if {"m", "n"} & t.model_fields_set or t.shape is None or len(t.shape) != arity:
                raise ValueError(f"a v3 timing names its shape of {arity} values, not m and n")

    def _listed_shapes(self) -> list[tuple[int, ...]]:
        return [
            *self.verified_shapes, *self.held_out_shapes, *self.determinism_shapes,
            *(shape for shapes in self.sanitizer_shapes.values() for shape in shapes),
        ]  # fmt: skip

    @property
    def op_name(self) -> str:
        """The op the certificate is of: its ``op`` (v3), else ``"trsm"`` (v1 and v2 predate
        other ops)."""
        return self.op or "trsm"

    def shapes(self) -> list[tuple[int, ...]]:
        """Every shape the certificate says something was run at (verified, held out,
        determinism, sanitizer, timed), each in its op's parameter order."""
        return [*self._listed_shapes(), *(t.problem for t in self.timings)]

    def to_json_dict(self) -> dict[str, Any]:
        """The JSON document stored with the champion and served (tuples become lists); v1 and
        v2 without the v3 fields, so a trsm certificate is what it always was."""
        if self.format == CERTIFICATE_V3:
            return self.model_dump(mode="json", exclude={"timings": {"__all__": {"m", "n"}}})
        return self.model_dump(
            mode="json",
            exclude={"op": True, "shape_params": True, "timings": {"__all__": {"shape"}}},
        )

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
        version = {CERTIFICATE_V1: " (v1)", CERTIFICATE_V3: f" (v3, {self.op})"}
        version_text = version.get(self.format, "")
        return [
            f"certificate{version_text}: passed {', '.join(self.checks_passed)}",
            f"  on {self.gpu_name} ({self.arch}); {versions}",
            f"  {len(self.verified_shapes)} verified shapes "
            f"({len(self.held_out_shapes)} held out), input seeds {self.input_seeds}, "
            f"held-out seeds {self.held_out_seeds}",
            f"  sanitizer: {sanitizer}; noise floor {noise}",
            *(_timing_line(t, self.shape_params) for t in self.timings),
            *(f"  not verified: {line}" for line in self.not_verified),
        ]


def _not_pairs(certificate: Any) -> list[Any]:
    """The shapes of a certificate (verified, held out, determinism, sanitizer) that are not
    trsm's (m, n) pairs of values >= 1, at most three."""
    listed = [
        *certificate.verified_shapes, *certificate.held_out_shapes,
        *certificate.determinism_shapes,
        *(shape for shapes in certificate.sanitizer_shapes.values() for shape in shapes),
    ] if hasattr(certificate, "sanitizer_shapes") else [
        *certificate.verified_shapes, *certificate.held_out_shapes,
        *certificate.determinism_shapes,
    ]  # fmt: skip
    return [shape for shape in listed if len(shape) != 2 or min(shape) < 1][:3]


def _timing_line(t: ShapeTimingSummary, params: list[str] | None = None) -> str:
    where = (
        " ".join(f"{name}={value}" for name, value in zip(params, t.shape, strict=True))
        if params and t.shape is not None
        else f"m={t.m} n={t.n}"
    )
    line = (
        f"  {where}: median {t.median_us:.2f} us (IQR {t.iqr_us:.2f}), baseline "
        f"{t.baseline_median_us:.2f} us (IQR {t.baseline_iqr_us:.2f}), {t.speedup:.2f}x"
    )
    if t.speedup_low is not None and t.speedup_high is not None:
        line += f" [{t.speedup_low:.2f}, {t.speedup_high:.2f}]"
    if t.faster_than_baseline is not None:
        line += f", {_verdict(t)}"
    return line


def _verdict(t: ShapeTimingSummary) -> str:
    """Faster than the baseline beyond the noise floor, slower beyond it (the interval's top
    times 1 + floor below 1: ``evaluator.score``'s "slower", which routing honours: such a
    shape is served by the library), or within the noise."""
    if t.faster_than_baseline:
        return "beats the noise floor"
    high, floor = t.speedup_high, t.noise_floor or 0.0
    if high is not None and high * (1 + floor) < 1:
        return "slower beyond the noise (the library serves this shape)"
    return "within the noise"


def certified_metrics(document: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a champion's certificate says it measured, in the shape of the champion row's
    ``metrics`` that ``seeds.registry.measured`` reads: ``combined_score`` (the geometric mean
    of the timed shapes' speedups over the vendor library) and ``timings`` (``m``, ``n``, or
    ``shape``; ``candidate_us``: the median µs per call; ``speedup``, ``speedup_high`` and
    ``noise_floor`` against the vendor library at that shape). The certificate is covered by
    the signature and ``metrics`` is not, so the loader chooses between paths on these numbers:
    a service or a cache that edits ``metrics`` cannot steer it. Empty for no certificate or
    one that does not parse (the trust policy has refused such a champion already)."""
    if document is None:
        return {}
    try:
        certificate = Certificate.model_validate(document)
    except ValueError:
        return {}
    speedups = [t.speedup for t in certificate.timings]
    score = (
        math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        if speedups and all(s > 0 for s in speedups)
        else None
    )
    return {
        "combined_score": score,
        "timings": [
            {
                **({"shape": list(t.shape)} if t.shape is not None else {"m": t.m, "n": t.n}),
                "candidate_us": t.median_us,
                "speedup": t.speedup,
                # Absent from v1 certificates (None): the loader then has no interval to judge
                # "slower than the vendor library at the shape" by, and does not.
                "speedup_high": getattr(t, "speedup_high", None),
                "noise_floor": getattr(t, "noise_floor", None),
            }
            for t in certificate.timings
        ],
    }


def canonical_json(document: Mapping[str, Any]) -> bytes:
    """``document`` as canonical JSON: sorted keys, no spaces, UTF-8.

    Raises:
        ValueError: a NaN or infinite float (JSON has none; Python would write ``NaN``, which
            the API's response encoder and strict JSON parsers refuse).
    """
    text = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
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
