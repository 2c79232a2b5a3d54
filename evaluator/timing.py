"""Device time per call from replaying a captured CUDA graph, candidate and cuBLAS interleaved.

At m, n ≤ 64 one launch timed with CUDA events measures launch overhead (an empty kernel reads
9.2 µs that way on the H200, 0.57 µs per launch inside a graph; docs/DESIGN.md "Timing").
So each timed graph holds ``calls`` solves over ``sets`` rotating input sets; because TRSM works
in place, every solve is preceded by a device-to-device copy restoring its B from a pristine
copy, and a third graph of the copies alone is timed the same way and subtracted. Replays of the
three graphs are interleaved sample by sample, after a warm-up, so drift hits all alike.

What was timed must also be right: a kernel could count its calls, or watch the clock, and skip
work only while it is being timed. So the candidate's outputs of one replay chosen at random
(unseeded, so unpredictable to the candidate) and of the single-call runs are checked with the
same checks as verification. Runs inside the GPU worker process only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from evaluator.inputs import NUMPY_DTYPES, Problem, make_problem
from evaluator.report import CheckFailure, ShapeTiming

Check = Callable[[Problem, np.ndarray], CheckFailure | None]


def _iqr(values: np.ndarray) -> float:
    q75, q25 = np.percentile(values, [75, 25])
    return float(q75 - q25)


def time_shape(
    m: int,
    n: int,
    dtype: str,
    candidate: Callable[[int, int, int, int, int, int, Any], None],
    baseline: Any,
    check: Check,
    *,
    sets: int = 8,
    calls: int = 32,
    samples: int = 60,
    warmup: int = 5,
    single_calls: int = 30,
    seed: int = 12345,
) -> tuple[ShapeTiming, CheckFailure | None]:
    """Median device µs per call (and IQR) of ``candidate`` and ``baseline`` at (m, n), and the
    first failure of ``check`` on the candidate's timed outputs (None when all are right).

    ``candidate(a_ptr, b_ptr, m, n, lda, ldb, stream)`` launches the kernel on ``stream``;
    ``baseline`` is a :class:`seeds.trsm_small.baseline.CublasTrsm` (rebound to the stream);
    ``check(problem, x)`` applies the verification checks to one output X (m×n, Fortran order).
    """
    import cupy
    from cupy.cuda import runtime

    itemsize = np.dtype(NUMPY_DTYPES[dtype]).itemsize
    nbytes = m * n * itemsize
    problems = [make_problem(m, n, dtype, seed + i) for i in range(sets)]
    a_sets = [cupy.asarray(p.a.ravel(order="F")) for p in problems]
    pristine = [cupy.asarray(p.b.ravel(order="F")) for p in problems]
    # Each graph solves into its own buffers, so the candidate's outputs survive to be checked.
    work = {key: [cupy.empty_like(b) for b in pristine] for key in ("cand", "blas", "copy")}
    stream = cupy.cuda.Stream(non_blocking=True)
    baseline.set_stream(stream)

    def restore(key: str, i: int) -> None:
        runtime.memcpyAsync(
            work[key][i].data.ptr, pristine[i].data.ptr, nbytes, runtime.memcpyDeviceToDevice,
            stream.ptr,
        )  # fmt: skip

    def run_candidate(i: int) -> None:
        candidate(a_sets[i].data.ptr, work["cand"][i].data.ptr, m, n, m, m, stream)

    def run_baseline(i: int) -> None:
        baseline.solve_raw(a_sets[i].data.ptr, work["blas"][i].data.ptr, m, n, m, m)

    solvers: dict[str, Callable[[int], None] | None] = {
        "cand": run_candidate, "blas": run_baseline, "copy": None,
    }  # fmt: skip
    # Untimed first calls outside capture: module load, geometry query, cuBLAS workspace.
    for key in ("cand", "blas"):
        restore(key, 0)
        solvers[key](0)  # type: ignore[misc]
    stream.synchronize()

    def capture(key: str) -> Any:
        stream.begin_capture()
        for r in range(calls):
            restore(key, r % sets)
            if (solve := solvers[key]) is not None:
                solve(r % sets)
        return stream.end_capture()

    def check_outputs(when: str) -> CheckFailure | None:
        stream.synchronize()
        for i, problem in enumerate(problems):
            x = work["cand"][i].get().reshape((m, n), order="F")
            if failure := check(problem, x):
                return CheckFailure(
                    "timed_output_" + failure.check, failure.shape, failure.value, failure.bound,
                    f"{when}, input set {i}: {failure.detail}",
                )  # fmt: skip
        return None

    graphs = {key: capture(key) for key in solvers}
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    raw: dict[str, list[float]] = {k: [] for k in graphs}
    order = list(graphs)
    audited = warmup + int(np.random.default_rng().integers(samples))
    failure: CheckFailure | None = None
    for s in range(warmup + samples):
        for key in order[s % 3 :] + order[: s % 3]:
            start.record(stream)
            graphs[key].launch(stream)
            stop.record(stream)
            stop.synchronize()
            if s >= warmup:
                raw[key].append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)  # µs
            if s == audited and key == "cand":
                failure = check_outputs(f"graph replay {s - warmup} of {samples}")
    copy_us = float(np.median(raw["copy"]))
    per_call = {k: (np.asarray(raw[k]) - copy_us) / calls for k in ("cand", "blas")}

    def single(key: str) -> float:
        times = []
        for i in range(single_calls):
            restore(key, i % sets)
            stream.synchronize()
            start.record(stream)
            solvers[key](i % sets)  # type: ignore[misc]
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return float(np.median(times))

    timing = ShapeTiming(
        m=m,
        n=n,
        candidate_us=float(np.median(per_call["cand"])),
        candidate_spread_us=_iqr(per_call["cand"]),
        baseline_us=float(np.median(per_call["blas"])),
        baseline_spread_us=_iqr(per_call["blas"]),
        candidate_single_call_us=single("cand"),
        baseline_single_call_us=single("blas"),
    )
    return timing, failure or check_outputs("single calls")
