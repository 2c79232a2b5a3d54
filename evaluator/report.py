"""Typed results of one evaluation: what the LLM, the lineage store and the CLI all read.

A candidate that fails to compile, lies or races is the normal case: every stage returns data
naming the check, the shape, the measured value and the bound it broke.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# "compiled": a compile-only evaluation (no GPU assigned) that compiled; not a failure, not a pass.
# "contract_error": it compiled, but the cubin breaks the candidate contract (a check of
# evaluator.checks on the binary, e.g. device_global_state); found before anything runs.
STATUSES = (
    "ok", "compiled", "screen_error", "compile_error", "contract_error", "wrong", "timeout",
    "fault", "infra_error",
)  # fmt: skip


@dataclass(frozen=True)
class CheckFailure:
    """The first check a candidate failed."""

    check: str
    shape: tuple[int, int] | None = None
    value: float | None = None
    bound: float | None = None
    detail: str = ""

    def describe(self) -> str:
        where = f" at m={self.shape[0]}, n={self.shape[1]}" if self.shape else ""
        numbers = ""
        if self.value is not None and self.bound is not None:
            numbers = f": {self.value:.3g} > bound {self.bound:.3g}"
        return f"{self.check}{where}{numbers}. {self.detail}".strip()


@dataclass(frozen=True)
class ShapeTiming:
    """Device time per call (µs) from graph replay, candidate and cuBLAS timed interleaved.

    ``*_spread_us`` is the interquartile range of the per-call samples; ``*_single_call_us`` is
    the median of single launches timed with CUDA events (launch overhead included).
    """

    m: int
    n: int
    candidate_us: float
    candidate_spread_us: float
    baseline_us: float
    baseline_spread_us: float
    candidate_single_call_us: float
    baseline_single_call_us: float

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.candidate_us if self.candidate_us > 0 else 0.0


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
    # The sandbox limit that stopped NVRTC: "time", "memory", "crash", or "" (it finished).
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
    """Everything one evaluation found; ``combined_score`` is 0 unless ``status == "ok"``."""

    path_id: str
    dtype: str
    status: str = "ok"
    stage: str = "screen"
    combined_score: float = 0.0
    failure: CheckFailure | None = None
    compile: CompileInfo | None = None
    gpu: GpuInfo | None = None
    timings: list[ShapeTiming] = field(default_factory=list)
    verified_shapes: list[tuple[int, int]] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    profile: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Seeds of the random inputs this evaluation drew (quick, verify, timing), to reproduce it.
    input_seeds: list[int] = field(default_factory=list)
    # Seeds of the held-out inputs a champion verification drew (evaluator.champion); empty else.
    held_out_seeds: list[int] = field(default_factory=list)

    def fail(self, status: str, failure: CheckFailure) -> EvaluationReport:
        """Mark this report failed (score 0) with ``status`` and its first failing check."""
        assert status in STATUSES and status not in ("ok", "compiled")
        self.status, self.failure, self.combined_score = status, failure, 0.0
        return self

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def speedup_at_largest(self) -> float:
        """cuBLAS time / candidate time at the largest timed shape (0 when untimed)."""
        if not self.timings:
            return 0.0
        largest = max(self.timings, key=lambda t: t.m * t.n)
        return largest.speedup

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["speedups"] = [t.speedup for t in self.timings]
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
        data["timings"] = [ShapeTiming(**t) for t in data.get("timings", [])]
        data["verified_shapes"] = [tuple(s) for s in data.get("verified_shapes", [])]
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> EvaluationReport:
        return cls.from_dict(json.loads(text))

    def metrics(self) -> dict[str, float]:
        """Numbers only, every key present even on failure (OpenEvolve drops a child whose
        MAP-Elites feature dimensions are missing)."""
        return {
            "combined_score": float(self.combined_score if self.passed else 0.0),
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
            rows = ["m  n  candidate_us  cublas_us  speedup  (graph-replayed device time)"]
            rows += [
                f"{t.m} {t.n} {t.candidate_us:.2f}±{t.candidate_spread_us:.2f} "
                f"{t.baseline_us:.2f}±{t.baseline_spread_us:.2f} {t.speedup:.2f}x"
                for t in self.timings
            ]
            out["timings"] = "\n".join(rows)
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
