"""Launching a compiled `trsm_blocked` candidate: its diagonal-block kernel, then cuBLAS GEMMs in
the order of ``schedule.block_schedule`` (recursive halving) into a workspace W that receives X,
then one 2-D copy of W into B, all on one stream (so that one captured graph holds a whole
solve).

Launch geometry (docs/CONTRACTS.md "paths"): the candidate's ``kernevo_launch_config(m, n, cfg)``
gives the diagonal kernel's launch for (m, n), checked as every path's is
(``seeds.driver.CompiledKernel``); ``kernevo_block_size(cfg)`` gives NB, from which this driver
forms the block rows. When m ≤ NB the kernel solves B directly (one diagonal block, no GEMM).
"""

from __future__ import annotations

from typing import Any

from ..cublas import VendorGemm
from ..driver import CompiledKernel, check_solve_arrays, unset_ints
from ..spec import PathSpec, check_dtype
from .schedule import Operands, Step, block_schedule, issue_gemms

_ITEMSIZE = {"float32": 4, "float64": 8, "complex64": 8, "complex128": 16}
# The largest NB a candidate may ask for: the inverse workspace is ceil(m / NB)·NB² scalars.
_MAX_NB = 4096


class TrsmBlockedDriver:
    """Solve A·X = B in place with a compiled `trsm_blocked` cubin and cuBLAS GEMMs.

    Args:
        cubin: the compiled module; dtype: the dtype it was compiled for; spec: the path's spec.

    Raises:
        UnknownDtypeError: unsupported ``dtype``.
        GeometryError: the candidate's NB is not in [1, 4096].
        cupy.cuda.driver.CUDADriverError: the cubin does not load or lacks an entry.
        OSError: libcublas cannot be loaded.
    """

    def __init__(self, cubin: bytes, dtype: str, spec: PathSpec) -> None:
        import cupy

        from ..driver import GeometryError

        self.dtype = check_dtype(dtype, spec.dtypes)
        self.spec = spec
        self.compiled = CompiledKernel(cubin, spec.kernel_name, spec.config_kernel_name)
        cfg = unset_ints(cupy, 1)
        self.compiled.module.get_function("kernevo_block_size")((1,), (1,), (cfg,))
        self.nb = int(cfg.get()[0])
        if not 1 <= self.nb <= _MAX_NB:
            raise GeometryError(f"block size NB = {self.nb} outside [1, {_MAX_NB}]")
        self._gemm = VendorGemm(dtype)
        # Workspaces per (m, n): the inverses (ceil(m / NB)·NB² scalars) and W (m·n scalars),
        # allocated on the first call of a shape, outside graph capture (the evaluator's timing
        # warms up before it captures), and kept while the driver lives: a captured graph holds
        # their addresses, so they are never reallocated under it.
        self._workspace: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._schedules: dict[int, tuple[Step, ...]] = {}

    def close(self) -> None:
        """Release the cuBLAS handle, its workspace and the per-shape buffers (the evaluator's
        GPU worker loads a driver per candidate: without this each one would keep them)."""
        self._gemm.close()
        self._workspace.clear()

    def _buffers(self, m: int, n: int) -> tuple[Any, Any]:
        import cupy

        if (m, n) not in self._workspace:
            nb, blocks = self.nb, -(-m // self.nb)
            inverse = cupy.empty(blocks * nb * nb * _ITEMSIZE[self.dtype], dtype=cupy.uint8)
            # Zeroed once: cuBLAS's Hopper GEMMs store W through the tensor memory accelerator,
            # which compute-sanitizer's initcheck does not see, so the copy of W into B read as
            # uninitialized and failed every champion's verification (RESULTS section 19). The
            # GEMMs still write every element of W before the copy; the LAPACK-ratio check of
            # every column of X is what proves it.
            work = cupy.zeros(m * n * _ITEMSIZE[self.dtype], dtype=cupy.uint8)
            self._workspace[(m, n)] = (inverse, work)
        return self._workspace[(m, n)]

    def _schedule(self, m: int) -> tuple[Step, ...]:
        if m not in self._schedules:
            self._schedules[m] = block_schedule(m, self.nb)
        return self._schedules[m]

    def solve_raw(
        self, a_ptr: int, b_ptr: int, m: int, n: int, lda: int, ldb: int, stream: Any = None
    ) -> None:
        """X = A⁻¹·B over B on raw device pointers (column-major A m×m, B m×n) on ``stream``
        (a CuPy stream; None: the current one).

        Raises:
            GeometryError: the candidate's launch does not fit the device.
        """
        import cupy
        import numpy as np

        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        nb, size = self.nb, _ITEMSIZE[self.dtype]
        if m <= nb:
            args = (np.uint64(a_ptr), np.int32(lda), np.int32(m), np.uint64(b_ptr),
                    np.int32(ldb), np.int32(n), np.int32(1))  # fmt: skip
            self.compiled.launch(self.compiled.geometry(m, n), args, stream)
            return
        self.invert_raw(a_ptr, m, n, lda, stream)
        inverse, work = self._buffers(m, n)
        inv_ptr, w_ptr = inverse.data.ptr, work.data.ptr
        self._gemm.set_stream(stream.ptr)
        ops = Operands(a_ptr, lda, b_ptr, ldb, inv_ptr, w_ptr, size)
        issue_gemms(self._schedule(m), self._gemm.gemm, ops, m, n, nb)
        cupy.cuda.runtime.memcpy2DAsync(
            b_ptr, ldb * size, w_ptr, m * size, m * size, n,
            cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr,
        )  # fmt: skip

    def invert_raw(self, a_ptr: int, m: int, n: int, lda: int, stream: Any = None) -> None:
        """The first phase of a solve at m > NB alone: the candidate's kernel inverts every
        diagonal block of A into the (m, n) workspace (``scripts/bench_blocked.py`` times it
        apart from the GEMMs, as the paper's Table 3 splits inversion from GEMM time).

        Raises:
            ValueError: m ≤ NB (no inversion: the kernel solves directly).
            GeometryError: the candidate's launch does not fit the device.
        """
        import cupy
        import numpy as np

        if m <= self.nb:
            raise ValueError(f"m = {m} <= NB = {self.nb}: the kernel solves directly")
        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        inverse, _ = self._buffers(m, n)
        # All ones (NaN in every dtype) before every launch: the inverses are the one buffer the
        # kernel writes that outlives a call, so it could count calls or keep results there; and
        # an entry it failed to write reaches the GEMMs as NaN instead of last call's value.
        cupy.cuda.runtime.memsetAsync(inverse.data.ptr, 0xFF, inverse.nbytes, stream.ptr)
        args = (np.uint64(a_ptr), np.int32(lda), np.int32(m), np.uint64(inverse.data.ptr),
                np.int32(self.nb), np.int32(0), np.int32(0))  # fmt: skip
        self.compiled.launch(self.compiled.geometry(m, n), args, stream)

    def solve(self, a: Any, b: Any, stream: Any = None) -> Any:
        """Overwrite ``b`` (m×n, Fortran order) with X = A⁻¹·B; ``a`` is m×m lower, Fortran order.

        Returns ``b``. Raises ``ValueError`` for shapes outside the path's envelope, a dtype other
        than the driver's, or arrays that are not Fortran-contiguous.
        """
        m, n = check_solve_arrays(self.spec, self.dtype, a, b)
        self.solve_raw(a.data.ptr, b.data.ptr, m, n, m, m, stream)
        return b
