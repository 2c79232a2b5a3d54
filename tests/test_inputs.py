"""Every input the evaluator builds holds NaN in A's strict upper triangle (BLAS never reads
it), and the kinds of ``evaluator.inputs`` have the sizes their docstrings state: the growth
case as before up to m = 64 and finite beyond, ``ill_conditioned`` ill-conditioned and finite,
``graded`` with a diagonal spanning its decades."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular
from scipy.linalg.lapack import dtrcon, ztrcon

from evaluator.checks.metamorphic import relations
from evaluator.checks.replay import audit_partner, issue_pair
from evaluator.inputs import (
    GRADED_DECADES,
    KINDS,
    NUMPY_DTYPES,
    CounterRng,
    Problem,
    bounded_sets,
    containment_cases,
    make_problem,
    scaled_problem,
    sweep_exponents,
)
from seeds.spec import DTYPES


def upper_is_nan(a: np.ndarray) -> bool:
    m = a.shape[0]
    return bool(np.isnan(a[np.triu_indices(m, 1)]).all())


def lower_is_finite(a: np.ndarray) -> bool:
    return bool(np.isfinite(a[np.tril_indices(a.shape[0])]).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_builder_leaves_nan_above_the_diagonal(dtype):
    built: list[tuple[str, Problem]] = []
    for kind in KINDS:
        built.append((kind, make_problem(37, 5, dtype, seed=1, kind=kind)))
    base = built[0][1]
    for exponent in sweep_exponents(dtype, 1)[:2]:
        built.append((f"scaled 2^{exponent}", scaled_problem(base, exponent)))
    built += [(f"containment {c.where()}", c.problem) for c in containment_cases(dtype, 1)]
    built.append(("audit partner", audit_partner(base)))
    built += [("issue 6 pair", p) for p in issue_pair(dtype)]
    for relation in relations(37, 5, dtype, seed=1):
        built += [(relation.check, term.problem) for term in relation.terms]
    for where, problem in built:
        assert upper_is_nan(problem.a), where
        m = problem.a.shape[0]
        assert problem.a.dtype == NUMPY_DTYPES[dtype] and problem.b.shape[0] == m, where
    a_sets, _ = bounded_sets(CounterRng(np, 5), 37, 5, dtype, 3)
    for k in range(3):
        assert upper_is_nan(a_sets[k].reshape(37, 37, order="F")), f"timed set {k}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 16, 33, 64])
def test_the_growth_case_is_drawn_as_before_up_to_m_64(dtype, m):
    """The growth draws of issue 1 (off-diagonals unscaled in [-1, 1]), bit for bit."""
    problem = make_problem(m, 3, dtype, seed=7, kind="growth")
    rng = np.random.default_rng([7, m, 3, 1])
    complex_ = dtype.startswith("complex")

    def uniform(shape):
        if complex_:
            return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)) / np.sqrt(2)
        return rng.uniform(-1, 1, shape)

    a = np.tril(uniform((m, m)) * 1.0, -1)
    magnitude = rng.uniform(0.5, 1.0, m)
    phase = np.exp(2j * np.pi * rng.uniform(0, 1, m)) if complex_ else rng.choice([-1.0, 1.0], m)
    a[np.diag_indices(m)] = magnitude * phase
    a[np.triu_indices(m, 1)] = np.nan
    b = uniform((m, 3))
    np.testing.assert_array_equal(problem.a, a.astype(NUMPY_DTYPES[dtype]))
    np.testing.assert_array_equal(problem.b, b.astype(NUMPY_DTYPES[dtype]))


def solve_wide(problem: Problem) -> np.ndarray:
    lower = np.tril(np.nan_to_num(problem.a.astype(np.complex128)))
    return solve_triangular(lower, problem.b.astype(np.complex128), lower=True)


def condition_1(problem: Problem) -> float:
    """κ₁ of A's lower triangle as LAPACK's xTRCON estimates it."""
    lower = np.tril(np.nan_to_num(problem.a))
    trcon = ztrcon if np.iscomplexobj(lower) else dtrcon
    rcond, info = trcon(lower.astype(np.complex128 if np.iscomplexobj(lower) else np.float64),
                        norm="1", uplo="L")  # fmt: skip
    assert info == 0
    return 1 / rcond


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
@pytest.mark.parametrize("m", [300, 1000, 2048])
def test_growth_ill_conditioned_and_graded_stay_finite_in_single_precision(dtype, m):
    """Unscaled, the growth case's X reached 1e45 at m = 512 and 1e88 at m = 1000 (past
    float32's 3.4e38): a float32 solve could only return Inf. Now every kind's X stays many
    orders of magnitude inside float32, and the ill-conditioned kinds are what they say."""
    for kind in ("growth", "ill_conditioned", "graded"):
        problem = make_problem(m, 2, dtype, seed=m, kind=kind)
        assert lower_is_finite(problem.a) and upper_is_nan(problem.a)
        x = np.abs(solve_wide(problem)).max()
        assert x < 1e12, (kind, x)
        if kind != "graded":
            assert condition_1(problem) > 1e6, kind
    graded = make_problem(m, 2, dtype, seed=m, kind="graded")
    diagonal = np.abs(np.diag(graded.a))
    assert diagonal.max() / diagonal.min() > 10 ** (GRADED_DECADES[dtype] - 1)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_graded_spans_twelve_decades_in_double(dtype):
    problem = make_problem(500, 2, dtype, seed=3, kind="graded")
    diagonal = np.abs(np.diag(problem.a))
    assert GRADED_DECADES[dtype] == 12
    assert 1e-12 <= diagonal.min() < 1e-10 and 1 <= diagonal.max() <= 2
    assert 1e10 < np.abs(solve_wide(problem)).max() < 1e14


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown problem kind 'wild'"):
        make_problem(4, 1, "float32", seed=1, kind="wild")
