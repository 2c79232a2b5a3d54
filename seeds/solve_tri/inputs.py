"""Seeded SOLVE_TRI problems on the host: ggml tensors in guarded buffers, different data in every
batch, strides that are not the packed ones.

Two kinds of data (:data:`KINDS`), drawn independently for every batch index (i2, i3):

- ``bounded``: diagonal magnitudes uniform in [1, 2] with a random sign, strict lower triangle
  uniform in [−1, 1]/√n, B uniform in [−1, 1]. X stays O(1) down the rows (the off-diagonals'
  scale keeps the growth bounded, as in ``evaluator.inputs``), so an error in any one row shows
  against the float64 reference.
- ``ggml``: ggml's own test inputs (test-backend-ops, SOLVE_TRI): A's lower triangle, diagonal
  included, uniform in [0.1, 1], B uniform in [−1, 1]. X grows like 1e7 down 64 rows and
  overflows float32 past n ≈ 300, so these serve the NMSE comparison at n ≤ 64 only.

The strict upper triangle of every A is NaN (the kernel must never read it).

Layouts (:data:`LAYOUTS`), each tensor with strides of its own drawn from the seed:

- ``packed``: ggml's packed strides;
- ``padded``: every row followed by 1–8 unused floats, every matrix by 1–40, every b3 slice by
  1–40 (nb1 > 4·cols, nb2 > nb1·rows, nb3 > nb2·b2);
- ``batch_swapped``: the same padding with b3 the inner batch dimension (nb2 > nb3·b3), a
  layout ggml's permuted views give; a kernel that assumes b2 is inner reads the wrong matrix.

Every tensor sits in a buffer of its own between two guard bands of ``GUARD_ELEMENTS`` floats,
and every unused float inside its span (row, matrix and batch padding) holds the guard value too:
tagged signaling NaNs (``GUARD_BITS``, the float32 value of
``evaluator.checks.integrity.guard_pattern``). A read of padding brings NaN into X; a write
there changes the exact bytes (``evaluator.checks.solve_tri``). X's own elements start as NaN
(``POISON_BITS``): an unwritten element stays non-finite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .layout import FLOAT_BYTES, Strides, packed_strides, span_bytes

KINDS: tuple[str, ...] = ("bounded", "ggml")
LAYOUTS: tuple[str, ...] = ("packed", "padded", "batch_swapped")
GUARD_ELEMENTS = 256
GUARD_BITS = 0x7F90_4B56
POISON_BITS = 0x7FC0_0000
_KIND_STREAM = {"bounded": 0, "ggml": 1}
_LAYOUT_STREAM = 0x57A1DE


def _filled(count: int, bits: int) -> np.ndarray:
    """``count`` float32 values with the bit pattern ``bits``."""
    return np.full(count, bits, dtype=np.uint32).view(np.float32)


@dataclass(frozen=True)
class Tensor:
    """A float32 ggml tensor [cols, rows, b2, b3] inside a host buffer.

    ``buffer``: 1-D float32, the guard bands included; ``offset``: the index in ``buffer`` of the
    element (0, 0) of batch (0, 0); ``ne``: (cols, rows, b2, b3); ``nb``: (nb1, nb2, nb3) bytes.
    """

    buffer: np.ndarray
    offset: int
    ne: tuple[int, int, int, int]
    nb: Strides

    def view(self, buffer: np.ndarray | None = None) -> np.ndarray:
        """The tensor as a (b3, b2, rows, cols) array viewing ``buffer`` (default: its own; a
        buffer of the same size read back from the device)."""
        data = self.buffer if buffer is None else buffer
        if data.shape != self.buffer.shape or data.dtype != np.float32:
            raise ValueError(f"buffer must be float32 of shape {self.buffer.shape}")
        cols, rows, b2, b3 = self.ne
        nb1, nb2, nb3 = self.nb
        return np.lib.stride_tricks.as_strided(
            data[self.offset :],
            shape=(b3, b2, rows, cols),
            strides=(nb3, nb2, nb1, FLOAT_BYTES),
            writeable=False,
        )

    def footprint(self) -> np.ndarray:
        """A boolean mask over ``buffer``: True at the tensor's own elements."""
        cols, rows, b2, b3 = self.ne
        nb1, nb2, nb3 = (s // FLOAT_BYTES for s in self.nb)
        i3, i2, r, c = np.meshgrid(
            np.arange(b3), np.arange(b2), np.arange(rows), np.arange(cols), indexing="ij"
        )
        mask = np.zeros(self.buffer.shape, dtype=bool)
        mask[self.offset + i3 * nb3 + i2 * nb2 + r * nb1 + c] = True
        return mask

    def batch_of(self, index: int) -> tuple[int, int] | None:
        """(i2, i3) of the matrix whose span (first to last element) holds buffer element
        ``index``; ``None`` outside every matrix's span (guard bands, batch padding)."""
        cols, rows, b2, b3 = self.ne
        span = span_bytes(cols, rows, 1, 1, self.nb) // FLOAT_BYTES
        nb1, nb2, nb3 = (s // FLOAT_BYTES for s in self.nb)
        for i3 in range(b3):
            for i2 in range(b2):
                start = self.offset + i3 * nb3 + i2 * nb2
                if start <= index < start + span:
                    return i2, i3
        return None


def _strides(rng: Any, cols: int, rows: int, b2: int, b3: int, layout: str) -> Strides:
    """(nb1, nb2, nb3) bytes of a [cols, rows, b2, b3] tensor in ``layout``."""
    if layout == "packed":
        return packed_strides(cols, rows, b2)
    row_pad, mat_pad, batch_pad = (int(v) for v in rng.integers([1, 1, 1], [9, 41, 41]))
    nb1 = (cols + row_pad) * FLOAT_BYTES
    inner = nb1 * rows + mat_pad * FLOAT_BYTES
    if layout == "padded":
        return nb1, inner, inner * b2 + batch_pad * FLOAT_BYTES
    return nb1, inner * b3 + batch_pad * FLOAT_BYTES, inner  # batch_swapped: b3 inner


def _tensor(values: np.ndarray, nb: Strides, fill_bits: int = GUARD_BITS) -> Tensor:
    """``values`` (b3, b2, rows, cols) stored with strides ``nb`` in a guarded buffer whose
    unused floats hold ``fill_bits``."""
    b3, b2, rows, cols = values.shape
    span = span_bytes(cols, rows, b2, b3, nb) // FLOAT_BYTES
    buffer = _filled(GUARD_ELEMENTS + span + GUARD_ELEMENTS, GUARD_BITS)
    tensor = Tensor(buffer, GUARD_ELEMENTS, (cols, rows, b2, b3), nb)
    target = np.lib.stride_tricks.as_strided(
        buffer[GUARD_ELEMENTS:],
        shape=values.shape,
        strides=(nb[2], nb[1], nb[0], FLOAT_BYTES),
    )
    target[...] = values
    return tensor


@dataclass(frozen=True)
class Problem:
    """One SOLVE_TRI problem: A [n, n, b2, b3], B [k, n, b2, b3] and the output X [k, n, b2, b3]
    (poisoned; ``x is b`` for an in-place solve), in the layouts named by ``layout``."""

    a: Tensor
    b: Tensor
    x: Tensor
    kind: str
    seed: int
    layout: str

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(n, k, b2, b3)."""
        k, n, b2, b3 = self.b.ne
        return n, k, b2, b3

    @property
    def in_place(self) -> bool:
        """Whether X is B (same buffer, same strides)."""
        return self.x is self.b


def draw_matrices(
    shape: tuple[int, int, int, int], seed: int, kind: str = "bounded"
) -> tuple[np.ndarray, np.ndarray]:
    """A (b3, b2, n, n) and B (b3, b2, n, k) float32 arrays of ``kind`` (module docstring),
    every batch drawn on its own, A's strict upper triangle NaN.

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown solve_tri input kind {kind!r}; known: {', '.join(KINDS)}")
    n, k, b2, b3 = shape
    rng = np.random.default_rng([seed, *shape, _KIND_STREAM[kind]])
    rows = np.arange(n)
    upper = rows[:, None] < rows[None, :]
    diag = rows[:, None] == rows[None, :]
    if kind == "bounded":
        a = rng.uniform(-1.0, 1.0, (b3, b2, n, n)) / np.sqrt(n)
        magnitude = rng.uniform(1.0, 2.0, (b3, b2, n)) * rng.choice([-1.0, 1.0], (b3, b2, n))
        a = np.where(diag, magnitude[..., None], a)
    else:
        a = rng.uniform(0.1, 1.0, (b3, b2, n, n))
    a = np.where(upper, np.nan, a)
    b = rng.uniform(-1.0, 1.0, (b3, b2, n, k))
    return a.astype(np.float32), b.astype(np.float32)


def make_problem(
    shape: tuple[int, int, int, int],
    seed: int,
    kind: str = "bounded",
    layout: str = "padded",
    in_place: bool = False,
) -> Problem:
    """A fresh problem of ``shape`` (n, k, b2, b3): data of ``kind``, each of A, B and X with
    strides of its own in ``layout`` (module docstring), X poisoned with NaN, or X = B when
    ``in_place``.

    Raises:
        ValueError: unknown ``kind`` or ``layout``.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown solve_tri layout {layout!r}; known: {', '.join(LAYOUTS)}")
    n, k, b2, b3 = shape
    a_values, b_values = draw_matrices(shape, seed, kind)
    rng = np.random.default_rng([seed, *shape, _LAYOUT_STREAM])
    a = _tensor(a_values, _strides(rng, n, n, b2, b3, layout))
    b = _tensor(b_values, _strides(rng, k, n, b2, b3, layout))
    if in_place:
        x = b
    else:
        poison = _filled(b3 * b2 * n * k, POISON_BITS).reshape(b3, b2, n, k)
        x = _tensor(poison, _strides(rng, k, n, b2, b3, layout))
    return Problem(a, b, x, kind, seed, layout)
