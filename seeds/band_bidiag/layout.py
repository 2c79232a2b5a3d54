"""Band storage of the `band_bidiag` path: LAPACK's upper band layout (the op's input, what
?gbbrd takes) and the padded layout the kernel works in (room for the bulges).

- **LAPACK upper band** (``band``, shape (BW + 1, n), column-major): ``band[BW + i − j, j] =
  a_ij`` for max(0, j − BW) ≤ i ≤ j, ldab = BW + 1 (?gbbrd with kl = 0, ku = BW). Entries of
  the first BW columns above row 0 are outside the matrix and never read.
- **Padded** (``ab``, shape (ldab, n), column-major): ``ab[ku + i − j, j] = a_ij`` with
  ``ku = 2·BWp − 1`` and ``ldab = 3·BWp``, BWp = max(min(BW, n − 1), 1). During a stage
  (b, t) fill reaches b + t ≤ 2·BW − 1 above the diagonal and t ≤ BW − 1 below it
  (``schedule``): rows 0..BW − 2 of a column hold the upper bulge, rows BW − 1..2·BW − 1 the
  band, rows 2·BW..3·BW − 2 the lower bulge, and the last row is padding (a column is then 3·BW
  scalars: 384 bytes at BW = 32 in float32, whole 128-byte lines). Everything outside the band
  is zero on entry. After the reduction d_i = ``ab[ku, i]`` and e_i = ``ab[ku − 1, i + 1]``.

Functions take NumPy or CuPy arrays (``xp``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .schedule import effective_bandwidth


@dataclass(frozen=True)
class PaddedLayout:
    """The kernel's storage for an n×n band of bandwidth ``bw`` (as given) and ``bw_eff`` =
    min(bw, n − 1) (what is reduced)."""

    n: int
    bw: int
    bw_eff: int
    ku: int
    ldab: int

    @classmethod
    def of(cls, n: int, bw: int) -> PaddedLayout:
        """The padded layout for (n, bw).

        Raises:
            ValueError: n < 1 or bw < 0.
        """
        eff = effective_bandwidth(n, bw)
        room = max(eff, 1)
        return cls(n=n, bw=bw, bw_eff=eff, ku=2 * room - 1, ldab=3 * room)


def check_band(band: Any, n: int | None = None) -> tuple[int, int]:
    """(n, BW) of a LAPACK upper band array of shape (BW + 1, n).

    Raises:
        ValueError: not 2-D, or no column, or ``n`` given and different.
    """
    if band.ndim != 2 or band.shape[0] < 1 or band.shape[1] < 1:
        raise ValueError(f"band must be (BW + 1, n) with n >= 1; got shape {band.shape}")
    bw, cols = band.shape[0] - 1, band.shape[1]
    if n is not None and cols != n:
        raise ValueError(f"band has {cols} columns, expected n = {n}")
    return cols, bw


def pack(band: Any, xp: Any = np, dtype: Any = None) -> tuple[Any, PaddedLayout]:
    """The padded array (ldab × n, Fortran order, zeros outside the band) of a LAPACK upper band
    ``band`` ((BW + 1) × n), and its layout. Rows of ``band`` past the effective bandwidth
    (BW ≥ n) hold entries outside the matrix and are dropped.

    Raises:
        ValueError: ``band`` is not a (BW + 1) × n array.
    """
    n, bw = check_band(band)
    layout = PaddedLayout.of(n, bw)
    ab = xp.zeros((layout.ldab, n), dtype=dtype or band.dtype, order="F")
    eff = layout.bw_eff
    # band row bw + i − j  →  padded row ku + i − j, for i − j in [−eff, 0]
    ab[layout.ku - eff : layout.ku + 1, :] = band[bw - eff : bw + 1, :]
    return ab, layout


def bidiagonal(ab: Any, layout: PaddedLayout) -> tuple[Any, Any]:
    """(d, e) of a reduced padded array: d (n,) the diagonal, e (n − 1,) the superdiagonal."""
    return ab[layout.ku, :].copy(), ab[layout.ku - 1, 1:].copy()


def dense_from_band(band: np.ndarray) -> np.ndarray:
    """The n×n upper banded matrix a LAPACK upper band array holds (NumPy)."""
    n, bw = check_band(band)
    a = np.zeros((n, n), dtype=band.dtype)
    for off in range(min(bw, n - 1) + 1):  # superdiagonal `off`: a[j − off, j] = band[bw − off, j]
        idx = np.arange(off, n)
        a[idx - off, idx] = band[bw - off, off:]
    return a


def band_from_dense(a: np.ndarray, bw: int) -> np.ndarray:
    """The LAPACK upper band array ((bw + 1) × n, Fortran order) of the upper band of ``a``
    (entries outside it are dropped; outside-matrix slots are zero).

    Raises:
        ValueError: ``a`` not square, or bw < 0.
    """
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"expected a square matrix; got shape {a.shape}")
    if bw < 0:
        raise ValueError(f"bandwidth must be >= 0; got {bw}")
    n = a.shape[0]
    band = np.zeros((bw + 1, n), dtype=a.dtype, order="F")
    for off in range(min(bw, n - 1) + 1):
        idx = np.arange(off, n)
        band[bw - off, off:] = a[idx - off, idx]
    return band
