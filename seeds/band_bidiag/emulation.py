"""A NumPy emulation of the `band_bidiag` seed kernel: the same stages, sweeps, steps and
launches (``schedule``), the same padded storage (``layout``), the same Householder convention
(:func:`householder`), in the kernel's own precision. No GPU.

What it is for: CPU tests of the algorithm the kernel runs (its singular values against
LAPACK's, the three-cycle rule, the storage room), the measured error that sets the check's
bound (``reference.BOUND_FACTOR``), and planted faults for the red-team tests.

Differences from the kernel: the per-row and per-column dot products are NumPy's (another
summation order than the kernel's sequential one), so results agree to rounding, not bitwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from . import schedule
from .layout import PaddedLayout, bidiagonal, pack
from .schedule import Stage, Task

Order = Literal["launch", "sequential"]
# A planted fault: called with (stage index, number of stages, stage, task); True skips the task.
SkipRule = Callable[[int, int, Stage, Task], bool]


def householder(x: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The reflector H = I − τ·v·vᵀ (v₀ = 1) with H·x = β·e₁, LAPACK's xLARFG convention, as the
    kernel computes it: β = −sign(x₀)·‖x‖ (x₀ = ±0 gives β = −‖x‖), τ = (β − x₀)/β,
    v_i = x_i/(x₀ − β); when x₁.. are all zero, τ = 0 and β = x₀ (H = I). ‖x‖ is taken as
    s·sqrt(Σ(x_i/s)²) with s = max|x_i|, so it neither overflows nor underflows where ‖x‖ is
    representable. Computed in ``x``'s dtype.

    Returns:
        (v, tau, beta), v of x's length and dtype.
    """
    dt = x.dtype.type
    alpha = x[0]
    v = x.copy()
    amax = np.max(np.abs(x[1:])) if x.size > 1 else dt(0)
    if amax == 0:
        v[0] = dt(1)
        v[1:] = dt(0)
        return v, dt(0), alpha
    scale = max(amax, abs(alpha))
    norm = dt(scale * np.sqrt(np.sum((x / scale) ** 2, dtype=x.dtype)))
    beta = -norm if alpha >= 0 else norm
    tau = dt((beta - alpha) / beta)
    v[1:] = x[1:] / dt(alpha - beta)
    v[0] = dt(1)
    return v, tau, beta


@dataclass
class Storage:
    """The padded band array and its layout; :meth:`room` refuses a task that would reach
    outside it (a failure of the layout's room, never a silent wrap of a negative index)."""

    ab: np.ndarray
    layout: PaddedLayout

    def room(self, stage: Stage, task: Task) -> None:
        """Check that every entry ``task`` touches is stored: its farthest entry above the
        diagonal (row ``row`` at column c1, row c0 at column min(c1 + b, n − 1)) within ku,
        below it (row c1 at column c0) within ldab − 1 − ku, and its columns inside the matrix.

        Raises:
            IndexError: naming the reach and the room.
        """
        above = max(task.c1 - task.row, task.columns(stage.b, self.layout.n)[1] - task.c0)
        below = task.c1 - task.c0
        ku, ldab, n = self.layout.ku, self.layout.ldab, self.layout.n
        if above > ku or below > ldab - 1 - ku or not 0 <= task.row <= task.c0 < task.c1 < n:
            raise IndexError(
                f"task {task} reaches {above} above and {below} below the diagonal; the padded "
                f"band holds {ku} above and {ldab - 1 - ku} below, n = {n}"
            )

    def index(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Storage indices of a_{rows, cols} (broadcasting, as NumPy's fancy indexing does)."""
        return self.layout.ku + rows - cols, cols


def run_task(store: Storage, stage: Stage, task: Task) -> None:
    """One step of one sweep, as one thread block of the kernel runs it: the row task (right
    reflector on columns c0..c1, applied to rows row+1..c1), then the column task (left
    reflector on rows c0..c1, applied to columns c0+1..min(c1 + b, n − 1)).

    Raises:
        IndexError: the task reaches outside the padded storage (``Storage.room``).
    """
    store.room(stage, task)
    ab, n = store.ab, store.layout.n
    cols = np.arange(task.c0, task.c1 + 1)
    # Row task: annihilate a(row, c0+1..c1).
    at_row = store.index(np.int64(task.row), cols)
    v, tau, beta = householder(ab[at_row])
    ab[at_row] = 0
    ab[store.index(np.int64(task.row), np.int64(task.c0))] = beta
    rows = np.arange(task.row + 1, task.c1 + 1)
    if rows.size:
        at = store.index(rows[:, None], cols[None, :])
        block = ab[at]
        ab[at] = block - ((block @ v) * tau)[:, None] * v[None, :]
    # Column task: annihilate a(c0+1..c1, c0).
    rows = cols
    at_col = store.index(rows, np.int64(task.c0))
    v, tau, beta = householder(ab[at_col])
    ab[at_col] = 0
    ab[store.index(np.int64(task.c0), np.int64(task.c0))] = beta
    right = np.arange(task.c0 + 1, min(task.c1 + stage.b, n - 1) + 1)
    if right.size:
        at = store.index(rows[:, None], right[None, :])
        block = ab[at]
        ab[at] = block - v[:, None] * ((v @ block) * tau)[None, :]


def _check_disjoint(tasks: list[Task]) -> None:
    spans = sorted(t.rows() for t in tasks)
    for (_, hi), (lo, _) in zip(spans, spans[1:], strict=False):
        if lo <= hi:
            raise AssertionError(f"tasks of one launch share rows: {spans}")


def _launch_tasks(n: int, stage: Stage, cycle: int, separation: int) -> list[Task]:
    """The tasks of one launch, highest sweep first (the kernel's block order), for any
    separation ≥ 2 (active sweeps are consecutive: see ``schedule.active_sweeps``)."""
    tasks = []
    r = min(schedule.last_sweep(n, stage), cycle // separation)
    while r >= 0 and cycle - separation * r < schedule.sweep_steps(n, stage, r):
        tasks.append(schedule.task(n, stage, r, cycle - separation * r))
        r -= 1
    return tasks


def reduce(
    band: np.ndarray,
    tw: int,
    *,
    dtype: type | None = None,
    order: Order = "launch",
    rng: np.random.Generator | None = None,
    skip: SkipRule | None = None,
    separation: int = schedule.SEPARATION,
) -> tuple[np.ndarray, np.ndarray]:
    """Reduce a LAPACK upper band ((BW + 1) × n) to (d, e) the way the kernel does.

    Args:
        band: the input band; tw: the kernel's tile width TW; dtype: the precision to work in
            (default the band's).
        order: ``"launch"`` runs launch by launch (the kernel's order; within a launch the
            tasks in the kernel's block order, or shuffled by ``rng``), checking that the tasks
            of each launch share no row; ``"sequential"`` runs sweep after sweep (the
            algorithm's defining order). Disjoint tasks commute exactly, so both give the same
            bits.
        skip: a planted fault (tests): tasks for which it returns True are not run.
        separation: launches between the starts of consecutive sweeps (3, the paper's rule;
            tests show that 2 makes tasks of one launch overlap where b − t = 1).

    Returns:
        (d (n,), e (n − 1,)) in the working dtype.

    Raises:
        AssertionError: tasks of one launch share rows (order ``"launch"``).
        IndexError: a task reached outside the padded storage.
    """
    ab, layout = pack(np.asarray(band), dtype=dtype)
    store = Storage(ab, layout)
    n = layout.n
    plan = schedule.stages(n, layout.bw, tw)
    for index, stage in enumerate(plan):
        last = schedule.last_sweep(n, stage)
        if order == "sequential":
            launches = [
                [schedule.task(n, stage, r, k)]
                for r in range(last + 1)
                for k in range(schedule.sweep_steps(n, stage, r))
            ]
        else:
            launches = [
                _launch_tasks(n, stage, cycle, separation)
                for cycle in range(separation * last + 1 if last >= 0 else 0)
            ]
        for tasks in launches:
            _check_disjoint(tasks)
            if rng is not None:
                tasks = [tasks[i] for i in rng.permutation(len(tasks))]
            for t in tasks:
                if skip is None or not skip(index, len(plan), stage, t):
                    run_task(store, stage, t)
    return bidiagonal(store.ab, layout)


def reduce_dense(a: np.ndarray, bw: int, tw: int) -> np.ndarray:
    """The same tasks in the same order, each reflector applied to the whole n×n matrix (every
    row for a right reflector, every column for a left one): an exact orthogonal equivalence
    step by step. Its result must be bidiagonal with every other entry exactly zero, which shows
    that the kernel's row and column ranges miss no nonzero (tests).

    Returns:
        The reduced n×n matrix (a copy of ``a``, in its dtype).
    """
    a = np.array(a, copy=True)
    n = a.shape[0]
    for stage in schedule.stages(n, bw, tw):
        for r in range(schedule.last_sweep(n, stage) + 1):
            for k in range(schedule.sweep_steps(n, stage, r)):
                t = schedule.task(n, stage, r, k)
                blk = slice(t.c0, t.c1 + 1)
                v, tau, beta = householder(a[t.row, blk].copy())
                a[:, blk] -= np.outer((a[:, blk] @ v) * tau, v)
                a[t.row, blk] = 0
                a[t.row, t.c0] = beta
                v, tau, beta = householder(a[blk, t.c0].copy())
                a[blk, :] -= np.outer(v, (v @ a[blk, :]) * tau)
                a[blk, t.c0] = 0
                a[t.c0, t.c0] = beta
    return a
