"""cuBLAS through ctypes, for every path: the library's loading, ?trsm (the vendor baseline
each TRSM path is timed against) and ?gemm (trsm_blocked's block-row updates).

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
