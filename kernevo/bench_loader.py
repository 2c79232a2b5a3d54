"""``kernevo bench-loader``: what a trsm call costs where an application makes it.

For each dtype and shape, in one process and on one CUDA stream, five ways to solve the same
problem (A m×m lower triangular, B m×n, both Fortran-ordered, X in place in B):

- ``loaded``: the callable ``kernevo.load("trsm", dtype)`` returns (or, with ``--seed``, the
  same callable serving each path's seed kernel compiled here: :class:`SeedResolver`);
- ``launch``: the loaded kernel's launch as the loader prepares it (:mod:`kernevo.launch`,
  one ``cuLaunchKernel``), without the loader's dispatch: ``loaded − launch`` is the
  dispatch's cost;
- ``driver``: the path driver's own launch (``solve_raw``: NumPy scalars through CuPy's
  ``Function.__call__``), the "raw driver launch" of issue 11;
- ``cublas``: cuBLAS ?trsm through ``cupyx.scipy.linalg.solve_triangular``, the loader's
  fallback (what the application would call without kernevo);
- ``cublas_ctypes``: cuBLAS ?trsm called through ctypes on a handle bound to the stream
  (``seeds.cublas.VendorTrsm``, the evaluator's baseline, which stream capture accepts).

``launch`` and ``driver`` exist only where the loaded callable launches a kernel for the shape.
Each way is first checked against a float64 (complex128) solve on the host, then timed two
ways:

- wall time per call: ``--calls`` calls in a Python loop, the stream synchronized once at the
  end (after a warm-up): what a loop in an application sees, launch overhead included;
- device time per call: ``--graph-calls`` calls captured in one CUDA graph, the graph replayed
  ``--replays`` times between CUDA events, the median replay over the calls (the evaluator's
  method: docs/DESIGN.md "Timing"); CuPy's cuBLAS wrappers refuse capture, so ``cublas`` has
  none.

Start-up is printed first: ``import kernevo`` and ``from kernevo import load`` in a fresh
interpreter, then for each dtype the time ``kernevo.load`` took and for each shape its first
call's (the routing, the service or the disk cache, the module load and the launch geometry).

The problem: A = I + L with L strictly lower of entries uniform in [−10⁻³/m, 10⁻³/m] (so
‖L‖∞ ≤ 10⁻³ and ‖A⁻ᵏ‖∞ ≤ (1 − 10⁻³)⁻ᵏ: solving in place thousands of times keeps B finite,
e³ for 3000 calls), B uniform in [−1, 1]; B is restored before each way's check and timing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from kernevo.files import write_atomically
from kernevo.paths import ops, registry
from kernevo.paths import package as seeds_package
from kernevo.text import printable

OP = "trsm"  # the one op this benchmark measures (its raw launch and cuBLAS are trsm's)
DEFAULT_SHAPES = ((16, 16), (32, 32), (48, 48), (64, 64))
VARIANTS = ("loaded", "launch", "driver", "cublas", "cublas_ctypes")
# Calls before a timed loop or capture: the first launches of a module, cuBLAS's handle
# workspace and CuPy's kernel cache are not what a loop of calls costs.
WARMUP_CALLS = 50
WARMUP_REPLAYS = 2
# Largest relative error (max |X − X_ref| / max |X_ref|) the check accepts: a few hundred units
# in the last place of the dtype for these well-conditioned problems (‖A‖∞·‖A⁻¹‖∞ ≤ 1.002²).
TOLERANCE = {"float32": 1e-4, "complex64": 1e-4, "float64": 1e-12, "complex128": 1e-12}
_REAL = {"float32": "float32", "float64": "float64", "complex64": "float32",
         "complex128": "float64"}  # fmt: skip


# MxN: each side an integer in plain decimal digits (a minus sign allowed, so that a negative
# side is told the range; the CLI's parser hands ``-1x16`` to the type as a value), as every
# integer of the ``kernevo`` command line.
_SHAPE = re.compile(r"(-?[0-9]{1,30})[xX](-?[0-9]{1,30})")


def shape_arg(text: str) -> tuple[int, int]:
    """An argparse type: ``16x16`` → ``(16, 16)``, m and n in [1, 2³¹ − 1] (trsm's m = 0 or
    n = 0 is a quick return, nothing to time).

    Raises:
        argparse.ArgumentTypeError: not ``<m>x<n>`` in decimal digits, or a side out of range:
            ``shape -1x16: m must be 1..2147483647, not -1``.
    """
    match = _SHAPE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"expected MxN such as 16x16 (decimal digits, 1 <= M, N <= 2147483647), not "
            f"{printable(text, 40)!r}"
        )
    m, n = int(match[1]), int(match[2])
    for name, value in (("m", m), ("n", n)):
        high = ops.get_op(OP).param(name).high
        if not 1 <= value <= high:
            raise argparse.ArgumentTypeError(f"shape {text}: {name} must be 1..{high}, not {value}")
    return m, n


def _count(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high], in plain decimal digits."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"[0-9]{1,30}", text) or not low <= int(text) <= high:
            shown = printable(text, 40)
            raise argparse.ArgumentTypeError(f"{what} must be {low}..{high}, not {shown!r}")
        return int(text)

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``kernevo bench-loader`` (usage errors are argparse's: exit 2)."""
    parser.add_argument(
        "--op",
        choices=(OP,),
        default=OP,
        help="the op measured: trsm only (scripts/bench_batched_loader.py: trsm_batched)",
    )
    parser.add_argument(
        "--dtype",
        nargs="+",
        choices=ops.get_op(OP).dtypes,
        required=True,
        metavar="DTYPE",
        help="one or more of float32 float64 complex64 complex128",
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        type=shape_arg,
        default=list(DEFAULT_SHAPES),
        metavar="MxN",
        help="problem shapes, A m×m and B m×n, m and n 1..2147483647 in decimal digits "
        "(default 16x16 32x32 48x48 64x64)",
    )
    parser.add_argument(
        "--calls",
        type=_count(1, 10**6, "--calls"),
        default=3000,
        help="calls per wall-time loop (default 3000)",
    )
    parser.add_argument(
        "--graph-calls",
        type=_count(1, 10**4, "--graph-calls"),
        default=100,
        help="calls captured per CUDA graph (default 100)",
    )
    parser.add_argument(
        "--replays",
        type=_count(1, 10**4, "--replays"),
        default=20,
        help="timed replays of each graph (default 20)",
    )
    parser.add_argument(
        "--seed",
        action="store_true",
        help="serve each path's seed kernel compiled here instead of the service's champions "
        "(no service, cache or keys needed; nothing is verified)",
    )
    parser.add_argument(
        "--json",
        type=json_path_arg,
        metavar="PATH",
        help="also write the results to this file (JSON; its folder must exist and be writable)",
    )


def json_path_arg(text: str) -> Path:
    """An argparse type for ``--json``: a file path whose folder exists and is writable, checked
    when the arguments are parsed, so that a typo is a usage error (exit 2) before minutes of
    measurement rather than a traceback after them.

    Raises:
        argparse.ArgumentTypeError: empty, an existing folder, or a folder that is missing, not
            a folder, or not writable by this process.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a file path, not an empty string")
    path = Path(text).expanduser()
    folder = path.parent
    shown = printable(str(path), 300)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{shown!r} is a folder, not a file to write")
    if not folder.exists():
        raise argparse.ArgumentTypeError(f"{shown!r}: no such folder {printable(str(folder))!r}")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{shown!r}: {printable(str(folder))!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"{shown!r}: folder {printable(str(folder))!r} is not writable"
        )
    return path


def write_json(path: Path, results: Sequence[ShapeResult]) -> None:
    """Write ``results`` to ``path`` as a JSON list, atomically (``kernevo.files``): a reader,
    or a run stopped mid-write, never sees a torn file. Mode 0644, as a plain file written by
    this user would have under the usual umask.

    Raises:
        OSError: the folder cannot be written (it was checked when parsed; it may change since).
    """
    data = json.dumps([asdict(item) for item in results], indent=1) + "\n"
    write_atomically(path, data.encode(), mode=0o644)


@dataclass(frozen=True)
class Measurement:
    """One way of solving at one shape: ``wall_us`` (µs per call, Python loop),
    ``graph_us`` (µs of device time per call in a replayed graph; ``None`` with ``graph_note``
    saying why), ``rel_error`` (max |X − X_ref| / max |X_ref| against the host's float64 or
    complex128 solve) and ``ok`` (``rel_error`` within :data:`TOLERANCE`)."""

    variant: str
    wall_us: float
    graph_us: float | None
    rel_error: float
    ok: bool
    graph_note: str = ""


@dataclass(frozen=True)
class ShapeResult:
    """The measurements of one (dtype, m, n), with the loaded callable's route and reason
    (``OpSolver.explain``) and its first call's time (ms: routing, fetching or reading the
    disk cache, loading the module, the launch geometry; only the first shape of a dtype pays
    for the module)."""

    dtype: str
    m: int
    n: int
    route: str
    reason: str
    first_call_ms: float
    measurements: tuple[Measurement, ...] = field(default=())

    def lines(self) -> list[str]:
        """The result as printed: a header line, one line per way, and the loader's
        overhead over the prepared launch and over the driver's launch."""
        out = [
            f"{OP} {self.dtype} m={self.m} n={self.n}: loaded -> {self.route} ({self.reason}); "
            f"first call {self.first_call_ms:.1f} ms",
            f"  {'variant':<14} {'wall us/call':>12} {'graph us/call':>13}  rel error",
        ]
        for item in self.measurements:
            graph = f"{item.graph_us:13.2f}" if item.graph_us is not None else f"{'n/a':>13}"
            verdict = "ok" if item.ok else "WRONG"
            note = f"  ({item.graph_note})" if item.graph_note else ""
            out.append(
                f"  {item.variant:<14} {item.wall_us:12.2f} {graph}  {item.rel_error:.1e} "
                f"{verdict}{note}"
            )
        wall = {item.variant: item.wall_us for item in self.measurements}
        over = [
            f"{wall['loaded'] - wall[base]:+.2f} us over {words}"
            for base, words in (("launch", "its prepared launch"), ("driver", "the driver's"))
            if "loaded" in wall and base in wall
        ]
        if over:
            out.append(f"  loader overhead per call: {', '.join(over)}")
        return out


class SeedResolver:
    """Routes trsm shapes as :class:`kernevo.resolver.Resolver` does, to the first path serving
    them (``seeds.registry.route``), whose champion is the path's seed kernel compiled here for
    this GPU (once per path and bucket): for measuring the loader without a service. Nothing is
    fetched, signed or verified; shapes no path serves go to cuBLAS.

    Raises (from :meth:`resolve`):
        RuntimeError: the seed does not compile, or this is the light loader install (no
            compiler: ``kernevo.kernel.compile_for_arch``).
    """

    def __init__(self, op: str, dtype: str, gpu: Any) -> None:
        from kernevo.resolver import Decision

        self.op, self.dtype, self.gpu = op, dtype, gpu
        self.op_spec = ops.get_op(op)
        self._decision_class = Decision
        self._lock = threading.Lock()
        self._decisions: dict[tuple[int, ...], Any] = {}
        self._champions: dict[tuple[str, str], Any] = {}

    def resolve(self, *shape: int) -> Any:
        """The decision for ``shape``: the seed of the first serving path, else cuBLAS."""
        with self._lock:
            if shape not in self._decisions:
                self._decisions[shape] = self._decide(shape)
            return self._decisions[shape]

    def mark_failed(self, shape: tuple[int, ...], error: BaseException) -> Any:
        """Pin ``shape`` to cuBLAS after the kernel raised ``error``."""
        with self._lock:
            reason = f"kernel error: {type(error).__name__}: {error}"
            decision = self._fallback(shape, reason)
            self._decisions[shape] = decision
            return decision

    def _fallback(self, shape: tuple[int, ...], reason: str) -> Any:
        return self._decision_class(
            shape, self.op_spec.fallback_route, reason, fallback=self.op_spec.fallback_library
        )

    def _decide(self, shape: tuple[int, ...]) -> Any:
        routes = registry.route(self.op, self.dtype, *shape)
        if not routes:
            return self._fallback(shape, f"no path serves {self.op_spec.assignments(shape)}")
        served = routes[0]
        key = (served.path_id, served.shape_bucket)
        if key not in self._champions:
            self._champions[key] = self._seed_champion(served.path_id, served.shape_bucket)
        reason = f"seed of {served.path_id}/{served.shape_bucket} compiled here (--seed)"
        return self._decision_class(
            shape,
            "kernel",
            reason,
            served.path_id,
            served.shape_bucket,
            self._champions[key],
            fallback=self.op_spec.fallback_library,
        )

    def _seed_champion(self, path_id: str, bucket: str) -> Any:
        from kernevo.client import ChampionKernel, Envelope
        from kernevo.kernel import compile_for_arch

        spec = registry.get_path(path_id, bucket)
        source = spec.seed_source()
        options = spec.compile_options(self.dtype, self.gpu.arch)
        cubin = compile_for_arch(source, options, self.gpu.arch)
        return ChampionKernel(
            path=path_id,
            dtype=self.dtype,
            gpu=self.gpu.key,
            shape_bucket=bucket,
            program_id=0,
            arch=self.gpu.arch,
            nvrtc_version=self.gpu.nvrtc_version or None,
            cubin_sha256=hashlib.sha256(cubin).hexdigest(),
            source_sha256=hashlib.sha256(source.encode()).hexdigest(),
            compile_options=tuple(options),
            kernel_name=spec.kernel_name,
            config_kernel_name=spec.config_kernel_name,
            envelope=Envelope(dict(spec.envelope)),
            promoted_at=None,
            source=source,
            cubin=cubin,
        )


def seed_solver(dtype: str) -> Any:
    """A loaded trsm callable (``kernevo.OpSolver``) on CuPy's current device serving each
    path's seed kernel (:class:`SeedResolver`).

    Raises:
        kernevo.NoGpuError: no usable CUDA device.
    """
    from kernevo.device import current_gpu
    from kernevo.solver import OpSolver

    return OpSolver(SeedResolver(OP, dtype, current_gpu()))  # type: ignore[arg-type]


def make_problem(
    m: int, n: int, dtype: str, seed: int = 0, batch: tuple[int, ...] = ()
) -> tuple[Any, Any, Any]:
    """``(a, b, x)`` on the host: A = I + L (module doc), B uniform in [−1, 1] (real and
    imaginary parts), both in ``dtype``, and X = A⁻¹B solved in float64 (complex128); with
    ``batch``, that many independent problems along the leading axes (A ``(*batch, m, m)``)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    complex_ = dtype.startswith("complex")

    def draw(shape: tuple[int, ...], scale: float) -> Any:
        values = rng.uniform(-scale, scale, shape)
        if complex_:
            values = values + 1j * rng.uniform(-scale, scale, shape)
        return values

    a = np.eye(m) + np.tril(draw((*batch, m, m), 1e-3 / m), -1)
    b = draw((*batch, m, n), 1.0)
    wide = np.complex128 if complex_ else np.float64
    a, b = a.astype(dtype), b.astype(dtype)
    x = np.linalg.solve(np.tril(a).astype(wide), b.astype(wide))
    return a, b, x


def wall_us(fn: Callable[[], Any], calls: int, stream: Any) -> float:
    """µs per call of ``fn`` over ``calls`` calls in a loop, ``stream`` synchronized once
    after them (and once before, after :data:`WARMUP_CALLS` untimed calls)."""
    for _ in range(WARMUP_CALLS):
        fn()
    stream.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    stream.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_us(fn: Callable[[], Any], calls: int, replays: int, stream: Any) -> float:
    """µs of device time per call of ``fn``: ``calls`` calls captured on ``stream`` (the
    current stream) into one graph, the median of ``replays`` replays timed by CUDA events
    (after :data:`WARMUP_REPLAYS`), divided by ``calls``.

    Raises:
        Exception: whatever ``fn`` raises under capture (the capture is ended first).
    """
    import cupy

    stream.begin_capture()
    try:
        for _ in range(calls):
            fn()
    except BaseException:
        with contextlib.suppress(Exception):  # the capture's own failure is secondary to fn's
            stream.end_capture()
        raise
    graph = stream.end_capture()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    per_call = []
    for replay in range(WARMUP_REPLAYS + replays):
        start.record(stream)
        graph.launch(stream)
        stop.record(stream)
        stop.synchronize()
        if replay >= WARMUP_REPLAYS:
            per_call.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / calls)
    return float(statistics.median(per_call))


def _variants(
    solver: Any, a: Any, b: Any, vendor: Any, drivers: dict[str, Any]
) -> dict[str, Callable[[], Any]]:
    """The ways of solving ``a``, ``b`` in place (module doc), by name, in :data:`VARIANTS`
    order; ``launch`` and ``driver`` only when the loaded callable launches a kernel, through a
    driver of the champion kept in ``drivers`` (by cubin digest) for the shapes after."""
    from kernevo import launch as launches
    from kernevo.fallback import cublas_trsm
    from kernevo.kernel import build_driver

    m, n = (int(d) for d in b.shape)
    ways: dict[str, Callable[[], Any]] = {"loaded": lambda: solver(a, b)}
    decision = solver.explain(m, n)
    if solver.runs_kernel(a, b) and decision.champion is not None:
        # A driver of its own (the same cubin loaded again), so that the loaded callable's
        # state is not what is measured.
        digest = decision.champion.cubin_sha256
        if digest not in drivers:
            drivers[digest] = build_driver(decision.champion, solver.gpu.arch)
        driver = drivers[digest]
        prepared = launches.prepare(driver, (a, b))
        if prepared is not None:
            ways["launch"] = lambda: prepared(a, b)
        a_ptr, b_ptr = a.data.ptr, b.data.ptr
        if hasattr(driver, "solve_raw"):
            ways["driver"] = lambda: driver.solve_raw(a_ptr, b_ptr, m, n, m, m)
        else:
            ways["driver"] = lambda: driver.solve(a, b)
    ways["cublas"] = lambda: cublas_trsm(a, b)
    ways["cublas_ctypes"] = lambda: vendor.solve(a, b)
    return {name: ways[name] for name in VARIANTS if name in ways}


def measure_shape(
    solver: Any,
    dtype: str,
    m: int,
    n: int,
    *,
    calls: int,
    graph_calls: int,
    replays: int,
    drivers: dict[str, Any] | None = None,
) -> ShapeResult:
    """Check and time every way of solving one (m, n) problem in ``dtype`` with the loaded
    ``solver`` (module doc), on a new non-blocking stream. ``drivers``: the champions' drivers
    of the ``driver`` and ``launch`` ways, kept between shapes (by cubin digest)."""
    import cupy
    import numpy as np

    cublas = importlib.import_module(f"{seeds_package.__name__}.cublas")
    a_host, b_host, x_ref = make_problem(m, n, dtype)
    stream = cupy.cuda.Stream(non_blocking=True)
    vendor = cublas.VendorTrsm(dtype, stream)
    try:
        with stream:
            a = cupy.asfortranarray(cupy.asarray(a_host))
            pristine = cupy.asfortranarray(cupy.asarray(b_host))
            b = pristine.copy(order="F")
            start = time.perf_counter()
            solver(a, b)
            stream.synchronize()
            first_ms = (time.perf_counter() - start) * 1e3
            decision = solver.explain(m, n)
            result = ShapeResult(dtype, m, n, decision.route, decision.reason, first_ms)
            measurements = []
            scale = float(np.abs(x_ref).max())
            ways = _variants(solver, a, b, vendor, drivers if drivers is not None else {})
            for name, fn in ways.items():
                b[...] = pristine
                fn()
                error = float(np.abs(cupy.asnumpy(b, stream=stream) - x_ref).max()) / scale
                b[...] = pristine
                wall = wall_us(fn, calls, stream)
                b[...] = pristine
                graph, note = None, ""
                try:
                    graph = graph_us(fn, graph_calls, replays, stream)
                except Exception as failure:  # noqa: BLE001 - a way that cannot be captured
                    note = f"capture refused: {type(failure).__name__}"
                measurements.append(
                    Measurement(name, wall, graph, error, error <= TOLERANCE[dtype], note)
                )
            stream.synchronize()
    finally:
        vendor.close()
    return replace(result, measurements=tuple(measurements))


def run(args: argparse.Namespace, out: Any = None) -> list[ShapeResult]:
    """Every dtype and shape of ``args`` (:func:`add_arguments`) measured and printed to ``out``
    (default stdout) as it completes; the results also written to ``args.json`` when set.

    Raises:
        kernevo.NoGpuError: no usable CUDA device (checked before anything else).
        RuntimeError: ``--seed`` on the light loader install (no compiler), or a seed that
            does not compile.
    """
    from kernevo.device import current_gpu

    out = out or sys.stdout
    gpu = current_gpu()
    import_ms, load_import_ms = import_times()
    print(
        f"kernevo bench-loader on {gpu.name} ({gpu.arch}), device {gpu.index}; in a fresh "
        f"interpreter, import kernevo {import_ms:.1f} ms, from kernevo import load "
        f"{load_import_ms:.1f} ms",
        file=out,
    )
    results = []
    drivers: dict[str, Any] = {}
    for dtype in args.dtype:
        start = time.perf_counter()
        solver = seed_solver(dtype) if args.seed else _loaded(dtype)
        print(f"{OP} {dtype}: loaded in {(time.perf_counter() - start) * 1e3:.1f} ms", file=out)
        for m, n in args.shapes:
            result = measure_shape(
                solver, dtype, m, n,
                calls=args.calls, graph_calls=args.graph_calls, replays=args.replays,
                drivers=drivers,
            )  # fmt: skip
            results.append(result)
            print("\n".join(result.lines()), file=out, flush=True)
    if args.json is not None:
        write_json(args.json, results)
    return results


def import_times() -> tuple[float, float]:
    """ms to ``import kernevo`` and to ``from kernevo import load`` (from the start) in a fresh
    interpreter of this Python, as an application starting sees them."""
    probe = (
        "import time; s = time.perf_counter(); import kernevo; i = time.perf_counter(); "
        "from kernevo import load; l = time.perf_counter(); "
        "print((i - s) * 1e3, (l - s) * 1e3)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    first, second = done.stdout.split()
    return float(first), float(second)


def wrong(results: Sequence[ShapeResult]) -> list[str]:
    """The ways whose check failed, as ``float64 m=16 n=16 loaded`` (empty: all solved)."""
    return [
        f"{result.dtype} m={result.m} n={result.n} {item.variant}"
        for result in results
        for item in result.measurements
        if not item.ok
    ]


def _loaded(dtype: str) -> Any:
    """``kernevo.load(OP, dtype)`` with the environment's settings (``KERNEVO_*``)."""
    from kernevo.solver import load

    return load(OP, dtype)
