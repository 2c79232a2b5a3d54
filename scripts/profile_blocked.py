"""One trsm_blocked solve inside a profiler range, for Nsight Compute (issue 7: what limits the
blocked solve where it misses the 1.2× target, float32 at 16384²).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section ComputeWorkloadAnalysis --section Occupancy -c 12 \\
        python3 scripts/profile_blocked.py --dtype float32 --shape 16384x16384 [--source FILE]

The candidate (default: the seed) is compiled for the device and one solve runs outside the
range first (cuBLAS's handle, workspace and kernel loading, the driver's own set-up); the second
solve alone runs between ``cudaProfilerStart`` and ``cudaProfilerStop``, so ``--profile-from-
start off`` sees only its kernels: the diagonal-block inversion first, then the block rows'
cuBLAS GEMMs in order (Nsight Compute names each kernel, so its report says which cuBLAS GEMM
kernel ran). The inputs are ``scripts/bench_blocked.py``'s. Prints the device and the block size
NB. Exit 1 when the compile fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_blocked import make_problem, parse_shape  # noqa: E402

from evaluator.compile import compile_cubin  # noqa: E402
from seeds.registry import get_path  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Solve once to warm up, once inside the profiler range; 0, or 1 on a compile failure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--shape", type=parse_shape, default=(16384, 16384))
    parser.add_argument("--source", type=Path, help="a candidate kernel (default: the seed)")
    args = parser.parse_args(argv)
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    import cupy

    spec = get_path("trsm_blocked")
    source = args.source.read_text() if args.source else spec.seed_source()
    arch = "sm_{}{}".format(*cupy.cuda.Device().compute_capability)
    compiled = compile_cubin(source, spec.compile_options(args.dtype, arch), arch)
    if not compiled.ok:
        print(f"compile failed: {compiled.log.splitlines()[:1]}", file=sys.stderr)
        return 1
    m, n = args.shape
    driver = spec.driver(compiled.cubin, args.dtype)
    try:
        a, b = make_problem(m, n, args.dtype, seed=1)
        work = b.copy(order="F")
        driver.solve_raw(a.data.ptr, work.data.ptr, m, n, m, m)  # warm-up, outside the range
        cupy.cuda.Device().synchronize()
        work[...] = b
        cupy.cuda.Device().synchronize()
        cupy.cuda.runtime.profilerStart()
        driver.solve_raw(a.data.ptr, work.data.ptr, m, n, m, m)
        cupy.cuda.Device().synchronize()
        cupy.cuda.runtime.profilerStop()
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        print(f"{name}: trsm_blocked {args.dtype} {m}x{n}, NB = {driver.nb}, one solve profiled")
    finally:
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
