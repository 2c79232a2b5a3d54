"""The `band_bidiag` baseline and library fallback: LAPACK ?gbbrd on the host (``lapack``),
in the candidate's own precision (SGBBRD for float32, DGBBRD for float64).

Not the GPU ``seeds.spec.Baseline`` protocol (stream, raw device pointers): the vendor routine
here is CPU code, so it is timed by wall clock on the host, once per (n, BW, dtype) (issue 8:
27 s at n = 16384, BW = 32 on the machine the issue measured). ?gbbrd is LAPACK's reference
implementation, single-threaded (plane rotations, level-1 BLAS at most): the speedups measured
against it are against one CPU core, and say so.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..spec import check_dtype
from .lapack import gbbrd
from .spec import DTYPES


class LapackGbbrd:
    """?gbbrd in ``dtype`` (``float32`` → SGBBRD, ``float64`` → DGBBRD).

    Raises:
        UnknownDtypeError: a dtype other than float32, float64.
    """

    def __init__(self, dtype: str) -> None:
        self.dtype = check_dtype(dtype, DTYPES)

    def reduce(self, band: Any) -> tuple[np.ndarray, np.ndarray]:
        """(d, e) of the upper band ``band`` ((BW + 1) × n, LAPACK layout; NumPy, or CuPy,
        which is copied to the host) in this baseline's dtype; ``band`` is not modified."""
        host = band.get() if hasattr(band, "get") else np.asarray(band)
        return gbbrd(np.asarray(host, dtype=self.dtype))

    def timed_reduce(self, band: Any) -> tuple[float, np.ndarray, np.ndarray]:
        """(wall-clock seconds, d, e) of one ?gbbrd on ``band`` (host copy and dtype conversion
        not counted), for a caller that wants the timed call's result too."""
        host = band.get() if hasattr(band, "get") else np.asarray(band)
        host = np.asarray(host, dtype=self.dtype, order="F")
        start = time.perf_counter()
        d, e = gbbrd(host)
        return time.perf_counter() - start, d, e

    def time(self, band: Any) -> float:
        """Wall-clock seconds of one ?gbbrd on ``band`` (:meth:`timed_reduce`'s seconds)."""
        return self.timed_reduce(band)[0]

    def close(self) -> None:
        """Nothing to release (kept for the baseline protocol's shape)."""
