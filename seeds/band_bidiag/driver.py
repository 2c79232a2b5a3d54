"""Running a compiled `band_bidiag` candidate: a whole reduction of an upper band to bidiagonal
form on device buffers, launch by launch or replayed from one captured CUDA graph.

The reduction is launch-bound: ``schedule.launches(n, BW, TW)`` ≈ 3·(n − 1)·BW/TW kernel
launches (24 570 at n = 8192, BW = 32, TW = 32; ~196 000 at n = 16384, BW = 128, TW = 32), each
a few microseconds of device work. Issued from Python, each launch costs CuPy's call overhead
too; a CUDA graph (:meth:`BandBidiagDriver.graph`) records them once and replays the whole
reduction with one call. Everything runs on one stream, in order: consecutive launches are the
only synchronization between sweeps (``schedule``).

Launch geometry: the candidate's ``kernevo_launch_config(n, bw, cfg)``, validated as every
path's (``seeds.driver.CompiledKernel``), one geometry for every launch of the problem;
``kernevo_tile_width(cfg)`` gives TW, from which the driver forms the stages.
Needs a CUDA device (CuPy); nothing here compiles.
"""

from __future__ import annotations

from typing import Any

from ..driver import CompiledKernel, GeometryError, LaunchGeometry, unset_ints
from ..spec import PathSpec, check_dtype
from . import schedule
from .layout import PaddedLayout, check_band
from .spec import BAND_BIDIAG

# The largest TW a candidate may declare (registers: a thread holds TW + 1 entries).
MAX_TILE_WIDTH = 1024


class BandBidiagDriver:
    """Reduce upper band matrices to bidiagonal form with a compiled `band_bidiag` cubin.

    Args:
        cubin: the compiled module; dtype: ``float32`` or ``float64`` (what the cubin was
            compiled for); spec: the path's spec.

    Raises:
        UnknownDtypeError: unsupported ``dtype``.
        GeometryError: the candidate's TW is outside [1, 1024].
        cupy.cuda.driver.CUDADriverError: the cubin does not load or lacks an entry.
    """

    def __init__(self, cubin: bytes, dtype: str, spec: PathSpec = BAND_BIDIAG) -> None:
        import cupy

        self.dtype = check_dtype(dtype, spec.dtypes)
        self.spec = spec
        self.compiled = CompiledKernel(cubin, spec.kernel_name, spec.config_kernel_name)
        cfg = unset_ints(cupy, 1)
        self.compiled.module.get_function("kernevo_tile_width")((1,), (1,), (cfg,))
        self.tw = int(cfg.get()[0])
        if not 1 <= self.tw <= MAX_TILE_WIDTH:
            raise GeometryError(f"tile width TW = {self.tw} outside [1, {MAX_TILE_WIDTH}]")
        # Per (n, BW): the padded workspace (kept while the driver lives: a captured graph holds
        # its address) and the graph of a whole reduction of it.
        self._workspace: dict[tuple[int, int], tuple[Any, PaddedLayout]] = {}
        self._graphs: dict[tuple[int, int], Any] = {}

    def close(self) -> None:
        """Release the workspaces and graphs (the evaluator loads a driver per candidate)."""
        self._graphs.clear()
        self._workspace.clear()

    def geometry(self, n: int, bw: int) -> LaunchGeometry:
        """The candidate's launch for problem (n, bw) (bandwidth clipped to n − 1).

        Raises:
            GeometryError: the launch does not fit the device.
        """
        return self.compiled.geometry(n, schedule.effective_bandwidth(n, bw))

    def launches(self, n: int, bw: int) -> int:
        """Kernel launches of one reduction at (n, bw) with this candidate's TW."""
        return schedule.launches(n, bw, self.tw)

    def reduce_raw(
        self, ab_ptr: int, n: int, bw: int, ldab: int, ku: int, stream: Any = None
    ) -> None:
        """Every launch of a reduction, in order, on ``stream`` (CuPy stream; None: current),
        over the padded band at ``ab_ptr`` (``layout``: a_ij at ab[j·ldab + ku + i − j]).
        Nothing is launched when the matrix is already bidiagonal (BW ≤ 1 or n ≤ 2).

        Raises:
            ValueError: the storage has no room for the bulges (ku < 2·BW − 1 or
                ldab < ku + BW).
            GeometryError: the candidate's launch does not fit the device.
        """
        import numpy as np

        plan = schedule.stages(n, bw, self.tw)
        if not plan:
            return
        eff = schedule.effective_bandwidth(n, bw)
        if ku < 2 * eff - 1 or ldab < ku + eff:
            raise ValueError(f"padded band needs ku >= {2 * eff - 1}, ldab >= ku + {eff}")
        geometry = self.geometry(n, bw)
        fixed = (np.uint64(ab_ptr), np.int32(ldab), np.int32(ku), np.int32(n))
        for stage in plan:
            b, t = np.int32(stage.b), np.int32(stage.t)
            for cycle in range(schedule.stage_cycles(n, stage)):
                self.compiled.launch(geometry, (*fixed, b, t, np.int32(cycle)), stream)

    def workspace(self, n: int, bw: int) -> tuple[Any, PaddedLayout]:
        """The padded array (ldab × n, Fortran order) this driver reduces at (n, bw), made on
        first use and kept (a graph captured over it holds its address)."""
        import cupy

        key = (n, bw)
        if key not in self._workspace:
            layout = PaddedLayout.of(n, bw)
            ab = cupy.zeros((layout.ldab, n), dtype=self.dtype, order="F")
            self._workspace[key] = (ab, layout)
        return self._workspace[key]

    def graph(self, n: int, bw: int) -> Any:
        """A CUDA graph (``cupy.cuda.Graph``) of a whole reduction of :meth:`workspace`
        ``(n, bw)``, captured on first use (the launch geometry is asked before capture, which
        allows no host synchronization) and kept; ``None`` when there is nothing to launch
        (bandwidth ≤ 1: no empty graph is captured)."""
        import cupy

        if not schedule.stages(n, bw, self.tw):
            return None
        key = (n, bw)
        if key not in self._graphs:
            ab, layout = self.workspace(n, bw)
            self.geometry(n, bw)
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                stream.begin_capture()
                try:
                    self.reduce_raw(ab.data.ptr, n, bw, layout.ldab, layout.ku, stream)
                finally:
                    graph = stream.end_capture()
            self._graphs[key] = graph
        return self._graphs[key]

    def load(self, band: Any, stream: Any = None) -> tuple[Any, PaddedLayout]:
        """Copy a LAPACK upper band (CuPy, (BW + 1) × n, this driver's dtype) into the (n, BW)
        workspace, zeros outside the band, on ``stream``.

        Raises:
            ValueError: wrong dtype or shape, or (n, BW) outside the path's envelope.
        """
        import cupy

        n, bw = check_band(band)
        if band.dtype != cupy.dtype(self.dtype):
            raise ValueError(f"band must be {self.dtype}; got {band.dtype}")
        if not self.spec.serves(n, bw):
            env = self.spec.envelope
            raise ValueError(
                f"{self.spec.path_id} serves {env.get('n_min', 1)} <= n <= {env['n_max']}, "
                f"{env.get('bandwidth_min', 1)} <= bandwidth <= {env['bandwidth_max']}; got "
                f"n={n}, bandwidth={bw}"
            )
        ab, layout = self.workspace(n, bw)
        eff = layout.bw_eff
        with stream if stream is not None else cupy.cuda.get_current_stream():
            ab.fill(0)
            ab[layout.ku - eff : layout.ku + 1, :] = band[bw - eff : bw + 1, :]
        return ab, layout

    def reduce(self, band: Any, stream: Any = None, use_graph: bool = True) -> tuple[Any, Any]:
        """Reduce the upper band ``band`` (CuPy, (BW + 1) × n, LAPACK layout, this driver's
        dtype) to bidiagonal form on ``stream``; ``band`` is not modified.

        Args:
            use_graph: replay the (n, BW) graph (:meth:`graph`, captured on the first call of
                a shape) instead of issuing every launch from Python.

        Returns:
            (d, e): CuPy arrays (n,) and (n − 1,) of the driver's dtype, new.

        Raises:
            ValueError: wrong dtype or shape, or outside the envelope (:meth:`load`).
            GeometryError: the candidate's launch does not fit the device.
        """
        import cupy

        n, bw = check_band(band)
        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        graph = self.graph(n, bw) if use_graph else None
        ab, layout = self.load(band, stream)
        if graph is not None:
            graph.launch(stream)
        elif not use_graph:
            self.reduce_raw(ab.data.ptr, n, bw, layout.ldab, layout.ku, stream)
        with stream:
            return ab[layout.ku, :].copy(), ab[layout.ku - 1, 1:].copy()

    def solve(self, band: Any, stream: Any = None) -> tuple[Any, Any]:
        """The loader's entry (``seeds.ops.band_bidiag``: ``solver(band) -> (d, e)``):
        :meth:`reduce` replaying the shape's graph. ``band`` is never written; a band this
        driver cannot take is refused before anything runs.

        Raises:
            ValueError: wrong dtype or shape, or outside the envelope.
            GeometryError: the candidate's launch does not fit the device.
        """
        return self.reduce(band, stream, use_graph=True)
