"""Random TRSM problems whose exact solution stays bounded, plus one that grows on purpose.

Bounded growth (the default): diagonal magnitudes uniform in [1, 2] (random sign, or random phase
for complex), off-diagonals uniform in [-1, 1]/sqrt(m). With off-diagonals of that size the
solution of A·X = B stays O(1), so an error in any single row of X is visible against the
reference. The badly conditioned "growth" case takes diagonal magnitudes in [0.5, 1] and leaves
the off-diagonals unscaled in [-1, 1]: at m = 64, X then grows by about 1e5–1e6 down the rows
(still finite in float32). That is the situation of ggml's SOLVE_TRI tests, where a residual
check passes a kernel that never computed the small rows; here the per-row criterion decides.

The strict upper triangle of A is filled with NaN: TRSM must never read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NUMPY_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
}


@dataclass(frozen=True)
class Problem:
    """One TRSM problem in the candidate's dtype: A (m×m) and B (m×n), both Fortran order."""

    a: np.ndarray
    b: np.ndarray
    kind: str
    seed: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.b.shape  # type: ignore[return-value]


def _uniform(rng: np.random.Generator, shape: tuple[int, int], complex_: bool) -> np.ndarray:
    if complex_:
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)) / np.sqrt(2)
    return rng.uniform(-1, 1, shape)


def make_problem(m: int, n: int, dtype: str, seed: int, kind: str = "bounded") -> Problem:
    """A fresh random problem of shape (m, n) in ``dtype``; ``kind`` is bounded or growth.

    Raises:
        ValueError: unknown ``kind`` or ``dtype``.
    """
    if kind not in ("bounded", "growth"):
        raise ValueError(f"unknown problem kind {kind!r}")
    np_dtype = NUMPY_DTYPES[dtype]
    complex_ = np.issubdtype(np_dtype, np.complexfloating)
    rng = np.random.default_rng([seed, m, n, 1 if kind == "growth" else 0])
    scale = 1.0 if kind == "growth" else 1.0 / np.sqrt(m)
    a = np.tril(_uniform(rng, (m, m), complex_) * scale, -1)
    magnitude = rng.uniform(0.5, 1.0, m) if kind == "growth" else rng.uniform(1.0, 2.0, m)
    phase = np.exp(2j * np.pi * rng.uniform(0, 1, m)) if complex_ else rng.choice([-1.0, 1.0], m)
    a[np.diag_indices(m)] = magnitude * phase
    a[np.triu_indices(m, 1)] = np.nan
    b = _uniform(rng, (m, n), complex_)
    return Problem(np.asfortranarray(a, np_dtype), np.asfortranarray(b, np_dtype), kind, seed)
