"""Launching a compiled `trsm_small` kernel on CuPy arrays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..driver import CompiledKernel, LaunchGeometry, check_solve_arrays
from ..prepared_launch import LaunchKernel, StreamPointer, pointer_launch
from ..spec import PathSpec, check_dtype
from .spec import TRSM_SMALL


class TrsmSmallDriver:
    """Solve A·X = B in place with a compiled `trsm_small` cubin.

    Args:
        cubin: the compiled module (from ``evaluator.compile.compile_cubin`` or the service).
        dtype: ``float32``, ``float64``, ``complex64`` or ``complex128``; the cubin must have
            been compiled for it.

    Raises:
        UnknownDtypeError: unsupported ``dtype``.
        cupy.cuda.driver.CUDADriverError: the cubin does not load on this device.
    """

    def __init__(self, cubin: bytes, dtype: str, spec: PathSpec = TRSM_SMALL) -> None:
        self.dtype = check_dtype(dtype, spec.dtypes)
        self.spec = spec
        self.compiled = CompiledKernel(cubin, spec.kernel_name, spec.config_kernel_name)

    def geometry(self, m: int, n: int) -> LaunchGeometry:
        """The candidate's launch geometry for (m, n)."""
        return self.compiled.geometry(m, n)

    def solve_raw(
        self, a_ptr: int, b_ptr: int, m: int, n: int, lda: int, ldb: int, stream: Any = None
    ) -> None:
        """Launch on raw device pointers (column-major A m×m at ``a_ptr``, B m×n at ``b_ptr``)."""
        import numpy as np

        geometry = self.compiled.geometry(m, n)
        args = (
            np.uint64(a_ptr), np.uint64(b_ptr),
            np.int32(m), np.int32(n), np.int32(lda), np.int32(ldb),
        )  # fmt: skip
        self.compiled.launch(geometry, args, stream)

    def prepare(
        self,
        a: Any,
        b: Any,
        *,
        launch_kernel: LaunchKernel | None = None,
        stream_pointer: StreamPointer | None = None,
    ) -> Callable[[Any, Any], Any]:
        """``launch(a, b) -> b``: :meth:`solve` ``(a, b, None)`` without its checks, for arrays
        shaped as ``a`` (m×m) and ``b`` (m×n), Fortran-contiguous (lda = ldb = m), on CuPy's
        current stream: the loader's hot path (``kernevo.launch``), which checked the
        signature once. The parameters are :meth:`solve_raw`'s (two pointers, then m, n, lda,
        ldb as 32-bit ints); a subclass launching another kernel must override this.

        Raises:
            seeds.driver.GeometryError: the candidate's launch for (m, n) does not fit the
                device (not raised after a first solve of the shape: the geometry is cached).
        """
        m, n = (int(d) for d in b.shape)
        launch = pointer_launch(
            int(self.compiled.kernel.ptr), self.compiled.geometry(m, n), 2, (m, n, m, m),
            launch_kernel=launch_kernel, stream_pointer=stream_pointer,
        )  # fmt: skip

        def run(a: Any, b: Any) -> Any:
            launch(a.data.ptr, b.data.ptr)
            return b

        run.buffers = launch.buffers  # type: ignore[attr-defined]
        return run

    def solve(self, a: Any, b: Any, stream: Any = None) -> Any:
        """Overwrite ``b`` (m×n, Fortran order) with X = A⁻¹·B; ``a`` is m×m lower, Fortran order.

        Returns ``b``. Raises ``ValueError`` for shapes outside the path's envelope, a dtype other
        than the driver's, or arrays that are not Fortran-contiguous.
        """
        m, n = check_solve_arrays(self.spec, self.dtype, a, b)
        self.solve_raw(a.data.ptr, b.data.ptr, m, n, m, m, stream)
        return b
