"""Device time per SOLVE_TRI call from replaying captured CUDA graphs
(``evaluator.set_timing``, shared with trsm_batched): the candidate, the same candidate captured a
second time, cuBLAS (``seeds.solve_tri.baseline.CublasSolveTri``), an empty kernel and any rival,
interleaved round by round, with fresh inputs before every replay.

What is SOLVE_TRI's here:

- each input set is A, B and the key's own X: packed ggml tensors, ggml's usual layout, every set
  between guard bands; SOLVE_TRI writes X to its own tensor, so no copy restores B between calls
  and nothing is subtracted. cuBLAS solves in place, so its time includes the strided copy
  B → X that SOLVE_TRI needs from it (as ggml would pay it);
- the sets are bounded problems drawn as ``seeds.solve_tri.inputs`` draws them
  (:func:`draw_sets`);
- the audited outputs are checked as verification checks them (``check``, the path's
  ``evaluator.checks.solve_tri.check_output``) on :data:`~evaluator.timing.AUDITED_SETS` sets,
  with the guard bands of every X set and A's and B's buffers compared byte for byte; failures
  are renamed ``timed_output_<check>`` (:func:`audit_outputs`). The sets' checks (each a
  float64 reference with |A⁻¹|, 0.6 s at (64, 64, 8, 32) on the development machine) run at
  once in the host pool (``evaluator.host_pool``), after the timed rounds; the first failing
  set in the audit's order is the one reported, as when they ran one after another.

Runs inside the GPU worker process only (CuPy imported by the functions that launch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np

from evaluator import host_pool, set_timing
from evaluator.checks.solve_tri import shape_words
from evaluator.inputs import CounterRng
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from evaluator.set_timing import (
    MAX_CALLS,
    SAMPLES,
    WARMUP,
    SetCall,
    TimedSets,
    time_sets,
)
from evaluator.set_timing import (
    MIN_CALLS as MIN_CALLS,  # the plan's bounds, read by the tests as this module's
)
from evaluator.timing import SetLayout
from seeds.solve_tri.inputs import Problem, Tensor
from seeds.solve_tri.layout import FLOAT_BYTES, packed_strides

SolveTriShape = tuple[int, int, int, int]
# solve_raw(a_ptr, b_ptr, x_ptr, n, k, b2, b3, nb_a, nb_b, nb_x, stream): the candidate's launch.
Solver = Callable[..., None]


def timing_plan(shape: SolveTriShape) -> dict[str, int]:
    """``calls``, ``samples``, ``warmup``, ``single_calls`` and ``replays_per_draw`` for
    ``shape`` (n, k, b2, b3): ``evaluator.set_timing.timing_plan`` of one set's A and B bytes."""
    n, k, b2, b3 = shape
    return set_timing.timing_plan(FLOAT_BYTES * b2 * b3 * (n * n + n * k))


def bytes_moved(shape: SolveTriShape) -> int:
    """Bytes one call must move at least: every A's lower triangle and B read, X written
    (b2·b3·(n(n+1)/2 + 2nk) floats)."""
    n, k, b2, b3 = shape
    return FLOAT_BYTES * b2 * b3 * (n * (n + 1) // 2 + 2 * n * k)


def plausibility_floor_us(shape: SolveTriShape, dram_bandwidth: float, launch_us: float) -> float:
    """The per-call time (µs) below which a measured solve cannot be real at ``shape``
    (``evaluator.set_timing.plausibility_floor_us`` of :func:`bytes_moved`)."""
    return set_timing.plausibility_floor_us(bytes_moved(shape), dram_bandwidth, launch_us)


def draw_sets(rng: CounterRng, shape: SolveTriShape, count: int) -> tuple[Any, Any]:
    """``count`` bounded problems at once in the array module of ``rng``: A (count, b3·b2·n·n)
    and B (count, b3·b2·n·k) float32, each row one set's packed ggml tensor (matrices row-major,
    b2 inner), drawn as ``seeds.solve_tri.inputs`` draws ``bounded`` data (diagonal magnitudes
    in [1, 2] with a random sign, strict lower triangle uniform in [−1, 1]/√n, strict upper
    triangle NaN, B uniform in [−1, 1])."""
    xp = rng.xp
    n, k, b2, b3 = shape
    lower = rng.uniform(-1.0, 1.0, (count, b3, b2, n, n)) / math.sqrt(n)
    magnitude = rng.uniform(1.0, 2.0, (count, b3, b2, n))
    sign = xp.where(rng.uniform(0.0, 1.0, (count, b3, b2, n)) < 0.5, -1.0, 1.0)
    rows = xp.arange(n)
    a = xp.where(rows[:, None] == rows[None, :], (magnitude * sign)[..., None], lower)
    a = xp.where(rows[:, None] < rows[None, :], xp.nan, a)
    b = rng.uniform(-1.0, 1.0, (count, b3, b2, n, k))
    return a.astype(xp.float32).reshape(count, -1), b.astype(xp.float32).reshape(count, -1)


def set_problem(
    shape: SolveTriShape,
    layouts: tuple[SetLayout, SetLayout],
    buffers: tuple[np.ndarray, np.ndarray, np.ndarray],
    index: int,
    seed: int,
) -> Problem:
    """Input set ``index`` of host copies of the timing buffers as a ``seeds.solve_tri`` problem
    (packed tensors between their guard bands), for the path's check: ``buffers`` are A's and
    B's buffers as the run read them and a fresh X buffer (guard values everywhere: what X's
    bands must still hold)."""
    n, k, b2, b3 = shape
    (a_layout, b_layout), (a_in, b_in, x_fresh) = layouts, buffers

    def tensor(layout: SetLayout, flat: np.ndarray, ne: SolveTriShape, cols: int) -> Tensor:
        start = layout.guard + index * layout.stride
        region = flat[start - layout.guard : start + layout.size + layout.guard]
        return Tensor(region, layout.guard, ne, packed_strides(cols, n, b2))

    a = tensor(a_layout, a_in, (n, n, b2, b3), n)
    b = tensor(b_layout, b_in, (k, n, b2, b3), k)
    x = tensor(b_layout, x_fresh, (k, n, b2, b3), k)
    return Problem(a, b, x, "bounded", seed, "packed")


def set_output(layout: SetLayout, x_out: np.ndarray, index: int) -> np.ndarray:
    """Set ``index``'s X with its guard bands, from a host copy of an X buffer (the region
    :func:`set_problem`'s X tensor spans)."""
    start = layout.guard + index * layout.stride
    return x_out[start - layout.guard : start + layout.size + layout.guard]


def audit_outputs(
    when: str,
    shape: SolveTriShape,
    layouts: tuple[SetLayout, SetLayout],
    inputs: tuple[np.ndarray, np.ndarray],
    after: tuple[np.ndarray, np.ndarray, np.ndarray],
    sets: list[int],
    check: Callable[..., CheckFailure | None],
    seed: int,
) -> CheckFailure | None:
    """The first failure of one timed run's outputs, from host copies: every X set's guard
    bands unchanged (``out_of_bounds_write``), A's and B's buffers as the run read them
    (``input_modified``), then ``check`` on the outputs of ``sets``; renamed
    ``timed_output_<check>``, ``when`` and the set in the detail."""
    a_layout, b_layout = layouts
    (a_in, b_in), (a_out, b_out, x_out) = inputs, after
    fresh = b_layout.allocate(np, np.dtype(np.float32))
    written = b_layout.guard_bytes(x_out) != b_layout.guard_bytes(fresh)
    cases = {
        i: (
            set_problem(shape, layouts, (a_in, b_in, fresh), i, seed),
            set_output(b_layout, x_out, i),
        )
        for i in sets
    }
    # Every set's check starts in the host pool when audit_sets asks for the first one (only
    # once the guard bands and the inputs have passed); it asks for them in the order of
    # ``sets`` and stops at the first failure, as it did when it ran each check itself.
    verdicts: dict[int, Future[CheckFailure | None]] = {}

    def judged(problem: Problem, output: np.ndarray) -> CheckFailure | None:
        if not verdicts:
            verdicts.update({id(p): host_pool.submit(check, p, x) for p, x in cases.values()})
        return verdicts[id(problem)].result()

    try:
        return set_timing.audit_sets(
            when, shape, shape_words(shape), "an X set" if written else None,
            (("A", a_in, a_out), ("B", b_in, b_out)), sets, cases.__getitem__, judged,
        )  # fmt: skip
    finally:
        for verdict in verdicts.values():
            verdict.cancel()  # after a failure, the later sets' checks are not needed


def time_shape(
    shape: SolveTriShape,
    candidate: Solver,
    baseline: Any,
    check: Callable[..., CheckFailure | None],
    *,
    rivals: Mapping[str, Solver] | None = None,
    calls: int = MAX_CALLS,
    samples: int = SAMPLES,
    warmup: int = WARMUP,
    single_calls: int = MAX_CALLS,
    replays_per_draw: int = 1,
    seed: int = 12345,
) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:
    """Time ``candidate`` (a driver's ``solve_raw``) at ``shape`` (n, k, b2, b3) against
    ``baseline`` (``CublasSolveTri``, rebound to the timing stream) and ``rivals`` (name →
    solver of the candidate's signature), all in the same rounds (module docstring;
    ``evaluator.set_timing.time_sets``). ``seed`` starts the device's draws of the timed inputs
    and fixes the bootstrap's resampling; ``replays_per_draw`` replays' inputs are drawn at once
    (every replay still sees sets no other replay saw).

    Returns the candidate's :class:`ShapeTiming` (``shape`` set, ``m = n = 0``), one
    :class:`RivalTiming` per rival, and the first failure: the audits of the timed outputs,
    then ``implausible_time``.

    Raises:
        ValueError: ``single_calls`` > ``calls`` (each single call needs a set of its own).
    """
    import cupy

    n, k, b2, b3 = shape
    nb_a, nb_b = packed_strides(n, n, b2), packed_strides(k, n, b2)
    layouts = (
        SetLayout(calls, n * n * b2 * b3, FLOAT_BYTES),
        SetLayout(calls, k * n * b2 * b3, FLOAT_BYTES),
    )
    stream = cupy.cuda.Stream(non_blocking=True)
    baseline.set_stream(stream)

    def bound(solve: Solver) -> SetCall:
        return lambda a, b, x, stream: solve(a, b, x, n, k, b2, b3, nb_a, nb_b, nb_b, stream)

    def audit(when: str, inputs: Any, after: Any, sets: list[int]) -> CheckFailure | None:
        return audit_outputs(when, shape, layouts, inputs, after, sets, check, seed)

    sets = TimedSets(
        shape=shape, words=shape_words(shape), dtype=np.dtype(np.float32), layouts=layouts,
        in_place=False, draw=lambda rng, count: draw_sets(rng, shape, count),
        bytes_moved=bytes_moved(shape), audit=audit,
    )  # fmt: skip
    return time_sets(
        sets, bound(candidate),
        lambda a, b, x, stream: baseline.solve_raw(a, b, x, n, k, b2, b3, nb_a, nb_b, nb_b),
        rivals={name: bound(solve) for name, solve in (rivals or {}).items()}, stream=stream,
        calls=calls, samples=samples, warmup=warmup, single_calls=single_calls,
        replays_per_draw=replays_per_draw, seed=seed,
    )  # fmt: skip
