"""Launching a compiled `solve_tri` candidate: on raw device pointers with ggml's byte strides
(``solve_raw``, what the evaluator times), or on CuPy arrays (``solve``).

Launch geometry: the candidate's ``kernevo_launch_config(n, k, b2, b3, cfg)`` (four shape values
where the TRSM paths pass (m, n)) writes grid xyz, block xyz and dynamic shared-memory bytes to
``cfg[0..6]``; it is asked once per shape and checked against the device's limits as every
path's is (``seeds.driver.CompiledKernel``). Needs a CUDA driver (CuPy) only when a driver is
built; importing this module imports nothing of CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..driver import CompiledKernel, LaunchGeometry, unset_ints
from ..spec import PathSpec, check_dtype
from .layout import LayoutError, check_launch, problem_of_arrays
from .spec import SOLVE_TRI


class SolveTriKernel(CompiledKernel):
    """A `solve_tri` cubin loaded on the current device: the solve entry and its launch-config
    kernel, whose geometry is asked per (n, k, b2, b3).

    Raises:
        cupy.cuda.driver.CUDADriverError: the cubin does not load or lacks an entry.
    """

    def __init__(self, cubin: bytes, kernel_name: str, config_kernel_name: str) -> None:
        super().__init__(cubin, kernel_name, config_kernel_name)
        self._shapes: dict[tuple[int, int, int, int], LaunchGeometry] = {}

    def shape_geometry(self, n: int, k: int, b2: int, b3: int) -> LaunchGeometry:
        """The candidate's launch for (n, k, b2, b3), asked once and cached.

        Raises:
            GeometryError: a launch the device cannot run (``CompiledKernel._validate``).
        """
        key = (n, k, b2, b3)
        if key in self._shapes:
            return self._shapes[key]
        cupy = self._cupy
        cfg = unset_ints(cupy, 7)
        args = (cupy.int32(n), cupy.int32(k), cupy.int32(b2), cupy.int32(b3), cfg)
        self.config_kernel((1,), (1,), args)
        values = [int(v) for v in cfg.get()]
        geometry = LaunchGeometry(tuple(values[0:3]), tuple(values[3:6]), values[6])  # type: ignore[arg-type]
        self._validate(geometry)
        self._shapes[key] = geometry
        return geometry


class SolveTriDriver:
    """Solve A·X = B for every batch index with a compiled `solve_tri` cubin (ggml SOLVE_TRI
    semantics: ``seeds/solve_tri/kernel.cu``).

    Args:
        cubin: the compiled module (``evaluator.compile.compile_cubin`` or the service).
        dtype: ``float32`` (the path's only dtype).
        spec: the path's spec.

    Raises:
        UnknownDtypeError: a dtype other than float32.
        cupy.cuda.driver.CUDADriverError: the cubin does not load on this device.
    """

    def __init__(self, cubin: bytes, dtype: str, spec: PathSpec = SOLVE_TRI) -> None:
        self.dtype = check_dtype(dtype, spec.dtypes)
        self.spec = spec
        self.compiled = SolveTriKernel(cubin, spec.kernel_name, spec.config_kernel_name)

    def geometry(self, n: int, k: int, b2: int, b3: int) -> LaunchGeometry:
        """The candidate's launch geometry for (n, k, b2, b3)."""
        return self.compiled.shape_geometry(n, k, b2, b3)

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
        stream: Any = None,
    ) -> None:
        """Launch on raw device pointers: A [n, n, b2, b3] at ``a_ptr``, B [k, n, b2, b3] at
        ``b_ptr``, X [k, n, b2, b3] written at ``x_ptr`` (ggml tensors, float32), with byte
        strides ``nb_*`` = (nb1, nb2, nb3) per tensor, on ``stream`` (CuPy; None: current).
        ``x_ptr`` may be ``b_ptr`` with the same strides (in place).

        Raises:
            LayoutError: a shape, stride, pointer or overlap the kernel cannot take
                (``layout.check_launch``), before anything is launched.
            GeometryError: the candidate asks for a launch the device cannot run.
        """
        import numpy as np

        (n, k, b2, b3), sa, sb, sx = check_launch(
            a_ptr, b_ptr, x_ptr, (n, k, b2, b3), nb_a, nb_b, nb_x
        )
        geometry = self.compiled.shape_geometry(n, k, b2, b3)
        args = (
            np.uint64(a_ptr), np.uint64(b_ptr), np.uint64(x_ptr),
            np.int32(n), np.int32(k), np.int32(b2),
            *(np.int64(v) for v in (*sa, *sb, *sx)),
        )  # fmt: skip
        self.compiled.launch(geometry, args, stream)

    def solve(self, a: Any, b: Any, out: Any = None, stream: Any = None) -> Any:
        """X = A⁻¹·B per batch on CuPy float32 arrays: ``a`` (n, n), (b2, n, n) or
        (b3, b2, n, n), ``b`` the same with (…, n, k); any strides with contiguous rows (NumPy
        order: the last index fastest, as ggml's ne[0]). ``out``: an array of ``b``'s shape to
        write X to (``b`` itself: in place); None: a new C-ordered array. Returns X.

        Raises:
            ValueError: (``LayoutError``) shapes outside the path's envelope, arrays that are
                not float32 or do not form a problem, or an ``out`` that overlaps A or B (other
                than being B), one line naming what is wrong.
        """
        import cupy

        if a.dtype != cupy.float32 or b.dtype != cupy.float32:
            raise LayoutError(f"solve_tri: arrays must be float32; got {a.dtype}, {b.dtype}")
        (n, k, b2, b3), nb_a, nb_b = problem_of_arrays(
            a.shape, a.strides, b.shape, b.strides, a.dtype.itemsize
        )
        if not self.spec.serves(n, k, b2, b3):
            bounds = ", ".join(
                f"{key.removesuffix('_max')} <= {value}"
                for key, value in self.spec.envelope.items()
                if key.endswith("_max")
            )
            raise LayoutError(
                f"{self.spec.path_id} serves {bounds}; got n={n}, k={k}, b2={b2}, b3={b3}"
            )
        if out is None:
            out = cupy.empty(b.shape, dtype=cupy.float32)
        if out.shape != b.shape or out.dtype != cupy.float32:
            raise LayoutError(
                f"solve_tri: out must be float32 of B's shape {b.shape}; got {out.dtype} "
                f"{out.shape}"
            )
        _, _, nb_x = problem_of_arrays(
            a.shape, a.strides, out.shape, out.strides, out.dtype.itemsize
        )
        self.solve_raw(a.data.ptr, b.data.ptr, out.data.ptr, n, k, b2, b3, nb_a, nb_b, nb_x, stream)
        return out
