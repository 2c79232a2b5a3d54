"""The host side of timing's input refresh and audit, run with NumPy (no GPU needed).

Timing draws its inputs on the device with the same code (``CounterRng`` and ``bounded_sets``
work on any array module), so these tests check what the GPU runs: the distributions match
``make_problem``'s, a refresh changes every set and no guard band, and the audit checks each
output against exactly the inputs its replay read.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from evaluator.checks.accuracy import check_solution
from evaluator.checks.integrity import GUARD_ELEMENTS, guard_pattern
from evaluator.inputs import NUMPY_DTYPES, CounterRng, bounded_sets, make_problem
from evaluator.timing import SET_ALIGN_BYTES, SetLayout, audit_outputs

DTYPES = ["float32", "float64", "complex64", "complex128"]


def test_counter_rng_is_reproducible_and_never_repeats_a_draw():
    first, again = CounterRng(np, 99), CounterRng(np, 99)
    a, b = first.uniform(-1, 1, (4, 5)), first.uniform(-1, 1, (4, 5))
    assert np.array_equal(a, again.uniform(-1, 1, (4, 5)))
    assert not np.isin(b, a).any()
    u = CounterRng(np, 3).uniform(1.0, 2.0, (100_000,))
    assert u.min() >= 1.0 and u.max() < 2.0 and abs(u.mean() - 1.5) < 0.01
    assert not np.array_equal(
        CounterRng(np, 4).uniform(0, 1, (8,)), CounterRng(np, 3).uniform(0, 1, (8,))
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n"), [(1, 1), (2, 7), (16, 16), (33, 5), (64, 64)])
def test_bounded_sets_have_make_problems_structure(dtype, m, n):
    a_sets, b_sets = bounded_sets(CounterRng(np, 5), m, n, dtype, 6)
    assert a_sets.dtype == NUMPY_DTYPES[dtype] and a_sets.shape == (6, m * m)
    assert b_sets.dtype == NUMPY_DTYPES[dtype] and b_sets.shape == (6, m * n)
    for flat_a, flat_b in zip(a_sets, b_sets, strict=True):
        a = flat_a.reshape((m, m), order="F")
        assert np.isnan(a[np.triu_indices(m, 1)]).all()
        diag = np.abs(np.diag(a))
        assert (diag >= 1 - 1e-6).all() and (diag <= 2 + 1e-6).all()
        assert (np.abs(np.tril(a, -1)) <= 1 / np.sqrt(m) + 1e-6).all()
        assert np.isfinite(flat_b).all() and (np.abs(flat_b) <= 1 + 1e-6).all()
    assert len({row.tobytes() for row in b_sets}) == 6


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_bounded_sets_draw_from_make_problems_distributions(dtype):
    """Same scale and conditioning as verification: moments of the entries and of X agree."""
    m, n, count = 48, 48, 40
    a_sets, b_sets = bounded_sets(CounterRng(np, 11), m, n, dtype, count)
    timed = [
        (a.reshape((m, m), order="F"), b.reshape((m, n), order="F"))
        for a, b in zip(a_sets, b_sets, strict=True)
    ]
    verified = [(p.a, p.b) for p in (make_problem(m, n, dtype, s) for s in range(count))]

    def moments(problems):
        off = np.concatenate([np.abs(a[np.tril_indices(m, -1)]) for a, _ in problems])
        diag = np.concatenate([np.abs(np.diag(a)) for a, _ in problems])
        b = np.concatenate([np.abs(b).ravel() for _, b in problems])
        x = [solve_triangular(np.tril(np.nan_to_num(a)), b, lower=True) for a, b in problems]
        return off.mean() * np.sqrt(m), diag.mean(), b.mean(), np.median(np.abs(x))

    np.testing.assert_allclose(moments(timed), moments(verified), rtol=0.05)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layout_aligns_sets_and_a_refresh_keeps_every_guard_band(dtype):
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    m, n, calls = 33, 5, 4
    layout = SetLayout(calls, m * n, np_dtype.itemsize)
    assert all(layout.offset(i) % SET_ALIGN_BYTES == 0 for i in range(calls))
    assert layout.stride - layout.size >= GUARD_ELEMENTS
    buf = layout.allocate(np, np_dtype)
    bands = layout.guard_bytes(buf)
    assert bands == guard_pattern(np_dtype, layout.total - calls * layout.size)
    rng = CounterRng(np, 1)
    seen = []
    for _ in range(3):
        layout.payload(buf)[...] = bounded_sets(rng, m, n, dtype, calls)[1]
        assert layout.guard_bytes(buf) == bands
        seen += [layout.payload(buf)[i].tobytes() for i in range(calls)]
    assert len(set(seen)) == 3 * calls  # no set repeats, within a refresh or across refreshes
    # Set i sits at its byte offset, in Fortran order.
    i = 2
    start = layout.offset(i) // np_dtype.itemsize
    assert np.array_equal(buf[start : start + layout.size], layout.payload(buf)[i])


def _timed_run(dtype, m, n, calls, seed):
    """Host stand-in for one replay: refreshed buffers and a correct candidate's outputs."""
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    layouts = a_layout, b_layout = (
        SetLayout(calls, m * m, np_dtype.itemsize),
        SetLayout(calls, m * n, np_dtype.itemsize),
    )
    a_buf, b_buf = a_layout.allocate(np, np_dtype), b_layout.allocate(np, np_dtype)
    a_sets, b_sets = bounded_sets(CounterRng(np, seed), m, n, dtype, calls)
    a_layout.payload(a_buf)[...] = a_sets
    b_layout.payload(b_buf)[...] = b_sets
    x_buf = b_buf.copy()
    for i in range(calls):
        a = np.tril(np.nan_to_num(a_sets[i].reshape((m, m), order="F")))
        x = solve_triangular(a, b_sets[i].reshape((m, n), order="F"), lower=True)
        b_layout.payload(x_buf)[i] = x.ravel(order="F")
    return layouts, (a_buf, b_buf), (a_buf.copy(), x_buf)


@pytest.mark.parametrize("dtype", DTYPES)
def test_audit_passes_right_outputs_of_the_inputs_the_replay_read(dtype):
    layouts, inputs, after = _timed_run(dtype, 16, 8, 6, seed=3)
    assert (
        audit_outputs("replay", layouts, (16, 8), inputs, after, range(6), check_solution, 3)
        is None
    )


def test_audit_catches_a_result_kept_from_an_earlier_replay():
    """A memo that hands back the X of the previous refresh's inputs (issue 6)."""
    layouts, inputs, (a_after, x_after) = _timed_run("float64", 16, 8, 6, seed=3)
    _, _, (_, x_earlier) = _timed_run("float64", 16, 8, 6, seed=2)
    b_layout = layouts[1]
    b_layout.payload(x_after)[4] = b_layout.payload(x_earlier)[4]
    failure = audit_outputs(
        "graph replay 7 of 60", layouts, (16, 8), inputs, (a_after, x_after), range(6),
        check_solution, 3,
    )  # fmt: skip
    assert failure.check == "timed_output_scaled_residual"
    assert failure.detail.startswith("graph replay 7 of 60, input set 4:")
    # Only the sets the run wrote are audited (single calls leave older outputs in the rest).
    assert audit_outputs(
        "single calls", layouts, (16, 8), inputs, (a_after, x_after), range(4), check_solution, 3
    ) is None  # fmt: skip


def test_audit_catches_state_kept_in_guard_bands_or_in_a():
    layouts, inputs, (a_after, x_after) = _timed_run("float32", 7, 5, 3, seed=9)
    a_layout, b_layout = layouts
    x_bad = x_after.copy()
    x_bad[b_layout.offset(1) // 4 + b_layout.size + 3] = 1.0  # a scratch word past set 1's B
    failure = audit_outputs(
        "r", layouts, (7, 5), inputs, (a_after, x_bad), range(3), check_solution, 9
    )
    assert failure.check == "timed_output_out_of_bounds_write"
    a_bad = a_after.copy()
    a_bad[a_layout.offset(2) // 4 + 7] = 0.0  # A's NaN upper triangle, set 2, column 1
    failure = audit_outputs(
        "r", layouts, (7, 5), inputs, (a_bad, x_after), range(3), check_solution, 9
    )
    assert failure.check == "timed_output_input_modified"


def test_audited_sets_are_distinct_in_range_and_not_always_the_same() -> None:
    from evaluator.timing import AUDITED_SETS, _audited_sets

    draws = [_audited_sets(32) for _ in range(20)]
    assert all(len(d) == AUDITED_SETS == len(set(d)) and min(d) >= 0 and max(d) < 32 for d in draws)
    assert len({tuple(d) for d in draws}) > 1  # drawn afresh: a candidate cannot predict them
    assert _audited_sets(5) == [0, 1, 2, 3, 4]


def test_a_time_below_the_plausibility_floor_is_implausible() -> None:
    from evaluator.timing import implausible_time

    assert implausible_time((64, 64), 2.4, 0.29, 0.58, 32) is None
    assert implausible_time((64, 64), 0.29, 0.29, 0.58, 32) is None  # at the floor: possible
    failure = implausible_time((16, 16), 0.04, 0.29, 0.58, 32)
    assert (failure.check, failure.shape, failure.value, failure.bound) == (
        "implausible_time", (16, 16), 0.04, 0.29,
    )  # fmt: skip
    assert "0.58 us per launch" in failure.detail
    assert failure.describe().startswith("implausible_time at m=16, n=16: 0.04 < bound 0.29.")


def _seed_driver(dtype: str):
    from evaluator.compile import compile_cubin
    from seeds.registry import get_path
    from seeds.trsm_small.driver import TrsmSmallDriver

    spec = get_path("trsm_small")
    result = compile_cubin(spec.seed_source(), spec.compile_options(dtype, "sm_90"), "sm_90")
    assert result.ok, result.log
    return TrsmSmallDriver(result.cubin, dtype)


@pytest.mark.gpu
def test_the_seed_against_itself_is_within_its_noise_floor_and_plausible() -> None:
    """The seed timed with a second copy of itself as a rival (another module, same cubin): not
    faster than itself, a small noise floor, a plausibility floor near half an empty launch, and
    faster than cuBLAS at 16×16 (about 2.3 against 10 µs per call on the H200)."""
    from evaluator.timing import time_shape
    from seeds.trsm_small.baseline import CublasTrsm

    driver, twin = _seed_driver("float64"), _seed_driver("float64")
    baseline = CublasTrsm("float64")
    try:
        timing, rivals, failure = time_shape(
            16, 16, "float64", driver.solve_raw, baseline, check_solution,
            rivals={"itself": twin.solve_raw}, seed=5,
        )  # fmt: skip
    finally:
        baseline.close()
    assert failure is None, failure
    assert timing.speedup_low <= timing.speedup <= timing.speedup_high
    assert timing.faster_than_baseline and timing.verdict() == "faster"
    assert 0 < timing.noise_floor < 0.25
    assert timing.candidate_again_us == pytest.approx(timing.candidate_us, rel=0.25)
    assert 0.05 < timing.plausibility_floor_us < 1.0 < timing.candidate_us
    [rival] = rivals
    assert (rival.name, rival.m, rival.n, rival.noise_floor) == (
        "itself",
        16,
        16,
        timing.noise_floor,
    )
    assert not rival.faster and rival.speedup_low <= rival.speedup <= rival.speedup_high


@pytest.mark.gpu
def test_a_solver_that_launches_nothing_is_an_implausible_time() -> None:
    """No kernel at all, with every output accepted (``check`` passes anything): the replays time
    the copies alone, below what one launch costs, and only the plausibility floor can say so."""
    from evaluator.timing import time_shape
    from seeds.trsm_small.baseline import CublasTrsm

    baseline = CublasTrsm("float32")
    try:
        _, _, failure = time_shape(
            16, 16, "float32", lambda *_: None, baseline, lambda *_: None, seed=6
        )
    finally:
        baseline.close()
    assert failure is not None and failure.check == "implausible_time", failure
    assert failure.value < failure.bound and failure.shape == (16, 16)


def test_rival_timings_report_each_rival_against_the_candidate() -> None:
    from evaluator.noise import Interval
    from evaluator.timing import RIVAL_PREFIX, rival_timings

    median = {"cand": 2.0, RIVAL_PREFIX + "torch": 5.0, RIVAL_PREFIX + "slow": 2.1}
    intervals = {
        RIVAL_PREFIX + "torch": Interval(2.5, 2.4, 2.6),
        RIVAL_PREFIX + "slow": Interval(1.05, 0.99, 1.1),
    }
    asked: list[str] = []

    def versus(key: str) -> Interval:
        asked.append(key)
        return intervals[key]

    by_trsm = rival_timings(["torch", "slow"], median, versus, 0.02, m=64, n=32)
    assert asked == [RIVAL_PREFIX + "torch", RIVAL_PREFIX + "slow"]
    assert [(t.name, t.m, t.n, t.shape) for t in by_trsm] == [
        ("torch", 64, 32, ()), ("slow", 64, 32, ()),
    ]  # fmt: skip
    torch, slow = by_trsm
    assert (torch.rival_us, torch.candidate_us, torch.speedup) == (5.0, 2.0, 2.5)
    assert (torch.speedup_low, torch.speedup_high, torch.noise_floor) == (2.4, 2.6, 0.02)
    assert torch.faster and not slow.faster  # 0.99 is not above 1.02
    (by_op,) = rival_timings(["torch"], median, versus, 0.02, shape=(64, 6, 4, 2))
    assert (by_op.m, by_op.n, by_op.shape) == (0, 0, (64, 6, 4, 2))
    assert rival_timings([], median, versus, 0.02) == []


def test_audit_sets_reports_guards_then_inputs_then_the_first_wrong_set() -> None:
    import numpy as np

    from evaluator.report import CheckFailure
    from evaluator.set_timing import audit_sets

    shape = (4, 2, 3)
    a = np.arange(6.0)
    checked: list[int] = []

    def check(problem: int, output: np.ndarray) -> CheckFailure | None:
        checked.append(problem)
        if problem == 5:
            return CheckFailure("row_relative_error", shape, 2.0, 1.0, "m=4: batch index 1 wrong")
        return None

    def audit(guards: str | None, a_after: np.ndarray) -> CheckFailure | None:
        checked.clear()
        return audit_sets("replay 3 of 20", shape, "m=4", guards, (("A", a, a_after),),
                          [1, 5, 7], lambda i: (i, a), check)  # fmt: skip

    wrong = audit(None, a.copy())
    assert checked == [1, 5]  # the first wrong set ends the audit
    assert (wrong.check, wrong.value, wrong.bound, wrong.detail) == (
        "timed_output_row_relative_error", 2.0, 1.0,
        "replay 3 of 20, input set 5: m=4: batch index 1 wrong",
    )  # fmt: skip
    guard = audit("an X set", a.copy())
    assert (guard.check, guard.detail) == (
        "timed_output_out_of_bounds_write",
        "replay 3 of 20: m=4: a guard band around an X set was written",
    ) and checked == []
    changed = audit(None, a + 1)
    assert changed.check == "timed_output_input_modified"
    assert changed.detail == "replay 3 of 20: m=4: A changed during the solves"
    checked.clear()
    assert audit_sets("r", shape, "m=4", None, (), [1, 7], lambda i: (i, a), check) is None
    assert checked == [1, 7]
