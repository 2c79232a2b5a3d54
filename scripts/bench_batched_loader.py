"""Issue 11's batched entry where an application calls it: ``kernevo.load("trsm_batched",
dtype)`` serving the trsm_small_batched seed compiled here (``kernevo.bench_loader.SeedResolver``,
no service), against cuBLAS ?trsmBatched through CuPy (the loader's fallback, what an
application calls without kernevo) and through ctypes on a stream-bound handle with pointer
arrays built once (``seeds.cublas.VendorTrsmBatched``, the evaluator's baseline).

Per dtype and (m, n, batch): each way checked against a float64 (complex128) solve on the host,
then wall time per call (``--calls`` calls in a loop, one synchronization after) and device
time per call (``--graph-calls`` calls in one CUDA graph, median of ``--replays`` replays timed
by CUDA events; CuPy's wrapper refuses capture, so it has none): bench_loader's method.

The problem per batch index: A = I + L, L strictly lower uniform in [−10⁻³/m, 10⁻³/m], B uniform
in [−1, 1] (real and imaginary parts), so thousands of in-place solves keep B finite (see
``kernevo.bench_loader``).

Usage: python scripts/bench_batched_loader.py [--dtype ...] [--shapes 16x16x1000 ...]
Prints one Markdown table. Needs a GPU.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from kernevo import bench_loader
from kernevo.paths import ops

OP = "trsm_batched"
DEFAULT_SHAPES = ("16x16x1000", "32x32x1000", "48x48x1000", "64x64x1000")


def measure(dtype: str, m: int, n: int, batch: int, args: argparse.Namespace) -> list[str]:
    """The table rows of one dtype and shape."""
    import cupy

    from kernevo.device import current_gpu
    from kernevo.solver import OpSolver
    from seeds.cublas import VendorTrsmBatched

    a_host, b_host, x_ref = bench_loader.make_problem(m, n, dtype, batch=(batch,))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a, b = cupy.asarray(a_host), cupy.asarray(b_host)
        solver = OpSolver(bench_loader.SeedResolver(OP, dtype, current_gpu()))  # type: ignore[arg-type]
        fallback = ops.get_op(OP).call().fallback
        vendor = VendorTrsmBatched(dtype, stream, pointers="cached")
        item = a.dtype.itemsize
        nb_a = (m * item, m * m * item, m * m * batch * item)
        nb_x = (n * item, m * n * item, m * n * batch * item)

        def ctypes_call() -> None:
            vendor.solve_raw(a.data.ptr, b.data.ptr, m, n, batch, 1, nb_a, nb_x)

        ways: dict[str, Any] = {
            "loaded": lambda: solver(a, b),
            "cublas (CuPy)": lambda: fallback(a, b),
            "cublas (ctypes)": ctypes_call,
        }
        rows = []
        scale = float(np.abs(x_ref).max())
        for name, fn in ways.items():
            b.set(b_host)
            fn()
            stream.synchronize()
            error = float(np.abs(b.get() - x_ref).max()) / scale
            ok = error <= bench_loader.TOLERANCE[dtype]
            wall = bench_loader.wall_us(fn, args.calls, stream)
            graph = "—"
            if name != "cublas (CuPy)":
                graph = f"{bench_loader.graph_us(fn, args.graph_calls, args.replays, stream):.2f}"
            route = solver.explain(m, n, batch).route if name == "loaded" else "—"
            rows.append(
                f"| {dtype} | {m}x{n}x{batch} | {name} | {route} | {wall:.2f} | {graph} | "
                f"{error:.1e} {'ok' if ok else 'WRONG'} |"
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "float64", "complex64",
                                                       "complex128"])  # fmt: skip
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--graph-calls", type=int, default=100)
    parser.add_argument("--replays", type=int, default=20)
    args = parser.parse_args()
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    print("| dtype | shape | way | route | wall µs/call | device µs/call | max rel. err |")
    print("|---|---|---|---|---|---|---|")
    for dtype in args.dtype:
        for text in args.shapes:
            m, n, batch = (int(part) for part in text.lower().split("x"))
            for row in measure(dtype, m, n, batch, args):
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
