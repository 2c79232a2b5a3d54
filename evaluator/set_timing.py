"""Graph-replay timing of an op whose problem is one A buffer and one B buffer per input set,
shared by the batched solves (``evaluator.solve_tri_timing``, ``evaluator.trsm_batched_timing``):
the candidate, the same candidate captured a second time, the vendor baseline, an empty kernel
and any rival, interleaved round by round, with fresh inputs before every replay.

It follows ``evaluator.timing`` (trsm's; docs/EVALUATOR.md, "Timing") where the op allows:

- each graph holds ``calls`` solves, each on an input set of its own, between guard bands
  (:class:`~evaluator.timing.SetLayout`); every graph writes its own output buffer. An op that
  writes X to its own tensor (solve_tri) reads the shared B buffer; an op that solves in place
  (trsm_batched) solves on its own output buffer, into which B is written before each of its
  replays, outside the timed events: no copy is timed and nothing is subtracted;
- before every replay, outside the timed events, every set is overwritten on the device with
  new problems (``TimedSets.draw``; a :class:`~evaluator.inputs.CounterRng`, no cuRAND), drawn
  for ``replays_per_draw`` replays at once, so no two calls see the same inputs;
- the outputs of one replay chosen at random (unseeded: the candidate cannot know which) and of
  the single calls are audited (``TimedSets.audit``) from host copies of exactly the inputs
  they read;
- the noise floor is the candidate against its second graph (``evaluator.noise``), and a time
  below the plausibility floor — max(bytes one call must move / (4 × DRAM bandwidth), half an
  empty kernel's launch measured in the same rounds) — is ``implausible_time``.

Before capture every key is called once outside it (module load, geometry query, the empty
kernel's compilation), each on a set of its own, and the baseline on every set (cuBLAS's
batched pointer arrays are built per set of addresses there, outside the timed region).

Runs inside the GPU worker process only (CuPy imported by the function that launches).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluator.noise import (
    L2_OVER_DRAM,
    LAUNCH_FLOOR_FRACTION,
    dram_bytes_per_s,
    is_faster,
    noise_floor,
    ratio_interval,
)
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming
from evaluator.timing import AUDITED_SETS, EMPTY_KERNEL, RIVAL_PREFIX, SetLayout, iqr, rival_timings

# Input sets per graph: as many as fit this many bytes of A and B (the L2 of an H200 is 50 MB:
# at solve_tri's largest timed shape, (64, 64, 8, 32), ten sets of 6 MiB reach past it, as
# ggml's tensors of that size would), between these bounds.
SET_BYTES_BUDGET = 64 * 2**20
MIN_CALLS, MAX_CALLS = 2, 16
# Rounds: 30 after 5 warm-up. In RESULTS section 21's solve_tri job (35 evaluations, 60 rounds)
# the noise floor (A against A', evaluator.noise) was 0.10-0.26 % in median at the four timed
# shapes, 0.15-0.50 % at the 90th percentile; a floor widens as 1/sqrt(rounds), so half the
# rounds gives about 0.15-0.7 %, well below any speedup worth a candidate, for half the time the
# GPU is held alone (timing was 6.4 s of a candidate; its lock wait 30 s).
SAMPLES, WARMUP = 30, 5
# Replays whose inputs are drawn at once (each refresh copies its own slice in), as many as fit
# this many bytes, at most MAX_REPLAYS_PER_DRAW: a draw costs a few dozen launches from Python
# whatever its size, and one per replay made timing 15.6 s of a candidate's 22 s on the H200
# (docs/RESULTS.md section 16).
DRAW_BYTES_BUDGET = 512 * 2**20
MAX_REPLAYS_PER_DRAW = 16

# One call on input set i: (a_ptr, b_ptr, x_ptr, stream) of that set; x_ptr is b_ptr in place.
SetCall = Callable[[int, int, int, Any], None]
# audit(when, inputs, after, sets): inputs are host copies of A's and B's buffers as the audited
# run read them, after those of A's buffer, B's buffer and the candidate's output buffer after
# it (B's is the output's in place); sets the indices whose outputs are judged.
Audit = Callable[
    [str, tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray], list[int]],
    "CheckFailure | None",
]


@dataclass(frozen=True)
class TimedSets:
    """What the timing needs of an op at one shape.

    ``shape`` and ``words`` (the shape by its parameters' names, for details); ``dtype`` of
    every buffer; ``layouts`` of the A and the B (and output) buffers; ``in_place``: the solve
    overwrites B (each graph then solves on its own output buffer, refreshed with B);
    ``draw(rng, count)``: ``count`` sets of A and B as (count, size) arrays of ``dtype`` in the
    module of ``rng``; ``bytes_moved``: the least bytes one call moves; ``audit``: see
    :data:`Audit`.
    """

    shape: tuple[int, ...]
    words: str
    dtype: np.dtype
    layouts: tuple[SetLayout, SetLayout]
    in_place: bool
    draw: Callable[[Any, int], tuple[Any, Any]]
    bytes_moved: int
    audit: Audit


def timing_plan(set_bytes: int) -> dict[str, int]:
    """``calls`` (solves per graph, each on its own input set), ``samples``, ``warmup``,
    ``single_calls`` and ``replays_per_draw`` for input sets of ``set_bytes`` bytes (A and B):
    calls = SET_BYTES_BUDGET / ``set_bytes``, within [MIN_CALLS, MAX_CALLS]; replays per draw =
    DRAW_BYTES_BUDGET / (bytes of one replay's sets), within [1, MAX_REPLAYS_PER_DRAW]."""
    calls = max(MIN_CALLS, min(MAX_CALLS, SET_BYTES_BUDGET // set_bytes))
    replays = max(1, min(MAX_REPLAYS_PER_DRAW, DRAW_BYTES_BUDGET // (calls * set_bytes)))
    return {"calls": calls, "samples": SAMPLES, "warmup": WARMUP, "single_calls": calls,
            "replays_per_draw": replays}  # fmt: skip


def plausibility_floor_us(bytes_moved: int, dram_bandwidth: float, launch_us: float) -> float:
    """The per-call time (µs) below which a measured solve cannot be real: max(``bytes_moved``
    / (L2_OVER_DRAM × ``dram_bandwidth``), LAUNCH_FLOOR_FRACTION × ``launch_us``), as
    ``evaluator.noise.plausibility_floor_us`` for trsm."""
    transfer_us = bytes_moved / (L2_OVER_DRAM * dram_bandwidth) * 1e6
    return max(transfer_us, LAUNCH_FLOOR_FRACTION * max(launch_us, 0.0))


def audited_sets(count: int) -> list[int]:
    """:data:`AUDITED_SETS` distinct set indices below ``count``, unseeded, in order."""
    picks = np.random.default_rng().choice(count, size=min(AUDITED_SETS, count), replace=False)
    return sorted(int(i) for i in picks)


def audit_sets(
    when: str,
    shape: tuple[int, ...],
    shape_text: str,
    guards_written: str | None,
    inputs: Iterable[tuple[str, np.ndarray, np.ndarray]],
    sets: Iterable[int],
    case: Callable[[int], tuple[Any, np.ndarray]],
    check: Callable[..., CheckFailure | None],
) -> CheckFailure | None:
    """The first failure of one timed run's outputs, from host copies, for either batched op:
    ``guards_written`` names the outputs whose guard bands were written (``None``: none were;
    ``out_of_bounds_write``), each ``(name, before, after)`` of ``inputs`` must be byte-identical
    (``input_modified``), then ``check(problem, output)`` for ``case(i)`` of every set of
    ``sets``. ``shape_text`` (the op's parameters by name) starts each detail; failures are
    renamed ``timed_output_<check>`` with ``when`` and the set in the detail."""
    where, failure = when, None
    if guards_written is not None:
        detail = f"{shape_text}: a guard band around {guards_written} was written"
        failure = CheckFailure("out_of_bounds_write", shape, None, None, detail)
    for name, before, now in inputs:
        if failure is None and before.tobytes() != now.tobytes():
            detail = f"{shape_text}: {name} changed during the solves"
            failure = CheckFailure("input_modified", shape, None, None, detail)
    for i in sets if failure is None else ():
        if failure := check(*case(i)):
            where = f"{when}, input set {i}"
            break
    if failure is None:
        return None
    return CheckFailure(
        "timed_output_" + failure.check, failure.shape, failure.value, failure.bound,
        f"{where}: {failure.detail}",
    )  # fmt: skip


def time_sets(
    sets: TimedSets,
    candidate: SetCall,
    baseline: SetCall,
    *,
    rivals: Mapping[str, SetCall] | None = None,
    stream: Any,
    calls: int,
    samples: int,
    warmup: int,
    single_calls: int,
    replays_per_draw: int,
    seed: int,
) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:
    """Time ``candidate`` against ``baseline`` and ``rivals`` (name → call), each a
    :data:`SetCall`, on ``stream`` (a CuPy stream the baseline is bound to), all in the same
    rounds (module docstring). ``seed`` starts the device's draws and fixes the bootstrap's
    resampling.

    Returns the candidate's :class:`ShapeTiming` (``shape`` set, ``m = n = 0``), one
    :class:`RivalTiming` per rival, and the first failure: the audits of the timed outputs,
    then ``implausible_time``.

    Raises:
        ValueError: ``single_calls`` > ``calls`` (each single call needs a set of its own).
    """
    import cupy

    from evaluator.inputs import CounterRng

    if single_calls > calls:
        raise ValueError(f"single_calls {single_calls} > calls {calls}")
    shape, (a_layout, b_layout) = sets.shape, sets.layouts
    a_buf, b_buf = a_layout.allocate(cupy, sets.dtype), b_layout.allocate(cupy, sets.dtype)
    rng = CounterRng(cupy, seed)
    empty = cupy.RawKernel(EMPTY_KERNEL, "kernevo_empty")

    def launch_empty(a_ptr: int, b_ptr: int, x_ptr: int, stream: Any) -> None:
        with stream:  # RawKernel launches on the current stream
            empty((1,), (1,), ())

    calls_of: dict[str, SetCall] = {
        "cand": candidate,
        "cand_again": candidate,
        "blas": baseline,
        "launch": launch_empty,
        **{RIVAL_PREFIX + name: call for name, call in (rivals or {}).items()},
    }
    outputs = {key: b_layout.allocate(cupy, sets.dtype) for key in calls_of}
    cupy.cuda.Device().synchronize()  # the buffers' guard values are in place before any stream

    def source_b(key: str) -> Any:
        """The B buffer ``key`` reads: its own output buffer in place, else the shared one."""
        return outputs[key] if sets.in_place else b_buf

    def run(key: str, i: int) -> None:
        b_ptr = source_b(key).data.ptr + b_layout.offset(i)
        x_ptr = outputs[key].data.ptr + b_layout.offset(i)
        calls_of[key](a_buf.data.ptr + a_layout.offset(i), b_ptr, x_ptr, stream)

    bank: dict[str, Any] = {"a": None, "b": None, "next": replays_per_draw}

    def refresh(key: str) -> None:
        # In place (the graphs hold these addresses), on the timing stream: ordered before the
        # next replay of ``key`` and outside its events.
        with stream:
            if bank["next"] == replays_per_draw:
                bank["a"], bank["b"] = sets.draw(rng, calls * replays_per_draw)
                bank["next"] = 0
            first = bank["next"] * calls
            bank["next"] += 1
            a_layout.payload(a_buf)[...] = bank["a"][first : first + calls]
            b_layout.payload(source_b(key))[...] = bank["b"][first : first + calls]

    def inputs_copy(key: str) -> tuple[Any, Any]:
        with stream:
            return a_buf.copy(), source_b(key).copy()

    def host_after(key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return a_buf.get(), source_b(key).get(), outputs[key].get()

    # Untimed first calls outside capture, each key on a set of its own (a kernel that keeps
    # results finds nothing of them in its later graphs), and the baseline on every set.
    for i, key in enumerate(calls_of):
        refresh(key)
        run(key, i % calls)
    for i in range(calls):
        run("blas", i)
    stream.synchronize()

    def capture(key: str) -> Any:
        stream.begin_capture()
        for r in range(calls):
            run(key, r)
        return stream.end_capture()

    graphs = {key: capture(key) for key in calls_of}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    raw: dict[str, list[float]] = {key: [] for key in graphs}
    order = list(graphs)
    audited = warmup + int(np.random.default_rng().integers(samples))
    replay_audit = None
    for s in range(warmup + samples):
        for key in order[s % len(order) :] + order[: s % len(order)]:
            refresh(key)
            watched = s == audited and key == "cand"
            before = inputs_copy(key) if watched else None
            start.record(stream)
            graphs[key].launch(stream)
            stop.record(stream)
            stop.synchronize()
            if s >= warmup:
                raw[key].append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)  # µs
            if before is not None:
                # To the host now: the next refresh overwrites what this replay read.
                replay_audit = (before[0].get(), before[1].get()), host_after(key)
    rounds = {key: np.asarray(values) for key, values in raw.items()}
    per_call = {key: values / calls for key, values in rounds.items()}
    median = {key: float(np.median(values)) for key, values in per_call.items()}

    def single(key: str) -> float:
        times = []
        for i in range(single_calls):
            stream.synchronize()
            start.record(stream)
            run(key, i)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return float(np.median(times))

    # The single calls too see inputs no replay saw; the candidate's are audited.
    refresh("cand")
    before = inputs_copy("cand")
    single_us = {"cand": single("cand")}
    single_audit = (before[0].get(), before[1].get()), host_after("cand")
    refresh("blas")
    single_us["blas"] = single("blas")

    def versus(key: str) -> Any:
        return ratio_interval(rounds[key], rounds["cand"], seed=seed)

    speedup = versus("blas")
    floor = noise_floor(ratio_interval(rounds["cand"], rounds["cand_again"], seed=seed))
    attributes = cupy.cuda.Device().attributes
    bandwidth = dram_bytes_per_s(
        attributes.get("MemoryClockRate", 0), attributes.get("GlobalMemoryBusWidth", 0)
    )
    floor_us = plausibility_floor_us(sets.bytes_moved, bandwidth, median["launch"])
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
    rivals_timed = rival_timings(rivals or {}, median, versus, floor, shape=shape)
    assert replay_audit is not None  # audited < warmup + samples
    failure = sets.audit(
        f"graph replay {audited - warmup} of {samples}", *replay_audit, audited_sets(calls)
    )
    failure = failure or sets.audit("single calls", *single_audit, audited_sets(single_calls))
    fastest = min(median["cand"], median["cand_again"])
    if failure is None and fastest < floor_us:
        failure = CheckFailure(
            "implausible_time", shape, fastest, floor_us,
            f"{sets.words}: median per-call time {fastest:.3g} us over graph replays of "
            f"{calls} solves is below what the device allows: max(bytes moved / L2 bound, "
            f"{LAUNCH_FLOOR_FRACTION} x an empty kernel's {median['launch']:.3g} us per launch, "
            "measured in the same replays)",
        )  # fmt: skip
    return timing, rivals_timed, failure
