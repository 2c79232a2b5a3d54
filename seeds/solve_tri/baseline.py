"""The vendor baseline for `solve_tri`: cuBLAS ``cublasStrsmBatched`` on the row-major data
(``seeds.cublas.VendorTrsmBatched``: Xᵀ·Aᵀ = Bᵀ, side=Right, uplo=Upper), after a strided copy
of B into X, since SOLVE_TRI writes X to its own tensor and cuBLAS solves in place. The copy is
part of what ggml would have to do with cuBLAS, so it is timed with it; it is skipped when X is
B (same pointer and strides).

Everything here launches on the bound stream and allocates only on the first call of a batch
count (``VendorTrsmBatched``'s pointer arrays), so a solve can be captured in a CUDA graph after
one call outside capture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cublas import VendorTrsmBatched
from .layout import LayoutError, check_launch, problem_of_arrays

# X ← B element by element for a [k, n, b2, b3] float32 tensor pair with byte strides.
_COPY_SOURCE = r"""
extern "C" __global__ void kernevo_copy_tensor(
    const float* b, float* x, int n, int k, int b2, long long count,
    long long nb_b1, long long nb_b2, long long nb_b3,
    long long nb_x1, long long nb_x2, long long nb_x3) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long c = e % k, r = (e / k) % n, m = e / ((long long)k * n);
    const long long i2 = m % b2, i3 = m / b2;
    const char* src = (const char*)b + i3 * nb_b3 + i2 * nb_b2 + r * nb_b1 + 4 * c;
    char* dst = (char*)x + i3 * nb_x3 + i2 * nb_x2 + r * nb_x1 + 4 * c;
    *(float*)dst = *(const float*)src;
  }
}
"""
_COPY_THREADS = 256
_COPY_MAX_BLOCKS = 4096


class CublasSolveTri:
    """SOLVE_TRI by cuBLAS: copy B into X (strided), then ``cublasStrsmBatched`` in place on X.

    Raises:
        ValueError: a dtype other than float32.
        OSError: libcublas cannot be loaded.
    """

    def __init__(self, dtype: str = "float32", stream: Any = None) -> None:
        import cupy

        self._cupy = cupy
        self._trsm = VendorTrsmBatched(dtype, stream)
        self._copy = cupy.RawKernel(_COPY_SOURCE, "kernevo_copy_tensor")
        self._stream = stream

    def set_stream(self, stream: Any) -> None:
        """Bind the copy and the solve to a CuPy stream (None: the legacy default stream)."""
        self._trsm.set_stream(stream)
        self._stream = stream

    def solve_raw(
        self,
        a_ptr: int,
        b_ptr: int,
        x_ptr: int,
        n: int,
        k: int,
        b2: int,
        b3: int,
        nb_a: Sequence[int],
        nb_b: Sequence[int],
        nb_x: Sequence[int],
    ) -> None:
        """The driver's ``solve_raw`` (``SolveTriDriver.solve_raw``) by cuBLAS, on the bound
        stream.

        Raises:
            LayoutError: what ``layout.check_launch`` refuses.
            ValueError: row strides cuBLAS cannot take (lda < n or ldb < k).
            RuntimeError: cuBLAS fails, or a new batch count under capture.
        """
        import numpy as np

        shape, sa, sb, sx = check_launch(a_ptr, b_ptr, x_ptr, (n, k, b2, b3), nb_a, nb_b, nb_x)
        if not (x_ptr == b_ptr and sx == sb):
            count = n * k * b2 * b3
            blocks = min(-(-count // _COPY_THREADS), _COPY_MAX_BLOCKS)
            args = (
                np.uint64(b_ptr), np.uint64(x_ptr), np.int32(n), np.int32(k), np.int32(b2),
                np.int64(count), *(np.int64(v) for v in (*sb, *sx)),
            )  # fmt: skip
            stream = self._stream if self._stream is not None else self._cupy.cuda.Stream.null
            with stream:
                self._copy((blocks,), (_COPY_THREADS,), args)
        self._trsm.solve_raw(a_ptr, x_ptr, *shape, sa, sx)

    def solve(self, a: Any, b: Any, out: Any = None) -> Any:
        """The driver's ``solve`` (CuPy float32 arrays, X returned) by cuBLAS, with no envelope.

        Raises:
            LayoutError: arrays that are not float32 or do not form a problem
                (``layout.problem_of_arrays``).
        """
        cupy = self._cupy
        out = cupy.empty(b.shape, dtype=cupy.float32) if out is None else out
        if any(array.dtype != cupy.float32 for array in (a, b, out)):
            raise LayoutError(
                f"solve_tri: arrays must be float32; got A {a.dtype}, B {b.dtype}, X {out.dtype}"
            )
        if out.shape != b.shape:
            raise LayoutError(f"solve_tri: X must have B's shape {b.shape}; got {out.shape}")
        shape, nb_a, nb_b = problem_of_arrays(
            a.shape, a.strides, b.shape, b.strides, a.dtype.itemsize
        )
        _, _, nb_x = problem_of_arrays(a.shape, a.strides, out.shape, out.strides, 4)
        self.solve_raw(a.data.ptr, b.data.ptr, out.data.ptr, *shape, nb_a, nb_b, nb_x)
        return out

    def close(self) -> None:
        """Release the cuBLAS handle and its buffers."""
        self._trsm.close()
