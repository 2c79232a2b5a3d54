"""Launching a compiled `trsm_small_batched` kernel: on raw device pointers (``solve_raw``, what
the evaluator times), on CuPy arrays (``solve``), or prepared once per operand signature for the
loader's hot path (``prepare``). Importing this module imports nothing of CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..driver import CompiledKernel, LaunchGeometry
from ..prepared_launch import LaunchKernel, StreamPointer, pointer_launch
from ..spec import PathSpec, check_dtype
from .spec import TRSM_SMALL_BATCHED


class TrsmSmallBatchedDriver:
    """Solve A_i·X_i = B_i in place for every batch index with a compiled `trsm_small_batched`
    cubin (``seeds/trsm_small_batched/kernel.cu``: packed, row-major matrices).

    Args:
        cubin: the compiled module (``evaluator.compile.compile_cubin`` or the service).
        dtype: ``float32``, ``float64``, ``complex64`` or ``complex128``; the cubin must have
            been compiled for it.
        spec: the path's spec.

    Raises:
        UnknownDtypeError: unsupported ``dtype``.
        cupy.cuda.driver.CUDADriverError: the cubin does not load on this device.
    """

    def __init__(self, cubin: bytes, dtype: str, spec: PathSpec = TRSM_SMALL_BATCHED) -> None:
        self.dtype = check_dtype(dtype, spec.dtypes)
        self.spec = spec
        self.compiled = CompiledKernel(cubin, spec.kernel_name, spec.config_kernel_name)

    def geometry(self, m: int, n: int, batch: int) -> LaunchGeometry:
        """The candidate's launch geometry for (m, n, batch), asked once and cached."""
        return self.compiled.geometry(m, n, batch)

    def solve_raw(
        self, a_ptr: int, b_ptr: int, m: int, n: int, batch: int, stream: Any = None
    ) -> None:
        """Launch on raw device pointers: A (batch, m, m) at ``a_ptr``, B (batch, m, n) at
        ``b_ptr`` (packed, row-major; X written over B), on ``stream`` (CuPy; None: current).

        Raises:
            GeometryError: the candidate asks for a launch the device cannot run.
        """
        import numpy as np

        geometry = self.compiled.geometry(m, n, batch)
        args = (
            np.uint64(a_ptr), np.uint64(b_ptr), np.int32(m), np.int32(n), np.int32(batch),
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
        """``launch(a, b) -> b``: :meth:`solve` without its checks, for arrays shaped as ``a``
        (batch, m, m) and ``b`` (batch, m, n), C-contiguous, on CuPy's current stream: the
        loader's hot path (``kernevo.launch``), which checked the signature once. The kernel's
        parameters are :meth:`solve_raw`'s: two pointers, then m, n, batch as 32-bit ints.

        Raises:
            seeds.driver.GeometryError: the candidate's launch does not fit the device (not
                raised after a first solve of the shape: the geometry is cached).
        """
        batch, m, n = (int(d) for d in b.shape)
        launch = pointer_launch(
            int(self.compiled.kernel.ptr), self.compiled.geometry(m, n, batch), 2, (m, n, batch),
            launch_kernel=launch_kernel, stream_pointer=stream_pointer,
        )  # fmt: skip

        def run(a: Any, b: Any) -> Any:
            launch(a.data.ptr, b.data.ptr)
            return b

        run.buffers = launch.buffers  # type: ignore[attr-defined]
        return run

    def solve(self, a: Any, b: Any, stream: Any = None) -> Any:
        """Overwrite ``b`` (batch, m, n) with X_i = A_i⁻¹·B_i for every i; ``a`` is
        (batch, m, m), only its lower triangles read. Returns ``b``.

        Raises:
            ValueError: shapes that do not form a batch or lie outside the path's envelope, a
                dtype other than the driver's, or arrays that are not C-contiguous (one line).
        """
        if a.ndim != 3 or b.ndim != 3 or a.shape != (b.shape[0], b.shape[1], b.shape[1]):
            raise ValueError(
                f"{self.spec.path_id} takes A (batch, m, m) and B (batch, m, n); got {a.shape}, "
                f"{b.shape}"
            )
        batch, m, n = (int(d) for d in b.shape)
        if not self.spec.serves(m, n, batch):
            raise ValueError(
                f"{self.spec.path_id} serves 1 <= m, n <= 64, batch >= 1; got m={m}, n={n}, "
                f"batch={batch}"
            )
        if a.dtype != self.dtype or b.dtype != self.dtype:
            raise ValueError(f"arrays must be {self.dtype}; got {a.dtype}, {b.dtype}")
        if not (a.flags.c_contiguous and b.flags.c_contiguous):
            raise ValueError("A and B must be packed row-major (C-contiguous)")
        self.solve_raw(a.data.ptr, b.data.ptr, m, n, batch, stream)
        return b
