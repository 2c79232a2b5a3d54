"""The `band_bidiag` path's reference and its check.

Reference: the same band matrix (the candidate's input, widened exactly to float64) reduced by
LAPACK DGBBRD, then the bidiagonal's singular values by DBDSQR (``lapack``: SciPy's LAPACK,
single-threaded reference code; O(n²·BW), 2.8 s at n = 4096, BW = 32 on the development
machine, about 45 s at n = 16384). The candidate's (d, e), widened exactly to float64, go
through the same DBDSQR.

The check, in order, each failure named:

1. ``band_bidiag_output_shape``: d has n entries and e n − 1.
2. ``non_finite_output``: every entry of d and e is finite.
3. ``singular_values``: with σ the reference's and σ̂ the candidate's singular values (both
   decreasing),

       max_i |σ̂_i − σ_i| / σ_1  ≤  C · n · u,     C = :data:`BOUND_FACTOR`,

   u the unit roundoff of the candidate's dtype (2⁻²⁴ float32, 2⁻⁵³ float64: LAPACK's
   xLAMCH('Epsilon')). A zero matrix (σ_1 = 0) must give σ̂ = 0.

Why this bound. A reduction by Householder reflectors is normwise backward stable: the computed
bidiagonal B is exactly orthogonally equivalent to A + E, and applying r reflectors to a vector
perturbs it by at most r·γ̃_ℓ of its norm, ℓ the reflectors' length (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., Lemma 19.3; Thm 19.4 for QR). Here every row and
column of A meets O(n) reflectors of length ≤ TW + 1 per stage, so ‖E‖₂ ≤ c·n·u·‖A‖₂ with c
depending on TW and the number of stages, and by Weyl's inequality |σ̂_i − σ_i| ≤ ‖E‖₂: an
absolute error per singular value, relative to σ_1 = ‖A‖₂, linear in n·u. Small singular
values get no relative accuracy from any backward-stable reduction, so zero and tiny σ_i are
judged on the same absolute scale. Worst-case constants (c·(TW + 1)·stages) are far above what
rounding does, since errors add like a random walk: on the NumPy emulation of the seed
(``emulation``) max_i |σ̂_i − σ_i|/(σ_1·n·u) measured at most 0.8 over every kind of
``inputs`` at n ≤ 300, BW 1–64, TW 2–32, in float32 and float64 (largest at small n; it falls
roughly like 1/√n); C = 4 leaves a factor 5 for the GPU kernel's other summation orders and
DGBBRD's own rounding (which counts in float64). The same bound scaled by ‖A‖_F instead of σ_1
would be looser by up to √n on random bands.

What it refuses: a reduction that skips its last sweep leaves an entry of size O(‖row‖) out
of (d, e); at n ≤ 300 that moves σ by 10–1000 times the bound (``tests``); (d, e) of a matrix
never reduced, rescaled to the right Frobenius norm, by 10⁵ times or more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .lapack import bdsqr_singular_values, gbbrd
from .layout import check_band

CHECK_NAME = "singular_values"
SHAPE_CHECK = "band_bidiag_output_shape"
FINITE_CHECK = "non_finite_output"
# C in C·n·u; measured and justified in the module docstring.
BOUND_FACTOR = 4.0


@dataclass(frozen=True)
class Failure:
    """The first check a candidate's (d, e) failed: the fields of the evaluator's
    ``evaluator.report.CheckFailure`` (``shape`` is (n, BW))."""

    check: str
    shape: tuple[int, int]
    value: float | None
    bound: float | None
    detail: str


def unit_roundoff(dtype: type | np.dtype) -> float:
    """u of a real dtype: 2⁻²⁴ (float32), 2⁻⁵³ (float64) (LAPACK's xLAMCH('Epsilon'))."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def bound(n: int, dtype: type | np.dtype) -> float:
    """The check's bound on max_i |σ̂_i − σ_i| / σ_1: :data:`BOUND_FACTOR` · n · u."""
    return BOUND_FACTOR * n * unit_roundoff(dtype)


def reference_singular_values(band: np.ndarray) -> np.ndarray:
    """Singular values (float64, decreasing) of the band matrix ``band`` ((BW + 1) × n, LAPACK
    upper band layout), widened exactly to float64 and reduced by DGBBRD then DBDSQR.

    Raises:
        ValueError: a malformed band.
        lapack.LapackError: LAPACK failed (DBDSQR not converging).
    """
    check_band(band)
    d, e = gbbrd(np.asarray(band, dtype=np.float64))
    return bdsqr_singular_values(d, e)


def bidiagonal_singular_values(d: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Singular values (float64, decreasing) of the upper bidiagonal (d, e), by DBDSQR after an
    exact widening to float64."""
    return bdsqr_singular_values(np.asarray(d, np.float64), np.asarray(e, np.float64))


def singular_value_error(sigma_hat: np.ndarray, sigma: np.ndarray) -> tuple[float, int]:
    """(max_i |σ̂_i − σ_i| / σ_1, the worst i); both decreasing. σ_1 = 0: 0 if σ̂ is all zero,
    else inf."""
    diff = np.abs(sigma_hat - sigma)
    worst = int(np.argmax(diff)) if diff.size else 0
    top = float(sigma[0]) if sigma.size else 0.0
    if top == 0.0:
        return (0.0 if not np.any(diff) else float("inf")), worst
    return float(diff[worst] / top), worst


def check_bidiagonal(
    band: np.ndarray, d: np.ndarray, e: np.ndarray, *, sigma: np.ndarray | None = None
) -> Failure | None:
    """Judge a candidate's bidiagonal (d, e) of ``band`` (its input, in the candidate's dtype):
    ``None`` when it passes, else the first failure (module docstring, checks 1–3).

    Args:
        sigma: the reference singular values when already computed
            (:func:`reference_singular_values` of ``band``); computed here otherwise.

    Raises:
        ValueError: a malformed band.
    """
    n, bw = check_band(band)
    shape = (n, bw)
    if np.shape(d) != (n,) or np.shape(e) != (n - 1,):
        return Failure(
            SHAPE_CHECK, shape, None, None,
            f"expected d ({n},) and e ({n - 1},); got {np.shape(d)}, {np.shape(e)}",
        )  # fmt: skip
    bad = int(np.size(d) - np.isfinite(d).sum() + np.size(e) - np.isfinite(e).sum())
    if bad:
        return Failure(FINITE_CHECK, shape, float(bad), 0.0, f"{bad} entries of d, e not finite")
    ref = reference_singular_values(band) if sigma is None else sigma
    err, worst = singular_value_error(bidiagonal_singular_values(d, e), ref)
    limit = bound(n, band.dtype)
    if not err <= limit:
        return Failure(
            CHECK_NAME, shape, err, limit,
            f"max_i |s_hat_i - s_i| / s_1 at i = {worst} (s_i = {ref[worst]:.6g}); bound "
            f"{BOUND_FACTOR:g} * n * u against DGBBRD + DBDSQR in float64",
        )  # fmt: skip
    return None
