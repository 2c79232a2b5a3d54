"""Random TRSM problems whose exact solution stays bounded, plus one that grows on purpose.

Bounded growth (the default): diagonal magnitudes uniform in [1, 2] (random sign, or random phase
for complex), off-diagonals uniform in [-1, 1]/sqrt(m). With off-diagonals of that size the
solution of A·X = B stays O(1), so an error in any single row of X is visible against the
reference. The badly conditioned "growth" case takes diagonal magnitudes in [0.5, 1] and leaves
the off-diagonals unscaled in [-1, 1]: at m = 64, X then grows by about 1e5–1e6 down the rows
(still finite in float32). That is the situation of ggml's SOLVE_TRI tests, where a residual
check passes a kernel that never computed the small rows; here the per-row criterion decides.

The strict upper triangle of A is filled with NaN: TRSM must never read it.

Timing draws many bounded problems at once on the device (:func:`bounded_sets` with a
:class:`CounterRng`), from the same distributions, so every timed call gets inputs of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


def _uniform(rng: Any, shape: tuple[int, ...], complex_: bool) -> Any:
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


_MASK64 = 2**64 - 1


class CounterRng:
    """Uniform draws from a counter-based hash (SplitMix64's finalizer), with NumPy or CuPy.

    Draw number i of a stream is a pure function of (seed, i), evaluated elementwise, so the same
    code runs on the host (CPU tests) and on the device (timing refreshes its inputs there
    without cuRAND, which CuPy loads from a library the device machine may lack), and a seed
    reproduces every draw. ``uniform`` has numpy's ``Generator.uniform(low, high, size)``
    signature, so :func:`_uniform` takes either.
    """

    def __init__(self, xp: Any, seed: int) -> None:
        self.xp = xp
        # The stream's start: the seed spread over 64 bits by the golden-ratio increment.
        self._next = (seed * 0x9E3779B97F4A7C15) & _MASK64

    def uniform(self, low: float, high: float, size: tuple[int, ...]) -> Any:
        """float64 values uniform in [low, high) of shape ``size``, from the next draws."""
        xp = self.xp
        count = int(np.prod(size))
        x = xp.arange(count, dtype=xp.uint64) + xp.uint64(self._next)
        self._next = (self._next + count) & _MASK64
        x = (x ^ (x >> xp.uint64(30))) * xp.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> xp.uint64(27))) * xp.uint64(0x94D049BB133111EB)
        x = x ^ (x >> xp.uint64(31))
        unit = (x >> xp.uint64(11)).astype(xp.float64) * 2.0**-53
        return (low + (high - low) * unit).reshape(size)


def bounded_sets(rng: Any, m: int, n: int, dtype: str, count: int) -> tuple[Any, Any]:
    """``count`` bounded problems at once, as :func:`make_problem` draws them (diagonal magnitudes
    in [1, 2] with a random sign or phase, off-diagonals uniform in [-1, 1]/sqrt(m), B uniform in
    [-1, 1], strict upper triangle NaN), in the array module of ``rng`` (a :class:`CounterRng`).

    Returns A as (count, m·m) and B as (count, m·n) arrays of ``dtype``: row k is set k in
    Fortran order, ready to be written into device buffers in place.
    """
    xp = rng.xp
    np_dtype = NUMPY_DTYPES[dtype]
    complex_ = np.issubdtype(np_dtype, np.complexfloating)
    # Built transposed, at[k, j, i] = A_k(i, j), so that row-major memory is A_k's column order.
    rows = xp.arange(m)
    below = rows[:, None] > rows[None, :]  # at[j, i] with j > i: the strict upper triangle of A
    off = _uniform(rng, (count, m, m), complex_) / np.sqrt(m)
    magnitude = rng.uniform(1.0, 2.0, (count, m))
    turn = rng.uniform(0.0, 1.0, (count, m))
    phase = xp.exp(2j * np.pi * turn) if complex_ else xp.where(turn < 0.5, -1.0, 1.0)
    at = xp.where(below, xp.nan, xp.where(below.T, off, 0))
    at[:, rows, rows] = magnitude * phase
    bt = _uniform(rng, (count, n, m), complex_)
    return at.astype(np_dtype).reshape(count, m * m), bt.astype(np_dtype).reshape(count, m * n)
