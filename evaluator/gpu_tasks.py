"""The work a GPU worker process does for one task: load a cubin, verify it, time it.

Imported only inside the worker process (evaluator/worker.py), which owns the CUDA context.
Every function returns plain data (dicts built from evaluator.report dataclasses) so results
cross the process boundary by pickling.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from evaluator.checks.accuracy import (
    HOST_REFERENCE_MAX_M,
    SolutionCheck,
    check_solution,
    reference,
    solution_check,
)
from evaluator.checks.containment import check_containment
from evaluator.checks.integrity import (
    GUARD_ELEMENTS,
    check_finite,
    check_guards,
    check_input_unchanged,
    first_changed,
    guard_pattern,
)
from evaluator.checks.metamorphic import check_relation, relations
from evaluator.checks.replay import audit_partner, check_replayed, issue_pair
from evaluator.checks.scaling import check_scale_invariance
from evaluator.inputs import (
    SCALE_EXPONENTS,
    SWEEP_SHAPE,
    Problem,
    containment_cases,
    make_problem,
    scaled_problem,
    sweep_exponents,
)
from evaluator.op_suites import OpSuite, suite_for
from evaluator.report import CheckFailure, GpuInfo
from evaluator.timing import time_shape as time_shape  # trsm's suite times through this name
from seeds.driver import GeometryError
from seeds.hardware import arch_for_compute_capability, normalize_gpu_name
from seeds.registry import get_path
from seeds.spec import PathSpec, close_driver


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


def _put(xp: Any, dst: Any, src: np.ndarray) -> None:
    """Copy host ``src`` into ``dst`` (a device array, or a NumPy one when ``xp`` is NumPy)."""
    if xp is np:
        dst[...] = src
    else:
        dst.set(src)


def _host(xp: Any, array: Any) -> np.ndarray:
    """A host copy of ``array``."""
    return array.copy() if xp is np else array.get()


def _pointer(xp: Any, array: Any) -> int:
    """The address of ``array``'s first element, as the driver takes it."""
    return int(array.ctypes.data) if xp is np else int(array.data.ptr)


def _guarded(xp: Any, array: np.ndarray, guard: np.ndarray) -> Any:
    """A new byte buffer of ``xp`` holding ``guard``, ``array``'s elements in Fortran order,
    ``guard``: copied from the host in three pieces, with no host copy of ``array`` made."""
    body = np.asfortranarray(array).reshape(-1, order="F").view(np.uint8)
    g = guard.size
    buffer = xp.empty(2 * g + body.size, dtype=np.uint8)
    _put(xp, buffer[:g], guard)
    _put(xp, buffer[g : g + body.size], body)
    _put(xp, buffer[g + body.size :], guard)
    return buffer


def run_candidate(
    driver: Any, problem: Problem, xp: Any = None
) -> tuple[CheckFailure | None, np.ndarray | None]:
    """Run the candidate once on ``problem`` between guard bands and check the memory it must
    not touch: launch geometry, guard bands around A and B (``out_of_bounds_write``), A
    byte-identical (``input_modified``, the first changed element's row and column in the
    detail). No numerical check: callers choose which apply to X.

    A never comes back to the host: a device copy of A, taken before the launch, is compared
    with it after, bit for bit (``integrity.first_changed``), then dropped; the copy doubles
    A's device memory for the run (2 GiB more at 16384² float64). The four guard bands (a few
    KiB) and X are copied to the host, the bands compared with their pattern byte for byte.
    ``xp`` is the array module the buffers live in: CuPy (default) in the GPU worker; NumPy
    runs the same steps on host memory, with a driver that takes host addresses (CPU tests).

    Returns the first failure (None when all pass) and the output X (None when nothing ran).
    """
    if xp is None:
        import cupy as xp

    m, n = problem.shape
    dtype = problem.b.dtype
    guard = np.frombuffer(guard_pattern(dtype, GUARD_ELEMENTS), dtype=np.uint8)
    g = guard.size
    a_dev, b_dev = _guarded(xp, problem.a, guard), _guarded(xp, problem.b, guard)
    a_before = a_dev[g:-g].copy()
    try:
        driver.solve_raw(_pointer(xp, a_dev) + g, _pointer(xp, b_dev) + g, m, n, m, m)
    except GeometryError as exc:
        return CheckFailure("launch_geometry", (m, n), None, None, str(exc)), None
    if xp is not np:
        xp.cuda.Device().synchronize()
    bands = (a_dev[:g], a_dev[-g:], b_dev[:g], b_dev[-g:])
    x = _host(xp, b_dev[g:-g]).view(dtype).reshape((m, n), order="F")
    after = b"".join(_host(xp, band).tobytes() for band in bands)
    failure = check_guards(guard.tobytes() * 4, after, (m, n))
    if failure is None:
        first = first_changed(a_before.view(dtype), a_dev[g:-g].view(dtype), xp)
        where = None if first is None else f"row {first % m}, col {first // m}"
        failure = check_input_unchanged(first, (m, n), where)
    del a_before, a_dev, b_dev  # the device copies go back to the pool before X is checked
    return failure, x


def solve_checked(
    driver: Any, problem: Problem, check: SolutionCheck = check_solution
) -> tuple[CheckFailure | None, np.ndarray | None]:
    """Run the candidate once on ``problem`` and apply every check to what it left behind: the
    memory checks of :func:`run_candidate`, then ``check`` on X (the path's reference check,
    ``PathSpec.reference_check``; the default is ``trsm_small``'s, ``host_reference``).

    Returns the first failure (None when all pass) and the output X (None when nothing ran).
    """
    failure, x = run_candidate(driver, problem)
    if failure or x is None:
        return failure, x
    return check(problem, x), x


def check_pair(
    driver: Any, first: Problem, second: Problem, check: SolutionCheck = check_solution
) -> CheckFailure | None:
    """Solve an audit pair back to back (``evaluator.checks.replay``), each against its own
    reference (``check``, as :func:`solve_checked`); a failing output of the second that solves
    the first is ``replayed_result``."""
    failure, _ = solve_checked(driver, first, check)
    if failure:
        return failure
    failure, x = solve_checked(driver, second, check)
    if failure and x is not None:
        return check_replayed(first, second, x) or failure
    return failure


def _located(failure: CheckFailure, where: str) -> CheckFailure:
    """``failure`` with the inputs it was found on appended to its detail."""
    return CheckFailure(
        failure.check, failure.shape, failure.value, failure.bound, f"{failure.detail} [{where}]"
    )


def check_scaled(
    driver: Any, problem: Problem, exponents: tuple[int, ...] | None = None
) -> CheckFailure | None:
    """``problem`` scaled by 2^e for each e of ``exponents`` (default ``SCALE_EXPONENTS``, up and
    down: 2 solves), X unchanged, each output judged on the unscaled problem, whose reference is
    computed once (``scale_invariance``, the exponent in the detail)."""
    exponents = SCALE_EXPONENTS[problem.b.dtype.name] if exponents is None else exponents
    unscaled_reference = reference(problem.a, problem.b)
    for exponent in exponents:
        scaled = scaled_problem(problem, exponent)
        failure, x = run_candidate(driver, scaled)
        if failure is None and x is not None:
            failure = check_scale_invariance(problem, exponent, x, unscaled_reference)
        if failure:
            where = f"{scaled.kind} inputs, s = 2^{exponent}, seed {problem.seed}"
            return _located(failure, where)
    return None


def check_scale_sweep(driver: Any, dtype: str, seed: int) -> CheckFailure | None:
    """The exponents of ``inputs.sweep_exponents`` at ``inputs.SWEEP_SHAPE`` on the problem of
    ``seed``: every integer exponent of the bands where the textbook complex division breaks
    (22 solves in complex64, 37 in complex128), or 4 drawn from ``seed`` (float32, float64)."""
    problem = make_problem(*SWEEP_SHAPE, dtype, seed)
    return check_scaled(driver, problem, sweep_exponents(dtype, seed))


def check_containment_cases(driver: Any, dtype: str, seed: int) -> CheckFailure | None:
    """The containment cases of ``inputs.containment_cases`` (issue 6's 64×8 case with
    A[40, 3] = +Inf and B's column 0 zero first, then non-finite entries of A and of B at
    positions drawn from ``seed``): the rows and columns that do not depend on the entry must
    pass their checks (``nonfinite_containment``, the entry in the detail); 7 solves."""
    for case in containment_cases(dtype, seed):
        failure, x = run_candidate(driver, case.problem)
        if failure is None and x is not None:
            failure = check_containment(case.problem, case.entry, x, case.matrix)
        if failure:
            return _located(failure, f"containment inputs, {case.where()}, seed {seed}")
    return None


def check_relations(
    driver: Any,
    dtype: str,
    shape: tuple[int, int],
    seed: int,
    check: SolutionCheck = check_solution,
) -> CheckFailure | None:
    """The metamorphic relations at ``shape`` drawn from ``seed`` (``checks.metamorphic``): each
    distinct problem solved once (memory checks and a finite X), then every relation
    (``metamorphic_*``), then each output against its own reference (``check``, as
    :func:`solve_checked`); 6 solves (5 for n = 1)."""
    found = relations(*shape, dtype, seed)
    where = f"inputs of the metamorphic relations, seed {seed}"
    outputs: dict[int, tuple[Problem, np.ndarray]] = {}
    for relation in found:
        for term in relation.terms:
            if id(term.problem) in outputs:
                continue
            failure, x = run_candidate(driver, term.problem)
            if failure is None and x is not None:
                failure = check_finite(x, term.problem.shape)
            if failure:
                return _located(failure, f"{term.problem.kind} {where}")
            assert x is not None  # run_candidate returns a failure whenever nothing ran
            outputs[id(term.problem)] = (term.problem, x)
    for relation in found:
        xs = [outputs[id(term.problem)][1] for term in relation.terms]
        if failure := check_relation(relation, xs):
            return _located(failure, where)
    for problem, x in outputs.values():
        if failure := check(problem, x):
            return _located(failure, f"{problem.kind} {where}")
    return None


def relation_shapes(shapes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Where the metamorphic relations run: the first shape of the largest m and the first
    ragged one (m ≥ 16, not a multiple of 16), each with n ≥ 2 where the list has such, among
    the shapes with m ≤ ``HOST_REFERENCE_MAX_M`` (their slack is the host reference's
    forward-error bound); none when no shape is that small."""
    shapes = [s for s in shapes if s[0] <= HOST_REFERENCE_MAX_M]
    if not shapes:
        return []
    wide = [s for s in shapes if s[1] >= 2] or list(shapes)
    largest = max(wide, key=lambda s: s[0])
    ragged = next((s for s in wide if s[0] >= 16 and s[0] % 16), None)
    return [largest] + ([ragged] if ragged and ragged != largest else [])


def verify(
    driver: Any,
    dtype: str,
    shapes: list[tuple[int, int]],
    seeds: list[int],
    growth: bool,
    check: SolutionCheck = check_solution,
    kinds: tuple[str, ...] = ("growth", "trap"),
) -> tuple[CheckFailure | None, list[tuple[int, int]]]:
    """Check every shape × seed on fresh inputs, an audit pair per shape with m ≥ 2 (built on the
    first seed's problem), and issue 6's 4×4 pair, each output by ``check`` (the path's
    reference check, as :func:`solve_checked`).

    ``growth`` (the full verification and the champion's held-out shapes; not the quick check
    nor the re-check after timing, which stay cheap) adds the inputs of issue 6 part 3, all from
    the first seed: per shape, the problems of ``kinds`` for m ≥ 16 (the path's
    ``verify_kinds``: the growth case and the trap, and for ``trsm_blocked`` the
    ill-conditioned kinds) and, for m ≤ ``HOST_REFERENCE_MAX_M`` (its judge is the host
    reference), the first seed's problem scaled up and down (``scale_invariance``); once, the
    scale sweep at ``SWEEP_SHAPE`` (:func:`check_scale_sweep`, ``scale_invariance``), the
    containment cases (``nonfinite_containment``) and the metamorphic relations at
    :func:`relation_shapes` (``metamorphic_*``). Extra solves: 2 per shape with m ≤
    ``HOST_REFERENCE_MAX_M`` + ``len(kinds)`` per shape with m ≥ 16 + the sweep (4 real, 22
    complex64, 37 complex128) + 7 + 6 per relation shape (trsm_small: 58, 76 and 91 on the 13
    verification shapes; 39, 57 and 72 on the 6 held-out ones).

    Returns the first failure (or None) and the shapes that passed every per-shape check.
    """
    passed: list[tuple[int, int]] = []
    for m, n in shapes:
        problems = [make_problem(m, n, dtype, s) for s in seeds]
        if growth and m >= 16:
            problems += [make_problem(m, n, dtype, seeds[0], kind=k) for k in kinds]
        for problem in problems:
            if failure := solve_checked(driver, problem, check)[0]:
                return _located(failure, f"{problem.kind} inputs, seed {problem.seed}"), passed
        scaled = growth and m <= HOST_REFERENCE_MAX_M
        if scaled and (failure := check_scaled(driver, problems[0])):
            return failure, passed
        if m >= 2 and (
            failure := check_pair(driver, problems[0], audit_partner(problems[0]), check)
        ):
            return _located(failure, f"audit pair on seed {problems[0].seed}"), passed
        passed.append((m, n))
    if failure := check_pair(driver, *issue_pair(dtype), check):
        return _located(failure, "audit pair of issue 6, 4x4"), passed
    if growth:
        failure = check_scale_sweep(driver, dtype, seeds[0])
        failure = failure or check_containment_cases(driver, dtype, seeds[0])
        for m, n in relation_shapes(shapes):
            failure = failure or check_relations(driver, dtype, (m, n), seeds[0], check)
        if failure:
            return failure, passed
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
    """Execute one task dict (``kind`` = info | check | time | champion); return a result dict.

    Every part comes from the spec of ``path_id`` (``seeds.spec.PathSpec``): the driver that
    loads ``cubin``, the reference check of each output and the baseline; what depends on the
    path's op — inputs, checks, timing — from the op's suite (``evaluator.op_suites``; trsm's:
    :func:`verify`, :func:`check_determinism`, ``evaluator.timing.time_shape``).
    ``check``: verify ``shapes`` × ``seeds``. ``champion``: the same, then repeated runs for
    determinism. ``time`` (sent after a ``check`` of the same cubin passed, and run holding the
    GPU alone: ``evaluator.worker.EXCLUSIVE_KINDS``): time ``timed_shapes`` against the path's
    baseline (cuBLAS for ``trsm_small``) and against ``rival_cubin``, the champion's or the
    parent's as ``rival_name`` says, when given (``rival_timings``), then verify
    ``recheck_shapes`` again on fresh inputs with the module that was timed (catches races and
    state that builds up across calls). Candidate failures come
    back as data; CUDA errors propagate to the worker loop, which reports a fault and retires the
    process.
    """
    if task["kind"] == "info":
        return {"gpu": gpu_info()}
    # The task's drivers are released when it ends, however it ends (a driver that calls cuBLAS
    # holds a handle and a workspace; the worker loads one per candidate).
    with contextlib.ExitStack() as owned:
        return _run_checks_and_timing(task, owned)


def _release(driver: Any) -> None:
    """Close ``driver`` (``seeds.spec.close_driver``) at the end of a task. An error here is
    dropped: after a CUDA fault every call on the context fails, the task's own outcome is what
    the worker reports, and the worker is retired after a fault anyway."""
    with contextlib.suppress(Exception):
        close_driver(driver)


def _run_checks_and_timing(task: dict[str, Any], owned: contextlib.ExitStack) -> dict[str, Any]:
    """:func:`run` for every kind but ``info``; drivers it loads are closed by ``owned``."""
    dtype = task["dtype"]
    t0 = time.perf_counter()
    spec = get_path(task["path_id"])
    suite = suite_for(spec.op)
    check = solution_check(spec.reference_check)
    driver = spec.driver(task["cubin"], dtype)
    owned.callback(_release, driver)
    if task["kind"] == "time":
        return _time_and_recheck(task, spec, suite, check, driver, owned)
    failure, passed = suite.verify(
        driver, spec, dtype, task["shapes"], task["seeds"], task["growth"], check
    )
    result: dict[str, Any] = {
        "failure": failure and asdict(failure),
        "verified_shapes": passed,
        "phase_seconds": {"verify": time.perf_counter() - t0},
    }
    if failure or task["kind"] == "check":
        return result
    if task["kind"] == "champion":
        failure = suite.determinism(
            driver, spec, dtype, task["determinism_shapes"], task["repeats"]
        )
        result["failure"] = failure and asdict(failure)
        return result
    raise ValueError(f"unknown task kind {task['kind']!r}")


def _time_and_recheck(
    task: dict[str, Any],
    spec: PathSpec,
    suite: OpSuite,
    check: SolutionCheck,
    driver: Any,
    owned: contextlib.ExitStack,
) -> dict[str, Any]:
    """The ``time`` kind of :func:`run` on ``driver`` (the task's cubin, loaded)."""
    dtype = task["dtype"]
    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    result: dict[str, Any] = {"failure": None, "phase_seconds": phases}
    baseline = spec.baseline(dtype)
    # The champion's (at promotion) or the parent's cubin, when given, is timed in the same
    # rounds as the candidate, so the two are compared interleaved, against the candidate's own
    # noise floor.
    rivals: dict[str, Any] = {}
    if task.get("rival_cubin"):
        rival = spec.driver(task["rival_cubin"], dtype)
        owned.callback(_release, rival)
        rivals[task.get("rival_name", "champion")] = rival
    timings, rival_timings = [], []
    try:
        for shape in task["timed_shapes"]:
            # The suite's plan for the shape (trsm: evaluator.timing_plan); the task's own
            # settings (its seed) win.
            timing, against, failure = suite.time(
                driver, spec, dtype, tuple(shape), baseline, check, rivals, task.get("timing", {})
            )
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
    phases["time"] = time.perf_counter() - t0
    fresh = [(s + 1) % 2**31 for s in task["seeds"]]
    failure, _ = suite.verify(driver, spec, dtype, task["recheck_shapes"], fresh, False, check)
    phases["verify"] = time.perf_counter() - t0 - phases["time"]
    if failure:
        result["failure"] = asdict(
            CheckFailure("recheck_after_timing", failure.shape, failure.value, failure.bound,
                         failure.describe())
        )  # fmt: skip
    return result
