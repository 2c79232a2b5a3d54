"""How much timing a shape gets: solves per graph, rounds, warm-up and how many replays' inputs
are drawn at once, scaled to the shape's work and memory.

The small paths' plan (32 solves per graph, 60 rounds, 5 warm-up rounds, 16 replays per draw)
was sized at m, n ≤ 64, where a solve is a few µs and a set of inputs 64 KiB. trsm_blocked times
up to 8192×8192: there one float64 solve is about 10 ms of device time and one set of A 512 MiB,
so the same plan would hold 32 sets per graph in every one of the seven graphs' B buffers (7 ×
16 GiB), draw 512 sets at once and replay for minutes. The plan keeps the small shapes' values
and, past them, bounds three things: a graph's work (enough solves that launch overhead is
amortized), the elements drawn at once, and the estimated time of all rounds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# LAWN 41's operation count of TRSM (side L): m²·n real flops, 4·m²·n for complex dtypes.
_COMPLEX = ("complex64", "complex128")

MAX_CALLS, MIN_CALLS = 32, 2  # solves per graph; two at least, so the audit picks among sets
# Work per graph past which fewer solves are captured: 32 solves of 256×256 float64 fit under it.
GRAPH_FLOPS = 5e9
# Elements (A and B of every set) drawn at once: bounded_sets builds a few float64 or complex128
# temporaries of this size, so 2^25 elements keep a draw under ~2 GiB.
DRAW_ELEMENTS = 1 << 25
MAX_REPLAYS_PER_DRAW = 16
MAX_SAMPLES, MIN_SAMPLES = 60, 12  # rounds; 12 still give the bootstrap interval meaning
# A device rate no TRSM on a current GPU falls below (flops/s), plus a launch, to estimate a
# solve's time; the rounds are then bounded to about ROUNDS_SECONDS of replays in all.
SLOW_RATE, LAUNCH_S, ROUNDS_SECONDS = 10e12, 5e-6, 4.0
GRAPHS_PER_ROUND = 7  # candidate twice, cuBLAS, copies, empty kernel, a rival, one spare


def trsm_flops(m: int, n: int, dtype: str) -> float:
    """LAWN 41's flop count of one TRSM, side L (m²·n real; 4·m²·n complex)."""
    return (4.0 if dtype in _COMPLEX else 1.0) * m * m * n


@dataclass(frozen=True)
class TimingPlan:
    """Arguments of :func:`evaluator.timing.time_shape` for one shape (see the module doc)."""

    calls: int
    samples: int
    warmup: int
    single_calls: int
    replays_per_draw: int

    def as_kwargs(self) -> dict[str, int]:
        """The plan as ``time_shape`` keyword arguments."""
        return asdict(self)


def timing_plan(m: int, n: int, dtype: str) -> TimingPlan:
    """The plan for (m, n) in ``dtype``: at m, n ≤ 64 the small paths' plan, unchanged; larger
    shapes get fewer solves per graph (work ≤ ``GRAPH_FLOPS`` and elements ≤ ``DRAW_ELEMENTS``
    per graph, at least 2), fewer
    replays per draw (≤ ``DRAW_ELEMENTS`` elements, at least 1) and fewer rounds (estimated
    replay time ≤ ``ROUNDS_SECONDS``, at least 12).

    Raises:
        ValueError: m or n below 1.
    """
    if m < 1 or n < 1:
        raise ValueError(f"no timing plan for m={m}, n={n}")
    work, per_set = trsm_flops(m, n, dtype), m * m + m * n
    # One graph's sets are drawn together too: at 4096×17 that, not the work, limits them.
    fit = max(MIN_CALLS, DRAW_ELEMENTS // per_set)
    calls = max(MIN_CALLS, min(MAX_CALLS, int(GRAPH_FLOPS // work), fit))
    replays = max(1, min(MAX_REPLAYS_PER_DRAW, DRAW_ELEMENTS // (calls * per_set)))
    solve_s = work / SLOW_RATE + LAUNCH_S
    rounds = int(ROUNDS_SECONDS // (GRAPHS_PER_ROUND * calls * solve_s))
    samples = max(MIN_SAMPLES, min(MAX_SAMPLES, rounds))
    warmup = max(2, min(5, samples // 12))
    return TimingPlan(calls, samples, warmup, min(30, calls), replays)
