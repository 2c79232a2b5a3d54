"""The accuracy and integrity checks on host data: they pass right answers and catch wrong ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.checks.accuracy import check_forward_error, check_residual, reference
from evaluator.checks.integrity import check_finite, check_guards
from evaluator.inputs import make_problem

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
