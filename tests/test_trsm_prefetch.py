"""trsm's verification with its problems built ahead (``evaluator.inputs.ProblemPrefetch``,
``evaluator.op_suites.TrsmSuite.verify``), on the CPU: the plan names exactly the calls
``evaluator.gpu_tasks.verify`` makes in its shape loop, in order, so every problem built ahead
is used; the candidate sees the same bytes as without the prefetch and the verification reports
the same; the prefetch hands each build out once, keeps to its budget, drops what was not used
and falls back to a build of its own when one in the pool failed. And ``make_problem``'s draws
taken a block of rows at a time keep every byte at the m2049_16384 bucket's shapes past 2048.

The candidate is emulated on the host (X from SciPy's triangular solve in float64, cast), so
the checks run as in the GPU worker (the LAPACK ratio on the host, CuPy absent).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np
import pytest
from scipy.linalg import solve_triangular
from test_inputs_fast_build import _assert_same_problem, _reference_make_problem

from evaluator import gpu_tasks, host_pool, inputs
from evaluator.checks.accuracy import solution_check
from evaluator.inputs import KINDS, Problem, ProblemPrefetch, make_problem, problem_bytes
from evaluator.op_suites import TrsmSuite, verify_problem_keys
from evaluator.report import CheckFailure
from seeds.registry import get_path

SPEC = get_path("trsm_blocked", "m2049_16384")
CHECK = solution_check(SPEC.reference_check)
# Every branch of verify's shape loop: m = 1 (no audit pair), m < 16 (no kinds), ragged m >= 16
# with n = 1 and n > 1, and one shape twice (its keys listed twice, each built once per call).
SHAPES = [(1, 3), (9, 2), (20, 5), (40, 1), (20, 5), (129, 64)]
SEEDS = [1234, 98765, 2**31 - 1]


def _host_candidate(seen: list[tuple[Any, ...]]) -> Any:
    """``gpu_tasks.run_candidate`` on the host: records each problem's shape, kind and bytes
    and returns X solved in float64 (or complex128) and cast, with no memory check failing."""

    def run_candidate(driver: Any, problem: Problem) -> tuple[CheckFailure | None, np.ndarray]:
        a, b = problem.a, problem.b
        seen.append(
            (
                problem.shape,
                problem.kind,
                hashlib.sha256(a.tobytes(order="F")).hexdigest(),
                hashlib.sha256(b.tobytes(order="F")).hexdigest(),
            )
        )
        wide = np.complex128 if np.iscomplexobj(a) else np.float64
        with np.errstate(all="ignore"):
            x = solve_triangular(
                np.tril(a.astype(wide)), b.astype(wide), lower=True, check_finite=False
            )
        return None, np.asfortranarray(x.astype(b.dtype))

    return run_candidate


def _recording_builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every build of ``make_problem`` from here on, as its key plus the building thread's
    name, in the order they start."""
    builds: list[tuple[Any, ...]] = []
    build = inputs._build_problem

    def recorded(m: int, n: int, dtype: str, seed: int, kind: str) -> Problem:
        builds.append(((m, n, dtype, seed, kind), threading.current_thread().name))
        return build(m, n, dtype, seed, kind)

    monkeypatch.setattr(inputs, "_build_problem", recorded)
    return builds


def _recording_submissions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The key of every problem build handed to the host pool from here on, in the order of
    submission: the order the prefetch plans, which the pool's threads need not start in."""
    submitted: list[tuple[Any, ...]] = []
    submit = host_pool.submit

    def recorded(fn: Any, *args: Any) -> Any:
        if fn is inputs._build_problem:
            submitted.append(tuple(args))
        return submit(fn, *args)

    monkeypatch.setattr(host_pool, "submit", recorded)
    return submitted


@pytest.mark.parametrize("growth", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_keys_are_the_calls_of_verifys_shape_loop_in_order(monkeypatch, dtype, growth):
    """Without a prefetch, verify's own calls: the plan is their prefix up to the scale sweep's
    33×2 problem (growth) or all of them (no growth: nothing after the loop draws)."""
    builds = _recording_builds(monkeypatch)
    monkeypatch.setattr(gpu_tasks, "run_candidate", _host_candidate([]))
    failure, passed = gpu_tasks.verify(None, dtype, SHAPES, SEEDS, growth, CHECK, SPEC.verify_kinds)
    assert failure is None and passed == SHAPES
    calls = [key for key, _ in builds]
    keys = verify_problem_keys(dtype, SHAPES, SEEDS, growth, SPEC.verify_kinds)
    assert calls[: len(keys)] == keys
    if growth:
        assert calls[len(keys)] == (33, 2, dtype, SEEDS[0], "bounded")  # the sweep's, after
    else:
        assert len(calls) == len(keys)
    # trsm_small's kinds (growth, trap) follow the same loop.
    assert verify_problem_keys(dtype, [(20, 5)], [3], True, ("growth", "trap")) == [
        (20, 5, dtype, 3, "bounded"),
        (20, 5, dtype, 3, "growth"),
        (20, 5, dtype, 3, "trap"),
        (20, 5, dtype, 3 ^ 0x5A5A_5A5A, "bounded"),
    ]
    assert verify_problem_keys(dtype, SHAPES, [], growth, SPEC.verify_kinds) == []


@pytest.mark.parametrize("growth", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_suite_verify_sees_the_same_bytes_and_uses_every_problem_built_ahead(
    monkeypatch, dtype, growth
):
    direct: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gpu_tasks, "run_candidate", _host_candidate(direct))
    expected = gpu_tasks.verify(None, dtype, SHAPES, SEEDS, growth, CHECK, SPEC.verify_kinds)

    prefetches: list[ProblemPrefetch] = []
    original_enter = ProblemPrefetch.__enter__

    def enter(self: ProblemPrefetch) -> ProblemPrefetch:
        prefetches.append(self)
        return original_enter(self)

    monkeypatch.setattr(ProblemPrefetch, "__enter__", enter)
    ahead: list[tuple[Any, ...]] = []
    monkeypatch.setattr(gpu_tasks, "run_candidate", _host_candidate(ahead))
    builds = _recording_builds(monkeypatch)
    submitted = _recording_submissions(monkeypatch)
    got = TrsmSuite().verify(None, SPEC, dtype, SHAPES, SEEDS, growth, CHECK)

    assert got == expected and ahead == direct  # same report, same inputs in the same order
    (prefetch,) = prefetches
    keys = verify_problem_keys(dtype, SHAPES, SEEDS, growth, SPEC.verify_kinds)
    assert prefetch.taken == len(keys) and prefetch.unused == 0
    assert submitted == keys  # handed to the pool in the plan's order
    pooled = [key for key, thread in builds if thread.startswith("kernevo-host")]
    # Built in the pool, each once; the pool's threads may start them in any order.
    assert sorted(pooled) == sorted(keys)
    assert inputs._PREFETCH is None  # left: make_problem builds for itself again


def test_a_failing_verification_leaves_the_rest_unused_and_the_prefetch_inactive(monkeypatch):
    def wrong(driver: Any, problem: Problem) -> tuple[CheckFailure | None, np.ndarray]:
        return None, np.zeros(problem.shape, problem.b.dtype, order="F")

    monkeypatch.setattr(gpu_tasks, "run_candidate", wrong)
    prefetches: list[ProblemPrefetch] = []
    original_exit = ProblemPrefetch.__exit__

    def exit_(self: ProblemPrefetch, *args: Any) -> None:
        prefetches.append(self)
        original_exit(self, *args)

    monkeypatch.setattr(ProblemPrefetch, "__exit__", exit_)
    failure, passed = TrsmSuite().verify(None, SPEC, "float32", SHAPES, SEEDS, True, CHECK)
    assert failure is not None and passed == []
    (prefetch,) = prefetches
    keys = verify_problem_keys("float32", SHAPES, SEEDS, True, SPEC.verify_kinds)
    assert prefetch.taken == len(SEEDS)  # the first shape's problems, then the failure
    assert prefetch.unused == len(keys) - len(SEEDS)
    assert inputs._PREFETCH is None


def test_each_build_is_handed_out_once_and_unlisted_keys_build_as_usual(monkeypatch):
    builds = _recording_builds(monkeypatch)
    key = (129, 7, "float64", 42, "graded")
    other = (20, 3, "float32", 5, "trap")
    with ProblemPrefetch([key, key]) as prefetch:
        first, second = make_problem(*key), make_problem(*key)
        third = make_problem(*key)  # listed twice only: built here
        unlisted = make_problem(*other)
    assert prefetch.taken == 2 and prefetch.unused == 0
    want = _reference_make_problem(*key)
    for problem in (first, second, third):
        _assert_same_problem(problem, want, f"make_problem{key}")
    assert first.a is not second.a and second.a is not third.a  # each caller's own arrays
    _assert_same_problem(unlisted, _reference_make_problem(*other), f"make_problem{other}")
    threads = [thread for _, thread in builds]
    assert [t.startswith("kernevo-host") for t in threads] == [True, True, False, False]


def test_builds_ahead_keep_to_the_budget(monkeypatch):
    builds = _recording_builds(monkeypatch)
    keys = [(64, 8, "float64", seed, "bounded") for seed in range(5)]
    size = problem_bytes(64, 8, "float64")
    host_pool.wait_idle()
    with ProblemPrefetch(keys, budget_bytes=2 * size) as prefetch:
        host_pool.wait_idle()
        assert len(builds) == 2  # two fit the budget; the rest wait for a take
        make_problem(*keys[0])
        host_pool.wait_idle()
        assert len(builds) == 3
    assert prefetch.taken == 1 and prefetch.unused == 4
    with ProblemPrefetch(keys[:2], budget_bytes=1):  # one at least, however small the budget
        host_pool.wait_idle()
        assert len(builds) == 4
    assert [key for key, _ in builds] == [*keys[:3], keys[0]]


def test_a_build_that_failed_in_the_pool_is_built_again_by_the_caller(monkeypatch):
    build = inputs._build_problem

    def fails_in_the_pool(m: int, n: int, dtype: str, seed: int, kind: str) -> Problem:
        if threading.current_thread().name.startswith("kernevo-host"):
            raise MemoryError("no room for a build ahead")
        return build(m, n, dtype, seed, kind)

    monkeypatch.setattr(inputs, "_build_problem", fails_in_the_pool)
    key = (33, 2, "float32", 7, "bounded")
    with ProblemPrefetch([key, (5, 5, "float16", 1, "bounded"), (5, 5, "float32", 1, "?")]):
        problem = make_problem(*key)
        # Keys make_problem refuses are not built ahead; make_problem refuses them as before.
        with pytest.raises(KeyError):
            make_problem(5, 5, "float16", 1)
        with pytest.raises(ValueError, match="unknown problem kind"):
            make_problem(5, 5, "float32", 1, "?")
    _assert_same_problem(problem, _reference_make_problem(*key), f"make_problem{key}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(2049, 16), (3001, 5), (4100, 33)], ids=str)
def test_make_problem_keeps_every_byte_past_2048(shape, dtype):
    """The row blocks' draws (one stream per part, advanced past A's draws for the rest) at
    the bucket's ragged verification shapes, every kind, against the whole-matrix build."""
    for kind in KINDS:
        _assert_same_problem(
            make_problem(*shape, dtype, 20261201, kind),
            _reference_make_problem(*shape, dtype, 20261201, kind),
            f"make_problem({shape}, {dtype}, {kind})",
        )
