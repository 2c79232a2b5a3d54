"""LAPACK's xTRT02 ratio (``evaluator.checks.lapack_ratio``) and ``trsm_blocked``'s reference
check built on it (``evaluator.checks.accuracy.check_solution_lapack``).

CPU: the array-module-generic ratio, run with NumPy, equals a transcription of DTRT02/ZTRT02
through SciPy's own BLAS and LAPACK (xTRMV, xAXPY's subtraction, DASUM/DZASUM, xLANTR,
xLAMCH), column by column, on random shapes (hypothesis); SciPy's ``solve_triangular``
passes far below 30 on every input kind in every dtype; a solution with one perturbed column
fails naming that column; the NaN upper triangle is never read; zero columns follow DTRT02 (and
our one deviation); a NumPy emulation of the seed's inversion-based blocked solve passes on
every kind trsm_blocked verifies, while one that skips the last block row's update fails; the
composite check adds the per-row forward error where it is affordable and fair (a zeroed row of
a growth problem in single precision passes the ratio and fails the forward error) and skips it
on the ill-conditioned kinds. GPU (``gpu``-marked): CuPy's ratio equals NumPy's, and at 4096
rows the device check passes cuBLAS's solutions (``cupyx.scipy.linalg.solve_triangular``) and
names a perturbed column.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg.blas as blas
import scipy.linalg.lapack as lapack
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import solve_triangular

from evaluator.checks import accuracy
from evaluator.checks.lapack_ratio import (
    LAPACK_THRESHOLD,
    check_lapack_ratio,
    lapack_eps,
    lapack_ratios,
)
from evaluator.inputs import BACKWARD_ERROR_ONLY_KINDS, KINDS, Problem, make_problem
from seeds.spec import DTYPES

WIDE = {"float32": np.float64, "float64": np.float64,
        "complex64": np.complex128, "complex128": np.complex128}  # fmt: skip


def dtrt02(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """DTRT02 / ZTRT02 (Reference-LAPACK TESTING/LIN/dtrt02.f) for UPLO = 'L', TRANS = 'N',
    DIAG = 'N', statement by statement through SciPy's BLAS and LAPACK, per column (the routine
    keeps the maximum): WORK = x_j; xTRMV; WORK −= b_j (xAXPY with −1); BNORM = xASUM(WORK);
    XNORM = xASUM(x_j); RESID_j = ((BNORM/ANORM)/XNORM)/EPS with ANORM = xLANTR('1') and EPS =
    xLAMCH('E') of the working precision. The products in float64/complex128, as the check
    under test computes them."""
    wide = WIDE[a.dtype.name]
    complex_ = np.iscomplexobj(a)
    trmv, asum = (blas.ztrmv, blas.dzasum) if complex_ else (blas.dtrmv, blas.dasum)
    lantr = lapack.zlantr if complex_ else lapack.dlantr
    a_wide = np.asfortranarray(a.astype(wide))
    anorm = lantr("1", a_wide, uplo="L", diag="N")
    single = a.dtype.name in ("float32", "complex64")
    eps = float(lapack.slamch("E") if single else lapack.dlamch("E"))
    resid = []
    for j in range(b.shape[1]):
        work = trmv(a_wide, x[:, j].astype(wide), lower=1)
        work = work - b[:, j].astype(wide)
        bnorm, xnorm = asum(work), asum(x[:, j].astype(wide))
        resid.append(((bnorm / anorm) / xnorm) / eps)
    return np.array(resid)


def exact(problem: Problem) -> np.ndarray:
    """SciPy's solve in float64/complex128, rounded to the problem's dtype."""
    wide = WIDE[problem.a.dtype.name]
    lower = np.tril(np.nan_to_num(problem.a.astype(wide)))
    return solve_triangular(lower, problem.b.astype(wide), lower=True).astype(problem.a.dtype)


# ---- the ratio against LAPACK's own steps ---------------------------------------------------


def test_eps_is_lapack_epsilon():
    """DLAMCH('E') and SLAMCH('E'): the unit roundoff, half of NumPy's machine epsilon."""
    assert lapack_eps(np.float64) == lapack.dlamch("E") == 2.0**-53
    assert lapack_eps(np.complex128) == 2.0**-53
    assert lapack_eps(np.float32) == lapack.slamch("E") == 2.0**-24
    assert lapack_eps(np.complex64) == 2.0**-24


@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 48),
    n=st.integers(1, 6),
    dtype=st.sampled_from(DTYPES),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**31 - 1),
)
def test_ratio_equals_dtrt02_column_by_column(m, n, dtype, kind, seed):
    """X perturbed well above rounding (relative 1e-3 single, 1e-8 double), so both residuals
    measure the perturbation and agree to the rounding of two summation orders."""
    problem = make_problem(m, n, dtype, seed, kind)
    x = exact(problem)
    rng = np.random.default_rng(seed)
    single = dtype in ("float32", "complex64")
    x = (x * (1 + (1e-3 if single else 1e-8) * rng.uniform(0.5, 1.0, x.shape))).astype(dtype)
    ours = lapack_ratios(problem.a, problem.b, x, np)
    theirs = dtrt02(problem.a, problem.b, x)
    assert ours.dtype == np.float64 and ours.shape == (n,)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9 if single else 1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("m", "n"), [(1, 1), (7, 5), (33, 64), (128, 7), (300, 17)])
def test_scipy_solutions_pass_far_below_the_threshold(dtype, kind, m, n):
    """Backward-stable substitution (SciPy, in the working precision) on every input kind:
    the ratio stays below 3, a tenth of LAPACK's threshold (a 1×1 float64 solve reads up to 2:
    the division's rounding and the check's own product, each up to u)."""
    problem = make_problem(m, n, dtype, seed=m + n, kind=kind)
    lower = np.tril(np.nan_to_num(problem.a))
    x = solve_triangular(lower, problem.b, lower=True)
    assert x.dtype == problem.a.dtype
    assert lapack_ratios(problem.a, problem.b, x, np).max() < 3.0
    assert check_lapack_ratio(problem.a, problem.b, x, np) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("column", [0, 5, 16])
def test_one_perturbed_column_fails_naming_it(dtype, column):
    problem = make_problem(200, 17, dtype, seed=column)
    x = exact(problem)
    x[:, column] *= 1 + 1e-2
    failure = check_lapack_ratio(problem.a, problem.b, x, np)
    assert failure is not None and failure.check == "lapack_ratio"
    assert failure.detail.startswith(f"column {column}:")
    assert failure.value > LAPACK_THRESHOLD == failure.bound and failure.shape == (200, 17)
    assert "1 of 17 columns" in failure.detail


def test_the_upper_triangle_is_never_read():
    """The ratio is the same bits whatever A holds above its diagonal (NaN in every check)."""
    problem = make_problem(64, 8, "float64", seed=3)
    x = exact(problem)
    garbage = problem.a.copy(order="F")
    garbage[np.triu_indices(64, 1)] = 1e300
    zeros = np.asfortranarray(np.tril(np.nan_to_num(problem.a)))
    ratios = [lapack_ratios(a, problem.b, x, np) for a in (problem.a, garbage, zeros)]
    assert np.isfinite(ratios[0]).all()
    assert all(np.array_equal(r, ratios[0]) for r in ratios)


def test_zero_columns_and_a_zero_matrix_follow_dtrt02():
    """x_j = 0 with b_j = 0 is exact (ratio 0: our deviation, LAPACK never tests b = 0);
    x_j = 0 with b_j ≠ 0 and a zero A give 1/EPS, as DTRT02 does."""
    problem = make_problem(16, 3, "float32", seed=1)
    b = problem.b.copy(order="F")
    b[:, 0] = 0
    x = solve_triangular(np.tril(np.nan_to_num(problem.a)), b, lower=True)
    x[:, 1] = 0
    ratios = lapack_ratios(problem.a, b, x, np)
    assert ratios[0] == 0 and ratios[1] == 2.0**24 and ratios[2] < 1
    zero_a = np.zeros_like(problem.a)
    assert (lapack_ratios(zero_a, b, x, np) == 2.0**24).all()


def test_a_non_finite_output_fails_and_names_the_column():
    problem = make_problem(40, 4, "complex64", seed=2)
    x = exact(problem)
    x[7, 2] = np.nan
    failure = check_lapack_ratio(problem.a, problem.b, x, np)
    assert failure is not None and failure.detail.startswith("column 2:")


# ---- the seed's algorithm under the ratio ---------------------------------------------------


def inversion_blocked(a: np.ndarray, b: np.ndarray, nb: int) -> np.ndarray:
    """trsm_blocked's seed in NumPy, in the working precision: each nb×nb diagonal block
    inverted by substitution on identity columns, X_i = inv(D_i)·(B_i − A_i,0:i·X_0:i); m ≤ nb
    solves directly. (tests/test_trsm_blocked.py emulates the kernel's exact step order.)"""
    m = a.shape[0]
    lower = np.tril(np.nan_to_num(a))
    if m <= nb:
        return solve_triangular(lower, b, lower=True)
    x = b.copy()
    for r0 in range(0, m, nb):
        rows = slice(r0, min(m, r0 + nb))
        inverse = solve_triangular(lower[rows, rows], np.eye(rows.stop - r0, dtype=a.dtype),
                                   lower=True)  # fmt: skip
        x[rows] = inverse @ (x[rows] - lower[rows, :r0] @ x[:r0])
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("m", "nb"), [(300, 128), (777, 256)])
def test_the_seeds_algorithm_passes_on_every_kind(dtype, kind, m, nb):
    """Every kind trsm_blocked verifies, ill-conditioned ones included (κ₁ up to ~1e10): the
    inversion-based blocked solve stays below 1 (LAPACK's threshold is 30)."""
    problem = make_problem(m, 5, dtype, seed=m, kind=kind)
    x = inversion_blocked(problem.a, problem.b, nb)
    assert x.dtype == problem.a.dtype
    assert lapack_ratios(problem.a, problem.b, x, np).max() < 1.0


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_skipping_the_last_block_rows_update_fails(dtype):
    """The red-team case of issue 7 (no GEMM update of the last block row) at m = 2048, in
    the precision where it is hardest to see: ~4e4 (divided by m, as the issue's text has it,
    it would be ~20 and pass)."""
    problem = make_problem(2048, 2, dtype, seed=9)
    lower = np.tril(np.nan_to_num(problem.a))
    x = solve_triangular(lower, problem.b, lower=True)
    x[1792:] = solve_triangular(lower[1792:, 1792:], problem.b[1792:], lower=True)
    ratio = lapack_ratios(problem.a, problem.b, x, np).max()
    assert ratio > 1000 and ratio / 2048 < LAPACK_THRESHOLD


def test_the_ratio_separates_inversion_from_substitution_when_x_is_bounded():
    """A measured limit, documented in docs/EVALUATOR.md: on an ill-conditioned A with
    B = A·X0, X0 bounded, an explicit inverse of a diagonal block loses backward stability
    (its residual follows the block's condition); substitution does not. Such inputs are not in
    the verification: the seed's algorithm would fail them."""
    rng = np.random.default_rng(4)
    m = 300
    a = np.tril(rng.uniform(-1, 1, (m, m)) * 14 / np.sqrt(m), -1)
    a[np.diag_indices(m)] = rng.uniform(1, 2, m) * rng.choice([-1.0, 1.0], m)
    b = a @ rng.uniform(-1, 1, (m, 8))
    a[np.triu_indices(m, 1)] = np.nan
    substitution = solve_triangular(np.tril(np.nan_to_num(a)), b, lower=True)
    inverted = inversion_blocked(a, b, 256)
    assert lapack_ratios(a, b, substitution, np).max() < 1.0
    assert lapack_ratios(a, b, inverted, np).max() > LAPACK_THRESHOLD


# ---- trsm_blocked's reference check ---------------------------------------------------------


def test_the_path_check_is_registered_with_its_name():
    assert accuracy.solution_check("lapack_ratio") is accuracy.check_solution_lapack
    assert accuracy.added_check_names("lapack_ratio") == ("lapack_ratio",)
    assert accuracy.added_check_names("host_reference") == ()
    with pytest.raises(ValueError, match="known: .*host_reference, lapack_ratio"):
        accuracy.added_check_names("nope")


@pytest.mark.parametrize("dtype", ["float32", "complex64"])
def test_a_zeroed_row_of_a_growth_problem_is_the_forward_errors(dtype):
    """Where the ratio cannot see it (X spans 1e8, so row 0 weighs nothing in ‖x‖₁), the
    per-row forward error can: the composite check fails it as ``forward_error``."""
    problem = make_problem(300, 4, dtype, seed=0, kind="growth")
    x = exact(problem)
    x[0] = 0
    assert lapack_ratios(problem.a, problem.b, x, np).max() < 1
    failure = accuracy.check_solution_lapack(problem, x)
    assert failure is not None and failure.check == "forward_error"


@pytest.mark.parametrize("kind", BACKWARD_ERROR_ONLY_KINDS)
def test_ill_conditioned_kinds_are_judged_by_the_ratio_alone(kind, monkeypatch):
    def host_reference(problem, x):
        raise AssertionError("the host reference judged a backward-error-only input")

    monkeypatch.setattr(accuracy, "check_solution", host_reference)
    problem = make_problem(300, 4, "float64", seed=1, kind=kind)
    assert accuracy.check_solution_lapack(problem, exact(problem)) is None
    x = exact(problem)
    x[:, 3] *= 1.001
    failure = accuracy.check_solution_lapack(problem, x)
    assert failure is not None and failure.check == "lapack_ratio"


def test_above_the_host_limit_only_the_ratio_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(accuracy, "check_solution", lambda p, x: calls.append(p) or None)
    small = make_problem(accuracy.HOST_REFERENCE_MAX_M, 2, "float32", seed=1)
    large = make_problem(accuracy.HOST_REFERENCE_MAX_M + 1, 2, "float32", seed=1)
    assert accuracy.check_solution_lapack(small, exact(small)) is None
    assert accuracy.check_solution_lapack(large, exact(large)) is None
    assert calls == [small]


def test_the_trap_is_judged_by_the_forward_error_first():
    """A float64 X only as accurate as float32 on the trap fails as ``forward_error`` (as
    ``check_solution`` names it), not as the ratio, which sees it too."""
    problem = make_problem(200, 3, "float64", seed=5, kind="trap")
    x = exact(problem).astype(np.float32).astype(np.float64)
    assert lapack_ratios(problem.a, problem.b, x, np).max() > 1e6
    failure = accuracy.check_solution_lapack(problem, x)
    assert failure is not None and failure.check == "forward_error"
    bounded = make_problem(200, 3, "float64", seed=5)
    single = exact(bounded).astype(np.float32).astype(np.float64)
    failure = accuracy.check_solution_lapack(bounded, single)
    assert failure is not None and failure.check == "lapack_ratio"


def test_a_non_finite_output_is_named_so():
    problem = make_problem(130, 2, "float32", seed=1)
    x = exact(problem)
    x[129, 1] = np.inf
    failure = accuracy.check_solution_lapack(problem, x)
    assert failure is not None and failure.check == "non_finite_output"


# ---- on the GPU -----------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cupy_computes_the_same_ratio(dtype):
    """Every column perturbed well above rounding (as in the comparison with DTRT02), so both
    GEMMs (cuBLAS's, NumPy's BLAS) measure the perturbation whatever their summation orders."""
    import cupy

    problem = make_problem(300, 17, dtype, seed=2)
    rng = np.random.default_rng(2)
    single = dtype in ("float32", "complex64")
    scale = (1e-3 if single else 1e-8) * rng.uniform(0.5, 1.0, (300, 17))
    x = (exact(problem) * (1 + scale)).astype(dtype)
    host = lapack_ratios(problem.a, problem.b, x, np)
    assert (host > 1).all()
    device = lapack_ratios(cupy.asarray(problem.a), cupy.asarray(problem.b), cupy.asarray(x))
    assert isinstance(device, cupy.ndarray)
    np.testing.assert_allclose(device.get(), host, rtol=1e-9 if single else 1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_device_check_at_4096_rows(dtype):
    """cuBLAS's solve (through CuPy) passes the device check on host arrays; a perturbed
    column fails it, named, computed on the device."""
    import cupy
    from cupyx.scipy.linalg import solve_triangular as device_solve

    from evaluator.checks.lapack_ratio import device_module

    assert device_module() is cupy
    problem = make_problem(4096, 64, dtype, seed=3)
    a = cupy.asarray(np.tril(np.nan_to_num(problem.a)))
    x = device_solve(a, cupy.asarray(problem.b), lower=True).get()
    assert accuracy.check_solution_lapack(problem, x) is None
    x[:, 63] *= 1 + 1e-3
    failure = accuracy.check_solution_lapack(problem, x)
    assert failure is not None and failure.check == "lapack_ratio"
    assert failure.detail.startswith("column 63:") and "on the device" in failure.detail
