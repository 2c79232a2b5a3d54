"""`kernevo.load("trsm", dtype)` over shapes from 1×1 to 16384×16384 against a running service.

    python3 scripts/trsm_sweep.py --dtype complex128 --api http://127.0.0.1:8000 --cache DIR \\
        [--shapes 1x1 64x64 ...] [--expect-paths trsm_small trsm_blocked cublas]

Each shape is solved through the loaded callable on the device (A lower triangular with NaN
above the diagonal, bounded growth, as ``scripts/bench_blocked.py`` draws it); the line printed
per shape is the route ``explain(m, n)`` gives (path and bucket, or cuBLAS) with its reason, the
wall time of the call and the solution's LAPACK xTRT02 ratio (must stay under 30). Exit 1 when a
ratio reaches 30 or a path named by ``--expect-paths`` served no shape (issue 7, Show: routed to
three paths and cuBLAS).
"""

from __future__ import annotations

import argparse
import sys
import time

from bench_blocked import LAPACK_THRESHOLD, make_problem, parse_shape, trt02_ratio

DEFAULT_SHAPES = (
    "1x1", "7x3", "16x16", "33x2", "48x48", "64x1", "64x33", "64x64", "65x65", "100x100",
    "127x5", "128x1", "128x128", "129x8192", "300x17", "1000x1000", "1024x1024", "2048x2048",
    "4096x17", "4096x4096", "8192x8192", "16384x1", "16384x16384",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Solve and print every shape; the exit status says whether the sweep held."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--api", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=None)
    parser.add_argument("--expect-paths", nargs="*", default=[])
    args = parser.parse_args(argv)
    shapes = args.shapes or [parse_shape(s) for s in DEFAULT_SHAPES]
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    import cupy

    import kernevo

    solver = kernevo.load("trsm", args.dtype, api_url=args.api, cache_dir=args.cache)
    served: dict[str, int] = {}
    worst = 0.0
    print("| m×n | route | µs (wall, 1 call) | xTRT02 | reason |\n|---|---|---|---|---|")
    for m, n in shapes:
        a, b = make_problem(m, n, args.dtype, seed=7 * m + n)
        b_copy = b.copy()
        solver(a, b)  # first call: the shape's decision, module load, workspaces
        b[...] = b_copy
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        x = solver(a, b)
        cupy.cuda.Device().synchronize()
        wall_us = (time.perf_counter() - start) * 1e6
        ratio = trt02_ratio(a, b_copy, x)
        worst = max(worst, ratio)
        decision = solver.explain(m, n)
        route = (
            f"{decision.path}/{decision.shape_bucket}" if decision.route == "kernel" else "cublas"
        )
        served[route.split("/")[0]] = served.get(route.split("/")[0], 0) + 1
        print(f"| {m}×{n} | {route} | {wall_us:.0f} | {ratio:.2f} | {decision.reason[:160]} |")
        del a, b, b_copy, x
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"routes: {served}; worst xTRT02 ratio {worst:.2f} (threshold {LAPACK_THRESHOLD:g})")
    missing = [p for p in args.expect_paths if p not in served]
    if missing:
        print(f"no shape went to {', '.join(missing)}", file=sys.stderr)
    return 0 if worst < LAPACK_THRESHOLD and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
