"""Launch a compiled candidate on one random problem: the target process for Nsight Compute
and compute-sanitizer (``python -m evaluator.run_once --cubin F --path P --dtype D --m M --n N``).

CuPy's memory pool is switched off so every buffer is its own allocation: with the pool on, an
out-of-bounds write lands in pooled memory and compute-sanitizer cannot see it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from evaluator.parent_watch import die_with_parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cubin", type=Path, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--m", type=int, required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    # The tool that runs this (compute-sanitizer, ncu) dies with the job; so does this target.
    die_with_parent(os.getppid())

    import cupy

    from evaluator.inputs import make_problem
    from seeds.registry import get_path
    from seeds.trsm_small.driver import TrsmSmallDriver

    cupy.cuda.set_allocator(None)
    driver = TrsmSmallDriver(args.cubin.read_bytes(), args.dtype, get_path(args.path))
    problem = make_problem(args.m, args.n, args.dtype, seed=7)
    a = cupy.asfortranarray(cupy.asarray(problem.a))
    for _ in range(args.repeat):
        b = cupy.asfortranarray(cupy.asarray(problem.b))
        driver.solve(a, b)
    cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main()
