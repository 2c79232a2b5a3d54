"""Issue 6 part 3 on the CPU: kernels right on the drawn inputs and wrong on others.

Each fault kind is a NumPy "kernel" that computes in the candidate's dtype (float32 and
complex64 arithmetic stay in those types), next to an honest one: naive complex division fails
``scale_invariance`` and Smith's passes; masking by zeros fails ``nonfinite_containment`` and
skipping passes; solving in float32 and refining once in float64 passes the bounded inputs
(within ~3× the bound) and fails ``forward_error`` far outside it on the trap; kernels that
break linearity, row scaling or a column permutation fail their ``metamorphic_*`` relation.
"""

from __future__ import annotations

import numpy as np
import pytest

from evaluator.checks.accuracy import check_solution, forward_bound, reference
from evaluator.checks.containment import check_containment
from evaluator.checks.metamorphic import (
    check_relation,
    column_permutation,
    linearity,
    relations,
    row_scaling,
)
from evaluator.checks.scaling import check_scale_invariance
from evaluator.inputs import (
    CONTAINMENT_ENTRY,
    NUMPY_DTYPES,
    SCALE_EXPONENTS,
    TRAP_ROW_EXPONENTS,
    Problem,
    containment_problem,
    make_problem,
    scaled_problem,
)

DTYPES = ["float32", "float64", "complex64", "complex128"]
COMPLEX = ["complex64", "complex128"]


# -- emulated kernels ------------------------------------------------------------------------


def _complex(re: np.ndarray, im: np.ndarray, dtype: np.dtype) -> np.ndarray:
    out = np.empty(np.shape(re), dtype)
    out.real, out.imag = re, im
    return out


def _divide(b: np.ndarray, a: np.generic, naive: bool) -> np.ndarray:
    """b / a in b's dtype, complex by its real parts: the textbook division by |a|² (``naive``)
    or Smith's (the seed's ``kv_div``)."""
    if not np.iscomplexobj(b):
        return b / a
    re, im = a.real, a.imag
    if naive:
        d = re * re + im * im
        return _complex((b.real * re + b.imag * im) / d, (b.imag * re - b.real * im) / d, b.dtype)
    if abs(re) >= abs(im):
        r = im / re
        den = re + im * r
        return _complex((b.real + b.imag * r) / den, (b.imag - b.real * r) / den, b.dtype)
    r = re / im
    den = im + re * r
    return _complex((b.real * r + b.imag) / den, (b.imag * r - b.real) / den, b.dtype)


def substitution(
    a: np.ndarray, b: np.ndarray, *, naive: bool = False, masking: bool = False
) -> np.ndarray:
    """Forward substitution in the dtype of ``a`` and ``b``, column k at a time as the seed does.
    ``masking``: update every row with a_ik = 0 at and above k instead of skipping them (the old
    seed: 0·x spreads a non-finite x_k into rows already solved)."""
    m = a.shape[0]
    x = b.copy(order="F")
    rows = np.arange(m)
    with np.errstate(all="ignore"):
        for k in range(m):
            x[k] = _divide(x[k], a[k, k], naive)
            if masking:
                column = np.zeros(m, a.dtype)
                column[rows > k] = a[rows > k, k]
                x -= np.outer(column, x[k])
            else:
                x[k + 1 :] -= np.outer(a[k + 1 :, k], x[k])
    return x


LOWER = {np.dtype(np.float64): np.float32, np.dtype(np.complex128): np.complex64}


def refined_once(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A float64/complex128 "kernel" that solves in float32/complex64 (Smith's division) and
    refines once: residual in the wide type, correction solved in the narrow one."""
    low = LOWER[a.dtype]
    with np.errstate(all="ignore"):
        a_low = a.astype(low)
        x0 = substitution(a_low, b.astype(low)).astype(a.dtype)
        residual = b - np.tril(np.nan_to_num(a)) @ x0
        return x0 + substitution(a_low, residual.astype(low)).astype(a.dtype)


def over_bound(problem: Problem, x: np.ndarray) -> float:
    """The worst row's forward error over its bound (the forward-error check fails above 1)."""
    x_ref, growth = reference(problem.a, problem.b)
    err = np.abs(x.astype(x_ref.dtype) - x_ref).max(axis=1)
    return float((err / forward_bound(problem.a, growth)).max())


# -- scaled inputs ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n"), [(1, 1), (33, 31), (64, 64)])
def test_scalings_are_exact_finite_and_normal(dtype, m, n):
    problem = make_problem(m, n, dtype, seed=11)
    info = np.finfo(NUMPY_DTYPES[dtype])
    x_ref = reference(problem.a, problem.b)[0]
    lower = np.tril_indices(m)
    for exponent in SCALE_EXPONENTS[dtype]:
        scaled = scaled_problem(problem, exponent)
        assert scaled.kind == ("scaled_up" if exponent > 0 else "scaled_down")
        assert scaled.a.dtype == problem.a.dtype and scaled.a.flags.f_contiguous
        # Exact: dividing back gives the bytes of the unscaled problem, NaN triangle included.
        back = Problem(*(np.ldexp(v.real, -exponent) for v in (scaled.a, scaled.b)), "", 0)
        assert np.array_equal(back.a, problem.a.real, equal_nan=True)
        assert np.array_equal(back.b, problem.b.real)
        entries = np.concatenate([scaled.a[lower], scaled.b.ravel()])
        parts = np.abs(np.concatenate([entries.real, entries.imag]))
        assert np.isfinite(parts).all()
        assert (parts[parts > 0] >= info.tiny).all()  # every nonzero part is normal
        # Sums of m products |a|·|x| stay below the maximum; products down to 2^-20 of the
        # problem's scale stay normal.
        sums = np.abs(scaled.a[lower]).max() * np.abs(x_ref).max() * m
        assert np.ldexp(1.0, exponent) * 2.0**-20 >= info.tiny and sums < info.max / 2**10
        assert np.isnan(scaled.a[np.triu_indices(m, 1)]).all()


@pytest.mark.parametrize("dtype", COMPLEX)
def test_naive_abs_squared_leaves_the_range_at_both_scales(dtype):
    """Why these exponents: |a|² of every diagonal entry overflows up and underflows down."""
    problem = make_problem(64, 4, dtype, seed=2)
    up, down = (scaled_problem(problem, e) for e in SCALE_EXPONENTS[dtype])
    info = np.finfo(NUMPY_DTYPES[dtype])
    with np.errstate(all="ignore"):
        d_up, d_down = (np.diag(p.a).real ** 2 + np.diag(p.a).imag ** 2 for p in (up, down))
    assert np.isinf(d_up).all()
    assert (d_down < info.tiny).all()  # subnormal or zero: no precision left


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize(("m", "n"), [(1, 3), (33, 31), (64, 64)])
def test_naive_complex_division_fails_scale_invariance_smith_passes(dtype, m, n):
    problem = make_problem(m, n, dtype, seed=5)
    # Right on the drawn inputs: the naive division passes the unscaled problem.
    assert check_solution(problem, substitution(problem.a, problem.b, naive=True)) is None
    for exponent in SCALE_EXPONENTS[dtype]:
        scaled = scaled_problem(problem, exponent)
        naive = substitution(scaled.a, scaled.b, naive=True)
        failure = check_scale_invariance(problem, exponent, naive)
        assert failure is not None and failure.check == "scale_invariance"
        assert f"s = 2^{exponent}" in failure.detail
        assert failure.detail.split(" ")[0] in ("non_finite_output", "scaled_residual")
        smith = substitution(scaled.a, scaled.b)
        assert check_scale_invariance(problem, exponent, smith) is None
        # Power-of-two scaling commutes with Smith's division: bit for bit the unscaled X.
        assert np.array_equal(smith, substitution(problem.a, problem.b))


def test_float32_inside_a_float64_kernel_fails_scale_invariance():
    """The refining kernel casts to float32, which holds neither 2^900 nor 2^-900."""
    problem = make_problem(33, 31, "float64", seed=8)
    for exponent in SCALE_EXPONENTS["float64"]:
        scaled = scaled_problem(problem, exponent)
        failure = check_scale_invariance(problem, exponent, refined_once(scaled.a, scaled.b))
        assert failure is not None and failure.check == "scale_invariance"


# -- containment -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [np.inf, np.nan])
def test_masking_by_zeros_fails_containment_skipping_passes(dtype, value):
    """Issue 6's 64×8 case: B's column 0 zero, A[40, 3] non-finite."""
    problem = containment_problem(dtype, seed=3, value=value)
    assert problem.shape == (64, 8) and CONTAINMENT_ENTRY == (40, 3)
    assert (problem.b[:, 0] == 0).all() and np.isnan(problem.a[np.triu_indices(64, 1)]).all()
    masked = substitution(problem.a, problem.b, masking=True)
    assert np.isnan(masked[:40, 0]).all()  # 0·NaN reached the rows solved before row 40
    failure = check_containment(problem, CONTAINMENT_ENTRY, masked)
    assert failure is not None and failure.check == "nonfinite_containment"
    assert failure.detail.startswith("rows 0-39 do not depend on A[40, 3]")
    assert "non_finite_output" in failure.detail
    skipped = substitution(problem.a, problem.b)
    assert check_containment(problem, CONTAINMENT_ENTRY, skipped) is None
    # The dependent rows are non-finite, as cuBLAS gives them, and are not constrained.
    assert np.isfinite(skipped[:40]).all() and not np.isfinite(skipped[40:, 0]).any()
    garbage = skipped.copy()
    garbage[40:] = 7
    assert check_containment(problem, CONTAINMENT_ENTRY, garbage) is None


def test_containment_rows_above_must_be_right_not_only_finite():
    problem = containment_problem("float64", seed=4)
    x = substitution(problem.a, problem.b)
    x[39, 5] += 1e-6
    failure = check_containment(problem, CONTAINMENT_ENTRY, x)
    assert failure is not None and failure.check == "nonfinite_containment"
    assert "forward_error" in failure.detail or "scaled_residual" in failure.detail


def test_containment_entry_must_be_strictly_lower():
    with pytest.raises(ValueError, match="strict lower triangle"):
        containment_problem("float32", 1, entry=(3, 3))
    problem = containment_problem("float32", 1)
    with pytest.raises(ValueError, match="strict lower triangle"):
        check_containment(problem, (3, 40), problem.b)


# -- the trap --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_trap_is_finite_with_the_bounded_solution_and_own_precision_passes(dtype):
    trap = make_problem(64, 64, dtype, seed=6, kind="trap")
    x_ref = reference(trap.a, trap.b)[0]
    assert np.isfinite(trap.a[np.tril_indices(64)]).all() and np.isfinite(trap.b).all()
    assert np.isfinite(x_ref).all() and np.abs(x_ref).max() < 100
    # Every row is a bounded row times 2^lo, 1 or 2^hi: about a third each.
    low, high = TRAP_ROW_EXPONENTS[dtype]
    diag = np.abs(np.diag(trap.a))
    for e in (low, 0, high):
        assert 21 <= ((diag >= 2.0**e) & (diag <= 2.0 ** (e + 1))).sum() <= 22
    assert check_solution(trap, substitution(trap.a, trap.b)) is None


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_solving_in_float32_and_refining_once_fails_forward_error_on_the_trap(dtype):
    """Bounded and growth inputs see this kernel at most ~3× over the bound (at the quick shapes
    it is caught by some seeds and not others); the trap puts it ~1e9× over, at every shape."""
    for m, n, kind in [(7, 5, "bounded"), (33, 64, "bounded"), (64, 64, "growth")]:
        for seed in range(4):
            problem = make_problem(m, n, dtype, seed, kind)
            assert over_bound(problem, refined_once(problem.a, problem.b)) < 5
    for m, n in [(16, 16), (31, 33), (64, 64), (64, 1)]:
        trap = make_problem(m, n, dtype, seed=1, kind="trap")
        x = refined_once(trap.a, trap.b)
        assert np.isfinite(x).all()
        assert over_bound(trap, x) > 1e8
        failure = check_solution(trap, x)
        assert failure is not None and failure.check == "forward_error"
        assert failure.value > 1e6 * failure.bound
        assert over_bound(trap, substitution(trap.a, trap.b)) < 0.1


def test_float16_inside_a_float32_kernel_is_far_over_on_the_trap():
    trap = make_problem(33, 31, "float32", seed=2, kind="trap")
    x16 = substitution(trap.a.astype(np.float16), trap.b.astype(np.float16))
    assert over_bound(trap, x16.astype(np.float32)) > 1e3


# -- metamorphic relations -------------------------------------------------------------------


def _outputs(found, kernel):
    """The outputs of ``kernel`` for each relation's terms, each distinct problem solved once,
    in the order the verification solves them."""
    solved: dict[int, np.ndarray] = {}
    result = []
    for relation in found:
        xs = []
        for term in relation.terms:
            if id(term.problem) not in solved:
                solved[id(term.problem)] = kernel(term.problem.a, term.problem.b)
            xs.append(solved[id(term.problem)])
        result.append(xs)
    return result


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("m", "n"), [(64, 63), (31, 33), (16, 1)])
def test_an_honest_kernel_satisfies_every_relation(dtype, m, n):
    found = relations(m, n, dtype, seed=9)
    assert [r.check for r in found] == [
        "metamorphic_linearity", "metamorphic_row_scaling", "metamorphic_row_scaling",
    ] + (["metamorphic_column_permutation"] if n >= 2 else [])  # fmt: skip
    problems = {id(t.problem): t.problem for r in found for t in r.terms}
    assert len(problems) == (6 if n >= 2 else 5)
    for relation, xs in zip(found, _outputs(found, substitution), strict=True):
        assert check_relation(relation, xs) is None, relation.statement


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_output_offset_by_a_constant_fails_linearity(dtype):
    """X̂ + c for every problem: c = 1e6·u is 1e6 units of roundoff, tiny next to X = O(1)."""
    base = make_problem(48, 16, dtype, seed=3)
    relation = linearity(base, np.random.default_rng(1))
    c = 1e6 * np.finfo(NUMPY_DTYPES[dtype]).eps / 2
    (xs,) = _outputs([relation], lambda a, b: substitution(a, b) + np.asarray(c, b.dtype))
    failure = check_relation(relation, xs)
    assert failure is not None and failure.check == "metamorphic_linearity"
    assert failure.value > failure.bound


@pytest.mark.parametrize("dtype", DTYPES)
def test_results_kept_per_column_keyed_on_the_first_row_fail_linearity(dtype):
    """A kernel that keeps each column's X keyed on B's first entry of that column: B2 shares
    B1's first row, so it gets X(B1) back."""
    kept: dict[bytes, np.ndarray] = {}

    def memo(a, b):
        x = substitution(a, b)
        for j in range(b.shape[1]):
            key = b[0, j].tobytes()
            if key in kept:
                x[:, j] = kept[key]
            kept[key] = x[:, j].copy()
        return x

    base = make_problem(33, 31, dtype, seed=4)
    relation = linearity(base, np.random.default_rng(2))
    (xs,) = _outputs([relation], memo)
    failure = check_relation(relation, xs)
    assert failure is not None and failure.check == "metamorphic_linearity"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("powers_of_two", [True, False])
def test_dropping_small_entries_fails_row_scaling(dtype, powers_of_two):
    """A kernel that treats |a_ik| < 1e-6 as a structural zero: right on the drawn inputs (their
    off-diagonals are ~1/sqrt(m)), wrong on rows scaled down by up to 2^-30."""

    def sparse(a, b):
        pruned = np.where(np.abs(np.nan_to_num(a)) < 1e-6, 0, a).astype(a.dtype)
        pruned[np.triu_indices(a.shape[0], 1)] = np.nan
        return substitution(pruned, b)

    base = make_problem(64, 8, dtype, seed=5)
    assert check_solution(base, sparse(base.a, base.b)) is None
    relation = row_scaling(base, np.random.default_rng(3), powers_of_two)
    (xs,) = _outputs([relation], sparse)
    failure = check_relation(relation, xs)
    assert failure is not None and failure.check == "metamorphic_row_scaling"


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_last_column_shortcut_fails_the_column_permutation(dtype):
    """A tail bug: the last column skips the last update (row m−1 misses a_{m−1,m−2}·x_{m−2})."""

    def tail(a, b):
        x = substitution(a, b)
        m, n = b.shape
        x[m - 1, n - 1] += a[m - 1, m - 2] * x[m - 2, n - 1] / a[m - 1, m - 1]
        return x

    base = make_problem(31, 33, dtype, seed=6)
    relation = column_permutation(base, np.random.default_rng(4))
    (xs,) = _outputs([relation], tail)
    failure = check_relation(relation, xs)
    assert failure is not None and failure.check == "metamorphic_column_permutation"
    assert failure.detail.startswith("row 30:")


def test_column_permutation_needs_two_columns():
    with pytest.raises(ValueError, match="n >= 2"):
        column_permutation(make_problem(8, 1, "float32", 1), np.random.default_rng(0))
