"""Fitness: `combined_score` = geometric mean over the timed shapes of cuBLAS time / candidate
time, a shape whose speedup cannot be told from 1 counting as exactly 1; 0 when any check failed
(docs/EVALUATOR.md, "Timing")."""

from __future__ import annotations

import math

from evaluator.report import RivalTiming, ShapeTiming


def credited_speedup(timing: ShapeTiming) -> float:
    """The speedup a shape contributes: ``timing.speedup`` when its verdict is "faster" or
    "slower" (the whole 95 % interval beyond the noise floor, ``evaluator.noise``), else 1.0 —
    neither credit nor penalty for a difference the evaluation cannot tell from noise."""
    return timing.speedup if timing.verdict() in ("faster", "slower") else 1.0


def _geometric_mean(values: list[float]) -> float:
    """exp(mean(ln v)); 0.0 when any value is ≤ 0 (a broken measurement never scores), +inf when
    one is +inf."""
    if any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


def combined_score(timings: list[ShapeTiming]) -> float:
    """Geometric mean of :func:`credited_speedup` over the shapes; 0.0 for no timings or a
    non-positive time (a broken measurement never scores)."""
    if not timings or any(t.candidate_us <= 0 or t.baseline_us <= 0 for t in timings):
        return 0.0
    return _geometric_mean([credited_speedup(t) for t in timings])


def score_interval(timings: list[ShapeTiming]) -> tuple[float, float]:
    """Geometric means of the speedup intervals' low and high ends over the shapes (no noise
    rule applied: the spread of the measurement itself); (0.0, 0.0) for no timings. The score can
    lie outside it when a shape within noise of 1 is counted as 1."""
    if not timings:
        return 0.0, 0.0
    return (
        _geometric_mean([t.speedup_low for t in timings]),
        _geometric_mean([t.speedup_high for t in timings]),
    )


def credited_rival_speedup(timing: RivalTiming) -> float:
    """What one shape says about the candidate against a rival timed in the same rounds: its
    speedup when the whole 95 % interval lies beyond the candidate's noise floor (faster:
    ``speedup_low > 1 + noise_floor``; slower: ``speedup_high < 1 / (1 + noise_floor)``), else
    1.0, the rule :func:`credited_speedup` applies against the baseline."""
    slower = timing.speedup_high * (1 + timing.noise_floor) < 1
    return timing.speedup if timing.faster or slower else 1.0


def beats_rival(timings: list[RivalTiming]) -> bool:
    """True when the candidate is faster than the rival beyond noise: the geometric mean of
    :func:`credited_rival_speedup` over the shapes is above 1 (so at least one shape is faster
    beyond the noise floor, and the shapes faster outweigh those slower); False for no timings."""
    return bool(timings) and _geometric_mean([credited_rival_speedup(t) for t in timings]) > 1.0


def held_to_parent(score: float, parent_score: float, timings: list[RivalTiming]) -> float:
    """A child's ``combined_score`` after it was timed against its parent in the same rounds
    (``timings``, the rival named "parent"): unchanged when it is faster than the parent beyond
    noise (:func:`beats_rival`) or scores no more than the parent; otherwise held at
    ``parent_score``, so that a difference the evaluation cannot tell from noise never ranks a
    child above its parent (issue 6: one kernel read 2.26 and 2.43 µs in two evaluations)."""
    if beats_rival(timings) or score <= parent_score:
        return score
    return parent_score
