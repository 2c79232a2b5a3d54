"""Device time per call from replaying captured CUDA graphs, candidate and cuBLAS interleaved.

At m, n ≤ 64 one launch timed with CUDA events measures launch overhead (an empty kernel reads
9.2 µs that way on the H200, 0.57 µs per launch inside a graph; docs/DESIGN.md "Timing").
So each timed graph holds ``calls`` solves, each on an input set of its own; because TRSM works
in place, every solve is preceded by a device-to-device copy restoring its B from a pristine
copy, and a graph of the copies alone is timed the same way and subtracted. Each round replays
every graph once, in rotating order, after a warm-up, so drift hits all alike: the candidate,
the candidate captured a second time (how far two timings of one kernel disagree is the noise
floor a speedup must beat, ``evaluator.noise``), cuBLAS, the copies, an empty kernel after each
copy (the launch floor no real call can go below: ``implausible_time``), and any rival (the
champion at promotion).

No two calls see the same inputs: before every replay (outside the timed region) every set of A
and of pristine B is overwritten in place on the device with a new bounded problem drawn as
``evaluator.inputs`` draws them. A kernel that keeps results between launches keyed on a few
input elements (issue 6) then never finds them again, and gains nothing from them.

What was timed must also be right: a kernel could count its calls, or watch the clock, and skip
work only while it is being timed. So the candidate's outputs of one replay chosen at random
(unseeded, so unpredictable to the candidate), and of the single-call runs, are checked with the
same checks as verification, against references of exactly the inputs that replay read (copied
before they are refreshed); the guard bands around every set of B and A's bytes, guards and NaN
triangle included, must be unchanged. Runs inside the GPU worker process only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluator.checks.integrity import (
    GUARD_ELEMENTS,
    check_guards,
    check_input_unchanged,
    first_changed,
    guard_pattern,
)
from evaluator.inputs import NUMPY_DTYPES, CounterRng, Problem, bounded_sets
from evaluator.noise import (
    LAUNCH_FLOOR_FRACTION,
    Interval,
    dram_bytes_per_s,
    is_faster,
    noise_floor,
    plausibility_floor_us,
    ratio_interval,
)
from evaluator.report import CheckFailure, RivalTiming, ShapeTiming

Check = Callable[[Problem, np.ndarray], CheckFailure | None]
# solve(a_ptr, b_ptr, m, n, lda, ldb, stream): one TRSM launched on ``stream``.
Solver = Callable[[int, int, int, int, int, int, Any], None]
# One call of a timed graph on the device pointers of its input set's A and work B.
Launch = Callable[[int, int], None]
# Graph keys of rivals: "rival:<name>", apart from the fixed keys whatever a rival is called.
RIVAL_PREFIX = "rival:"

# Every input set starts on this many bytes, as a fresh allocation would, so a kernel's
# vectorized loads see the same alignment as in verification.
SET_ALIGN_BYTES = 256


@dataclass(frozen=True)
class SetLayout:
    """``count`` arrays of ``size`` elements in one buffer, each between guard bands.

    Buffer: a guard band, then per set its elements and a band of at least ``guard`` elements
    (padded so the next set starts aligned). Works on NumPy and CuPy arrays alike.
    """

    count: int
    size: int
    itemsize: int
    guard: int = GUARD_ELEMENTS

    @property
    def stride(self) -> int:
        """Elements from one set's start to the next's."""
        align = SET_ALIGN_BYTES // self.itemsize
        return -(-(self.size + self.guard) // align) * align

    @property
    def total(self) -> int:
        """Elements in the whole buffer."""
        return self.guard + self.count * self.stride

    def offset(self, i: int) -> int:
        """Byte offset of set ``i`` in the buffer."""
        return (self.guard + i * self.stride) * self.itemsize

    def allocate(self, xp: Any, dtype: np.dtype) -> Any:
        """A buffer of ``dtype`` holding guard values (payload-tagged NaNs) everywhere."""
        return xp.array(np.frombuffer(guard_pattern(dtype, self.total), dtype))

    def payload(self, flat: Any) -> Any:
        """A (count, size) view of the sets' elements in ``flat``; writable."""
        return flat[self.guard :].reshape(self.count, self.stride)[:, : self.size]

    def guard_bytes(self, flat: np.ndarray) -> bytes:
        """The bytes of every guard band of a host copy of the buffer, in order."""
        bands = np.ones(self.total, dtype=bool)
        self.payload(bands)[...] = False
        return flat[bands].tobytes()

    def locate(self, element: int, rows: int | None = None) -> str:
        """Where flat ``element`` of the buffer lies: in a set (its row and column when the sets
        are matrices of ``rows`` rows in Fortran order) or in a guard band."""
        if element < self.guard:
            return f"buffer element {element}, in the guard band before input set 0"
        i, j = divmod(element - self.guard, self.stride)
        if j >= self.size:
            return f"buffer element {element}, in the guard band after input set {i}"
        return f"input set {i}, " + (f"row {j % rows}, col {j // rows}" if rows else f"element {j}")


@dataclass(frozen=True)
class Compared:
    """An input buffer compared before and after a run where it lives (the device), instead of
    being copied back: ``first`` is the index of its first changed element
    (``integrity.first_changed``), None when every byte is the same."""

    first: int | None


def audit_outputs(
    when: str,
    layouts: tuple[SetLayout, SetLayout],
    shape: tuple[int, int],
    inputs: tuple[np.ndarray, np.ndarray],
    after: tuple[np.ndarray | Compared, np.ndarray],
    sets: Iterable[int],
    check: Check,
    seed: int,
) -> CheckFailure | None:
    """The first failure of the candidate's outputs of one timed run, from host copies.

    ``layouts``: of the A and the B buffers; ``inputs``: the A and pristine-B buffers as that
    run read them (copied before the next refresh); ``after``: the A buffer after it (a host
    copy, or a :class:`Compared`: already compared with the inputs' A on the device, as
    :func:`time_shape` does) and the candidate's work-B buffer. Checks: B's guard bands
    unchanged, A unchanged bit for bit (guards and NaN triangle included; the first changed
    element in the detail), then ``check`` on the outputs of ``sets`` against their own inputs.
    Failures are renamed ``timed_output_<check>``; ``seed`` (of the timing inputs) is recorded
    in the problems checked.
    """
    (a_layout, b_layout), (m, n) = layouts, shape
    a_in, b_in = inputs
    a_out, x_out = after
    fresh_bands = b_layout.guard_bytes(b_layout.allocate(np, x_out.dtype))
    failure = check_guards(fresh_bands, b_layout.guard_bytes(x_out), shape)
    if failure is None:
        first = a_out.first if isinstance(a_out, Compared) else first_changed(a_in, a_out)
        where = None if first is None else a_layout.locate(first, rows=m)
        failure = check_input_unchanged(first, shape, where)
    where = when
    if failure is None:
        a_sets, b_sets = a_layout.payload(a_in), b_layout.payload(b_in)
        x_sets = b_layout.payload(x_out)
        for i in sets:
            a, b = a_sets[i].reshape((m, m), order="F"), b_sets[i].reshape((m, n), order="F")
            x = x_sets[i].reshape((m, n), order="F")
            if failure := check(Problem(a, b, "timed", seed), x):
                where = f"{when}, input set {i}"
                break
    if failure is None:
        return None
    return CheckFailure(
        "timed_output_" + failure.check, failure.shape, failure.value, failure.bound,
        f"{where}: {failure.detail}",
    )  # fmt: skip


# The numerical checks of a timed run look at this many of its sets, chosen after the run from
# the OS's randomness (the candidate cannot know which); guard bands and A are checked for every
# set. All 62 sets per shape cost about 0.4 s of host time per shape (H200, RESULTS section 11).
AUDITED_SETS = 8


def _audited_sets(count: int) -> list[int]:
    """:data:`AUDITED_SETS` distinct set indices below ``count``, unseeded, in order."""
    picks = np.random.default_rng().choice(count, size=min(AUDITED_SETS, count), replace=False)
    return sorted(int(i) for i in picks)


# Replays whose fresh inputs are drawn together (see time_shape's refresh): 16 × 32 sets of 64×64
# complex128 are 64 MiB on the device.
REPLAYS_PER_DRAW = 16


def iqr(values: np.ndarray) -> float:
    """The interquartile range (75th − 25th percentile) of ``values``: the spread every timing
    module reports beside its medians."""
    q75, q25 = np.percentile(values, [75, 25])
    return float(q75 - q25)


def rival_timings(
    names: Iterable[str],
    median: Mapping[str, float],
    versus: Callable[[str], Interval],
    floor: float,
    *,
    m: int = 0,
    n: int = 0,
    shape: tuple[int, ...] = (),
) -> list[RivalTiming]:
    """One :class:`RivalTiming` per rival of ``names``, in order: its median µs per call
    (``median[RIVAL_PREFIX + name]``) against the candidate's (``median["cand"]``), the speedup
    interval ``versus(RIVAL_PREFIX + name)`` and whether it clears the noise ``floor``; ``m``,
    ``n`` (trsm) or ``shape`` (every op's parameters) name the shape. Every timing module
    reports its rivals so."""
    timings = []
    for name in names:
        key = RIVAL_PREFIX + name
        interval = versus(key)
        timings.append(
            RivalTiming(
                name=name,
                m=m,
                n=n,
                rival_us=median[key],
                candidate_us=median["cand"],
                speedup=interval.estimate,
                speedup_low=interval.low,
                speedup_high=interval.high,
                noise_floor=floor,
                faster=is_faster(interval, floor),
                shape=shape,
            )
        )
    return timings


# The launch-floor graph's kernel: one block of one thread doing nothing, the cheapest launch.
EMPTY_KERNEL = 'extern "C" __global__ void kernevo_empty() {}'


def implausible_time(
    shape: tuple[int, int], candidate_us: float, floor_us: float, launch_us: float, calls: int
) -> CheckFailure | None:
    """``implausible_time`` when the candidate's per-call median ``candidate_us`` (the lower of
    its two graphs') is below ``floor_us`` (``evaluator.noise.plausibility_floor_us``): no solve
    of ``shape`` can take less, so the timing or the work is not real; None otherwise."""
    if candidate_us >= floor_us:
        return None
    return CheckFailure(
        "implausible_time", shape, candidate_us, floor_us,
        f"median per-call time {candidate_us:.3g} us over graph replays of {calls} solves is "
        f"below what the device allows: max(bytes moved / L2 bound, {LAUNCH_FLOOR_FRACTION} x "
        f"an empty kernel's {launch_us:.3g} us per launch, measured in the same replays)",
    )  # fmt: skip


def time_shape(
    m: int,
    n: int,
    dtype: str,
    candidate: Solver,
    baseline: Any,
    check: Check,
    *,
    rivals: Mapping[str, Solver] | None = None,
    calls: int = 32,
    samples: int = 60,
    warmup: int = 5,
    single_calls: int = 30,
    replays_per_draw: int = REPLAYS_PER_DRAW,
    seed: int = 12345,
) -> tuple[ShapeTiming, list[RivalTiming], CheckFailure | None]:
    """Time ``candidate`` at (m, n) against ``baseline`` and ``rivals``, all in the same rounds.

    ``candidate(a_ptr, b_ptr, m, n, lda, ldb, stream)`` launches the kernel on ``stream``;
    ``baseline`` is the path's (``seeds.spec.PathSpec.baseline``; rebound to the stream);
    ``rivals`` maps names to solvers of the candidate's signature (e.g. the champion's
    ``solve_raw``); ``check(problem, x)`` applies the verification checks to one output X (m×n,
    Fortran order). ``seed`` starts the device's draws of the timed inputs (recorded in the
    report) and fixes the bootstrap's resampling, so the same samples give the same intervals.
    ``calls`` (solves per graph), ``samples`` (rounds), ``warmup``, ``single_calls`` and
    ``replays_per_draw`` (replays whose inputs are drawn at once) default to the small paths'
    plan; :func:`evaluator.timing_plan.timing_plan` scales them to a shape.

    Returns the candidate's :class:`ShapeTiming` (medians, interval, noise floor, plausibility
    floor), one :class:`RivalTiming` per rival, and the first failure (None when all pass): the
    audits of the candidate's timed outputs, then ``implausible_time``.

    Raises:
        ValueError: ``single_calls`` > ``calls`` (each single call needs a set of its own).
    """
    import cupy
    from cupy.cuda import runtime

    if single_calls > calls:
        raise ValueError(f"single_calls {single_calls} > calls {calls}")
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    nbytes = m * n * np_dtype.itemsize
    layouts = a_layout, b_layout = (
        SetLayout(calls, m * m, np_dtype.itemsize), SetLayout(calls, m * n, np_dtype.itemsize),
    )  # fmt: skip
    a_buf, pristine = a_layout.allocate(cupy, np_dtype), b_layout.allocate(cupy, np_dtype)
    rng = CounterRng(cupy, seed)
    stream = cupy.cuda.Stream(non_blocking=True)
    baseline.set_stream(stream)
    empty = cupy.RawKernel(EMPTY_KERNEL, "kernevo_empty")

    def bound(solve: Solver) -> Launch:
        return lambda a_ptr, b_ptr: solve(a_ptr, b_ptr, m, n, m, m, stream)

    def launch_empty(a_ptr: int, b_ptr: int) -> None:
        with stream:  # RawKernel launches on the current stream
            empty((1,), (1,), ())

    # One graph per key, each solving into a B buffer of its own (so the candidate's outputs
    # survive to be checked): the candidate twice, captured separately (A and A': their
    # disagreement is the noise floor), cuBLAS, the copies alone (subtracted from all), an empty
    # kernel after each copy (the launch floor), and each rival.
    launches: dict[str, Launch | None] = {
        "cand": bound(candidate),
        "cand_again": bound(candidate),
        "blas": lambda a_ptr, b_ptr: baseline.solve_raw(a_ptr, b_ptr, m, n, m, m),
        "copy": None,
        "launch": launch_empty,
        **{RIVAL_PREFIX + name: bound(solve) for name, solve in (rivals or {}).items()},
    }
    work = {key: b_layout.allocate(cupy, np_dtype) for key in launches}

    # Drawing a set costs a few dozen small kernels launched from Python whatever its size, so
    # the draws for ``replays_per_draw`` replays are made at once and each refresh copies its own
    # slice in: every replay still sees inputs no other replay saw (measured on the H200: one
    # draw per replay added 2.2 s per candidate, section 11 of docs/RESULTS.md).
    bank: dict[str, Any] = {"a": None, "b": None, "next": replays_per_draw}

    def refresh() -> None:
        # In place: the captured graphs hold these addresses. On the timing stream, so it is
        # ordered before the next replay and never inside its events.
        with stream:
            if bank["next"] == replays_per_draw:
                bank["a"], bank["b"] = bounded_sets(rng, m, n, dtype, calls * replays_per_draw)
                bank["next"] = 0
            first = bank["next"] * calls
            bank["next"] += 1
            a_layout.payload(a_buf)[...] = bank["a"][first : first + calls]
            b_layout.payload(pristine)[...] = bank["b"][first : first + calls]

    def inputs_copy() -> tuple[Any, Any]:
        with stream:
            return a_buf.copy(), pristine.copy()

    def a_compared(a_before: Any) -> Compared:
        # Bit for bit on the device, where A stays (1 GiB at 8192 x 1024 float64 with 2 sets):
        # no copy of A after the run comes back to the host.
        with stream:
            return Compared(first_changed(a_before, a_buf, cupy))

    def restore(key: str, i: int) -> None:
        runtime.memcpyAsync(
            work[key].data.ptr + b_layout.offset(i), pristine.data.ptr + b_layout.offset(i),
            nbytes, runtime.memcpyDeviceToDevice, stream.ptr,
        )  # fmt: skip

    def solve(key: str, i: int) -> None:
        if (launch := launches[key]) is not None:
            launch(a_buf.data.ptr + a_layout.offset(i), work[key].data.ptr + b_layout.offset(i))

    # Untimed first calls outside capture: module load, geometry query, cuBLAS workspace, the
    # empty kernel's compilation. Each on a set of its own: a kernel that keeps results would
    # otherwise find its first graph's result again in the second graph of the same candidate.
    refresh()
    for i, key in enumerate(launches):
        restore(key, i % calls)
        solve(key, i % calls)
    stream.synchronize()

    def capture(key: str) -> Any:
        stream.begin_capture()
        for r in range(calls):
            restore(key, r)
            solve(key, r)
        return stream.end_capture()

    graphs = {key: capture(key) for key in launches}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    raw: dict[str, list[float]] = {k: [] for k in graphs}
    order = list(graphs)
    audited = warmup + int(np.random.default_rng().integers(samples))
    replay_audit: tuple[tuple[np.ndarray, np.ndarray], tuple[Compared, np.ndarray]] | None = None
    for s in range(warmup + samples):
        # One round: every graph once, in an order rotating from round to round.
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
                # A compared on the device; what the replay read to the host now: the next
                # refresh overwrites it.
                changed = a_compared(before[0])
                inputs = (before[0].get(), before[1].get())
                replay_audit = inputs, (changed, work["cand"].get())
                before = None
    rounds = {key: np.asarray(v) for key, v in raw.items()}
    copy_us = float(np.median(rounds["copy"]))
    per_call = {k: (v - copy_us) / calls for k, v in rounds.items() if k != "copy"}
    median = {k: float(np.median(v)) for k, v in per_call.items()}

    def single(key: str) -> float:
        times = []
        for i in range(single_calls):
            restore(key, i)
            stream.synchronize()
            start.record(stream)
            solve(key, i)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return float(np.median(times))

    refresh()  # the single calls too see inputs no replay saw
    before = inputs_copy()
    single_us = {key: single(key) for key in ("cand", "blas")}
    changed = a_compared(before[0])
    single_audit = (before[0].get(), before[1].get()), (changed, work["cand"].get())
    del before

    # Every comparison: medians less the copy graph's, resampled by rounds with one seed.
    def versus(key: str) -> Interval:
        return ratio_interval(rounds[key], rounds["cand"], seed=seed, offset=rounds["copy"])

    speedup = versus("blas")
    floor = noise_floor(
        ratio_interval(rounds["cand"], rounds["cand_again"], seed=seed, offset=rounds["copy"])
    )
    attributes = cupy.cuda.Device().attributes
    bandwidth = dram_bytes_per_s(
        attributes.get("MemoryClockRate", 0), attributes.get("GlobalMemoryBusWidth", 0)
    )
    floor_us = plausibility_floor_us(m, n, np_dtype.itemsize, bandwidth, median["launch"])
    timing = ShapeTiming(
        m=m,
        n=n,
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
    )
    rivals_timed = rival_timings(rivals or {}, median, versus, floor, m=m, n=n)
    assert replay_audit is not None  # audited < warmup + samples
    replay_when = f"graph replay {audited - warmup} of {samples}"
    failure = audit_outputs(
        replay_when, layouts, (m, n), *replay_audit, _audited_sets(calls), check, seed
    )
    failure = failure or audit_outputs(
        "single calls", layouts, (m, n), *single_audit, _audited_sets(single_calls), check, seed
    )
    fastest = min(median["cand"], median["cand_again"])
    failure = failure or implausible_time((m, n), fastest, floor_us, median["launch"], calls)
    return timing, rivals_timed, failure
