"""The order of a bulge-chasing reduction of an upper band to upper bidiagonal form: stages,
sweeps, steps and the launches ("cycles") that run them, as the kernel (``kernel.cu``), its
driver (``driver.py``) and the NumPy emulation (``emulation.py``) all compute it.

Notation (0-based indices; A is n×n upper banded, a_ij = 0 unless 0 ≤ j − i ≤ BW):

- **Stage** (b, t): reduce the current bandwidth b to b − t, t = min(TW, b − 1). Stages run
  from b = BW until b = 1 (``stages``); each is a separate run of launches. TW is the kernel's
  inner tile width (``BB_TW``): the number of elements one reflector annihilates.
- **Sweep** R (0 ≤ R ≤ ``last_sweep`` = n − 2 − (b − t)): the chase started by row R. Its step
  k (0 ≤ k < ``sweep_steps``) works on the block ``c0 = R − t + (k + 1)·b``,
  ``c1 = min(c0 + t, n − 1)``:
    * row task: a right Householder reflector on columns c0..c1 annihilates a(row, c0+1..c1)
      (row = R at k = 0, else R − t + k·b, the row the previous step's left reflector filled),
      applied to rows row..c1;
    * column task: a left reflector on rows c0..c1 annihilates a(c0+1..c1, c0), the first
      column of the bulge the row task made, applied to columns c0..min(c1 + b, n − 1).
  Step k's data lie in rows [R − t + k·b, c1] and columns [c0, c1 + b]: b + t + 1 of each, and
  each step moves b rows down.
- **Cycle** c (one kernel launch): sweep R runs its step k = c − 3R. Sweeps start three cycles
  apart, so the blocks of one launch (one per sweep) touch disjoint rows: the rows of sweep
  R+1 at step k end 2·b − t − 1 ≥ b rows above those of sweep R at step k + 3, since
  t ≤ b − 1 (the paper's condition R + 3·BW > R + 1 + BW + TW; two cycles would do only when
  b − t > 1).
  ``stage_cycles`` = 3·``last_sweep`` + 1 launches per stage; about 3·(n − 1)·BW/TW in all.

Only the first column of each bulge (and the first row of each fill) is annihilated; the rest
is left to the next sweep, whose block is the same one shifted by one row and column, so every
entry outside the target band is annihilated by some later task of the same stage. Storage
room this needs (``layout.py``): fill reaches b + t ≤ 2·BW − 1 above the diagonal and t ≤ BW − 1
below it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

# Sweeps start this many launches apart (the paper's three-cycle separation).
SEPARATION = 3


@dataclass(frozen=True)
class Stage:
    """One stage: current bandwidth ``b`` reduced to ``b - t``."""

    b: int
    t: int


@dataclass(frozen=True)
class Task:
    """Step ``k`` of sweep ``sweep`` in a stage: the row task's ``row`` and the block
    ``c0..c1`` (inclusive) both reflectors act on."""

    sweep: int
    k: int
    row: int
    c0: int
    c1: int

    def rows(self) -> tuple[int, int]:
        """Inclusive row range the task reads or writes (row task: row..c1; column task:
        c0..c1)."""
        return self.row, self.c1

    def columns(self, b: int, n: int) -> tuple[int, int]:  # b: the stage's bandwidth
        """Inclusive column range the task reads or writes (c0..min(c1 + b, n − 1))."""
        return self.c0, min(self.c1 + b, n - 1)


def effective_bandwidth(n: int, bw: int) -> int:
    """The bandwidth that matters for an n×n matrix: ``min(bw, n − 1)`` (a band past the last
    column is the whole upper triangle), at least 0.

    Raises:
        ValueError: n < 1 or bw < 0.
    """
    if n < 1 or bw < 0:
        raise ValueError(f"need n >= 1 and bandwidth >= 0; got n={n}, bandwidth={bw}")
    return min(bw, n - 1)


def stages(n: int, bw: int, tw: int) -> list[Stage]:
    """The stages reducing an n×n upper band of bandwidth ``bw`` with tile width ``tw``: b from
    ``effective_bandwidth(n, bw)`` down to 1, t = min(tw, b − 1). Empty when the matrix is
    already bidiagonal (bandwidth ≤ 1).

    Raises:
        ValueError: tw < 1, or n, bw out of range (``effective_bandwidth``).
    """
    if tw < 1:
        raise ValueError(f"tile width must be >= 1; got {tw}")
    b = effective_bandwidth(n, bw)
    out: list[Stage] = []
    while b > 1:
        t = min(tw, b - 1)
        out.append(Stage(b, t))
        b -= t
    return out


def last_sweep(n: int, stage: Stage) -> int:
    """The last sweep with work in ``stage``: n − 2 − (b − t) (row R has entries past the target
    band b − t only up to there); −1 when there is none."""
    return n - 2 - (stage.b - stage.t)


def sweep_steps(n: int, stage: Stage, sweep: int) -> int:
    """Number of steps of sweep R: those k with c0 = R − t + (k + 1)·b < n − 1, i.e.
    ⌊(n − 2 − R + t) / b⌋ (≥ 1 for R ≤ ``last_sweep``)."""
    return (n - 2 - sweep + stage.t) // stage.b


def stage_cycles(n: int, stage: Stage) -> int:
    """Launches of one stage: 3·``last_sweep`` + 1 (the last sweep has one step and starts
    last); 0 when the stage has no sweep."""
    last = last_sweep(n, stage)
    return SEPARATION * last + 1 if last >= 0 else 0


def task(n: int, stage: Stage, sweep: int, k: int) -> Task:
    """Step ``k`` of sweep ``sweep`` (its row and block); see the module's notation."""
    b, t = stage.b, stage.t
    rk = sweep - t + k * b
    c0 = rk + b
    return Task(sweep, k, sweep if k == 0 else rk, c0, min(c0 + t, n - 1))


def active_sweeps(n: int, stage: Stage, cycle: int) -> list[int]:
    """The sweeps that run a step in launch ``cycle``, in the order the kernel's blocks take
    them (highest R first: block x takes the x-th, then every gridDim.x-th). They are
    consecutive: going down from min(last, ⌊cycle/3⌋), k = cycle − 3R grows by 3 per sweep and
    the step count by at most 1, so the first inactive one ends the list."""
    out: list[int] = []
    r = min(last_sweep(n, stage), cycle // SEPARATION)
    while r >= 0 and cycle - SEPARATION * r < sweep_steps(n, stage, r):
        out.append(r)
        r -= 1
    return out


def cycle_tasks(n: int, stage: Stage, cycle: int) -> list[Task]:
    """The tasks of launch ``cycle`` (one per active sweep, mutually disjoint in rows)."""
    return [task(n, stage, r, cycle - SEPARATION * r) for r in active_sweeps(n, stage, cycle)]


def max_active(n: int, bw: int, tw: int) -> int:
    """The most sweeps any launch of the reduction runs: ⌈K₀/3⌉ over the stages, K₀ the first
    sweep's step count (sweeps active together span fewer than K₀ launches of start times 3
    apart); at least 1. The kernel's ``kernevo_launch_config`` computes the same bound."""
    most = 1
    for stage in stages(n, bw, tw):
        if last_sweep(n, stage) >= 0:
            k0 = sweep_steps(n, stage, 0)
            most = max(most, -(-k0 // SEPARATION))
    return most


def launches(n: int, bw: int, tw: int) -> int:
    """Kernel launches of a whole reduction (sum of ``stage_cycles``)."""
    return sum(stage_cycles(n, s) for s in stages(n, bw, tw))


def all_cycles(n: int, bw: int, tw: int) -> Iterator[tuple[Stage, int]]:
    """Every launch of a reduction in order: (stage, cycle)."""
    for stage in stages(n, bw, tw):
        for cycle in range(stage_cycles(n, stage)):
            yield stage, cycle
