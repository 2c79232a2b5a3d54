"""cuBLAS through ctypes, for every path: the library's loading, ?trsm (the vendor baseline
each TRSM path is timed against), ?trsmBatched (solve_tri's and trsm_small_batched's) and ?gemm
(trsm_blocked's block-row updates).

CuPy's cuBLAS wrappers raise under CUDA stream capture, so timing cuBLAS over a replayed graph
calls libcublas's ``cublas?trsm_v2`` and ``cublas?gemm_v2`` directly on a handle bound to the
capturing stream (docs/CONTRACTS.md, docs/DESIGN.md "Timing").
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from typing import Any

# cublas_api.h enums: CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT.
_SIDE_LEFT, _FILL_LOWER, _OP_N, _DIAG_NON_UNIT = 0, 0, 0, 0

_ROUTINES = {
    "float32": ("cublasStrsm_v2", ctypes.c_float * 1),
    "float64": ("cublasDtrsm_v2", ctypes.c_double * 1),
    "complex64": ("cublasCtrsm_v2", ctypes.c_float * 2),
    "complex128": ("cublasZtrsm_v2", ctypes.c_double * 2),
}


def load_libcublas() -> ctypes.CDLL:
    """libcublas as already loaded by CuPy, else from the nvidia-cublas wheel or CUDA_HOME."""
    # CuPy's own binding loads libcublas into the process; dlopen then finds it by soname.
    with contextlib.suppress(ImportError, OSError):
        import cupy_backends.cuda.libs.cublas  # noqa: F401
    candidates = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
    for root in (os.environ.get("CUDA_HOME", "/usr/local/cuda"),):
        candidates += sorted(glob.glob(os.path.join(root, "lib64", "libcublas.so*")))
    try:
        import nvidia  # the namespace of NVIDIA's wheels: nvidia/cublas/lib or nvidia/cu13/lib

        for path in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(path, "*", "lib", "libcublas.so*")))
            candidates += sorted(glob.glob(os.path.join(path, "cu*", "*", "lib", "libcublas.so*")))
    except ImportError:
        pass
    errors = []
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            errors.append(str(exc))
    raise OSError("libcublas not found: " + "; ".join(errors[:3]))


class VendorTrsm:
    """cuBLAS ?trsm (side=L, uplo=L, trans=N, diag=N, alpha=1) on one handle and stream.

    Raises:
        OSError: libcublas cannot be loaded.
        RuntimeError: a cuBLAS call returns a non-zero status.
    """

    def __init__(self, dtype: str, stream: Any = None) -> None:
        self._lib = load_libcublas()
        name, alpha_type = _ROUTINES[dtype]
        self._fn = getattr(self._lib, name)
        self._fn.restype = ctypes.c_int
        self._alpha = alpha_type(1.0) if alpha_type._length_ == 1 else alpha_type(1.0, 0.0)
        self._handle = ctypes.c_void_p()
        self._check(self._lib.cublasCreate_v2(ctypes.byref(self._handle)), "cublasCreate_v2")
        self.set_stream(stream)

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} returned cuBLAS status {status}")

    def set_stream(self, stream: Any) -> None:
        """Bind the handle to a CuPy stream (None: the legacy default stream)."""
        ptr = 0 if stream is None else stream.ptr
        self._check(self._lib.cublasSetStream_v2(self._handle, ctypes.c_void_p(ptr)), "SetStream")

    def solve_raw(self, a_ptr: int, b_ptr: int, m: int, n: int, lda: int, ldb: int) -> None:
        """B ← A⁻¹·B on raw device pointers (column-major), on the bound stream."""
        self._check(
            self._fn(
                self._handle,
                _SIDE_LEFT,
                _FILL_LOWER,
                _OP_N,
                _DIAG_NON_UNIT,
                ctypes.c_int(m),
                ctypes.c_int(n),
                self._alpha,
                ctypes.c_void_p(a_ptr),
                ctypes.c_int(lda),
                ctypes.c_void_p(b_ptr),
                ctypes.c_int(ldb),
            ),  # fmt: skip
            "trsm",
        )

    def solve(self, a: Any, b: Any) -> Any:
        """Overwrite Fortran-ordered ``b`` (m×n) with A⁻¹·B for Fortran-ordered lower ``a``."""
        m, n = b.shape
        self.solve_raw(a.data.ptr, b.data.ptr, m, n, m, m)
        return b

    def close(self) -> None:
        """Destroy the handle."""
        if self._handle:
            self._lib.cublasDestroy_v2(self._handle)
            self._handle = ctypes.c_void_p()


_GEMM_ROUTINES = {
    "float32": ("cublasSgemm_v2", ctypes.c_float * 1),
    "float64": ("cublasDgemm_v2", ctypes.c_double * 1),
    "complex64": ("cublasCgemm_v2", ctypes.c_float * 2),
    "complex128": ("cublasZgemm_v2", ctypes.c_double * 2),
}
# cuBLAS's recommended user workspace on Hopper (cuBLAS docs, cublasSetWorkspace): set
# explicitly so that a captured GEMM never asks the library to allocate.
_GEMM_WORKSPACE_BYTES = 32 * 1024 * 1024


class VendorGemm:
    """cuBLAS ?gemm (no transposes, column-major) with alpha, beta in {−1, 0, 1} on one handle,
    its own 32 MiB workspace, and the stream of the last :meth:`set_stream`.

    Raises:
        OSError: libcublas cannot be loaded.
        RuntimeError: a cuBLAS call returns a non-zero status.
    """

    def __init__(self, dtype: str) -> None:
        import cupy

        self._lib = load_libcublas()
        name, self._scalar = _GEMM_ROUTINES[dtype]
        self._fn = getattr(self._lib, name)
        self._fn.restype = ctypes.c_int
        self._workspace = cupy.empty(_GEMM_WORKSPACE_BYTES, dtype=cupy.uint8)
        self._handle = ctypes.c_void_p()
        self._stream_ptr: int | None = None
        VendorTrsm._check(self._lib.cublasCreate_v2(ctypes.byref(self._handle)), "cublasCreate_v2")

    def _value(self, x: float) -> Any:
        return self._scalar(x) if self._scalar._length_ == 1 else self._scalar(x, 0.0)

    def set_stream(self, stream_ptr: int) -> None:
        """Bind the handle to the stream at ``stream_ptr`` (0: legacy default) and its workspace
        (cublasSetStream resets the workspace to the library's pool, so it is set again)."""
        if stream_ptr == self._stream_ptr:
            return
        lib, handle = self._lib, self._handle
        VendorTrsm._check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(stream_ptr)), "SetStream")
        VendorTrsm._check(
            lib.cublasSetWorkspace_v2(
                handle,
                ctypes.c_void_p(self._workspace.data.ptr),
                ctypes.c_size_t(_GEMM_WORKSPACE_BYTES),
            ),
            "SetWorkspace",
        )
        self._stream_ptr = stream_ptr

    def gemm(
        self, m: int, n: int, k: int, alpha: float, a: int, lda: int, b: int, ldb: int,
        beta: float, c: int, ldc: int,
    ) -> None:  # fmt: skip
        """C ← alpha·A·B + beta·C on raw device pointers (A m×k, B k×n, C m×n, column-major),
        on the bound stream."""
        VendorTrsm._check(
            self._fn(
                self._handle,
                _OP_N,
                _OP_N,
                ctypes.c_int(m),
                ctypes.c_int(n),
                ctypes.c_int(k),
                self._value(alpha),
                ctypes.c_void_p(a),
                ctypes.c_int(lda),
                ctypes.c_void_p(b),
                ctypes.c_int(ldb),
                self._value(beta),
                ctypes.c_void_p(c),
                ctypes.c_int(ldc),
            ),  # fmt: skip
            "gemm",
        )

    def close(self) -> None:
        """Destroy the handle."""
        if self._handle:
            self._lib.cublasDestroy_v2(self._handle)
            self._handle = ctypes.c_void_p()


# cublas_api.h enums for the batched solve on row-major data: CUBLAS_SIDE_RIGHT,
# CUBLAS_FILL_MODE_UPPER.
_SIDE_RIGHT, _FILL_UPPER = 1, 1
_BATCHED_ROUTINES = {
    "float32": ("cublasStrsmBatched", ctypes.c_float * 1),
    "float64": ("cublasDtrsmBatched", ctypes.c_double * 1),
    "complex64": ("cublasCtrsmBatched", ctypes.c_float * 2),
    "complex128": ("cublasZtrsmBatched", ctypes.c_double * 2),
}
_ITEMSIZE = {"float32": 4, "float64": 8, "complex64": 8, "complex128": 16}
# The pointer arrays' filler: entry i = i3 * b2 + i2 of each array is the address of matrix
# (i2, i3) of its tensor (byte strides, so any dtype).
_BATCH_POINTERS_SOURCE = r"""
extern "C" __global__ void kernevo_batch_pointers(
    unsigned long long a, unsigned long long x, long long nb_a2, long long nb_a3,
    long long nb_x2, long long nb_x3, int b2, int count, unsigned long long* a_ptrs,
    unsigned long long* x_ptrs) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) {
    const long long i2 = i % b2, i3 = i / b2;
    a_ptrs[i] = a + i2 * nb_a2 + i3 * nb_a3;
    x_ptrs[i] = x + i2 * nb_x2 + i3 * nb_x3;
  }
}
"""
_BATCHED_WORKSPACE_BYTES = 4 * 1024 * 1024
# Pointer arrays kept by address (``pointers="cached"``): a timing's input sets and a loop's
# buffers are a few dozen; the oldest is dropped past this many.
_CACHED_POINTER_SETS = 256


class VendorTrsmBatched:
    """cuBLAS ``cublas?trsmBatched`` (s, d, c, z) solving a batch of row-major lower triangular
    systems in place: for every batch index (i2, i3), A·X = B with A n×n lower triangular
    (non-unit diagonal) and X, B n×k, each matrix row-major (ggml tensors [n, n, b2, b3] and
    [k, n, b2, b3] with byte strides (nb1, nb2, nb3); ``trsm_batched``'s packed (batch, m, m) and
    (batch, m, n) arrays are the case b2 = batch, b3 = 1).

    Row-major A read as column-major with leading dimension nb_a1/itemsize is Aᵀ, upper
    triangular; row-major X (k×n column-major, leading dimension nb_x1/itemsize) is Xᵀ. So
    A·X = B is Xᵀ·Aᵀ = Bᵀ: side=Right, uplo=Upper, trans=N, diag=Non-unit, m = k, n = n,
    alpha = 1, on per-batch pointer arrays (b2·b3 entries each). The strict lower triangle of
    Aᵀ (A's strict upper triangle) is not referenced.

    Pointer arrays, by ``pointers``:

    - ``"refill"`` (solve_tri, as ggml calls cuBLAS): allocated once per batch count, on the
      first call with that count, which must come before any capture; every call refills them
      with a small kernel on the handle's stream (one extra launch per solve, part of what is
      timed: ggml's own batched cuBLAS calls fill theirs with a kernel per call too);
    - ``"cached"`` (trsm_batched, as an application calling cuBLAS on its own buffers does):
      built once per (addresses, shape, strides), on the first call with them, which must come
      before any capture; later calls only call cuBLAS (the timing calls cuBLAS on every input
      set before it captures).

    Either way a captured call neither allocates nor synchronizes; the handle has its own
    workspace (cublasSetWorkspace), so a captured solve never asks the library to allocate.

    Raises:
        ValueError: an unknown dtype or ``pointers`` mode.
        OSError: libcublas cannot be loaded.
        RuntimeError: a cuBLAS call returns a non-zero status.
    """

    def __init__(
        self, dtype: str = "float32", stream: Any = None, pointers: str = "refill"
    ) -> None:
        import cupy

        if dtype not in _BATCHED_ROUTINES:
            raise ValueError(
                f"cublas?trsmBatched solves {', '.join(_BATCHED_ROUTINES)}; got {dtype}"
            )
        if pointers not in ("refill", "cached"):
            raise ValueError(f"pointers must be 'refill' or 'cached'; got {pointers!r}")
        self._cupy = cupy
        self._lib = load_libcublas()
        name, alpha_type = _BATCHED_ROUTINES[dtype]
        self._fn = getattr(self._lib, name)
        self._fn.restype = ctypes.c_int
        self._alpha = alpha_type(1.0) if alpha_type._length_ == 1 else alpha_type(1.0, 0.0)
        self._itemsize = _ITEMSIZE[dtype]
        self._routine = name
        self._refill = pointers == "refill"
        self._fill = cupy.RawKernel(_BATCH_POINTERS_SOURCE, "kernevo_batch_pointers")
        self._workspace = cupy.empty(_BATCHED_WORKSPACE_BYTES, dtype=cupy.uint8)
        self._pointers: dict[Any, tuple[Any, Any]] = {}
        self._handle = ctypes.c_void_p()
        self._stream: Any = None
        VendorTrsm._check(self._lib.cublasCreate_v2(ctypes.byref(self._handle)), "cublasCreate_v2")
        self.set_stream(stream)

    def set_stream(self, stream: Any) -> None:
        """Bind the handle and the pointer fills to a CuPy stream (None: the legacy default
        stream) and set the handle's workspace again (cublasSetStream resets it)."""
        lib, handle = self._lib, self._handle
        ptr = 0 if stream is None else stream.ptr
        VendorTrsm._check(lib.cublasSetStream_v2(handle, ctypes.c_void_p(ptr)), "SetStream")
        VendorTrsm._check(
            lib.cublasSetWorkspace_v2(
                handle,
                ctypes.c_void_p(self._workspace.data.ptr),
                ctypes.c_size_t(_BATCHED_WORKSPACE_BYTES),
            ),
            "SetWorkspace",
        )
        self._stream = stream

    def _new_arrays(self, count: int) -> tuple[Any, Any]:
        """Two pointer arrays of ``count`` entries.

        Raises:
            RuntimeError: the stream is capturing (nothing may be allocated).
        """
        from cupy.cuda import runtime

        ptr = 0 if self._stream is None else self._stream.ptr
        if ptr and runtime.streamIsCapturing(ptr):
            raise RuntimeError(
                f"{self._routine}: pointer arrays for {count} matrices are built on the first "
                "call, which must come before graph capture"
            )
        cupy = self._cupy
        return cupy.zeros(count, dtype=cupy.uint64), cupy.zeros(count, dtype=cupy.uint64)

    def _filled_arrays(
        self, a_ptr: int, x_ptr: int, b2: int, count: int, nb_a: tuple[int, int, int],
        nb_x: tuple[int, int, int],
    ) -> tuple[Any, Any]:  # fmt: skip
        """The pointer arrays of this call: refilled (``"refill"``) or as built for these
        addresses and strides (``"cached"``; module docstring)."""
        import numpy as np

        key: Any = count if self._refill else (a_ptr, x_ptr, b2, count, nb_a, nb_x)
        found = self._pointers.get(key)
        if found is not None and not self._refill:
            return found
        arrays = found or self._new_arrays(count)
        args = (
            np.uint64(a_ptr), np.uint64(x_ptr), np.int64(nb_a[1]), np.int64(nb_a[2]),
            np.int64(nb_x[1]), np.int64(nb_x[2]), np.int32(b2), np.int32(count), *arrays,
        )  # fmt: skip
        stream = self._stream if self._stream is not None else self._cupy.cuda.Stream.null
        with stream:
            self._fill(((count + 127) // 128,), (128,), args)
        if found is None:
            if not self._refill and len(self._pointers) >= _CACHED_POINTER_SETS:
                del self._pointers[next(iter(self._pointers))]
            self._pointers[key] = arrays
        return arrays

    def solve_raw(
        self, a_ptr: int, x_ptr: int, n: int, k: int, b2: int, b3: int,
        nb_a: tuple[int, int, int], nb_x: tuple[int, int, int],
    ) -> None:  # fmt: skip
        """X ← A⁻¹·X in place for every batch on the bound stream: A [n, n, b2, b3] at ``a_ptr``,
        X [k, n, b2, b3] at ``x_ptr`` holding B, byte strides ``nb_*`` = (nb1, nb2, nb3).

        Raises:
            ValueError: a row stride not a multiple of the element size or shorter than a row
                (cuBLAS needs lda ≥ n, ldb ≥ k), or a non-positive size.
            RuntimeError: cuBLAS fails, or new pointer arrays under capture.
        """
        if min(n, k, b2, b3) < 1:
            raise ValueError(f"{self._routine}: sizes must be >= 1; got {(n, k, b2, b3)}")
        size = self._itemsize
        for name, nb, cols in (("A", nb_a, n), ("X", nb_x, k)):
            if nb[0] % size or nb[0] < size * cols:
                raise ValueError(
                    f"{self._routine}: {name}'s row stride {nb[0]} bytes must be a multiple "
                    f"of {size} and at least {size * cols}"
                )
        count = b2 * b3
        a_ptrs, x_ptrs = self._filled_arrays(
            a_ptr,
            x_ptr,
            b2,
            count,
            tuple(nb_a),
            tuple(nb_x),  # type: ignore[arg-type]
        )
        VendorTrsm._check(
            self._fn(
                self._handle,
                _SIDE_RIGHT,
                _FILL_UPPER,
                _OP_N,
                _DIAG_NON_UNIT,
                ctypes.c_int(k),
                ctypes.c_int(n),
                self._alpha,
                ctypes.c_void_p(a_ptrs.data.ptr),
                ctypes.c_int(nb_a[0] // size),
                ctypes.c_void_p(x_ptrs.data.ptr),
                ctypes.c_int(nb_x[0] // size),
                ctypes.c_int(count),
            ),  # fmt: skip
            "trsmBatched",
        )

    def close(self) -> None:
        """Destroy the handle and drop the pointer arrays and the workspace."""
        if self._handle:
            self._lib.cublasDestroy_v2(self._handle)
            self._handle = ctypes.c_void_p()
        self._pointers.clear()
