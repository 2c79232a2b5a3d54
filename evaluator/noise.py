"""When is one timed kernel faster than another? Paired statistics over timing's sample rounds,
and the shortest time a call can plausibly take.

``evaluator.timing`` replays each captured graph once per *round*, in rotating order, so round
``s`` holds one sample (µs per replay of 32 solves) of every graph: the candidate "A", the same
candidate captured a second time "A'", cuBLAS, the copies-only graph, and any rival. Samples of
one round share whatever the GPU was doing then (clock changes, a neighbour's work), so every
statistic here resamples whole rounds, never one graph's samples alone.

- A speed comparison is the ratio of two graphs' medians, each less the copy graph's median
  (what the solves cost beyond the copies), with a 95 % percentile-bootstrap interval over
  rounds (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13).
- The *noise floor* of an evaluation is the same comparison made for A against A': two timings
  of one kernel, measured the way every comparison is. It is read off the whole interval, not
  the point estimate, so a run whose two medians happen to agree still carries the uncertainty
  of its sampling.
- One kernel counts as faster than another only when the whole interval of the speedup lies
  above 1 + floor (:func:`is_faster`).

Pure NumPy; nothing here touches a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Percentile endpoints are order statistics far out in the resampled distribution: 25–200
# resamples give a standard error, but 2.5 % and 97.5 % endpoints need about a thousand or more
# (Efron & Tibshirani 1993). 2000 × 60 rounds take ~10 ms per comparison on one core.
RESAMPLES = 2000
LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A ratio of medians (``estimate``, from all rounds) and its bootstrap interval."""

    estimate: float
    low: float
    high: float


def _rounds(*samples: np.ndarray | None) -> list[np.ndarray]:
    """The given sample arrays as float64, checked to be 1-D, non-empty and of equal length."""
    arrays = [np.asarray(s, dtype=np.float64) for s in samples if s is not None]
    lengths = {a.shape for a in arrays}
    if len(lengths) != 1 or arrays[0].ndim != 1 or arrays[0].size == 0:
        raise ValueError(f"samples must be 1-D arrays of one non-zero length, got {lengths}")
    return arrays


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator of times less the copies' median, with the degenerate cases
    defined: a time at or below the copies' is 0 (nothing measurable beyond the copies), x / 0 is
    +inf for x > 0 and 0 / 0 is 1 (neither measurable: no evidence of a difference)."""
    num, den = np.maximum(numerator, 0.0), np.maximum(denominator, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = num / den
    ratio = np.where((num == 0) & (den == 0), 1.0, ratio)
    return np.asarray(ratio, dtype=np.float64)


def median_ratio(
    numerator: np.ndarray, denominator: np.ndarray, offset: np.ndarray | None = None
) -> float:
    """(median(numerator) − median(offset)) / (median(denominator) − median(offset)).

    ``numerator``, ``denominator``, ``offset``: (rounds,) µs per replay of three graphs, round
    by round; ``offset`` (the copy-only graph) is 0 when None. With numerator = cuBLAS and
    denominator = candidate this is the speedup (the 32 calls per replay cancel). Degenerate
    differences follow :func:`_ratio`.

    Raises:
        ValueError: arrays not 1-D, empty or of different lengths.
    """
    num, den, *off = _rounds(numerator, denominator, offset)
    base = float(np.median(off[0])) if off else 0.0
    return float(_ratio(np.median(num) - base, np.median(den) - base))


def ratio_interval(
    numerator: np.ndarray,
    denominator: np.ndarray,
    *,
    seed: int,
    offset: np.ndarray | None = None,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
) -> Interval:
    """:func:`median_ratio` and its two-sided percentile-bootstrap interval at ``level``.

    Paired: each resample draws ``rounds`` round indices with replacement and takes every graph's
    samples of those same rounds, so a slowdown that hits all graphs in some rounds moves both
    medians together and not the ratio. The endpoints are the order statistics at
    (1 − level)/2 and (1 + level)/2 of the ``resamples`` resampled ratios (``inverted_cdf``: no
    interpolation, so an infinite ratio never makes a NaN); Efron & Tibshirani 1993, ch. 13.
    ``seed`` fixes the resampling, so the same samples always give the same interval.

    Raises:
        ValueError: arrays not 1-D, empty or of different lengths; ``level`` outside (0, 1);
            ``resamples`` < 1.
    """
    num, den, *off = _rounds(numerator, denominator, offset)
    if not 0 < level < 1 or resamples < 1:
        raise ValueError(f"need 0 < level < 1 and resamples ≥ 1, got {level}, {resamples}")
    picks = np.random.default_rng(seed).integers(0, num.size, size=(resamples, num.size))
    base = np.median(off[0][picks], axis=1) if off else 0.0
    ratios = _ratio(np.median(num[picks], axis=1) - base, np.median(den[picks], axis=1) - base)
    tail = (1 - level) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail], method="inverted_cdf")
    estimate = median_ratio(num, den, off[0] if off else None)
    return Interval(estimate, float(low), float(high))


def noise_floor(same_kernel: Interval) -> float:
    """The relative noise floor from the interval of one kernel timed against itself (A / A').

    exp(max(|ln low|, |ln high|)) − 1: the farthest the interval reaches from 1, either way, as a
    fraction (0.03 = 3 %). Taking the interval's end rather than the estimate means a run whose
    two medians agree by chance still has a floor as wide as its sampling uncertainty. A
    degenerate interval (an end at 0 or +inf) gives +inf: nothing counts as faster.
    """
    ends = (same_kernel.low, same_kernel.high)
    if not all(0 < e < math.inf for e in ends):
        return math.inf
    return math.expm1(max(abs(math.log(e)) for e in ends))


def is_faster(speedup: Interval, floor: float) -> bool:
    """True when the whole interval of ``speedup`` (other's time / this kernel's time) lies
    above 1 + ``floor``: ``speedup.low > 1 + floor``. Strict, and False for a NaN floor."""
    return speedup.low > 1 + floor


def is_slower(speedup: Interval, floor: float) -> bool:
    """The mirror of :func:`is_faster`: ``speedup.high < 1 / (1 + floor)``."""
    return speedup.high < 1 / (1 + floor)


# -- plausibility: the shortest per-call time the device allows --------------------------------

# NVIDIA H200 SXM datasheet: 4.8 TB/s HBM3e. Used only when the device reports no memory clock
# or bus width (an attribute the runtime no longer fills reads 0).
H200_DRAM_BYTES_PER_S = 4.8e12

# In a graph replay the inputs were just written by the refresh and the B copies (A and B of 32
# sets are 4.2 MB at 64×64 complex128, the L2 holds 50 MB), so they are read from L2, not DRAM,
# and bytes / DRAM bandwidth is no lower bound. L2 bandwidth is neither a device attribute nor in
# NVIDIA's datasheets: 4× the DRAM peak (19 TB/s on the H200) is an assumed upper bound, not a
# measurement. It does not decide anything at these sizes: even at 1× DRAM the largest shape's
# term is 0.034 µs, a tenth of the launch term below.
L2_OVER_DRAM = 4.0

# An empty kernel node in a graph costs ~0.57 µs per launch on the H200 (docs/DESIGN.md); every
# solve is at least one launch. Half of the empty launch measured in the same evaluation leaves
# room for the copy subtraction's noise and run-to-run spread (the same kernel read 2.26 and
# 2.43 µs in two evaluations) while still refusing times no launch can reach; the seed takes
# 2–6 µs per call and cuBLAS-speed kernels ≥ 1 µs, far above 0.3 µs.
LAUNCH_FLOOR_FRACTION = 0.5


def bytes_moved(m: int, n: int, itemsize: int) -> int:
    """Bytes one solve must move at least: A's lower triangle read, B read, X written
    (m(m+1)/2 + 2mn elements of ``itemsize`` bytes)."""
    return (m * (m + 1) // 2 + 2 * m * n) * itemsize


def dram_bytes_per_s(memory_clock_khz: int, bus_width_bits: int) -> float:
    """Peak DRAM bandwidth from the device attributes MemoryClockRate (kHz) and
    GlobalMemoryBusWidth (bits): 2 (double data rate) × clock × width / 8. Falls back to
    :data:`H200_DRAM_BYTES_PER_S` when either reads 0 (attribute not reported)."""
    if memory_clock_khz <= 0 or bus_width_bits <= 0:
        return H200_DRAM_BYTES_PER_S
    return 2.0 * memory_clock_khz * 1e3 * bus_width_bits / 8


def plausibility_floor_us(
    m: int, n: int, itemsize: int, dram_bandwidth: float, launch_us: float
) -> float:
    """The per-call time (µs) below which a measured solve cannot be real at (m, n):
    max(:func:`bytes_moved` / (:data:`L2_OVER_DRAM` × ``dram_bandwidth`` B/s),
    :data:`LAUNCH_FLOOR_FRACTION` × ``launch_us``), ``launch_us`` being an empty kernel's
    per-call time measured like the candidate's (a non-positive one counts as 0). At these
    sizes the launch term binds: 64×64 complex128 moves 164 kB, 0.009 µs at 19 TB/s."""
    transfer_us = bytes_moved(m, n, itemsize) / (L2_OVER_DRAM * dram_bandwidth) * 1e6
    return max(transfer_us, LAUNCH_FLOOR_FRACTION * max(launch_us, 0.0))
