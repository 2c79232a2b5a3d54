"""The accuracy and integrity checks on host data: they pass right answers and catch wrong ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.checks.accuracy import (
    check_forward_error,
    check_residual,
    check_solution,
    reference,
)
from evaluator.checks.integrity import check_finite, check_guards
from evaluator.checks.replay import audit_partner, check_replayed, issue_pair
from evaluator.inputs import TRAP_ROW_EXPONENTS, make_problem

DTYPES = ["float32", "float64", "complex64", "complex128"]


def _solve_in_dtype(problem):
    """A correct solution computed in the problem's own precision by forward substitution."""
    a, b = problem.a, problem.b
    m = a.shape[0]
    x = b.copy()
    for k in range(m):
        x[k] = x[k] / a[k, k]
        x[k + 1 :] -= np.outer(a[k + 1 :, k], x[k])
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bounded", "growth"])
def test_correct_solution_in_own_precision_passes(dtype, kind):
    problem = make_problem(64, 48, dtype, seed=3, kind=kind)
    x = _solve_in_dtype(problem)
    x_ref, growth = reference(problem.a, problem.b)
    assert check_residual(problem.a, problem.b, x) is None
    assert check_forward_error(problem.a, x, x_ref, growth) is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_zeroed_row_fails_forward_error(dtype):
    problem = make_problem(33, 31, dtype, seed=5)
    x = _solve_in_dtype(problem)
    x[20] = 0
    x_ref, growth = reference(problem.a, problem.b)
    failure = check_forward_error(problem.a, x, x_ref, growth)
    assert failure is not None and failure.check == "forward_error"
    assert failure.value == pytest.approx(1.0) and failure.bound < 1e-2


def test_growth_case_zeroed_first_rows_pass_residual_but_not_forward_error():
    """Why the residual alone is not enough: X grows so fast down the rows that zeroing the
    small leading rows barely moves the column-scaled residual."""
    problem = make_problem(64, 8, "float32", seed=1, kind="growth")
    x = _solve_in_dtype(problem)
    x_ref, growth = reference(problem.a, problem.b)
    assert np.abs(x_ref[-1]).max() / np.abs(x_ref[0]).max() > 1e3
    x_bad = x.copy()
    x_bad[0] = 0
    assert check_residual(problem.a, problem.b, x_bad) is None  # the residual cannot see it
    failure = check_forward_error(problem.a, x_bad, x_ref, growth)
    assert failure is not None and failure.check == "forward_error"


def test_lower_precision_answer_fails_in_float64():
    """A float64 kernel that secretly computes in float32 breaks the float64 bound."""
    problem = make_problem(48, 16, "float64", seed=2)
    low = type(problem)(problem.a.astype(np.float32), problem.b.astype(np.float32), "bounded", 2)
    x32 = _solve_in_dtype(low)
    x_ref, growth = reference(problem.a, problem.b)
    assert check_forward_error(problem.a, x32.astype(np.float64), x_ref, growth) is not None


def test_finite_and_guard_checks():
    x = np.ones((4, 3))
    assert check_finite(x, (4, 3)) is None
    x[2, 1] = np.nan
    assert check_finite(x, (4, 3)).detail == "first at row 2, col 1"
    assert check_guards(b"abc", b"abc", (1, 1)) is None
    assert check_guards(b"abc", b"abd", (1, 1)).check == "out_of_bounds_write"


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_inputs_have_the_documented_structure(m, n, dtype, seed):
    problem = make_problem(m, n, dtype, seed)
    a = problem.a
    assert a.flags.f_contiguous and problem.b.flags.f_contiguous
    assert problem.b.shape == (m, n) and np.isfinite(problem.b).all()
    assert np.isnan(a[np.triu_indices(m, 1)]).all()
    diag = np.abs(np.diag(a))
    assert (diag >= 1 - 1e-6).all() and (diag <= 2 + 1e-6).all()
    assert (np.abs(np.tril(a, -1)) <= 1 / np.sqrt(m) + 1e-6).all()
    x_ref, _ = reference(a, problem.b)
    assert np.isfinite(x_ref).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_issue_6_small_case_second_solution_accepted_first_refused_as_replayed(dtype):
    """A memo keyed on A[0], B's first and last rows hands X(B1) back for B2: refused, named."""
    first, second = issue_pair(dtype)
    assert first.a[0, 0] == second.a[0, 0] == 2 and np.isnan(first.a[np.triu_indices(4, 1)]).all()
    assert np.array_equal(first.b[[0, 3]], second.b[[0, 3]])
    x1, x2 = reference(first.a, first.b)[0], reference(second.a, second.b)[0]
    assert np.array_equal(x2, [[1, 1], [4, 4], [-2.75, -2.75], [4.75, 4.75]])
    assert np.array_equal(x1, [[1, 1], [0, 0], [0.25, 0.25], [1.75, 1.75]])
    x1, x2 = x1.astype(dtype, order="F"), x2.astype(dtype, order="F")
    assert check_solution(second, x2) is None
    failure = check_solution(second, x1)
    assert failure is not None and failure.check == "scaled_residual"
    replayed = check_replayed(first, second, x1)
    assert replayed is not None and replayed.check == "replayed_result"
    # An output that is merely wrong keeps the failure its own checks gave.
    assert check_replayed(first, second, x2 + 1) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "n", "kind"), [(2, 3, "bounded"), (7, 5, "bounded"), (64, 64, "growth")]
)
def test_audit_partner_shares_what_a_cheap_key_reads_and_differs_inside(dtype, m, n, kind):
    first = make_problem(m, n, dtype, seed=17, kind=kind)
    second = audit_partner(first)
    assert second.a.flags.f_contiguous and second.b.flags.f_contiguous
    assert second.a.dtype == first.a.dtype and second.shape == first.shape
    assert np.array_equal(second.b[[0, m - 1]], first.b[[0, m - 1]])
    assert np.array_equal(np.diag(second.a), np.diag(first.a))
    assert np.isnan(second.a[np.triu_indices(m, 1)]).all()
    lower = np.tril_indices(m, -1)
    assert (second.a[lower] != first.a[lower]).all()
    assert (second.b[1 : m - 1] != first.b[1 : m - 1]).all()
    # The same distribution: its own bound holds, and X differs in every row but the first.
    scale = 1.0 if kind == "growth" else 1 / np.sqrt(m)
    assert (np.abs(second.a[lower]) <= scale + 1e-6).all()
    x1, x2 = reference(first.a, first.b)[0], reference(second.a, second.b)[0]
    assert np.array_equal(x1[0], x2[0]) and (x1[1:] != x2[1:]).all()
    assert check_solution(second, x2.astype(dtype)) is None
    replayed = check_replayed(first, second, x1.astype(dtype))
    assert replayed is not None and replayed.check == "replayed_result"


def test_audit_partner_needs_a_row_inside():
    with pytest.raises(ValueError):
        audit_partner(make_problem(1, 4, "float64", seed=1))


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(16, 64),
    n=st.integers(1, 64),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_trap_rows_are_bounded_rows_scaled_by_powers_of_two(m, n, dtype, seed):
    trap = make_problem(m, n, dtype, seed, kind="trap")
    assert trap.kind == "trap" and trap.a.flags.f_contiguous and trap.b.flags.f_contiguous
    exponents = np.floor(np.log2(np.abs(np.diag(trap.a)))).astype(int)
    low, high = TRAP_ROW_EXPONENTS[dtype]
    for e in (low, 0, high):
        assert (exponents == e).sum() >= m // 3
    # Undo the row scaling: a bounded problem, exactly.
    a = np.ldexp(trap.a.real, -exponents[:, None]) + (
        1j * np.ldexp(trap.a.imag, -exponents[:, None]) if np.iscomplexobj(trap.a) else 0
    )
    diag = np.abs(np.diag(a))
    assert (diag >= 1 - 1e-6).all() and (diag <= 2 + 1e-6).all()
    assert (np.abs(np.tril(np.nan_to_num(a), -1)) <= 1 / np.sqrt(m) + 1e-6).all()
    assert np.isnan(trap.a[np.triu_indices(m, 1)]).all()
    assert np.isfinite(reference(trap.a, trap.b)[0]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_trap_is_judged_by_the_forward_error_first(dtype):
    """An output both criteria refuse is named by the residual on drawn inputs and by the
    forward error on the trap (whose normwise residual its largest rows dominate)."""
    for kind, first in [("bounded", "scaled_residual"), ("trap", "forward_error")]:
        problem = make_problem(33, 31, dtype, seed=7, kind=kind)
        x = reference(problem.a, problem.b)[0] * 1.01
        failure = check_solution(problem, x.astype(dtype, order="F"))
        assert failure is not None and failure.check == first
