"""Launch a compiled candidate on one random problem: the target process for Nsight Compute
and compute-sanitizer (``python -m evaluator.run_once --cubin F --path P --dtype D --m M --n
N``: the shape by the path's op's parameters, ``--n 64 --k 6 --b2 4 --b3 2`` for solve_tri).

The problem is the op's suite's (``evaluator.op_suites``: ``OpSuite.run_once``). For trsm, A
and B are each their own device allocation of exactly m·m and m·n elements: CuPy's memory pool
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
    from seeds import ops

    for name in ops.param_names():  # every op's shape parameters; the path's op takes its own
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    # The tool that runs this (compute-sanitizer, ncu) dies with the job; so does this target
    # (and, when its parent is the tool's launcher, the reaper of evaluator.tools kills it).
    die_with_parent(os.getppid())

    import cupy

    from evaluator.op_suites import suite_for
    from seeds.registry import get_path

    cupy.cuda.set_allocator(None)  # every array the suite makes is one cudaMalloc of its size
    spec = get_path(args.path)
    try:
        shape = ops.get_op(spec.op).shape_from({name: getattr(args, name) for name in spec.params})
    except ops.ShapeError as error:
        parser.error(str(error))
    driver = spec.driver(args.cubin.read_bytes(), args.dtype)
    suite_for(spec.op).run_once(driver, spec, args.dtype, shape, args.repeat)


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
