"""Inputs of the `band_bidiag` path: upper band matrices in LAPACK's upper band layout
((BW + 1) × n, Fortran order, ``layout``), of the kinds the check runs on.

Kinds (:data:`KINDS`):

- ``random`` (any n): band entries uniform in [−1, 1].
- ``zero_rows`` (any n): ``random`` with every 7th row zero (rows 3, 10, 17, …): ⌈(n − 3)/7⌉
  zero singular values.
- ``repeated_blocks`` (any n): block diagonal, every block the same random upper triangle of
  order BW + 1 (the last one cut to what is left): each of the block's singular values repeated
  ⌊n/(BW + 1)⌋ times; the band holds zeros between blocks, so reflectors meet zero vectors
  (τ = 0).
- The paper's spectra (n ≤ :data:`SPECTRUM_MAX_N`), A = U·Σ·Vᵀ with Haar-random orthogonal U, V
  and Σ in [0, 1] (:func:`spectrum`), reduced to band form in float64 (:func:`dense_to_band`):
  ``arithmetic`` (σ_i = i/n), ``log_decay`` (σ from 1 down to 10⁻⁶ in single, 10⁻¹² in double,
  geometrically), ``quarter_circle`` (quantiles of the quarter-circle law, the singular values
  of a large Gaussian matrix), ``repeated`` (four values 1, 1/2, 1/4, 1/8, each ⌈n/4⌉ times) and
  ``rank_deficient`` (``arithmetic`` with its smallest ⌈n/8⌉ values set to 0).

Cost of the spectra: forming U, V (QR of two Gaussian n×n matrices) and U·Σ·Vᵀ, then the
dense-to-band reduction (two blocked Householder factorizations per panel of BW columns, about
8/3·n³ flops), O(n³) in all: measured on the (shared, two-core) development machine 1.8 s at
n = 512, 5 s at 1024 and 14 s at 2048, so about 2 minutes at 4096, hence the limit; the CPU
tests stay at n ≤ 300.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .layout import band_from_dense

KINDS: tuple[str, ...] = (
    "random",
    "zero_rows",
    "repeated_blocks",
    "arithmetic",
    "log_decay",
    "quarter_circle",
    "repeated",
    "rank_deficient",
)
SPECTRUM_KINDS: tuple[str, ...] = KINDS[3:]
# The spectra need an O(n³) dense reduction on the host; beyond this they are not drawn.
SPECTRUM_MAX_N = 4096
ZERO_ROW_START, ZERO_ROW_STEP = 3, 7


@dataclass(frozen=True)
class BandProblem:
    """One input: ``band`` ((BW + 1) × n, Fortran order, the candidate's dtype) and, for the
    spectra, the singular values it was built with (float64, decreasing; ``None`` otherwise:
    they are then only known through the reference)."""

    kind: str
    band: np.ndarray
    sigma: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.band.shape[1])

    @property
    def bandwidth(self) -> int:
        return int(self.band.shape[0]) - 1


def _zero_outside(band: np.ndarray) -> np.ndarray:
    """Zero the slots of the first BW columns that lie above row 0 (outside the matrix)."""
    bw = band.shape[0] - 1
    for off in range(1, bw + 1):
        band[bw - off, : min(off, band.shape[1])] = 0
    return band


def random_band(n: int, bw: int, dtype: type, rng: np.random.Generator) -> np.ndarray:
    """Kind ``random``: band entries uniform in [−1, 1], drawn in float64 and rounded to
    ``dtype``."""
    band = np.asfortranarray(rng.uniform(-1.0, 1.0, (bw + 1, n)))
    return _zero_outside(band).astype(dtype, order="F")


def spectrum(kind: str, n: int, dtype: type = np.float64) -> np.ndarray:
    """The prescribed singular values of a spectrum kind, float64, decreasing, in [0, 1].

    Raises:
        ValueError: ``kind`` is not one of :data:`SPECTRUM_KINDS`.
    """
    i = np.arange(1, n + 1, dtype=np.float64)
    if kind == "arithmetic":
        s = i / n
    elif kind == "log_decay":
        decades = 6.0 if np.dtype(dtype) == np.float32 else 12.0
        s = 10.0 ** (-decades * (i - 1) / max(n - 1, 1))
    elif kind == "quarter_circle":
        s = _quarter_circle_quantiles((i - 0.5) / n)
    elif kind == "repeated":
        s = np.repeat([1.0, 0.5, 0.25, 0.125], -(-n // 4))[:n]
    elif kind == "rank_deficient":
        s = i / n
        s[: -(-n // 8)] = 0.0
    else:
        raise ValueError(f"unknown spectrum {kind!r}; expected one of {', '.join(SPECTRUM_KINDS)}")
    return np.sort(s)[::-1].copy()


def _quarter_circle_quantiles(p: np.ndarray) -> np.ndarray:
    """x in [0, 1] with F(x) = p for the quarter-circle law on [0, 1], density
    (4/π)·√(1 − x²), F(x) = (2/π)·(x·√(1 − x²) + arcsin x): bisection, 60 halvings (to
    float64 resolution)."""
    lo, hi = np.zeros_like(p), np.ones_like(p)
    for _ in range(60):
        mid = (lo + hi) / 2
        below = (2 / np.pi) * (mid * np.sqrt(1 - mid * mid) + np.arcsin(mid)) < p
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2


def haar_orthogonal(n: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-distributed n×n orthogonal matrix: Q of a Gaussian matrix's QR with R's diagonal
    made positive (F. Mezzadri, Notices AMS 54 (2007) 592–604)."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.where(np.diag(r) == 0, 1.0, np.diag(r)))


def _lwork(query: tuple[np.ndarray, ...]) -> int:
    return max(1, int(query[-2][0]))


def dense_to_band(a: np.ndarray, bw: int) -> np.ndarray:
    """Reduce a dense n×n matrix to upper band form of bandwidth ``bw`` by two-sided blocked
    Householder transformations in float64 (the first stage of a two-stage SVD: for each panel
    of BW columns, a QR factorization from the left makes the panel upper triangular, then an
    LQ factorization from the right (QR of the transpose) makes the row block to its right lower
    triangular), LAPACK DGEQRF and DORMQR through SciPy. The result is orthogonally equivalent
    to ``a``: same singular values, to float64 rounding.

    Returns:
        The LAPACK upper band ((bw + 1) × n, Fortran order, float64).

    Raises:
        ValueError: ``a`` not square or bw < 1.
    """
    from scipy.linalg import lapack

    if a.ndim != 2 or a.shape[0] != a.shape[1] or bw < 1:
        raise ValueError(f"need a square matrix and bw >= 1; got {a.shape}, bw={bw}")
    a = np.array(a, dtype=np.float64, order="F", copy=True)
    n = a.shape[0]
    for k in range(0, n, bw):
        p = min(bw, n - k)
        qr, tau, _, info = lapack.dgeqrf(a[k:, k : k + p])
        assert info == 0
        if k + p < n:
            trail = a[k:, k + p :]
            lwork = _lwork(lapack.dormqr("L", "T", qr, tau, trail, -1))
            a[k:, k + p :], _, info = lapack.dormqr("L", "T", qr, tau, trail, lwork)
            assert info == 0
        a[k:, k : k + p] = np.triu(qr)
        if k + p < n:
            lq, tau2, _, info = lapack.dgeqrf(np.asfortranarray(a[k : k + p, k + p :].T))
            assert info == 0
            trail = a[k + p :, k + p :]
            refl = lq[:, : tau2.size]  # fewer reflectors than p when fewer columns are left
            lwork = _lwork(lapack.dormqr("R", "N", refl, tau2, trail, -1))
            a[k + p :, k + p :], _, info = lapack.dormqr("R", "N", refl, tau2, trail, lwork)
            assert info == 0
            a[k : k + p, k + p :] = np.triu(lq).T
    return band_from_dense(a, bw)


def band_with_spectrum(sigma: np.ndarray, bw: int, rng: np.random.Generator) -> np.ndarray:
    """A float64 upper band ((bw + 1) × n) with singular values ``sigma``: U·Σ·Vᵀ (Haar U, V)
    reduced by :func:`dense_to_band`. O(n³): see the module's costs.

    Raises:
        ValueError: bw < 1 (a diagonal cannot hold a rotated spectrum).
    """
    n = sigma.shape[0]
    u, v = haar_orthogonal(n, rng), haar_orthogonal(n, rng)
    return dense_to_band((u * sigma) @ v.T, bw)


def make_band(kind: str, n: int, bw: int, dtype: type, rng: np.random.Generator) -> BandProblem:
    """One input of ``kind`` at (n, bw) in ``dtype`` (float32 or float64).

    Raises:
        ValueError: unknown kind, n < 1, bw < 0, or a spectrum kind past
            :data:`SPECTRUM_MAX_N`.
    """
    if n < 1 or bw < 0:
        raise ValueError(f"need n >= 1 and bandwidth >= 0; got n={n}, bandwidth={bw}")
    if kind == "random":
        return BandProblem(kind, random_band(n, bw, dtype, rng))
    if kind == "zero_rows":
        band = random_band(n, bw, np.float64, rng)
        for i in range(ZERO_ROW_START, n, ZERO_ROW_STEP):
            for off in range(min(bw, n - 1 - i) + 1):  # a[i, i + off] = band[bw − off, i + off]
                band[bw - off, i + off] = 0.0
        return BandProblem(kind, band.astype(dtype, order="F"))
    if kind == "repeated_blocks":
        size = min(bw + 1, n)  # an upper triangle of order BW + 1 spans the whole band
        block = np.triu(rng.uniform(-1.0, 1.0, (size, size)))
        a = np.zeros((n, n))
        for k in range(0, n, size):
            m = min(size, n - k)
            a[k : k + m, k : k + m] = block[:m, :m]
        return BandProblem(kind, band_from_dense(a, bw).astype(dtype, order="F"))
    if kind in SPECTRUM_KINDS:
        if n > SPECTRUM_MAX_N:
            raise ValueError(f"spectrum {kind!r} is drawn up to n = {SPECTRUM_MAX_N}; got {n}")
        sigma = spectrum(kind, n, dtype)
        band = band_with_spectrum(sigma, bw, rng)
        return BandProblem(kind, band.astype(dtype, order="F"), sigma)
    raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
