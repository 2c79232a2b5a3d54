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
