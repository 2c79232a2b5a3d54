"""Device time per call from replaying a captured CUDA graph, candidate and cuBLAS interleaved.

At m, n ≤ 64 one launch timed with CUDA events measures launch overhead (an empty kernel reads
9.2 µs that way on the H200, 0.57 µs per launch inside a graph; ../shared/DESIGN.md "Timing").
So each timed graph holds ``calls`` solves over ``sets`` rotating input sets; because TRSM works
in place, every solve is preceded by a device-to-device copy restoring its B from a pristine
copy, and a third graph of the copies alone is timed the same way and subtracted. Replays of the
three graphs are interleaved sample by sample, after a warm-up, so drift hits all alike.
Runs inside the GPU worker process only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evaluator.inputs import NUMPY_DTYPES, make_problem
from evaluator.report import ShapeTiming

SolveRaw = Callable[[int, int, int, int, int, int], None]


def _iqr(values: np.ndarray) -> float:
    q75, q25 = np.percentile(values, [75, 25])
    return float(q75 - q25)


def time_shape(
    m: int,
    n: int,
    dtype: str,
    candidate: Callable[[int, int, int, int, int, int, Any], None],
    baseline: Any,
    *,
    sets: int = 8,
    calls: int = 32,
    samples: int = 60,
    warmup: int = 5,
    single_calls: int = 30,
    seed: int = 12345,
) -> ShapeTiming:
    """Median device µs per call (and IQR) of ``candidate`` and ``baseline`` at (m, n).

    ``candidate(a_ptr, b_ptr, m, n, lda, ldb, stream)`` launches the kernel on ``stream``;
    ``baseline`` is a :class:`seeds.trsm_small.baseline.CublasTrsm` (rebound to the stream).
    """
    import cupy
    from cupy.cuda import runtime

    itemsize = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    nbytes = m * n * itemsize
    problems = [make_problem(m, n, dtype, seed + i) for i in range(sets)]
    a_sets = [cupy.asarray(p.a.ravel(order="F")) for p in problems]
    pristine = [cupy.asarray(p.b.ravel(order="F")) for p in problems]
    work = [cupy.empty_like(b) for b in pristine]
    stream = cupy.cuda.Stream(non_blocking=True)
    baseline.set_stream(stream)

    def restore(i: int) -> None:
        runtime.memcpyAsync(
            work[i].data.ptr, pristine[i].data.ptr, nbytes, runtime.memcpyDeviceToDevice,
            stream.ptr,
        )  # fmt: skip

    def run_candidate(i: int) -> None:
        candidate(a_sets[i].data.ptr, work[i].data.ptr, m, n, m, m, stream)

    def run_baseline(i: int) -> None:
        baseline.solve_raw(a_sets[i].data.ptr, work[i].data.ptr, m, n, m, m)

    # Untimed first calls outside capture: module load, geometry query, cuBLAS workspace.
    for fn in (run_candidate, run_baseline):
        restore(0)
        fn(0)
    stream.synchronize()

    def capture(solve: Callable[[int], None] | None) -> Any:
        stream.begin_capture()
        for r in range(calls):
            restore(r % sets)
            if solve is not None:
                solve(r % sets)
        return stream.end_capture()

    graphs = {"cand": capture(run_candidate), "blas": capture(run_baseline), "copy": capture(None)}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    raw: dict[str, list[float]] = {k: [] for k in graphs}
    order = list(graphs)
    for s in range(warmup + samples):
        for key in order[s % 3 :] + order[: s % 3]:
            start.record(stream)
            graphs[key].launch(stream)
            stop.record(stream)
            stop.synchronize()
            if s >= warmup:
                raw[key].append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)  # µs
    copy_us = float(np.median(raw["copy"]))
    per_call = {k: (np.asarray(raw[k]) - copy_us) / calls for k in ("cand", "blas")}

    def single(fn: Callable[[int], None]) -> float:
        times = []
        for i in range(single_calls):
            restore(i % sets)
            stream.synchronize()
            start.record(stream)
            fn(i % sets)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return float(np.median(times))

    return ShapeTiming(
        m=m,
        n=n,
        candidate_us=float(np.median(per_call["cand"])),
        candidate_spread_us=_iqr(per_call["cand"]),
        baseline_us=float(np.median(per_call["blas"])),
        baseline_spread_us=_iqr(per_call["blas"]),
        candidate_single_call_us=single(run_candidate),
        baseline_single_call_us=single(run_baseline),
    )
