"""The work a GPU worker process does for one task: load a cubin, verify it, time it.

Imported only inside the worker process (evaluator/worker.py), which owns the CUDA context.
Every function returns plain data (dicts built from evaluator.report dataclasses) so results
cross the process boundary by pickling.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np

from evaluator.checks.accuracy import check_solution
from evaluator.checks.integrity import (
    GUARD_ELEMENTS,
    check_guards,
    check_input_unchanged,
    digest,
    guard_pattern,
)
from evaluator.checks.replay import audit_partner, check_replayed, issue_pair
from evaluator.inputs import Problem, make_problem
from evaluator.report import CheckFailure, GpuInfo
from evaluator.timing import time_shape
from seeds.driver import GeometryError
from seeds.hardware import arch_for_compute_capability, normalize_gpu_name


def gpu_info() -> dict[str, Any]:
    """Identity and limits of the worker's device (device 0 of its CUDA_VISIBLE_DEVICES)."""
    import cupy
    from cupy.cuda import runtime

    props = runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    driver = runtime.driverGetVersion()
    rt = runtime.runtimeGetVersion()
    return asdict(
        GpuInfo(
            name=name,
            key=normalize_gpu_name(name),
            arch=arch_for_compute_capability(props["major"], props["minor"]),
            driver_version=f"{driver // 1000}.{driver % 1000 // 10}",
            runtime_version=f"{rt // 1000}.{rt % 1000 // 10}",
            sm_count=int(props["multiProcessorCount"]),
            max_shared_per_block_optin=int(
                cupy.cuda.Device(0).attributes["MaxSharedMemoryPerBlockOptin"]
            ),
        )
    )


def _load_driver(cubin: bytes, path_id: str, dtype: str) -> Any:
    from seeds.registry import get_path
    from seeds.trsm_small.driver import TrsmSmallDriver

    return TrsmSmallDriver(cubin, dtype, get_path(path_id))


def solve_checked(driver: Any, problem: Problem) -> tuple[CheckFailure | None, np.ndarray | None]:
    """Run the candidate once on ``problem`` and apply every check to what it left behind.

    Returns the first failure (None when all pass) and the output X (None when nothing ran).
    """
    import cupy

    m, n = problem.shape
    itemsize = problem.b.dtype.itemsize
    guard = guard_pattern(problem.b.dtype, GUARD_ELEMENTS)
    g = len(guard)
    a_host = guard + problem.a.tobytes(order="F") + guard
    b_host = guard + problem.b.tobytes(order="F") + guard
    a_dev = cupy.asarray(np.frombuffer(a_host, dtype=np.uint8))
    b_dev = cupy.asarray(np.frombuffer(b_host, dtype=np.uint8))
    try:
        driver.solve_raw(a_dev.data.ptr + g, b_dev.data.ptr + g, m, n, m, m)
    except GeometryError as exc:
        return CheckFailure("launch_geometry", (m, n), None, None, str(exc)), None
    cupy.cuda.Device().synchronize()
    a_out, b_out = a_dev.get().tobytes(), b_dev.get().tobytes()
    x = np.frombuffer(b_out[g : g + m * n * itemsize], problem.b.dtype).reshape((m, n), order="F")
    failure = check_guards(guard * 4, a_out[:g] + a_out[-g:] + b_out[:g] + b_out[-g:], (m, n))
    failure = failure or check_input_unchanged(digest(a_host), digest(a_out), (m, n))
    return failure or check_solution(problem, x), x


def check_pair(driver: Any, first: Problem, second: Problem) -> CheckFailure | None:
    """Solve an audit pair back to back (``evaluator.checks.replay``), each against its own
    reference; a failing output of the second that solves the first is ``replayed_result``."""
    failure, _ = solve_checked(driver, first)
    if failure:
        return failure
    failure, x = solve_checked(driver, second)
    if failure and x is not None:
        return check_replayed(first, second, x) or failure
    return failure


def _located(failure: CheckFailure, where: str) -> CheckFailure:
    """``failure`` with the inputs it was found on appended to its detail."""
    return CheckFailure(
        failure.check, failure.shape, failure.value, failure.bound, f"{failure.detail} [{where}]"
    )


def verify(
    driver: Any, dtype: str, shapes: list[tuple[int, int]], seeds: list[int], growth: bool
) -> tuple[CheckFailure | None, list[tuple[int, int]]]:
    """Check every shape × seed on fresh inputs (plus the growth case for m ≥ 16 if asked), an
    audit pair per shape with m ≥ 2 (built on the first seed's problem), and issue 6's 4×4 pair.

    Returns the first failure (or None) and the shapes that passed every check.
    """
    passed: list[tuple[int, int]] = []
    for m, n in shapes:
        problems = [make_problem(m, n, dtype, s) for s in seeds]
        if growth and m >= 16:
            problems.append(make_problem(m, n, dtype, seeds[0], kind="growth"))
        for problem in problems:
            if failure := solve_checked(driver, problem)[0]:
                return _located(failure, f"{problem.kind} inputs, seed {problem.seed}"), passed
        if m >= 2 and (failure := check_pair(driver, problems[0], audit_partner(problems[0]))):
            return _located(failure, f"audit pair on seed {problems[0].seed}"), passed
        passed.append((m, n))
    if failure := check_pair(driver, *issue_pair(dtype)):
        return _located(failure, "audit pair of issue 6, 4x4"), passed
    return None, passed


def check_determinism(
    driver: Any, dtype: str, shapes: list[tuple[int, int]], repeats: int
) -> CheckFailure | None:
    """The same input solved ``repeats`` times must give bit-identical X (a race moves it)."""
    import cupy

    for m, n in shapes:
        problem = make_problem(m, n, dtype, seed=4242)
        a = cupy.asarray(problem.a.ravel(order="F"))
        outputs = set()
        for _ in range(repeats):
            b = cupy.asarray(problem.b.ravel(order="F"))
            driver.solve_raw(a.data.ptr, b.data.ptr, m, n, m, m)
            outputs.add(b.get().tobytes())
        if len(outputs) > 1:
            return CheckFailure(
                "nondeterministic", (m, n), float(len(outputs)), 1.0,
                f"{len(outputs)} distinct results in {repeats} runs on the same input",
            )  # fmt: skip
    return None


def run(task: dict[str, Any]) -> dict[str, Any]:
    """Execute one task dict (``kind`` = info | check | full | champion); return a result dict.

    ``check``: verify ``shapes`` × ``seeds``. ``champion``: the same, then repeated runs for
    determinism. ``full``: verify, time ``timed_shapes`` against
    cuBLAS (and against ``rival_cubin``, the champion's, when given: ``rival_timings``), then
    verify ``recheck_shapes`` again on fresh inputs (catches races and state that builds up
    across calls). Candidate failures come back as data; CUDA errors propagate to the
    worker loop, which reports a fault and retires the process.
    """
    if task["kind"] == "info":
        return {"gpu": gpu_info()}
    dtype = task["dtype"]
    t0 = time.perf_counter()
    driver = _load_driver(task["cubin"], task["path_id"], dtype)
    failure, passed = verify(driver, dtype, task["shapes"], task["seeds"], task["growth"])
    phases = {"verify": time.perf_counter() - t0}
    result: dict[str, Any] = {
        "failure": failure and asdict(failure),
        "verified_shapes": passed,
        "phase_seconds": phases,
    }
    if failure or task["kind"] == "check":
        return result
    if task["kind"] == "champion":
        failure = check_determinism(driver, dtype, task["determinism_shapes"], task["repeats"])
        result["failure"] = failure and asdict(failure)
        return result

    from seeds.trsm_small.baseline import CublasTrsm

    baseline = CublasTrsm(dtype)
    # The champion's cubin, when given, is timed in the same rounds as the candidate, so that
    # promotion compares the two interleaved, against the candidate's own noise floor.
    rivals: dict[str, Any] = {}
    if task.get("rival_cubin"):
        rivals["champion"] = _load_driver(task["rival_cubin"], task["path_id"], dtype).solve_raw
    timings, rival_timings = [], []
    try:
        for m, n in task["timed_shapes"]:
            timing, against, failure = time_shape(
                m, n, dtype, driver.solve_raw, baseline, check_solution, rivals=rivals,
                **task.get("timing", {}),
            )  # fmt: skip
            timings.append(asdict(timing))
            rival_timings += [asdict(r) for r in against]
            if failure:
                result["failure"] = asdict(failure)
                break
    finally:
        baseline.close()
    result["timings"], result["rival_timings"] = timings, rival_timings
    if result["failure"]:
        return result
    phases["time"] = time.perf_counter() - t0 - phases["verify"]
    fresh = [(s + 1) % 2**31 for s in task["seeds"]]
    failure, _ = verify(driver, dtype, task["recheck_shapes"], fresh, growth=False)
    phases["verify"] = time.perf_counter() - t0 - phases["time"]
    if failure:
        result["failure"] = asdict(
            CheckFailure("recheck_after_timing", failure.shape, failure.value, failure.bound,
                         failure.describe())
        )  # fmt: skip
    return result
