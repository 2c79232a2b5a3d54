"""The solve_tri and band_bidiag evaluation suites without a GPU: their own code (problems with
guard bands copied whole, raw pointers at ``buffer + offset``, buffers read back and judged,
graph against launches, determinism, run_once's exact allocations, the timing's audits, plans
and floors) run on host memory (``tests/ops_host.py``: NumPy in CuPy's place, drivers that solve
on host addresses), with right drivers and with issue 8's planted faults, each refused by the
check named. The suites on the device: ``tests/test_ops_registered_gpu.py``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest
from ops_host import HostBandBidiag, HostSolveTri, host_cupy

from evaluator import band_bidiag_suite as band_suite
from evaluator import band_bidiag_timing as band_timing
from evaluator import solve_tri_suite as tri_suite
from evaluator import solve_tri_timing as tri_timing
from evaluator.checks import accuracy
from evaluator.checks.integrity import guard_pattern
from evaluator.inputs import CounterRng
from evaluator.op_suites import suite_for
from evaluator.timing import SetLayout
from seeds.band_bidiag.inputs import SPECTRUM_KINDS, BandProblem, random_band
from seeds.band_bidiag.lapack import gbbrd
from seeds.band_bidiag.spec import BAND_BIDIAG
from seeds.solve_tri.reference import forward_substitution
from seeds.solve_tri.spec import SOLVE_TRI

TRI_CHECK = accuracy.solution_check(SOLVE_TRI.reference_check)
BAND_CHECK = accuracy.solution_check(BAND_BIDIAG.reference_check)


@pytest.fixture(autouse=True)
def on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy in CuPy's place for the suites' ``import cupy``."""
    monkeypatch.setitem(sys.modules, "cupy", host_cupy())


def tri_spec(baseline: HostSolveTri) -> Any:
    """What the suite reads of a path spec: the baseline factory and the input kinds."""
    return types.SimpleNamespace(baseline=lambda dtype: baseline, verify_kinds=("ggml",))


# --- solve_tri ----------------------------------------------------------------------------------


def test_the_problems_rotate_layouts_and_growth_adds_in_place_and_ggmls_inputs():
    quick = tri_suite.problems((64, 10, 2, 2), [5], growth=False)
    assert [(p.kind, p.layout, p.in_place) for p in quick] == [("bounded", "padded", False)]
    full = tri_suite.problems((64, 10, 2, 2), [5, 6, 7], growth=True)
    assert [(p.kind, p.layout, p.in_place, p.seed) for p in full] == [
        ("bounded", "padded", False, 5), ("bounded", "batch_swapped", False, 6),
        ("bounded", "packed", False, 7), ("bounded", "padded", True, 5),
        ("ggml", "padded", False, 5),
    ]  # fmt: skip
    one_seed = tri_suite.problems((128, 32, 4, 2), [9], growth=True)
    assert {p.layout for p in one_seed} == {"padded", "batch_swapped", "packed"}
    assert "ggml" not in {p.kind for p in one_seed}  # n > 64: ggml's inputs are not judged


def test_the_seed_driver_passes_every_verify_shape_with_growth():
    baseline = HostSolveTri()
    shapes = [s for s in SOLVE_TRI.verify_shapes if s[0] * s[2] * s[3] <= 64 * 64]
    failure, passed = tri_suite.SolveTriSuite().verify(
        HostSolveTri(), tri_spec(baseline), "float32", shapes, [11, 12, 13], True, TRI_CHECK
    )
    assert failure is None and passed == list(shapes)
    assert baseline.calls and baseline.closed  # cuBLAS ran on ggml's inputs, and was released


@pytest.mark.parametrize(
    ("fault", "shape", "check", "where"),
    [
        ("first_batch_a", (17, 9, 2, 4), "row_relative_error", "batch (i2, i3) = (1, 0)"),
        ("columns_past_32", (64, 64, 2, 2), "non_finite_output", "column 32"),
        ("pad_write", (30, 8, 7, 1), "out_of_bounds_write", "batch (i2, i3) = (0, 0)"),
        ("packed_strides", (11, 5, 1, 1), "out_of_bounds_write", "n=11, k=5, b2=1, b3=1"),
    ],
)  # fmt: skip
def test_planted_faults_are_refused_by_the_check_named(fault, shape, check, where):
    failure, passed = tri_suite.SolveTriSuite().verify(
        HostSolveTri(fault), tri_spec(HostSolveTri()), "float32", [shape], [3], True, TRI_CHECK
    )
    assert failure is not None and passed == []
    assert (failure.check, failure.shape) == (check, shape)
    assert where in failure.detail and "[bounded inputs, padded layout, seed 3]" in failure.detail
    assert "m=" not in failure.describe()  # the op's words, never trsm's


def test_determinism_and_run_once_launch_the_ops_problem():
    suite = tri_suite.SolveTriSuite()
    driver = HostSolveTri()
    assert suite.determinism(driver, SOLVE_TRI, "float32", [(30, 8, 7, 1)], 3) is None
    assert driver.calls == [(30, 8, 7, 1)] * 3
    recorder = HostSolveTri()
    suite.run_once(recorder, SOLVE_TRI, "float32", (11, 5, 2, 1), 2)
    assert recorder.calls == [(11, 5, 2, 1)] * 2
    assert suite.input_scales("float32", 1) == []


def test_the_timing_plan_fits_the_sets_in_its_budget():
    assert tri_timing.timing_plan((64, 6, 4, 2))["calls"] == tri_timing.MAX_CALLS
    plan = tri_timing.timing_plan((64, 64, 8, 32))  # 8 MiB of A and B per set
    assert plan["calls"] == 8 and plan["single_calls"] == 8
    assert tri_timing.timing_plan((4096, 4096, 64, 1))["calls"] == tri_timing.MIN_CALLS
    # Draws for many replays at once (one per replay cost 15.6 s a candidate on the H200),
    # within the draw budget: 8 sets of 8 MiB per replay, 8 replays in 512 MiB.
    assert plan["replays_per_draw"] == 8
    assert tri_timing.timing_plan((64, 6, 4, 2))["replays_per_draw"] == 16
    assert tri_timing.timing_plan((4096, 4096, 64, 1))["replays_per_draw"] == 1
    floor = tri_timing.plausibility_floor_us((64, 6, 4, 2), 4.8e12, 2.0)
    assert floor == pytest.approx(1.0)  # the launch term: 0.5 x 2 us; the bytes take 0.005 us


def test_timed_sets_are_drawn_bounded_and_different_per_set():
    n, k, b2, b3 = shape = (17, 9, 2, 3)
    a, b = tri_timing.draw_sets(CounterRng(np, 5), shape, 4)
    a = a.reshape(4, b3, b2, n, n)
    rows = np.arange(n)
    assert np.isnan(a[..., rows[:, None] < rows[None, :]]).all()
    diagonal = np.abs(a[..., rows, rows])
    assert ((diagonal >= 1) & (diagonal <= 2)).all()
    lower = a[..., rows[:, None] > rows[None, :]]
    assert (np.abs(lower) <= 1 / np.sqrt(n)).all() and (np.abs(b) <= 1).all()
    assert not np.array_equal(a[0], a[1]) and b.shape == (4, b3 * b2 * n * k)


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


def audit(buffers: dict[str, Any], shape: tuple[int, ...], a_out=None, sets=(0, 3)) -> Any:
    a_buf, b_buf = buffers["inputs"]
    after = (a_buf if a_out is None else a_out, b_buf, buffers["x"])
    return tri_timing.audit_outputs(
        "graph replay 7 of 60", shape, buffers["layouts"], (a_buf, b_buf), after, list(sets),
        TRI_CHECK, 9,
    )  # fmt: skip


def test_the_timed_outputs_are_audited_set_by_set():
    shape = (17, 9, 2, 3)
    buffers = timed_buffers(shape, 4)
    assert audit(buffers, shape) is None
    b_layout = buffers["layouts"][1]
    b_layout.payload(buffers["x"])[3, 5] += 1.0  # set 3: batch (0, 0), row 0 off by 1
    failure = audit(buffers, shape)
    assert failure.check == "timed_output_row_relative_error" and failure.shape == shape
    assert failure.detail.startswith("graph replay 7 of 60, input set 3: n=17, k=9, b2=2, b3=3")


def test_a_timed_write_past_a_set_or_into_a_is_refused():
    shape = (11, 5, 1, 1)
    buffers = timed_buffers(shape, 3)
    x = buffers["x"]
    x[buffers["layouts"][1].guard + 11 * 5] = 0.0  # just past set 0's X
    failure = audit(buffers, shape)
    assert failure.check == "timed_output_out_of_bounds_write"
    assert failure.detail.startswith("graph replay 7 of 60: n=11, k=5, b2=1, b3=1: a guard band")
    buffers = timed_buffers(shape, 3)
    a_out = buffers["inputs"][0].copy()
    a_out[buffers["layouts"][0].guard + 1] = 7.0  # A's strict upper triangle, set 0
    assert audit(buffers, shape, a_out=a_out).check == "timed_output_input_modified"


# --- band_bidiag --------------------------------------------------------------------------------

SMALL_BANDS = [(1, 0), (2, 1), (7, 3), (33, 1), (40, 39), (100, 7)]


def test_the_seed_drivers_stand_in_passes_every_small_shape_with_growth():
    driver = HostBandBidiag("float64")
    failure, passed = band_suite.BandBidiagSuite().verify(
        driver, BAND_BIDIAG, "float64", SMALL_BANDS, [21, 22], True, BAND_CHECK
    )
    assert failure is None and passed == SMALL_BANDS
    # Per shape: 2 seeds, zero_rows, repeated_blocks and the spectra (n <= 512, bandwidth >= 1).
    expected = sum(4 + (5 if bw >= 1 else 0) for _, bw in SMALL_BANDS)
    assert len(driver.reduced) == expected and driver.solves == len(SMALL_BANDS)


def test_which_spectra_a_shape_draws():
    kinds = BAND_BIDIAG.verify_kinds
    assert band_suite.spectrum_kinds((300, 64), kinds, 1) == list(SPECTRUM_KINDS)
    one = band_suite.spectrum_kinds((1000, 128), kinds, 1)
    assert len(one) == 1 and one != band_suite.spectrum_kinds((1000, 128), kinds, 2)
    assert band_suite.spectrum_kinds((2049, 32), kinds, 1) == []
    assert band_suite.spectrum_kinds((64, 0), kinds, 1) == []
    drawn = band_suite.bands((33, 4), "float32", [1, 2], False, kinds)
    assert [(d.problem.kind, d.seed, d.problem.band.dtype) for d in drawn] == [
        ("random", 1, np.float32), ("random", 2, np.float32),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "check"),
    [
        ("unreduced", "singular_values"),
        ("guard_write", "out_of_bounds_write"),
        ("writes_band", "input_modified"),
        ("graph_bits", "graph_matches_launches"),
    ],
)
def test_planted_band_faults_are_refused_by_the_check_named(fault, check):
    failure, passed = band_suite.BandBidiagSuite().verify(
        HostBandBidiag("float32", fault), BAND_BIDIAG, "float32", [(40, 6)], [8], True, BAND_CHECK
    )
    assert failure is not None and passed == []
    assert (failure.check, failure.shape) == (check, None)
    assert "at n=40, bandwidth=6" in failure.detail and "random input, seed 8" in failure.detail
    assert "m=" not in failure.describe()


def test_band_determinism_compares_launches_and_replays():
    suite = band_suite.BandBidiagSuite()
    for fault, check in ((None, None), ("alternating", "nondeterministic")):
        driver = HostBandBidiag("float64", fault)
        failure = suite.determinism(driver, BAND_BIDIAG, "float64", [(150, 40)], 4)
        assert (failure and failure.check) == check
    assert "at n=150, bandwidth=40: 2 distinct (d, e) in 5 reductions" in failure.detail


def test_band_run_once_reduces_its_own_exact_storage():
    driver = HostBandBidiag("float32")
    band_suite.BandBidiagSuite().run_once(driver, BAND_BIDIAG, "float32", (150, 40), 2)
    assert driver.reduced == [(150, 40, 120, 79)] * 2  # ldab = 3 BW, ku = 2 BW - 1


def test_lapack_is_timed_once_per_shape_and_dtype_and_repeated_when_fast(monkeypatch):
    monkeypatch.setattr(band_timing, "_LAPACK_SECONDS", {})
    times = iter([0.1, 0.3, 0.2, 0.5, 0.4, 9.0])
    calls: list[Any] = []

    class Lapack:
        def time(self, band: np.ndarray) -> float:
            calls.append(band.dtype)
            return next(times)

    assert band_timing.lapack_seconds(Lapack(), (64, 8), "float32") == pytest.approx((0.3, 0.2))
    assert band_timing.lapack_seconds(Lapack(), (64, 8), "float32") == pytest.approx((0.3, 0.2))
    assert len(calls) == band_timing.LAPACK_MAX_REPEATS and calls[0] == np.float32
    assert band_timing.lapack_seconds(Lapack(), (64, 8), "float64") == (9.0, 0.0)  # slow: once


def test_a_lapack_call_of_a_third_of_a_second_is_a_median_of_repeats(monkeypatch):
    """RESULTS section 21: one 0.29 s call read 287 ms in one GPU worker and 392 ms in
    another; a single slow read no longer sets the shape's baseline."""
    monkeypatch.setattr(band_timing, "_LAPACK_SECONDS", {})
    times = iter([0.392, 0.287, 0.290, 0.288, 0.291])

    class Lapack:
        def time(self, band: np.ndarray) -> float:
            return next(times)

    median, _ = band_timing.lapack_seconds(Lapack(), (1024, 128), "float32")
    assert median == pytest.approx(0.290)


def test_band_timing_draws_floors_and_samples():
    band = band_timing.draw_band(CounterRng(np, 3), (10, 4), "float64")
    assert band.flags.f_contiguous and band.shape == (5, 10) and (np.abs(band) <= 1).all()
    for off in range(1, 5):  # the slots above row 0 are outside the matrix
        assert not band[4 - off, :off].any() and band[4 - off, off:].all()
    floor = band_timing.plausibility_floor_us((8192, 32), 4, 24570, 4.8e12, 1.0)
    assert floor == pytest.approx(0.5 * 24570)
    assert band_timing.sample_count(0.3, 2, 6.0, 5, 30) == 10
    assert band_timing.sample_count(0.001, 2, 6.0, 5, 30) == 30
    assert band_timing.sample_count(5.0, 2, 6.0, 5, 30) == 5


def test_a_timed_reduction_is_audited():
    band = random_band(64, 8, np.float32, np.random.default_rng(4))
    right = gbbrd(band)
    when = "graph replay 3 of 10"
    assert band_timing.audit_replay(when, (64, 8), band, band, right, BAND_CHECK) is None
    unreduced = (band[8].copy(), band[7, 1:].copy())
    failure = band_timing.audit_replay(when, (64, 8), band, band, unreduced, BAND_CHECK)
    assert failure.check == "timed_output_singular_values"
    assert failure.detail.startswith("graph replay 3 of 10: at n=64, bandwidth=8 (timed input)")
    changed = band.copy(order="F")
    changed[8, 0] += 1
    failure = band_timing.audit_replay(when, (64, 8), band, changed, right, BAND_CHECK)
    assert failure.check == "timed_output_input_modified"


def test_the_band_check_names_the_ops_parameters():
    band = random_band(40, 6, np.float64, np.random.default_rng(1))
    assert BAND_CHECK(BandProblem("random", band), gbbrd(band)) is None
    d, e = gbbrd(band)
    d[3] = np.nan
    failure = BAND_CHECK(BandProblem("random", band), (d, e))
    assert failure.check == "non_finite_output" and failure.shape is None
    assert failure.describe() == (
        "non_finite_output: 1 > bound 0. at n=40, bandwidth=6 (random input): 1 entries of d, e "
        "not finite"
    )
    assert suite_for("band_bidiag").input_scales("float64", 3) == []
    assert guard_pattern(np.float64, 1) != guard_pattern(np.float32, 2)
