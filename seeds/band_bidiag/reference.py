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

       max_i |σ̂_i − σ_i| / σ_1  ≤  C · max(n, 32) · ε,     C = :data:`BOUND_FACTOR` = 4,

   ε the machine epsilon of the candidate's dtype (2⁻²³ float32, 2⁻⁵² float64). A zero matrix
   (σ_1 = 0) must give σ̂ = 0.

Why this bound. A reduction by Householder reflectors is normwise backward stable: the computed
bidiagonal B is exactly orthogonally equivalent to A + E, and applying r reflectors to a vector
perturbs it by at most r·γ̃_ℓ of its norm, ℓ the reflectors' length (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., Lemma 19.3; Thm 19.4 for QR). Here every row and
column of A meets O(n) reflectors of length ≤ TW + 1 per stage, so ‖E‖₂ ≤ c·n·ε·‖A‖₂ with c
depending on TW and the number of stages, and by Weyl's inequality |σ̂_i − σ_i| ≤ ‖E‖₂: an
absolute error per singular value, relative to σ_1 = ‖A‖₂, linear in n·ε. Small singular
values get no relative accuracy from any backward-stable reduction, so zero and tiny σ_i are
judged on the same absolute scale. Worst-case constants (c·(TW + 1)·stages) are far above what
rounding does, since errors add like a random walk; the constant is measured instead, on the
NumPy emulation of the seed (``emulation``), as max_i |σ̂_i − σ_i| / (σ_1·max(n, 32)·ε):

- n ≤ 32: at most 0.76 (float64, kind ``repeated``, n = 7: 24ε over 400 draws). There the
  error does not grow with n: it is 15–25ε at every n from 5 to 32, and DGBBRD + DBDSQR differ
  from ``numpy.linalg.svd`` (LAPACK DGESDD) by as much (45u at n = 7) — the reference's own
  rounding. Hence the floor of 32 in max(n, 32).
- n = 33–300 (every kind of ``inputs``, BW 1–64, TW 2–32, float32 and float64): at most 0.03,
  falling with n (roughly like 1/√n).

C = 4 leaves a factor ≥ 5 over the worst measured case for the GPU kernel's other summation
orders (sequential FMA sums where NumPy's are pairwise) and for float64's reference rounding.
The same bound scaled by ‖A‖_F instead of σ_1 would be looser by up to √n on random bands.

What it refuses (``tests/test_band_bidiag_reference.py``): (d, e) of a matrix never reduced,
rescaled to the right Frobenius norm (σ off by 0.08–0.22·σ_1 at n = 120: 1400–3900 times the
bound in float32, 10¹¹ times in float64; at n = 16384 the float32 bound is 7.8e−3, still ten
times below); a reduction that skips its last sweep (the last stage's) on the paper's spectra
by 18–1300 times the bound in float32 and 10¹⁰ times in float64 at n = 33–300. On ``random``
bands that fault mostly hides (0.03 of the bound at n = 64 and 0.5 at 100 in float32; 1.2 at 150
and 0.01 at 300 in float64: random triangular bands have singular vectors that vanish in the
trailing rows, so the entry the fault leaves is tiny): the spectra kinds are what find it, and
they are drawn up to n = 4096; the fault's effect relative to the bound falls with n (1300 at
n = 33, 23 at 300 for ``arithmetic`` in float32), so small verified shapes matter most.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .lapack import bdsqr_singular_values, gbbrd
from .layout import check_band

CHECK_NAME = "singular_values"
SHAPE_CHECK = "band_bidiag_output_shape"
FINITE_CHECK = "non_finite_output"
# C and the floor of n in C·max(n, 32)·ε; measured and justified in the module docstring.
BOUND_FACTOR = 4.0
BOUND_MIN_N = 32


@dataclass(frozen=True)
class Failure:
    """The first check a candidate's (d, e) failed: the fields of the evaluator's
    ``evaluator.report.CheckFailure`` (``shape`` is (n, BW))."""

    check: str
    shape: tuple[int, int]
    value: float | None
    bound: float | None
    detail: str


def machine_epsilon(dtype: type | np.dtype) -> float:
    """ε of a real dtype: 2⁻²³ (float32), 2⁻⁵² (float64) (NumPy's ``finfo.eps``, 2u)."""
    return float(np.finfo(np.dtype(dtype)).eps)


def bound(n: int, dtype: type | np.dtype) -> float:
    """The check's bound on max_i |σ̂_i − σ_i| / σ_1: :data:`BOUND_FACTOR` ·
    max(n, :data:`BOUND_MIN_N`) · ε."""
    return BOUND_FACTOR * max(n, BOUND_MIN_N) * machine_epsilon(dtype)


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
            f"{BOUND_FACTOR:g} * max(n, {BOUND_MIN_N}) * eps against DGBBRD + DBDSQR in float64",
        )  # fmt: skip
    return None
