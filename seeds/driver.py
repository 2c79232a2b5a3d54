"""Loading a compiled candidate and launching it with the geometry it asks for.

The launch-geometry mechanism (docs/CONTRACTS.md): every seed defines, inside its EVOLVE-BLOCK,
``kernevo_launch_config(int m, int n, int* cfg)``, which writes grid xyz, block xyz and dynamic
shared-memory bytes to ``cfg[0..6]``. The driver runs it once per shape, checks the numbers
against the device's limits and opts the kernel into large dynamic shared memory when asked.
Needs a CUDA driver (CuPy); nothing here compiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# CUDA's default per-block dynamic shared memory before cudaFuncSetAttribute raises it.
_DEFAULT_DYNAMIC_SHARED = 48 * 1024
_MAX_GRID = (2**31 - 1, 65535, 65535)


def check_solve_arrays(spec: Any, dtype: Any, a: Any, b: Any) -> tuple[int, int]:
    """(m, n) of a solve on arrays ``a`` (m×m) and ``b`` (m×n), checked the way every path's
    driver ``solve`` needs them: inside ``spec``'s envelope (``PathSpec.serves``), of the
    driver's ``dtype``, both Fortran-contiguous.

    Raises:
        ValueError: one line naming what is wrong (the path, its envelope and the shapes got).
    """
    m, n = b.shape
    if a.shape != (m, m) or not spec.serves(m, n):
        env = spec.envelope
        raise ValueError(
            f"{spec.path_id} serves A m×m, B m×n with {env.get('m_min', 1)} ≤ m ≤ "
            f"{env['m_max']}, {env.get('n_min', 1)} ≤ n ≤ {env['n_max']}; got {a.shape}, "
            f"{b.shape}"
        )
    if a.dtype != dtype or b.dtype != dtype:
        raise ValueError(f"arrays must be {dtype}; got {a.dtype}, {b.dtype}")
    if not (a.flags.f_contiguous and b.flags.f_contiguous):
        raise ValueError("A and B must be column-major (Fortran-contiguous)")
    return m, n


class GeometryError(ValueError):
    """The candidate asked for a launch the device cannot run."""


def unset_ints(cupy: Any, count: int) -> Any:
    """``count`` int32 values of −1 on CuPy's current device: the output slots of a kernel that
    reports launch parameters (−1 until it writes them). Copied from the host rather than
    ``cupy.full``, which launches a fill kernel that CuPy compiles with NVRTC on its first use
    in a process whose CuPy kernel cache is cold: a cost the loader's first call must not carry.
    """
    import numpy

    return cupy.asarray(numpy.full(count, -1, dtype=numpy.int32))


@dataclass(frozen=True)
class LaunchGeometry:
    """Grid and block dimensions and dynamic shared memory (bytes) for one launch."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


class CompiledKernel:
    """A cubin loaded on the current device: the solve entry and its launch-config kernel.

    Raises:
        cupy.cuda.driver.CUDADriverError: the cubin does not load or lacks an entry.
    """

    def __init__(self, cubin: bytes, kernel_name: str, config_kernel_name: str) -> None:
        import cupy
        from cupy.cuda import function

        self._cupy = cupy
        self.module = function.Module()
        self.module.load(cubin)
        self.kernel = self.module.get_function(kernel_name)
        self.config_kernel = self.module.get_function(config_kernel_name)
        self._geometry: dict[tuple[int, ...], LaunchGeometry] = {}
        self._opted_in = _DEFAULT_DYNAMIC_SHARED

    def geometry(self, *shape: int) -> LaunchGeometry:
        """The launch for a problem of ``shape`` (the op's parameters in order, each passed to
        the candidate's launch-config kernel as an int before ``cfg``: trsm's (m, n),
        trsm_batched's (m, n, batch)), asked of the candidate once and cached.

        Raises:
            GeometryError: zero or too many threads, an empty or oversized grid, or more shared
                memory than the device grants a block.
        """
        if shape in self._geometry:
            return self._geometry[shape]
        cupy = self._cupy
        cfg = unset_ints(cupy, 7)
        self.config_kernel((1,), (1,), (*(cupy.int32(v) for v in shape), cfg))
        values = [int(v) for v in cfg.get()]
        geometry = LaunchGeometry(tuple(values[0:3]), tuple(values[3:6]), values[6])  # type: ignore[arg-type]
        self._validate(geometry)
        self._geometry[shape] = geometry
        return geometry

    def _validate(self, g: LaunchGeometry) -> None:
        from cupy.cuda import driver

        device = self._cupy.cuda.Device()
        max_threads = driver.funcGetAttribute(
            driver.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, self.kernel.ptr
        )
        static_shared = driver.funcGetAttribute(
            driver.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.kernel.ptr
        )
        optin = device.attributes["MaxSharedMemoryPerBlockOptin"]
        if any(d < 1 for d in (*g.grid, *g.block)):
            raise GeometryError(f"launch config has a dimension < 1: grid {g.grid} block {g.block}")
        if g.threads > max_threads:
            raise GeometryError(f"{g.threads} threads per block > kernel limit {max_threads}")
        if any(d > lim for d, lim in zip(g.grid, _MAX_GRID, strict=True)):
            raise GeometryError(f"grid {g.grid} exceeds the device limit {_MAX_GRID}")
        if g.shared_bytes < 0 or g.shared_bytes + static_shared > optin:
            raise GeometryError(
                f"{g.shared_bytes} B dynamic + {static_shared} B static shared memory > "
                f"{optin} B per block"
            )
        if g.shared_bytes > self._opted_in:
            driver.funcSetAttribute(
                self.kernel.ptr,
                driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                g.shared_bytes,
            )
            self._opted_in = g.shared_bytes

    def launch(self, geometry: LaunchGeometry, args: tuple[Any, ...], stream: Any = None) -> None:
        """Launch the solve entry with ``args`` on ``stream`` (CuPy stream; current if None)."""
        self.kernel(
            geometry.grid, geometry.block, args, shared_mem=geometry.shared_bytes, stream=stream
        )
