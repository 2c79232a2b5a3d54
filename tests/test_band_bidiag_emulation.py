"""The NumPy emulation of the `band_bidiag` seed (``seeds.band_bidiag.emulation``): the kernel's
stages, sweeps, blocks, launch order and Householder convention, in the kernel's precision.

What it shows about the algorithm the kernel runs: its singular values match LAPACK's (DGBBRD +
DBDSQR in float64) within the check's bound at small n, several BW, TW and ragged n, in float32
and float64, on every input kind; launch order (tasks of one launch in any order) gives the same
bits as sweep-after-sweep order, so the three-cycle rule lets blocks run concurrently; each
reflector applied to the whole matrix leaves exactly a bidiagonal, so the kernel's row and column
ranges miss no nonzero; the padded layout holds every bulge.
"""

from __future__ import annotations

import numpy as np
import pytest

from seeds.band_bidiag import emulation, inputs, schedule
from seeds.band_bidiag.layout import dense_from_band
from seeds.band_bidiag.reference import (
    bidiagonal_singular_values,
    bound,
    reference_singular_values,
    singular_value_error,
)

# (n, BW, TW): ragged n (no multiple of TW), one stage (TW ≥ BW − 1) and several, BW = 1,
# BW ≥ n (the whole upper triangle).
CASES = [
    (2, 1, 32), (3, 2, 4), (7, 3, 2), (17, 16, 4), (33, 1, 8), (40, 64, 16), (64, 63, 32),
    (97, 12, 4), (101, 32, 32), (150, 40, 16), (150, 40, 32), (211, 17, 8), (300, 64, 32),
]  # fmt: skip
DTYPES = (np.float32, np.float64)


@pytest.mark.parametrize(("n", "bw", "tw"), CASES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_emulated_reduction_matches_lapack_within_the_bound(n, bw, tw, dtype):
    rng = np.random.default_rng(n * 1000 + bw * 10 + tw)
    kinds = ("random", "zero_rows", "repeated_blocks") + (("quarter_circle",) if n <= 150 else ())
    for kind in kinds:
        problem = inputs.make_band(kind, n, bw, dtype, rng)
        d, e = emulation.reduce(problem.band, tw)
        assert d.dtype == dtype and d.shape == (n,) and e.shape == (n - 1,)
        err, _ = singular_value_error(
            bidiagonal_singular_values(d, e), reference_singular_values(problem.band)
        )
        assert err <= bound(n, dtype), (kind, err, bound(n, dtype))


@pytest.mark.parametrize("kind", inputs.SPECTRUM_KINDS)
def test_the_papers_spectra_come_back_in_float32(kind):
    """The paper's experiment at small n: U·Σ·Vᵀ reduced to band in float64, then the emulated
    float32 reduction; its singular values within the bound of the reference's and of Σ."""
    rng = np.random.default_rng(7)
    problem = inputs.make_band(kind, 120, 24, np.float32, rng)
    d, e = emulation.reduce(problem.band, 8)
    sigma_hat = bidiagonal_singular_values(d, e)
    err, _ = singular_value_error(sigma_hat, reference_singular_values(problem.band))
    assert err <= bound(120, np.float32)
    # Against the prescribed Σ the float32 rounding of the band input counts too (~u per entry).
    assert np.max(np.abs(sigma_hat - problem.sigma)) <= 2 * bound(120, np.float32)
    if kind == "rank_deficient":
        assert np.sum(sigma_hat < 1e-5) == -(-120 // 8)


@pytest.mark.parametrize(("n", "bw", "tw"), [(97, 12, 4), (150, 40, 16), (64, 63, 32)])
def test_launch_order_gives_the_bits_of_sweep_order(n, bw, tw):
    """Tasks of one launch commute exactly (disjoint rows): the kernel's block order, a random
    order within each launch and one-sweep-at-a-time order give identical bits."""
    band = inputs.random_band(n, bw, np.float32, np.random.default_rng(3))
    sequential = emulation.reduce(band, tw, order="sequential")
    for rng in (None, np.random.default_rng(11), np.random.default_rng(12)):
        launched = emulation.reduce(band, tw, rng=rng)
        for got, want in zip(launched, sequential, strict=True):
            np.testing.assert_array_equal(got, want)


def test_two_cycle_separation_is_refused_where_tasks_would_overlap():
    band = inputs.random_band(60, 8, np.float64, np.random.default_rng(0))
    with pytest.raises(AssertionError, match="share rows"):
        emulation.reduce(band, 8, separation=2)


@pytest.mark.parametrize(("n", "bw", "tw"), [(23, 5, 2), (40, 9, 4), (57, 16, 16), (31, 30, 8)])
def test_every_reflector_on_the_whole_matrix_leaves_a_bidiagonal(n, bw, tw):
    """Applied to every row and column, each reflector changes nothing outside the kernel's
    ranges (those entries are exactly zero), and what is left is exactly bidiagonal: no entry
    the kernel never reads survives. The banded emulation agrees to rounding."""
    band = inputs.random_band(n, bw, np.float64, np.random.default_rng(n))
    full = emulation.reduce_dense(dense_from_band(band), bw, tw)
    off = full - np.diag(np.diag(full)) - np.diag(np.diag(full, 1), 1)
    assert not np.any(off)
    d, e = emulation.reduce(band, tw)
    np.testing.assert_allclose(d, np.diag(full), rtol=0, atol=1e-13)
    np.testing.assert_allclose(e, np.diag(full, 1), rtol=0, atol=1e-13)


def test_an_already_bidiagonal_matrix_is_returned_unchanged():
    rng = np.random.default_rng(5)
    for n, bw in ((1, 0), (1, 4), (2, 1), (2, 9), (50, 1)):
        band = inputs.random_band(n, bw, np.float32, rng)
        d, e = emulation.reduce(band, 32)
        assert schedule.launches(n, bw, 32) == 0
        np.testing.assert_array_equal(d, band[bw, :])
        np.testing.assert_array_equal(e, band[bw - 1, 1:] if bw >= 1 else np.zeros(n - 1))


def test_householder_follows_xlarfg():
    x = np.array([3.0, 4.0, 0.0, 12.0])
    v, tau, beta = emulation.householder(x)
    assert beta == -13.0 and v[0] == 1.0
    h = np.eye(4) - tau * np.outer(v, v)
    np.testing.assert_allclose(h @ x, [-13.0, 0, 0, 0], atol=1e-14)
    np.testing.assert_allclose(h @ h.T, np.eye(4), atol=1e-15)
    v, tau, beta = emulation.householder(np.array([-2.0, 0.0, 0.0]))  # nothing to annihilate
    assert tau == 0.0 and beta == -2.0
    v, tau, beta = emulation.householder(np.array([0.0, -1e-30]))  # x0 = 0: beta = −‖x‖
    assert beta == -1e-30 and np.isfinite(v).all()
    big = np.array([3e30, 4e30], dtype=np.float32)  # squares overflow float32 unscaled
    assert emulation.householder(big)[2] == np.float32(-5e30)


def test_a_task_past_the_padded_storage_is_refused():
    band = inputs.random_band(30, 6, np.float64, np.random.default_rng(1))
    ab, layout = emulation.pack(band)
    cramped = emulation.Storage(ab[:-6, :], emulation.PaddedLayout(30, 6, 6, layout.ku, 12))
    stage = schedule.stages(30, 6, 4)[0]
    with pytest.raises(IndexError, match="padded band holds"):
        emulation.run_task(cramped, stage, schedule.task(30, stage, 0, 1))
