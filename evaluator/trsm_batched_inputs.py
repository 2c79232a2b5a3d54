"""Seeded ``trsm_batched`` problems: a batch of A_i (m×m) and B_i (m×n), packed and row-major,
different data in every batch index, drawn as ``evaluator.inputs.bounded_sets`` draws trsm's
bounded problems (diagonal magnitudes in [1, 2] with a random sign or phase, strict lower
triangle uniform in [−1, 1]/√m, B uniform in [−1, 1], strict upper triangle NaN), so X stays O(1)
down the rows and an error in any one row shows against the reference.

A problem's buffers are its A and its B each between guard bands (one set of a
:class:`~evaluator.timing.SetLayout`, payload-tagged NaNs around it): a read past a matrix
brings NaN into X, a write past one changes the exact bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluator.inputs import NUMPY_DTYPES, CounterRng, bounded_sets
from evaluator.timing import SetLayout

TrsmBatchedShape = tuple[int, int, int]


def draw_sets(rng: CounterRng, shape: TrsmBatchedShape, dtype: str, count: int) -> tuple[Any, Any]:
    """``count`` sets of bounded problems at ``shape`` (m, n, batch) in the array module of
    ``rng``: A (count, batch·m·m) and B (count, batch·m·n) of ``dtype``, each row one set's
    packed batch of row-major matrices, every matrix drawn on its own."""
    m, n, batch = shape
    a_cols, b_cols = bounded_sets(rng, m, n, dtype, count * batch)  # column-major rows
    a = a_cols.reshape(count * batch, m, m).transpose(0, 2, 1)
    b = b_cols.reshape(count * batch, n, m).transpose(0, 2, 1)
    return a.reshape(count, batch * m * m), b.reshape(count, batch * m * n)


@dataclass(frozen=True)
class BatchedProblem:
    """One problem: ``a`` (batch, m, m) and ``b`` (batch, m, n) host arrays of the dtype, the
    ``seed`` they were drawn from (``set_index``: which set of that draw, 0 in verification)."""

    a: np.ndarray
    b: np.ndarray
    seed: int
    set_index: int = 0

    @property
    def shape(self) -> TrsmBatchedShape:
        """(m, n, batch)."""
        batch, m, n = self.b.shape
        return m, n, batch

    @property
    def layouts(self) -> tuple[SetLayout, SetLayout]:
        """The guarded layouts of A's and B's buffers (one set each)."""
        size = self.a.dtype.itemsize
        return SetLayout(1, self.a.size, size), SetLayout(1, self.b.size, size)

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """A's and B's flat buffers: the packed values between guard bands."""
        found = []
        for layout, values in zip(self.layouts, (self.a, self.b), strict=True):
            buffer = layout.allocate(np, self.a.dtype)
            layout.payload(buffer)[0] = values.ravel()
            found.append(buffer)
        return found[0], found[1]


def make_problem(shape: TrsmBatchedShape, dtype: str, seed: int) -> BatchedProblem:
    """The bounded problem of ``seed`` at ``shape`` (m, n, batch) in ``dtype``.

    Raises:
        KeyError: an unknown dtype.
    """
    m, n, batch = shape
    a, b = draw_sets(CounterRng(np, seed), shape, dtype, 1)
    np_dtype = NUMPY_DTYPES[dtype]
    return BatchedProblem(
        np.ascontiguousarray(a.reshape(batch, m, m), dtype=np_dtype),
        np.ascontiguousarray(b.reshape(batch, m, n), dtype=np_dtype),
        seed,
    )
