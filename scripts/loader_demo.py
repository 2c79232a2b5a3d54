"""`kernevo.load` against a running `kernevo serve`, then with the service stopped.

    python scripts/loader_demo.py --dtype float64 --api http://127.0.0.1:8000 --cache DIR
        [--service-stopped]

Checks X against cuBLAS (through CuPy) within the dtype's tolerance for shapes inside the
envelope, shows that 100×100 goes to cuBLAS, and prints every routing decision with its reason.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--api", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--service-stopped", action="store_true")
    args = parser.parse_args()
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    import cupy
    from cupyx.scipy.linalg import solve_triangular

    import kernevo
    from evaluator.inputs import make_problem

    solver = kernevo.load("trsm", args.dtype, api_url=args.api, cache_dir=args.cache)
    tol = 1e-4 if args.dtype in ("float32", "complex64") else 1e-10
    ok = True
    for m, n in [(64, 64), (48, 48), (33, 7), (100, 100)]:
        problem = make_problem(m, n, args.dtype, seed=99)
        a = cupy.asfortranarray(cupy.asarray(np.tril(np.nan_to_num(problem.a))))
        b = cupy.asfortranarray(cupy.asarray(problem.b))
        expected = solve_triangular(a, b.copy(), lower=True)
        x = solver(a, b)
        rel = float(cupy.abs(x - expected).max() / cupy.abs(expected).max())
        decision = solver.explain(m, n)
        want = "cublas" if m > 64 else "kernel"
        good = rel <= tol and decision.route == want
        ok &= good
        print(
            f"{m}x{n}: route={decision.route} ({decision.reason}); "
            f"max rel diff vs cuBLAS {rel:.2e} (tol {tol:g}) {'OK' if good else 'FAIL'}"
        )
    print("loader:", "OK" if ok else "FAILED", "(service stopped)" if args.service_stopped else "")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
