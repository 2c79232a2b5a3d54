"""Inputs of the `band_bidiag` path (``seeds.band_bidiag.inputs``): each kind is an upper band
in LAPACK's layout with the singular values it promises (the spectra's Σ, zero and repeated
values), the dense-to-band reduction keeps the singular values, and bad requests are refused."""

from __future__ import annotations

import numpy as np
import pytest

from seeds.band_bidiag import inputs
from seeds.band_bidiag.layout import dense_from_band
from seeds.band_bidiag.reference import reference_singular_values


@pytest.mark.parametrize("kind", inputs.KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_kind_is_an_upper_band_in_lapack_layout(kind, dtype):
    n, bw = 70, 9
    problem = inputs.make_band(kind, n, bw, dtype, np.random.default_rng(0))
    band = problem.band
    assert band.shape == (bw + 1, n) and band.dtype == dtype and band.flags.f_contiguous
    assert (problem.n, problem.bandwidth) == (n, bw)
    for off in range(1, bw + 1):  # slots above row 0 are zero
        assert not np.any(band[bw - off, :off])
    assert np.all(np.isfinite(band)) and np.any(band[0, bw:])  # the outer diagonal is used
    assert (problem.sigma is not None) == (kind in inputs.SPECTRUM_KINDS)


@pytest.mark.parametrize("kind", inputs.SPECTRUM_KINDS)
def test_spectra_have_the_singular_values_they_were_built_with(kind):
    rng = np.random.default_rng(1)
    for n, bw in ((1, 1), (5, 30), (64, 8), (257, 32)):
        problem = inputs.make_band(kind, n, bw, np.float64, rng)
        sigma = reference_singular_values(problem.band)
        assert np.max(np.abs(sigma - problem.sigma)) <= 64 * n * np.finfo(np.float64).eps
        assert problem.sigma.max() <= 1.0 and problem.sigma.min() >= 0.0


def test_the_spectra_are_what_the_paper_names():
    n = 400
    np.testing.assert_allclose(inputs.spectrum("arithmetic", n), np.arange(n, 0, -1) / n)
    log32, log64 = inputs.spectrum("log_decay", n, np.float32), inputs.spectrum("log_decay", n)
    assert log32[0] == 1.0 and np.isclose(log32[-1], 1e-6) and np.isclose(log64[-1], 1e-12)
    assert np.allclose(np.diff(np.log10(log64)), -12 / (n - 1))
    # Quarter circle on [0, 1]: density (4/π)·√(1 − x²), mean 4/(3π), median ≈ 0.404.
    qc = inputs.spectrum("quarter_circle", 20000)
    assert abs(qc.mean() - 4 / (3 * np.pi)) < 1e-4 and abs(np.median(qc) - 0.4040) < 1e-3
    assert sorted(set(inputs.spectrum("repeated", 10))) == [0.125, 0.25, 0.5, 1.0]
    rank = inputs.spectrum("rank_deficient", n)
    assert np.sum(rank == 0) == n // 8 and rank[0] == 1.0


def test_zero_rows_and_repeated_blocks_have_zero_and_repeated_singular_values():
    rng = np.random.default_rng(2)
    n, bw = 100, 6
    zero = inputs.make_band("zero_rows", n, bw, np.float64, rng)
    dense = dense_from_band(zero.band)
    zero_rows = list(range(inputs.ZERO_ROW_START, n, inputs.ZERO_ROW_STEP))
    assert not np.any(dense[zero_rows, :])
    sigma = reference_singular_values(zero.band)
    assert np.sum(sigma < 1e-13 * sigma[0]) >= len(zero_rows)
    blocks = inputs.make_band("repeated_blocks", n, bw, np.float64, rng)
    sigma = reference_singular_values(blocks.band)
    block = np.linalg.svd(dense_from_band(blocks.band)[: bw + 1, : bw + 1], compute_uv=False)
    for value in block:  # each of the block's values at least ⌊n/(BW + 1)⌋ times
        assert np.sum(np.abs(sigma - value) <= 1e-13) >= n // (bw + 1)


def test_dense_to_band_keeps_the_singular_values():
    rng = np.random.default_rng(3)
    for n, bw in ((50, 1), (50, 7), (51, 16), (20, 40)):
        a = rng.standard_normal((n, n))
        band = inputs.dense_to_band(a, bw)
        assert band.shape == (bw + 1, n)
        np.testing.assert_allclose(
            reference_singular_values(band), np.linalg.svd(a, compute_uv=False),
            rtol=0, atol=1e-12,
        )  # fmt: skip


def test_bad_requests_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="unknown kind"):
        inputs.make_band("gaussian", 10, 2, np.float32, rng)
    with pytest.raises(ValueError, match="unknown spectrum"):
        inputs.spectrum("gaussian", 10)
    with pytest.raises(ValueError, match="up to n = 4096"):
        inputs.make_band("arithmetic", inputs.SPECTRUM_MAX_N + 1, 2, np.float32, rng)
    with pytest.raises(ValueError):
        inputs.make_band("random", 0, 2, np.float32, rng)
    with pytest.raises(ValueError):
        inputs.dense_to_band(np.ones((3, 4)), 1)
