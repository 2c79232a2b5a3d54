"""Typed results of one evaluation: what the LLM, the lineage store and the CLI all read.

A candidate that fails to compile, lies or races is the normal case: every stage returns data
naming the check, the shape, the measured value and the bound it broke.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from evaluator.noise import Interval, is_faster, is_slower

# "compiled": a compile-only evaluation (no GPU assigned) that compiled; not a failure, not a pass.
# "contract_error": it compiled, but the cubin breaks the candidate contract (a check of
# evaluator.checks on the binary, e.g. device_global_state); found before anything runs.
STATUSES = (
    "ok", "compiled", "screen_error", "compile_error", "contract_error", "wrong", "timeout",
    "fault", "infra_error",
)  # fmt: skip


# Checks whose bound is a minimum the value fell below (all others: a maximum it exceeded).
LOWER_BOUND_CHECKS = frozenset({"implausible_time"})


@dataclass(frozen=True)
class CheckFailure:
    """The first check a candidate failed."""

    check: str
    shape: tuple[int, ...] | None = None
    value: float | None = None
    bound: float | None = None
    detail: str = ""

    def describe(self) -> str:
        """One line: the check, where (trsm's ``at m=…, n=…``; another arity ``at shape
        (…)``: an op's suite names its parameters in ``detail``), the value against its bound,
        the detail."""
        if not self.shape:
            where = ""
        elif len(self.shape) == 2:
            where = f" at m={self.shape[0]}, n={self.shape[1]}"
        else:
            where = f" at shape {tuple(self.shape)}"
        numbers = ""
        if self.value is not None and self.bound is not None:
            sign = "<" if self.check in LOWER_BOUND_CHECKS else ">"
            numbers = f": {self.value:.3g} {sign} bound {self.bound:.3g}"
        return f"{self.check}{where}{numbers}. {self.detail}".strip()


@dataclass(frozen=True)
class ShapeTiming:
    """Device time per call (µs) from graph replay, candidate and cuBLAS timed interleaved.

    ``*_spread_us`` is the interquartile range of the per-call samples; ``*_single_call_us`` is
    the median of single launches timed with CUDA events (launch overhead included).
    ``candidate_again_us``: the median of a second graph of the same candidate, captured
    separately and timed in the same rounds. ``noise_floor``: how far those two timings of one
    kernel disagree (relative, 0.03 = 3 %; ``evaluator.noise.noise_floor``).
    ``speedup_low``/``speedup_high``: the 95 % bootstrap interval of :attr:`speedup`;
    ``faster_than_baseline``: ``speedup_low > 1 + noise_floor``. ``plausibility_floor_us``: the
    per-call time below which a measurement cannot be real (``evaluator.noise``). The fields
    after ``baseline_single_call_us`` default to 0/False: reports from before they existed.
    ``shape``: the problem's shape in the op's parameter order for an op other than trsm (whose
    ``m`` and ``n`` are then 0); empty for trsm, whose shape is (m, n), and left out of its JSON
    (:meth:`EvaluationReport.to_dict`), so trsm's reports read as they did.
    """

    m: int
    n: int
    candidate_us: float
    candidate_spread_us: float
    baseline_us: float
    baseline_spread_us: float
    candidate_single_call_us: float
    baseline_single_call_us: float
    candidate_again_us: float = 0.0
    noise_floor: float = 0.0
    speedup_low: float = 0.0
    speedup_high: float = 0.0
    faster_than_baseline: bool = False
    plausibility_floor_us: float = 0.0
    shape: tuple[int, ...] = ()

    @property
    def problem(self) -> tuple[int, ...]:
        """The timed shape: ``shape``, or trsm's (m, n)."""
        return tuple(self.shape) or (self.m, self.n)

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.candidate_us if self.candidate_us > 0 else 0.0

    def verdict(self) -> str:
        """Against cuBLAS: "faster" (:func:`evaluator.noise.is_faster` on the interval and the
        floor), "slower" (:func:`evaluator.noise.is_slower`) or "within noise"; "" for a report
        from before intervals were measured (``speedup_high`` 0)."""
        if self.speedup_high == 0:
            return ""
        interval = Interval(self.speedup, self.speedup_low, self.speedup_high)
        if is_faster(interval, self.noise_floor):
            return "faster"
        return "slower" if is_slower(interval, self.noise_floor) else "within noise"


@dataclass(frozen=True)
class RivalTiming:
    """The candidate against another kernel (e.g. the champion) timed in the same rounds.

    ``speedup`` = ``rival_us`` / ``candidate_us`` (> 1: the candidate is faster), with its 95 %
    bootstrap interval; ``faster``: ``speedup_low > 1 + noise_floor``, the floor being the
    candidate's own (A against A') of the same shape and evaluation. ``shape``: as
    :attr:`ShapeTiming.shape`.
    """

    name: str
    m: int
    n: int
    rival_us: float
    candidate_us: float
    speedup: float
    speedup_low: float
    speedup_high: float
    noise_floor: float
    faster: bool
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class CompileInfo:
    """Compiler facts for the LLM and for reproducing the cubin."""

    ok: bool
    log: str
    options: tuple[str, ...]
    arch: str
    nvrtc_version: str
    seconds: float
    cubin_sha256: str = ""
    registers: int = 0
    spill_bytes: int = 0
    stack_bytes: int = 0
    static_shared_bytes: int = 0
    # The sandbox limit that stopped NVRTC: "time" (CPU time), "wall" (the wall-clock backstop),
    # "memory", "crash", or "" (it finished).
    limit: str = ""


@dataclass(frozen=True)
class GpuInfo:
    """Identity of the GPU an evaluation ran on (recorded with every evaluation)."""

    name: str
    key: str
    arch: str
    driver_version: str
    runtime_version: str
    sm_count: int = 0
    max_shared_per_block_optin: int = 0


@dataclass
class EvaluationReport:
    """Everything one evaluation found; ``combined_score`` is 0 unless ``status == "ok"``.

    ``combined_score_low``/``combined_score_high``: geometric means over the timed shapes of the
    ends of each speedup's 95 % interval (``evaluator.score.score_interval``), 0 unless ok.
    ``rival_timings``: the candidate against other kernels timed in the same rounds (the champion
    at promotion), one per rival and shape; empty when none was asked for.
    """

    path_id: str
    dtype: str
    status: str = "ok"
    stage: str = "screen"
    combined_score: float = 0.0
    combined_score_low: float = 0.0
    combined_score_high: float = 0.0
    failure: CheckFailure | None = None
    compile: CompileInfo | None = None
    gpu: GpuInfo | None = None
    timings: list[ShapeTiming] = field(default_factory=list)
    rival_timings: list[RivalTiming] = field(default_factory=list)
    verified_shapes: list[tuple[int, int]] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    profile: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Seeds of the random inputs this evaluation drew (quick, verify, timing), to reproduce it.
    input_seeds: list[int] = field(default_factory=list)
    # Seeds of the held-out inputs a champion verification drew (evaluator.champion); empty else.
    held_out_seeds: list[int] = field(default_factory=list)
    # Checks of issue 6 part 3 the full verification ran and the candidate passed
    # (evaluator.gpu_tasks.verify with growth: scale_invariance, nonfinite_containment,
    # metamorphic_*), and the factors s of its scaled inputs (evaluator.inputs.scale_exponents:
    # the per-shape extremes and the sweep).
    checks_run: list[str] = field(default_factory=list)
    input_scales: list[float] = field(default_factory=list)

    def fail(self, status: str, failure: CheckFailure) -> EvaluationReport:
        """Mark this report failed (score 0) with ``status`` and its first failing check."""
        assert status in STATUSES and status not in ("ok", "compiled")
        self.status, self.failure, self.combined_score = status, failure, 0.0
        self.combined_score_low = self.combined_score_high = 0.0
        return self

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def speedup_at_largest(self) -> float:
        """cuBLAS time / candidate time at the largest timed shape (0 when untimed)."""
        if not self.timings:
            return 0.0
        largest = max(self.timings, key=lambda t: math.prod(t.problem))
        return largest.speedup

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["speedups"] = [t.speedup for t in self.timings]
        for timing in (*data["timings"], *data["rival_timings"]):
            if not timing["shape"]:
                del timing["shape"]  # trsm's: (m, n), as its reports always read
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvaluationReport:
        data = dict(data)
        data.pop("speedups", None)
        if data.get("failure"):
            f = dict(data["failure"])
            f["shape"] = tuple(f["shape"]) if f.get("shape") else None
            data["failure"] = CheckFailure(**f)
        if data.get("compile"):
            c = dict(data["compile"])
            c["options"] = tuple(c["options"])
            data["compile"] = CompileInfo(**c)
        if data.get("gpu"):
            data["gpu"] = GpuInfo(**data["gpu"])
        data["timings"] = [ShapeTiming(**_shaped(t)) for t in data.get("timings", [])]
        data["rival_timings"] = [RivalTiming(**_shaped(r)) for r in data.get("rival_timings", [])]
        data["verified_shapes"] = [tuple(s) for s in data.get("verified_shapes", [])]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> EvaluationReport:
        return cls.from_dict(json.loads(text))

    def metrics(self) -> dict[str, float]:
        """Numbers only, every key present even on failure (OpenEvolve drops a child whose
        MAP-Elites feature dimensions are missing), all finite (its checkpoints refuse NaN and
        inf: an unbounded interval end shows as 0 here, its value stays in ``timings``).
        ``noise_floor`` is the largest over the timed shapes."""
        passed = self.passed and bool(self.timings)
        floor = max((t.noise_floor for t in self.timings), default=0.0) if passed else 0.0
        return {
            "combined_score": float(self.combined_score if self.passed else 0.0),
            "combined_score_low": _finite(self.combined_score_low) if passed else 0.0,
            "combined_score_high": _finite(self.combined_score_high) if passed else 0.0,
            "noise_floor": _finite(floor),
            "passed": 1.0 if self.passed else 0.0,
            "speedup_64": float(self.speedup_at_largest()) if self.passed else 0.0,
            "registers": float(self.compile.registers if self.compile else 0),
            "stage": float(("screen", "compile", "quick", "verify", "time").index(self.stage)),
        }

    def artifacts(self) -> dict[str, str]:
        """Text feedback for the LLM: compile log, first failing check, timings, resources."""
        out: dict[str, str] = {"status": self.status}
        if self.failure:
            out["first_failure"] = self.failure.describe()
        if self.compile:
            c = self.compile
            if c.log.strip():
                out["compile_log"] = c.log.strip()[-4000:]
            out["resources"] = (
                f"registers {c.registers}, spills {c.spill_bytes} B, stack {c.stack_bytes} B, "
                f"static shared {c.static_shared_bytes} B, compile {c.seconds * 1e3:.0f} ms"
            )
        if self.timings:
            by_shape = any(t.shape for t in self.timings)  # an op other than trsm
            rows = [
                ("shape  " if by_shape else "m  n  ")
                + "candidate_us  baseline_us  speedup [95% interval]  noise floor  verdict  "
                "(graph-replayed device time)"
            ]
            rows += [
                f"{' '.join(str(v) for v in t.problem)} "
                f"{t.candidate_us:.2f}±{t.candidate_spread_us:.2f} "
                f"{t.baseline_us:.2f}±{t.baseline_spread_us:.2f} {t.speedup:.2f}x"
                + (
                    f" [{t.speedup_low:.2f}, {t.speedup_high:.2f}] {t.noise_floor:.1%} "
                    f"{t.verdict()}"
                    if t.verdict()
                    else ""  # timed before intervals existed
                )
                for t in self.timings
            ]
            out["timings"] = "\n".join(rows)
        if self.rival_timings:
            out["rivals"] = "\n".join(
                f"vs {r.name} at {'x'.join(str(v) for v in r.shape or (r.m, r.n))}: "
                f"{r.rival_us:.2f} us, {r.speedup:.2f}x "
                f"[{r.speedup_low:.2f}, {r.speedup_high:.2f}], noise floor {r.noise_floor:.1%}: "
                + ("faster" if r.faster else "not faster")
                for r in self.rival_timings
            )
        if self.profile:
            out["ncu"] = ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.profile.items()))
        if self.gpu:
            g = self.gpu
            out["gpu"] = (
                f"{g.name} ({g.arch}), {g.sm_count} SMs, "
                f"{g.max_shared_per_block_optin} B shared memory per block (opt-in)"
            )
        if self.notes:
            out["notes"] = "\n".join(self.notes)
        return out


def _shaped(timing: dict[str, Any]) -> dict[str, Any]:
    """A timing's fields with its ``shape`` (when present) as a tuple."""
    return {**timing, "shape": tuple(timing["shape"])} if "shape" in timing else timing


def _finite(value: float) -> float:
    """``value`` as a float, 0.0 when it is NaN or infinite."""
    return float(value) if math.isfinite(value) else 0.0
