"""Fitness: `combined_score` = geometric mean over the timed shapes of cuBLAS time / candidate
time, 0 when any check failed (docs/DESIGN.md, "Evaluation pipeline")."""

from __future__ import annotations

import math

from evaluator.report import ShapeTiming


def combined_score(timings: list[ShapeTiming]) -> float:
    """Geometric mean of per-shape speedups over cuBLAS; 0.0 for no timings or a non-positive
    time (a broken measurement never scores)."""
    if not timings or any(t.candidate_us <= 0 or t.baseline_us <= 0 for t in timings):
        return 0.0
    return math.exp(sum(math.log(t.speedup) for t in timings) / len(timings))
