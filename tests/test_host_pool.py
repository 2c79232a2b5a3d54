"""The host pool (``evaluator.host_pool``) and what band_bidiag's and solve_tri's evaluations run
in it: results read back in the caller's order, unneeded tasks cancelled, idleness awaited
before LAPACK is timed, references and draws computed in the pool equal to sequential ones bit
for bit, and the first failure in the sequential order still the one reported.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from typing import Any

import numpy as np
import pytest
from ops_host import HostBandBidiag, HostSolveTri, host_cupy

from evaluator import band_bidiag_suite as band_suite
from evaluator import band_bidiag_timing as band_timing
from evaluator import host_pool
from evaluator import solve_tri_suite as tri_suite
from evaluator import solve_tri_timing as tri_timing
from evaluator.checks import accuracy
from evaluator.inputs import CounterRng
from evaluator.report import CheckFailure
from evaluator.timing import SetLayout
from seeds.band_bidiag.inputs import SPECTRUM_KINDS
from seeds.band_bidiag.reference import reference_singular_values
from seeds.band_bidiag.spec import BAND_BIDIAG
from seeds.solve_tri.inputs import make_problem
from seeds.solve_tri.reference import forward_substitution, nmse, reference
from seeds.solve_tri.spec import SOLVE_TRI

BAND_CHECK = accuracy.solution_check(BAND_BIDIAG.reference_check)
TRI_CHECK = accuracy.solution_check(SOLVE_TRI.reference_check)


@pytest.fixture(autouse=True)
def on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy in CuPy's place for the suites' ``import cupy``."""
    monkeypatch.setitem(sys.modules, "cupy", host_cupy())


# --- the pool -----------------------------------------------------------------------------------


def test_prefetched_results_come_back_in_the_callers_order_whatever_the_submission_order():
    calls = [lambda i=i: (i, threading.current_thread().name) for i in range(6)]
    with host_pool.prefetched(calls, order=[5, 3, 1, 0, 2, 4]) as futures:
        results = [future.result() for future in futures]
    assert [i for i, _ in results] == list(range(6))
    assert all(name.startswith("kernevo-host") for _, name in results)  # in the pool's threads
    with (
        pytest.raises(ValueError, match="each of the 2 calls once"),
        host_pool.prefetched(calls[:2], order=[0, 0]),
    ):
        pass


def test_leaving_prefetched_cancels_what_has_not_started_and_wait_idle_waits_for_the_rest():
    release = threading.Event()
    ran: list[int] = []

    def blocked(i: int) -> int:
        release.wait(10)
        time.sleep(0.2)
        ran.append(i)
        return i

    host_pool.wait_idle()  # no task of another test holds a thread
    workers = host_pool.host_workers()
    calls = [lambda i=i: blocked(i) for i in range(workers + 3)]
    try:
        with host_pool.prefetched(calls) as futures:
            time.sleep(0.2)  # every thread has taken one
        release.set()
        assert [f.cancelled() for f in futures] == [False] * workers + [True] * 3
        host_pool.wait_idle()  # the running ones finish in the background; this waits for them
        assert sorted(ran) == list(range(workers)) and all(f.done() for f in futures)
    finally:
        release.set()


def test_lapack_is_timed_only_once_the_pool_is_idle_and_once_per_key(monkeypatch):
    monkeypatch.setattr(band_timing, "_LAPACK_SECONDS", {})
    finished = threading.Event()

    def leftover() -> None:  # a reference of a verification that stopped at a failure
        time.sleep(0.3)
        finished.set()

    seen: list[bool] = []

    class Lapack:
        def time(self, band: np.ndarray) -> float:
            seen.append(finished.is_set())
            return 1.0  # slow: timed once

    host_pool.submit(leftover)
    assert band_timing.lapack_seconds(Lapack(), (64, 8), "float32") == (1.0, 0.0)
    host_pool.submit(leftover)  # the cached value is read without waiting or timing again
    assert band_timing.lapack_seconds(Lapack(), (64, 8), "float32") == (1.0, 0.0)
    assert seen == [True]
    host_pool.wait_idle()


# --- band_bidiag --------------------------------------------------------------------------------


def test_bands_and_references_prepared_in_the_pool_equal_sequential_ones_bit_for_bit():
    kinds = BAND_BIDIAG.verify_kinds
    items = [
        (shape, kind, seed)
        for shape in ((40, 6), (100, 7), (130, 9))
        for kind, seed in band_suite.band_draws(shape, [5, 6], True, kinds)
    ]
    assert {kind for _, kind, _ in items} >= set(SPECTRUM_KINDS)
    calls = [lambda s=s, k=k, d=d: band_suite.prepared(k, s, "float32", d) for s, k, d in items]
    with host_pool.prefetched(calls, order=list(reversed(range(len(calls))))) as futures:
        pooled = [future.result() for future in futures]
    for (shape, kind, seed), (drawn, sigma) in zip(items, pooled, strict=True):
        alone = band_suite.draw(kind, shape, "float32", seed).problem.band
        assert drawn.problem.band.tobytes() == alone.tobytes() and drawn.seed == seed
        assert sigma is not None and sigma.tobytes() == reference_singular_values(alone).tobytes()


def test_a_reference_that_raises_in_the_pool_is_left_to_the_check(monkeypatch):
    def fails(band: np.ndarray) -> np.ndarray:
        raise RuntimeError("dbdsqr: INFO = 3")

    monkeypatch.setattr(band_suite, "reference_singular_values", fails)
    drawn, sigma = band_suite.prepared("random", (33, 4), "float64", 2)
    assert sigma is None and drawn.problem.band.shape == (5, 33)


def test_which_bands_go_to_the_pool_first():
    assert band_suite.first_needed((1000, 128), "arithmetic")
    assert band_suite.first_needed((2048, 33), "rank_deficient")
    assert not band_suite.first_needed((512, 64), "log_decay")  # every spectrum is drawn there
    assert not band_suite.first_needed((2048, 33), "random")


def test_band_verify_hands_each_bands_reference_to_the_check_in_the_sequential_order():
    seen: list[tuple[str, np.ndarray, np.ndarray | None]] = []

    def check(problem: Any, output: Any, sigma: np.ndarray | None = None) -> CheckFailure | None:
        seen.append((problem.kind, problem.band.copy(order="F"), sigma))
        return BAND_CHECK(problem, output, sigma=sigma)

    shapes = [(7, 3), (40, 6), (100, 7)]
    failure, passed = band_suite.BandBidiagSuite().verify(
        HostBandBidiag("float64"), BAND_BIDIAG, "float64", shapes, [3, 4], True, check
    )
    assert failure is None and passed == shapes
    expected = [
        drawn.problem
        for shape in shapes
        for drawn in band_suite.bands(shape, "float64", [3, 4], True, BAND_BIDIAG.verify_kinds)
    ]
    assert [(kind, band.tobytes()) for kind, band, _ in seen] == [
        (problem.kind, problem.band.tobytes()) for problem in expected
    ]
    for _, band, sigma in seen:
        assert sigma is not None and sigma.tobytes() == reference_singular_values(band).tobytes()


def test_band_verify_reports_the_first_failing_band_in_order_and_stops_there():
    # Fails the third band of (40, 6) and every band after it: the third is the one reported.
    calls: list[str] = []

    def check(problem: Any, output: Any, sigma: np.ndarray | None = None) -> CheckFailure | None:
        calls.append(problem.kind)
        if problem.n == 40 and len(calls) >= 3:
            return CheckFailure("singular_values", None, 1.0, 0.5, f"at n=40 ({problem.kind})")
        return BAND_CHECK(problem, output, sigma=sigma)

    driver = HostBandBidiag("float32")
    failure, passed = band_suite.BandBidiagSuite().verify(
        driver, BAND_BIDIAG, "float32", [(40, 6), (100, 7)], [8, 9], True, check
    )
    assert passed == [] and failure.check == "singular_values"
    assert failure.detail == "at n=40 (zero_rows) [zero_rows input, seed 8]"
    assert calls == ["random", "random", "zero_rows"] and len(driver.reduced) == 3
    host_pool.wait_idle()


# --- solve_tri ----------------------------------------------------------------------------------


def timed_buffers(shape: tuple[int, int, int, int], calls: int) -> dict[str, Any]:
    """Host timing buffers of ``calls`` sets and X solved right for each."""
    n, k, b2, b3 = shape
    layouts = SetLayout(calls, n * n * b2 * b3, 4), SetLayout(calls, k * n * b2 * b3, 4)
    a_buf, b_buf, x_buf = (
        layout.allocate(np, np.dtype(np.float32)) for layout in (*layouts, layouts[1])
    )
    a_sets, b_sets = tri_timing.draw_sets(CounterRng(np, 9), shape, calls)
    layouts[0].payload(a_buf)[...], layouts[1].payload(b_buf)[...] = a_sets, b_sets
    x = forward_substitution(
        a_sets.reshape(calls, b3, b2, n, n), b_sets.reshape(calls, b3, b2, n, k)
    )
    layouts[1].payload(x_buf)[...] = x.astype(np.float32).reshape(calls, -1)
    return {"layouts": layouts, "inputs": (a_buf, b_buf), "x": x_buf}


def audit(buffers: dict[str, Any], shape: tuple[int, ...], sets: list[int], check: Any) -> Any:
    a_buf, b_buf = buffers["inputs"]
    return tri_timing.audit_outputs(
        "graph replay 7 of 60", shape, buffers["layouts"], (a_buf, b_buf),
        (a_buf, b_buf, buffers["x"]), sets, check, 9,
    )  # fmt: skip


def test_the_audits_checks_run_in_the_pool_and_the_first_failing_set_in_order_is_reported():
    shape = (17, 9, 2, 3)
    buffers = timed_buffers(shape, 6)
    b_layout = buffers["layouts"][1]
    b_layout.payload(buffers["x"])[4, 5] += 1.0  # set 4: batch (0, 0), row 0 off by 1
    b_layout.payload(buffers["x"])[2, 7] += 1.0  # set 2 too: the first audited
    threads: list[str] = []

    def check(*args: Any) -> CheckFailure | None:
        threads.append(threading.current_thread().name)
        return TRI_CHECK(*args)

    failure = audit(buffers, shape, [0, 2, 4, 5], check)
    assert failure.check == "timed_output_row_relative_error"
    assert failure.detail.startswith("graph replay 7 of 60, input set 2: n=17, k=9, b2=2, b3=3")
    assert threads and all(name.startswith("kernevo-host") for name in threads)
    host_pool.wait_idle()
    # The same verdict as each set's check run in order in this thread.
    fresh = b_layout.allocate(np, np.dtype(np.float32))
    problems = {
        i: tri_timing.set_problem(shape, buffers["layouts"], (*buffers["inputs"], fresh), i, 9)
        for i in (0, 2, 4, 5)
    }
    alone = [
        TRI_CHECK(p, tri_timing.set_output(b_layout, buffers["x"], i)) for i, p in problems.items()
    ]
    assert [f and f.check for f in alone] == [
        None,
        "row_relative_error",
        "row_relative_error",
        None,
    ]
    assert failure.detail.endswith(alone[1].detail) and failure.value == alone[1].value


def test_no_set_is_checked_when_the_guards_or_the_inputs_already_failed():
    shape = (11, 5, 1, 1)
    buffers = timed_buffers(shape, 3)
    buffers["x"][buffers["layouts"][1].guard + 11 * 5] = 0.0  # just past set 0's X
    checked: list[Any] = []
    failure = audit(buffers, shape, [0, 1, 2], lambda *args: checked.append(args))
    assert failure.check == "timed_output_out_of_bounds_write" and checked == []


def test_the_ggml_baselines_nmse_uses_the_references_own_x():
    problem = make_problem((30, 8, 7, 1), 5, "ggml", "padded")
    got = tri_suite.baseline_nmse(HostSolveTri(), problem)
    x = problem.x.buffer.copy()
    HostSolveTri().solve_raw(
        problem.a.buffer.ctypes.data + 4 * problem.a.offset,
        problem.b.buffer.ctypes.data + 4 * problem.b.offset,
        x.ctypes.data + 4 * problem.x.offset, *problem.shape, problem.a.nb, problem.b.nb,
        problem.x.nb,
    )  # fmt: skip
    x_ref = reference(problem.a.view(), problem.b.view())[0]
    assert got.tobytes() == nmse(problem.x.view(x), x_ref).tobytes()


def test_solve_tri_verify_draws_in_the_pool_and_still_stops_at_the_first_failure():
    shapes = [(11, 5, 1, 1), (17, 9, 2, 4), (30, 8, 7, 1)]
    spec = types.SimpleNamespace(baseline=lambda dtype: HostSolveTri())
    driver = HostSolveTri("first_batch_a")  # wrong wherever there is more than one batch
    failure, passed = tri_suite.SolveTriSuite().verify(
        driver, spec, "float32", shapes, [3, 4], True, TRI_CHECK
    )
    assert passed == [(11, 5, 1, 1)] and failure.shape == (17, 9, 2, 4)
    assert failure.check == "row_relative_error" and driver.calls[-1] == (17, 9, 2, 4)
    assert (30, 8, 7, 1) not in driver.calls
    host_pool.wait_idle()
