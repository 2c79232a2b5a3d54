"""Device time per SOLVE_TRI call from replaying captured CUDA graphs: the candidate, the same
candidate captured a second time, cuBLAS (``seeds.solve_tri.baseline.CublasSolveTri``), an empty
kernel and any rival, interleaved round by round, with fresh inputs before every replay.

It follows ``evaluator.timing`` (trsm's; docs/EVALUATOR.md, "Timing") where the op allows:

- each graph holds ``calls`` solves, each on an input set of its own (A, B and the key's own X:
  packed ggml tensors, ggml's usual layout, every set between guard bands); SOLVE_TRI writes X to
  its own tensor, so no copy restores B between calls and nothing is subtracted. cuBLAS solves in
  place, so its time includes the strided copy B → X that SOLVE_TRI needs from it (as ggml would
  pay it);
- before every replay, outside the timed events, every set of A and B is overwritten on the
  device with new bounded problems drawn as ``seeds.solve_tri.inputs`` draws them (the
  :class:`~evaluator.inputs.CounterRng` hash: no cuRAND), so no two calls see the same inputs;
- the outputs of one replay chosen at random (unseeded: the candidate cannot know which) and of
  the single calls are checked as verification checks them (``check``, the path's
  ``evaluator.checks.solve_tri.check_output``) on :data:`~evaluator.timing.AUDITED_SETS` sets,
  with the guard bands of every X set and A's and B's buffers compared byte for byte; failures
  are renamed ``timed_output_<check>``;
- the noise floor is the candidate against its second graph (``evaluator.noise``), and a time
  below the plausibility floor — max(bytes one call must move / (4 × DRAM bandwidth), half an
  empty kernel's launch measured in the same rounds) — is ``implausible_time``.

Runs inside the GPU worker process only (CuPy imported by the functions that launch).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from evaluator.checks.solve_tri import shape_words
from evaluator.inputs import CounterRng
from evaluator.noise import (
    L2_OVER_DRAM,
    LAUNCH_FLOOR_FRACTION,
    dram_bytes_per_s,
    is_faster,
    noise_floor,
    ratio_interval,
)
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from evaluator.timing import AUDITED_SETS, EMPTY_KERNEL, RIVAL_PREFIX, SetLayout, iqr
from seeds.solve_tri.inputs import Problem, Tensor
from seeds.solve_tri.layout import FLOAT_BYTES, packed_strides

SolveTriShape = tuple[int, int, int, int]
# solve_raw(a_ptr, b_ptr, x_ptr, n, k, b2, b3, nb_a, nb_b, nb_x, stream): the candidate's launch.
Solver = Callable[..., None]

# Input sets per graph: as many as fit this many bytes of A and B (the L2 of an H200 is 50 MB:
# at the largest timed shape, (64, 64, 8, 32), ten sets of 6 MiB reach past it, as ggml's
# tensors of that size would), between these bounds.
SET_BYTES_BUDGET = 64 * 2**20
MIN_CALLS, MAX_CALLS = 2, 16
SAMPLES, WARMUP = 60, 5
# Replays whose inputs are drawn at once (each refresh copies its own slice in), as many as fit
# this many bytes, at most MAX_REPLAYS_PER_DRAW: a draw costs a few dozen launches from Python
# whatever its size, and one per replay made timing 15.6 s of a candidate's 22 s on the H200
# (docs/RESULTS.md section 16).
DRAW_BYTES_BUDGET = 512 * 2**20
MAX_REPLAYS_PER_DRAW = 16


def timing_plan(shape: SolveTriShape) -> dict[str, int]:
    """``calls`` (solves per graph, each on its own input set), ``samples``, ``warmup``,
    ``single_calls`` and ``replays_per_draw`` for ``shape`` (n, k, b2, b3): calls =
    SET_BYTES_BUDGET / (bytes of one set's A and B), within [MIN_CALLS, MAX_CALLS]; replays per
    draw = DRAW_BYTES_BUDGET / (bytes of one replay's sets), within [1, MAX_REPLAYS_PER_DRAW]."""
    n, k, b2, b3 = shape
    per_set = FLOAT_BYTES * b2 * b3 * (n * n + n * k)
    calls = max(MIN_CALLS, min(MAX_CALLS, SET_BYTES_BUDGET // per_set))
    replays = max(1, min(MAX_REPLAYS_PER_DRAW, DRAW_BYTES_BUDGET // (calls * per_set)))
    return {"calls": calls, "samples": SAMPLES, "warmup": WARMUP, "single_calls": calls,
            "replays_per_draw": replays}  # fmt: skip


def bytes_moved(shape: SolveTriShape) -> int:
    """Bytes one call must move at least: every A's lower triangle and B read, X written
    (b2·b3·(n(n+1)/2 + 2nk) floats)."""
    n, k, b2, b3 = shape
    return FLOAT_BYTES * b2 * b3 * (n * (n + 1) // 2 + 2 * n * k)


def plausibility_floor_us(shape: SolveTriShape, dram_bandwidth: float, launch_us: float) -> float:
    """The per-call time (µs) below which a measured solve cannot be real:
    max(:func:`bytes_moved` / (L2_OVER_DRAM × ``dram_bandwidth``), LAUNCH_FLOOR_FRACTION ×
    ``launch_us``), as ``evaluator.noise.plausibility_floor_us`` for trsm."""
    transfer_us = bytes_moved(shape) / (L2_OVER_DRAM * dram_bandwidth) * 1e6
    return max(transfer_us, LAUNCH_FLOOR_FRACTION * max(launch_us, 0.0))


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
    where, failure = when, None
    if b_layout.guard_bytes(x_out) != b_layout.guard_bytes(fresh):
        detail = f"{shape_words(shape)}: a guard band around an X set was written"
        failure = CheckFailure("out_of_bounds_write", shape, None, None, detail)
    for name, before, now in (("A", a_in, a_out), ("B", b_in, b_out)):
        if failure is None and before.tobytes() != now.tobytes():
            detail = f"{shape_words(shape)}: {name} changed during the solves"
            failure = CheckFailure("input_modified", shape, None, None, detail)
    for i in sets if failure is None else ():
        problem = set_problem(shape, layouts, (a_in, b_in, fresh), i, seed)
        if failure := check(problem, set_output(b_layout, x_out, i)):
            where = f"{when}, input set {i}"
            break
    if failure is None:
        return None
    return CheckFailure(
        "timed_output_" + failure.check, failure.shape, failure.value, failure.bound,
        f"{where}: {failure.detail}",
    )  # fmt: skip


def _audited(count: int) -> list[int]:
    """:data:`AUDITED_SETS` distinct set indices below ``count``, unseeded, in order."""
    picks = np.random.default_rng().choice(count, size=min(AUDITED_SETS, count), replace=False)
    return sorted(int(i) for i in picks)


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
    solver of the candidate's signature), all in the same rounds (module docstring). ``seed``
    starts the device's draws of the timed inputs and fixes the bootstrap's resampling;
    ``replays_per_draw`` replays' inputs are drawn at once (every replay still sees sets no
    other replay saw).

    Returns the candidate's :class:`ShapeTiming` (``shape`` set, ``m = n = 0``), one
    :class:`RivalTiming` per rival, and the first failure: the audits of the timed outputs,
    then ``implausible_time``.

    Raises:
        ValueError: ``single_calls`` > ``calls`` (each single call needs a set of its own).
    """
    import cupy

    if single_calls > calls:
        raise ValueError(f"single_calls {single_calls} > calls {calls}")
    n, k, b2, b3 = shape
    f32 = np.dtype(np.float32)
    nb_a, nb_b = packed_strides(n, n, b2), packed_strides(k, n, b2)
    a_layout = SetLayout(calls, n * n * b2 * b3, FLOAT_BYTES)
    b_layout = SetLayout(calls, k * n * b2 * b3, FLOAT_BYTES)
    layouts = a_layout, b_layout
    a_buf, b_buf = a_layout.allocate(cupy, f32), b_layout.allocate(cupy, f32)
    rng = CounterRng(cupy, seed)
    stream = cupy.cuda.Stream(non_blocking=True)
    baseline.set_stream(stream)
    empty = cupy.RawKernel(EMPTY_KERNEL, "kernevo_empty")

    def pointers(x: Any, i: int) -> tuple[int, int, int]:
        return (
            a_buf.data.ptr + a_layout.offset(i), b_buf.data.ptr + b_layout.offset(i),
            x.data.ptr + b_layout.offset(i),
        )  # fmt: skip

    def bound(solve: Solver) -> Callable[[Any, int], None]:
        return lambda x, i: solve(*pointers(x, i), n, k, b2, b3, nb_a, nb_b, nb_b, stream)

    def launch_empty(x: Any, i: int) -> None:
        with stream:  # RawKernel launches on the current stream
            empty((1,), (1,), ())

    launches: dict[str, Callable[[Any, int], None]] = {
        "cand": bound(candidate),
        "cand_again": bound(candidate),
        "blas": lambda x, i: baseline.solve_raw(*pointers(x, i), n, k, b2, b3, nb_a, nb_b, nb_b),
        "launch": launch_empty,
        **{RIVAL_PREFIX + name: bound(solve) for name, solve in (rivals or {}).items()},
    }
    outputs = {key: b_layout.allocate(cupy, f32) for key in launches}
    cupy.cuda.Device().synchronize()  # the buffers' guard values are in place before any stream

    bank: dict[str, Any] = {"a": None, "b": None, "next": replays_per_draw}

    def refresh() -> None:
        # In place (the graphs hold these addresses), on the timing stream: ordered before the
        # next replay and outside its events.
        with stream:
            if bank["next"] == replays_per_draw:
                bank["a"], bank["b"] = draw_sets(rng, shape, calls * replays_per_draw)
                bank["next"] = 0
            first = bank["next"] * calls
            bank["next"] += 1
            a_layout.payload(a_buf)[...] = bank["a"][first : first + calls]
            b_layout.payload(b_buf)[...] = bank["b"][first : first + calls]

    def inputs_copy() -> tuple[Any, Any]:
        with stream:
            return a_buf.copy(), b_buf.copy()

    # Untimed first calls outside capture: module load, geometry query, cuBLAS's pointer arrays,
    # the empty kernel's compilation; each key on a set of its own.
    refresh()
    for i, key in enumerate(launches):
        launches[key](outputs[key], i % calls)
    stream.synchronize()

    def capture(key: str) -> Any:
        stream.begin_capture()
        for r in range(calls):
            launches[key](outputs[key], r)
        return stream.end_capture()

    graphs = {key: capture(key) for key in launches}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    raw: dict[str, list[float]] = {key: [] for key in graphs}
    order = list(graphs)
    audited = warmup + int(np.random.default_rng().integers(samples))
    replay_audit = None
    for s in range(warmup + samples):
        for key in order[s % len(order) :] + order[: s % len(order)]:
            refresh()
            watched = s == audited and key == "cand"
            before = inputs_copy() if watched else None
            start.record(stream)
            graphs[key].launch(stream)
            stop.record(stream)
            stop.synchronize()
            if s >= warmup:
                raw[key].append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)  # µs
            if before is not None:
                # To the host now: the next refresh overwrites what this replay read.
                replay_audit = (
                    (before[0].get(), before[1].get()),
                    (a_buf.get(), b_buf.get(), outputs["cand"].get()),
                )
    rounds = {key: np.asarray(values) for key, values in raw.items()}
    per_call = {key: values / calls for key, values in rounds.items()}
    median = {key: float(np.median(values)) for key, values in per_call.items()}

    def single(key: str) -> float:
        times = []
        for i in range(single_calls):
            stream.synchronize()
            start.record(stream)
            launches[key](outputs[key], i)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return float(np.median(times))

    refresh()  # the single calls too see inputs no replay saw
    before = inputs_copy()
    single_us = {key: single(key) for key in ("cand", "blas")}
    single_audit = (
        (before[0].get(), before[1].get()),
        (a_buf.get(), b_buf.get(), outputs["cand"].get()),
    )

    def versus(key: str) -> Any:
        return ratio_interval(rounds[key], rounds["cand"], seed=seed)

    speedup = versus("blas")
    floor = noise_floor(ratio_interval(rounds["cand"], rounds["cand_again"], seed=seed))
    attributes = cupy.cuda.Device().attributes
    bandwidth = dram_bytes_per_s(
        attributes.get("MemoryClockRate", 0), attributes.get("GlobalMemoryBusWidth", 0)
    )
    floor_us = plausibility_floor_us(shape, bandwidth, median["launch"])
    timing = ShapeTiming(
        m=0,
        n=0,
        candidate_us=median["cand"],
        candidate_spread_us=iqr(per_call["cand"]),
        baseline_us=median["blas"],
        baseline_spread_us=iqr(per_call["blas"]),
        candidate_single_call_us=single_us["cand"],
        baseline_single_call_us=single_us["blas"],
        candidate_again_us=median["cand_again"],
        noise_floor=floor,
        speedup_low=speedup.low,
        speedup_high=speedup.high,
        faster_than_baseline=is_faster(speedup, floor),
        plausibility_floor_us=floor_us,
        shape=shape,
    )
    rival_timings = []
    for name in rivals or {}:
        interval = versus(RIVAL_PREFIX + name)
        rival_timings.append(
            RivalTiming(
                name=name,
                m=0,
                n=0,
                rival_us=median[RIVAL_PREFIX + name],
                candidate_us=median["cand"],
                speedup=interval.estimate,
                speedup_low=interval.low,
                speedup_high=interval.high,
                noise_floor=floor,
                faster=is_faster(interval, floor),
                shape=shape,
            )  # fmt: skip
        )
    assert replay_audit is not None  # audited < warmup + samples
    failure = audit_outputs(
        f"graph replay {audited - warmup} of {samples}", shape, layouts, *replay_audit,
        _audited(calls), check, seed,
    )  # fmt: skip
    failure = failure or audit_outputs(
        "single calls", shape, layouts, *single_audit, _audited(single_calls), check, seed
    )
    fastest = min(median["cand"], median["cand_again"])
    if failure is None and fastest < floor_us:
        failure = CheckFailure(
            "implausible_time", shape, fastest, floor_us,
            f"{shape_words(shape)}: median per-call time {fastest:.3g} us over graph replays of "
            f"{calls} solves is "
            f"below what the device allows: max(bytes moved / L2 bound, {LAUNCH_FLOOR_FRACTION} "
            f"x an empty kernel's {median['launch']:.3g} us per launch, measured in the same "
            "replays)",
        )  # fmt: skip
    return timing, rival_timings, failure
