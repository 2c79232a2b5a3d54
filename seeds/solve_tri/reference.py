"""The float64 (complex128) host reference of SOLVE_TRI (and of trsm_batched, the same batched
lower solve in four dtypes) and the measures its checks compare against, per
batch index (``evaluator.checks.solve_tri`` applies the bounds).

NumPy only (no SciPy): the path's folder is vendored into the loader, which must import every
module of it without the service's dependencies; ``tests/test_solve_tri.py`` checks the solve
against SciPy's ``solve_triangular``.

Arrays are batched as ``seeds.solve_tri.inputs`` views them: A (b3, b2, n, n), B and X
(b3, b2, n, k), row-major matrices.
"""

from __future__ import annotations

import numpy as np

# Per-row bound: 4·γ_{n+2}·max_j (|A⁻¹|·|A|·|X|)_ij (evaluator.checks.accuracy, Higham, Accuracy
# and Stability of Numerical Algorithms, 2nd ed., Thm 8.5: substitution in any summation order,
# blocked or not, is componentwise backward stable with |ΔA| ≤ γ_n·|A|). 4 and n + 2 cover a
# fused multiply-add or not, and the reference's own rounding.
FORWARD_SAFETY = 4.0
FLOAT32_UNIT_ROUNDOFF = 2.0**-24


def forward_substitution(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """X = A⁻¹·B in float64 (complex128 when ``a`` or ``b`` is complex) for every batch: ``a``
    (..., n, n), of which only the lower triangle is read (its strict upper triangle may be
    NaN), ``b`` (..., n, k); returns (..., n, k)."""
    wide = _wide(a, b)
    lower = np.tril(np.nan_to_num(np.asarray(a, dtype=wide)))
    x = np.array(b, dtype=wide)
    n = lower.shape[-1]
    for i in range(n):
        if i:
            x[..., i, :] -= np.einsum("...j,...jk->...k", lower[..., i, :i], x[..., :i, :])
        x[..., i, :] /= lower[..., i, i][..., None]
    return x


def _wide(a: np.ndarray, b: np.ndarray) -> type:
    """complex128 when ``a`` or ``b`` is complex, else float64."""
    return np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """X (..., n, k) and |A⁻¹|·|A|·|X| (..., n, k) in float64 (complex128 for X on complex
    inputs), per batch."""
    x = forward_substitution(a, b)
    lower = np.tril(np.nan_to_num(np.asarray(a, dtype=_wide(a, b))))
    n = lower.shape[-1]
    inverse = forward_substitution(lower, np.broadcast_to(np.eye(n), lower.shape))
    growth = np.abs(inverse) @ (np.abs(lower) @ np.abs(x))
    return x, growth


def _row_scale(x_ref: np.ndarray) -> np.ndarray:
    """max_j |x_ij| per row, 1 where a row is all zero."""
    scale = np.abs(x_ref).max(axis=-1)
    return np.where(scale > 0, scale, 1.0)


def row_relative_errors(x_hat: np.ndarray, x_ref: np.ndarray) -> np.ndarray:
    """max_j |x̂_ij − x_ij| / max_j |x_ij| for every row: (..., n) float64 (NaN where x̂ is);
    x̂ is widened to the reference's dtype (float64 or complex128)."""
    err = np.abs(np.asarray(x_hat, dtype=x_ref.dtype) - x_ref).max(axis=-1)
    return err / _row_scale(x_ref)


def row_error_bounds(
    n: int, x_ref: np.ndarray, growth: np.ndarray, u: float = FLOAT32_UNIT_ROUNDOFF
) -> np.ndarray:
    """Each row's bound on :func:`row_relative_errors`: 4·γ_{n+2}·max_j (|A⁻¹|·|A|·|X|)_ij /
    max_j |x_ij| for a solve of order ``n`` with unit roundoff ``u`` (float32's by default; the
    same bound covers complex arithmetic, ``evaluator.checks.accuracy``): (..., n) float64."""
    gamma = (n + 2) * u / (1 - (n + 2) * u)
    return FORWARD_SAFETY * gamma * growth.max(axis=-1) / _row_scale(x_ref)


def nmse(x_hat: np.ndarray, x_ref: np.ndarray) -> np.ndarray:
    """ggml's normalized mean squared error per matrix, Σ (x̂ − x)² / Σ x² over its n·k
    elements (test-backend-ops's ``nmse``, the CPU back end's output replaced by the float64
    reference): (...) float64; 0 where X and x̂ are both zero, Inf where only X is."""
    diff = np.asarray(x_hat, dtype=np.float64) - x_ref
    num = (diff**2).sum(axis=(-2, -1))
    den = (x_ref**2).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))
