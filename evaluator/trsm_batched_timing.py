"""Device time per ``trsm_batched`` call from replaying captured CUDA graphs
(``evaluator.set_timing``): the candidate against cuBLAS ``?trsmBatched``
(the path's baseline, ``PathSpec.baseline``: pointer arrays built once per input
set before capture) at one (m, n, batch), in place, with fresh bounded inputs
(``evaluator.trsm_batched_inputs``) before every replay.

The audited outputs are checked as verification checks them (``check``, the path's
``evaluator.checks.trsm_batched.check_output``) on :data:`~evaluator.timing.AUDITED_SETS` sets,
with the guard bands of every output set and A's buffer compared byte for byte; failures are
renamed ``timed_output_<check>``.

Runs inside the GPU worker process only (CuPy imported by the function that launches).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from evaluator import set_timing
from evaluator.checks.trsm_batched import shape_words
from evaluator.inputs import NUMPY_DTYPES
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from evaluator.set_timing import SetCall, TimedSets, time_sets
from evaluator.timing import SetLayout
from evaluator.trsm_batched_inputs import BatchedProblem, TrsmBatchedShape, draw_sets

# solve_raw(a_ptr, b_ptr, m, n, batch, stream): the candidate's launch.
Solver = Callable[..., None]


def timing_plan(shape: TrsmBatchedShape, dtype: str) -> dict[str, int]:
    """The plan for ``shape`` (m, n, batch) in ``dtype``: ``evaluator.set_timing.timing_plan``
    of one set's A and B bytes."""
    m, n, batch = shape
    itemsize = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    return set_timing.timing_plan(itemsize * batch * (m * m + m * n))


def bytes_moved(shape: TrsmBatchedShape, itemsize: int) -> int:
    """Bytes one call must move at least: every A's lower triangle and B read, X written."""
    m, n, batch = shape
    return itemsize * batch * (m * (m + 1) // 2 + 2 * m * n)


def audit_outputs(
    when: str,
    shape: TrsmBatchedShape,
    layouts: tuple[SetLayout, SetLayout],
    inputs: tuple[np.ndarray, np.ndarray],
    after: tuple[np.ndarray, np.ndarray, np.ndarray],
    sets: list[int],
    check: Callable[..., CheckFailure | None],
    seed: int,
) -> CheckFailure | None:
    """The first failure of one timed run's outputs, from host copies: every output set's guard
    bands unchanged (``out_of_bounds_write``), A's buffer as the run read it
    (``input_modified``), then ``check`` on the outputs of ``sets``; renamed
    ``timed_output_<check>``, ``when`` and the set in the detail."""
    m, n, batch = shape
    a_layout, b_layout = layouts
    (a_in, b_in), (a_out, _, x_out) = inputs, after
    fresh = b_layout.allocate(np, x_out.dtype)
    written = b_layout.guard_bytes(x_out) != b_layout.guard_bytes(fresh)

    def case(i: int) -> tuple[BatchedProblem, np.ndarray]:
        problem = BatchedProblem(
            a_layout.payload(a_in)[i].reshape(batch, m, m),
            b_layout.payload(b_in)[i].reshape(batch, m, n),
            seed, i,
        )  # fmt: skip
        begin = b_layout.guard + i * b_layout.stride
        return problem, x_out[begin - b_layout.guard : begin + b_layout.stride]

    return set_timing.audit_sets(
        when, shape, shape_words(shape), "an output set" if written else None,
        (("A", a_in, a_out),), sets, case, check,
    )  # fmt: skip


def time_shape(
    shape: TrsmBatchedShape,
    dtype: str,
    candidate: Solver,
    baseline: Any,
    check: Callable[..., CheckFailure | None],
    *,
    rivals: Mapping[str, Solver] | None = None,
    calls: int = set_timing.MAX_CALLS,
    samples: int = set_timing.SAMPLES,
    warmup: int = set_timing.WARMUP,
    single_calls: int = set_timing.MAX_CALLS,
    replays_per_draw: int = 1,
    seed: int = 12345,
) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:
    """Time ``candidate`` (a driver's ``solve_raw``) at ``shape`` (m, n, batch) in ``dtype``
    against ``baseline`` (the path's cuBLAS ?trsmBatched, rebound to the timing stream) and
    ``rivals`` (name → solver of the candidate's signature), in the same rounds
    (``evaluator.set_timing.time_sets``, in place).

    Raises:
        ValueError: ``single_calls`` > ``calls``.
    """
    import cupy

    m, n, batch = shape
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    layouts = (
        SetLayout(calls, batch * m * m, np_dtype.itemsize),
        SetLayout(calls, batch * m * n, np_dtype.itemsize),
    )
    stream = cupy.cuda.Stream(non_blocking=True)
    baseline.set_stream(stream)

    def bound(solve: Solver) -> SetCall:
        return lambda a, b, x, stream: solve(a, x, m, n, batch, stream)

    def audit(when: str, inputs: Any, after: Any, sets: list[int]) -> CheckFailure | None:
        return audit_outputs(when, shape, layouts, inputs, after, sets, check, seed)

    sets = TimedSets(
        shape=shape, words=shape_words(shape), dtype=np_dtype, layouts=layouts, in_place=True,
        draw=lambda rng, count: draw_sets(rng, shape, dtype, count),
        bytes_moved=bytes_moved(shape, np_dtype.itemsize), audit=audit,
    )  # fmt: skip
    return time_sets(
        sets, bound(candidate), lambda a, b, x, stream: baseline.solve_raw(a, x, m, n, batch),
        rivals={name: bound(solve) for name, solve in (rivals or {}).items()}, stream=stream,
        calls=calls, samples=samples, warmup=warmup, single_calls=single_calls,
        replays_per_draw=replays_per_draw, seed=seed,
    )  # fmt: skip
