"""The vendor baseline for `trsm_small_batched`: cuBLAS ``cublas?trsmBatched`` (s, d, c, z) on
the packed row-major batch (``seeds.cublas.VendorTrsmBatched``: Xᵀ·Aᵀ = Bᵀ, side=Right,
uplo=Upper), in place, with its pointer arrays built once per (addresses, shape) outside the
timed region and every later call capturable in a CUDA graph (``pointers="cached"``).
"""

from __future__ import annotations

from typing import Any

from ..cublas import VendorTrsmBatched


class CublasBatchedTrsm:
    """``trsm_batched`` by cuBLAS: ``solve_raw(a_ptr, b_ptr, m, n, batch)`` on the bound stream.

    Raises:
        ValueError: an unknown dtype.
        OSError: libcublas cannot be loaded.
    """

    def __init__(self, dtype: str, stream: Any = None) -> None:
        import numpy as np

        self._itemsize = np.dtype(dtype).itemsize
        self._trsm = VendorTrsmBatched(dtype, stream, pointers="cached")

    def set_stream(self, stream: Any) -> None:
        """Bind the solves to a CuPy stream (None: the legacy default stream)."""
        self._trsm.set_stream(stream)

    def solve_raw(self, a_ptr: int, b_ptr: int, m: int, n: int, batch: int) -> None:
        """B_i ← A_i⁻¹·B_i for i < ``batch``: A (batch, m, m) at ``a_ptr`` and B (batch, m, n) at
        ``b_ptr``, packed and row-major, on the bound stream.

        Raises:
            ValueError: a size below 1.
            RuntimeError: cuBLAS fails, or a first call with these addresses under capture.
        """
        size = self._itemsize
        nb_a = (m * size, m * m * size, m * m * batch * size)
        nb_b = (n * size, m * n * size, m * n * batch * size)
        self._trsm.solve_raw(a_ptr, b_ptr, m, n, batch, 1, nb_a, nb_b)

    def solve(self, a: Any, b: Any) -> Any:
        """:meth:`solve_raw` on C-contiguous CuPy arrays ``a`` (batch, m, m) and ``b``
        (batch, m, n) of the baseline's dtype; returns ``b``."""
        batch, m, n = b.shape
        self.solve_raw(a.data.ptr, b.data.ptr, m, n, batch)
        return b

    def close(self) -> None:
        """Release the cuBLAS handle and the pointer arrays."""
        self._trsm.close()
