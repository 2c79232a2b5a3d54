"""The `band_bidiag` reference and check (``seeds.band_bidiag.reference``, ``lapack``,
``layout``): LAPACK ?gbbrd and DBDSQR through SciPy's cython_lapack capsules against
``numpy.linalg.svd`` of the dense band matrix; the bound; planted faults refused, each by the
check that names it; the layouts' round trips.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seeds.band_bidiag import emulation, inputs, schedule
from seeds.band_bidiag.lapack import LapackError, bdsqr_singular_values, gbbrd
from seeds.band_bidiag.layout import band_from_dense, bidiagonal, dense_from_band, pack
from seeds.band_bidiag.reference import (
    CHECK_NAME,
    FINITE_CHECK,
    SHAPE_CHECK,
    bound,
    check_bidiagonal,
    reference_singular_values,
)

DTYPES = (np.float32, np.float64)


SVD_CASES = [
    (kind, n, bw)
    for kind in ("random", "zero_rows", "repeated_blocks", "arithmetic")
    for n, bw in ((1, 0), (1, 5), (2, 1), (9, 8), (60, 7), (200, 32))
    if not (kind == "arithmetic" and bw == 0)  # a spectrum needs BW >= 1 to rotate into a band
]


@pytest.mark.parametrize(("kind", "n", "bw"), SVD_CASES)
def test_reference_matches_numpy_svd_of_the_dense_band(kind, n, bw):
    problem = inputs.make_band(kind, n, bw, np.float64, np.random.default_rng(n + bw))
    sigma = reference_singular_values(problem.band)
    dense = np.linalg.svd(dense_from_band(problem.band), compute_uv=False)
    assert np.all(np.diff(sigma) <= 0)
    assert np.max(np.abs(sigma - dense)) <= 64 * np.finfo(np.float64).eps * max(dense[0], 1e-300)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gbbrd_in_the_bands_precision(dtype):
    band = inputs.random_band(150, 12, dtype, np.random.default_rng(2))
    d, e = gbbrd(band)
    assert d.dtype == dtype and d.shape == (150,) and e.shape == (149,)
    assert check_bidiagonal(band, d, e) is None  # LAPACK's own reduction passes the check
    before = band.copy()
    gbbrd(band)
    np.testing.assert_array_equal(band, before)  # input untouched


def test_lapack_bindings_refuse_bad_arguments():
    with pytest.raises(ValueError, match="float32 or float64"):
        gbbrd(np.zeros((3, 5), dtype=np.complex128))
    with pytest.raises(ValueError):
        bdsqr_singular_values(np.ones(3), np.ones(3))
    assert issubclass(LapackError, RuntimeError)
    np.testing.assert_array_equal(bdsqr_singular_values(np.array([-2.0]), np.zeros(0)), [2.0])


def test_bound_is_a_multiple_of_n_eps_with_a_floor():
    eps32 = np.finfo(np.float32).eps
    assert bound(1000, np.float32) == 4 * 1000 * eps32
    assert bound(5, np.float32) == bound(32, np.float32) == 4 * 32 * eps32
    assert bound(1000, np.float64) == 4 * 1000 * np.finfo(np.float64).eps


@pytest.mark.parametrize("dtype", DTYPES)
def test_special_matrices_pass_with_exact_answers(dtype):
    # Zero matrix: σ = 0; a diagonal: σ = |diag|; BW = 1 returned as is.
    zero = np.zeros((4, 20), dtype=dtype, order="F")
    assert check_bidiagonal(zero, np.zeros(20, dtype), np.zeros(19, dtype)) is None
    failure = check_bidiagonal(zero, np.ones(20, dtype), np.zeros(19, dtype))
    assert failure is not None and failure.check == CHECK_NAME and failure.value == np.inf
    bidiag = inputs.random_band(40, 1, dtype, np.random.default_rng(0))
    assert check_bidiagonal(bidiag, bidiag[1, :], bidiag[0, 1:]) is None
    # Repeated and zero singular values survive a correct reduction (the emulated seed).
    for kind in ("repeated_blocks", "zero_rows", "repeated", "rank_deficient"):
        problem = inputs.make_band(kind, 90, 9, dtype, np.random.default_rng(4))
        d, e = emulation.reduce(problem.band, 4)
        assert check_bidiagonal(problem.band, d, e) is None, kind


def skip_last_sweep(n: int) -> emulation.SkipRule:
    """The fault: the last stage's last sweep is not run."""
    return lambda index, count, stage, task: (
        index == count - 1 and task.sweep == schedule.last_sweep(n, stage)
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "bw", "tw"), [(33, 4, 4), (100, 7, 4), (150, 40, 16)])
@pytest.mark.parametrize("kind", ["arithmetic", "quarter_circle"])
def test_a_reduction_that_skips_its_last_sweep_is_refused(dtype, n, bw, tw, kind):
    problem = inputs.make_band(kind, n, bw, dtype, np.random.default_rng(0))
    d, e = emulation.reduce(problem.band, tw, skip=skip_last_sweep(n))
    failure = check_bidiagonal(problem.band, d, e)
    assert failure is not None and failure.check == CHECK_NAME
    assert failure.value > 10 * failure.bound and failure.shape == (n, bw)
    assert check_bidiagonal(problem.band, *emulation.reduce(problem.band, tw)) is None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["random", "arithmetic", "repeated_blocks"])
def test_an_unreduced_matrix_with_the_right_frobenius_norm_is_refused(dtype, kind):
    """d, e read off the band as given (never reduced), scaled so that ‖(d, e)‖_F = ‖A‖_F:
    orthogonal reductions preserve that norm, so a norm check alone would pass it. Its singular
    values are off by 0.08–0.22·σ_1 here: 1400–3900 times the bound in float32, 10¹¹ times in
    float64."""
    n, bw = 120, 16
    problem = inputs.make_band(kind, n, bw, dtype, np.random.default_rng(1))
    band = problem.band
    d, e = band[bw, :].astype(np.float64), band[bw - 1, 1:].astype(np.float64)
    scale = np.linalg.norm(band) / np.hypot(np.linalg.norm(d), np.linalg.norm(e))
    d, e = (d * scale).astype(dtype), (e * scale).astype(dtype)
    np.testing.assert_allclose(np.hypot(np.linalg.norm(d), np.linalg.norm(e)),
                               np.linalg.norm(band.astype(np.float64)), rtol=1e-6)  # fmt: skip
    failure = check_bidiagonal(band, d, e)
    assert failure is not None and failure.check == CHECK_NAME
    assert failure.value > 1e3 * failure.bound


def test_malformed_outputs_are_named():
    band = inputs.random_band(30, 5, np.float32, np.random.default_rng(0))
    d, e = emulation.reduce(band, 4)
    failure = check_bidiagonal(band, d[:-1], e)
    assert failure is not None and failure.check == SHAPE_CHECK
    failure = check_bidiagonal(band, d, np.concatenate([e, e[:1]]))
    assert failure is not None and failure.check == SHAPE_CHECK
    d_nan = d.copy()
    d_nan[3] = np.nan
    failure = check_bidiagonal(band, d_nan, e)
    assert failure is not None and failure.check == FINITE_CHECK and failure.value == 1.0
    e_inf = e.copy()
    e_inf[-1] = np.inf
    assert check_bidiagonal(band, d, e_inf).check == FINITE_CHECK  # type: ignore[union-attr]
    # A precomputed reference is used as given.
    assert check_bidiagonal(band, d, e, sigma=reference_singular_values(band)) is None


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), bw=st.integers(0, 45), seed=st.integers(0, 2**32 - 1))
def test_layouts_round_trip(n, bw, seed):
    """Dense ↔ LAPACK band ↔ padded band: the same entries; the padded layout's diagonal and
    superdiagonal are the matrix's, everything else of it zero."""
    rng = np.random.default_rng(seed)
    a = np.triu(rng.uniform(-1, 1, (n, n)))
    a -= np.triu(a, bw + 1)  # keep the band only
    band = band_from_dense(a, bw)
    np.testing.assert_array_equal(dense_from_band(band), a)
    ab, layout = pack(band)
    assert layout.ku == 2 * max(min(bw, n - 1), 1) - 1 and layout.ldab == 3 * max(min(bw, n - 1), 1)
    d, e = bidiagonal(ab, layout)
    np.testing.assert_array_equal(d, np.diag(a))
    np.testing.assert_array_equal(e, np.diag(a, 1))
    for j in range(n):
        for r in range(layout.ldab):
            i = r - layout.ku + j
            expected = a[i, j] if 0 <= i < n else 0.0
            assert ab[r, j] == expected
