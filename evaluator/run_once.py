"""Launch a compiled candidate on one random problem: the target process for Nsight Compute
and compute-sanitizer (``python -m evaluator.run_once --cubin F --path P --dtype D --m M --n N``).

A and B are each their own device allocation of exactly m·m and m·n elements: CuPy's memory pool
is switched off (with it on, buffers are carved out of larger pooled blocks, and an access past
B lands in pooled memory that compute-sanitizer counts as allocated), and the arrays are created
at their exact size (no padding, no view into a larger buffer). Exact sizes matter because
memcheck judges an access against the size the program *requested*: ``cudaMalloc`` rounds an
allocation up (to at least 256 bytes) and a write into that rounding reaches memory the driver
did allocate, yet compute-sanitizer tracks the requested size and reports it. A write past B that
puts back the bytes it read there is seen this way and by no content check (docs/EVALUATOR.md,
"Memcheck before a new job best").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

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
    # The tool that runs this (compute-sanitizer, ncu) dies with the job; so does this target
    # (and, when its parent is the tool's launcher, the reaper of evaluator.tools kills it).
    die_with_parent(os.getppid())

    import cupy

    from evaluator.inputs import make_problem
    from seeds.registry import get_path

    cupy.cuda.set_allocator(None)  # every array below is one cudaMalloc of its own size
    driver = get_path(args.path).driver(args.cubin.read_bytes(), args.dtype)
    problem = make_problem(args.m, args.n, args.dtype, seed=7)
    a = exact_device_copy(cupy, problem.a)
    for _ in range(args.repeat):
        b = exact_device_copy(cupy, problem.b)  # B afresh: TRSM overwrites it in place
        # On raw pointers, as the verification launches: the sanitizer shape (33, 31) lies
        # outside the envelope of a path that serves m = 64 only (trsm_small_z64), which
        # ``solve`` refuses, yet the verification runs such a path there too.
        driver.solve_raw(a.data.ptr, b.data.ptr, args.m, args.n, args.m, args.m)
    cupy.cuda.Device().synchronize()


def exact_device_copy(cupy: Any, host: Any) -> Any:
    """A Fortran-order device copy of the host array ``host`` in an allocation of exactly its
    ``nbytes`` (CuPy's pool must be off).

    Raises:
        RuntimeError: the allocation is larger than the array (a pool is on): memcheck could
            not see an access just past it.
    """
    array = cupy.empty(host.shape, host.dtype, order="F")
    array.set(host)
    if array.data.mem.size != array.nbytes:
        raise RuntimeError(
            f"device array of {array.nbytes} bytes sits in an allocation of "
            f"{array.data.mem.size}: CuPy's memory pool is on"
        )
    return array


if __name__ == "__main__":
    main()
