"""Where a trsm_blocked solve goes wrong on the GPU, step by step (a diagnostic, not a check).

    python3 scripts/diagnose_blocked.py [--source FILE] [--dtype float64] \\
        --shapes 2048x17 4096x17 8192x17

Per (dtype, shape), on the benchmark's inputs (``scripts/bench_blocked.py``'s ``make_problem``):
1. the candidate's inverses of the diagonal blocks against ``cupy.linalg.inv`` of each block in
   float64 (complex128): the largest relative error per block, and whether any slot stayed NaN;
2. every GEMM of ``schedule.block_schedule`` issued through cuBLAS exactly as the driver issues
   it, each followed by the same product in CuPy (float64 / complex128) on a copy of the state
   before it: the first step whose output differs beyond 1e3·ε of the dtype is printed with its
   arguments;
3. whether A or the pristine B changed during a whole ``solve_raw`` (a stray write);
4. the whole solve's largest relative error against cuBLAS ?trsm, per block row.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_blocked import make_problem, parse_shape  # noqa: E402

from evaluator.compile import compile_cubin  # noqa: E402
from seeds.registry import get_path  # noqa: E402
from seeds.trsm_blocked.schedule import Inverse, Operands, block_schedule  # noqa: E402

_ITEMSIZE = {"float32": 4, "float64": 8, "complex64": 8, "complex128": 16}


def view(cupy, base, address: int, rows: int, cols: int, ld: int):  # noqa: ANN001, ANN201
    """A column-major rows×cols view of ``base``'s memory at byte ``address`` (ld elements)."""
    size = base.itemsize
    offset = (address - base.data.ptr) // size
    flat = base.ravel(order="K")
    return cupy.lib.stride_tricks.as_strided(
        flat[offset:], shape=(rows, cols), strides=(size, ld * size)
    )


def owner(ptr: int, arrays):  # noqa: ANN001, ANN201
    """The array of ``arrays`` whose memory holds byte address ``ptr``."""
    for x in arrays:
        if x.data.ptr <= ptr < x.data.ptr + x.nbytes:
            return x
    raise ValueError(hex(ptr))


def diagnose(driver, vendor, dtype: str, m: int, n: int) -> None:  # noqa: ANN001
    """Print the four findings for one shape."""
    import cupy

    wide = np.complex128 if dtype.startswith("complex") else np.float64
    eps = float(np.finfo(np.dtype(dtype)).eps)
    a, b = make_problem(m, n, dtype, seed=m * 100003 + n)
    a0, b0 = a.copy(), b.copy()
    nb, size = driver.nb, _ITEMSIZE[dtype]
    stream = cupy.cuda.get_current_stream()
    print(f"## {dtype} {m}x{n} (NB = {nb})")

    driver.invert_raw(a.data.ptr, m, n, m, stream)
    stream.synchronize()
    inverse, work = driver._buffers(m, n)
    inv = inverse.view(dtype)
    blocks = -(-m // nb)
    worst = []
    for t in range(blocks):
        r0, r1 = t * nb, min((t + 1) * nb, m)
        got = view(cupy, inv, inv.data.ptr + t * nb * nb * size, r1 - r0, r1 - r0, nb)
        ref = cupy.linalg.inv(cupy.tril(cupy.nan_to_num(a[r0:r1, r0:r1], nan=0)).astype(wide))
        finite = bool(cupy.isfinite(got).all())
        err = float(cupy.abs(got.astype(wide) - ref).max() / cupy.abs(ref).max())
        worst.append((err, t, finite))
    err, t, finite = max(worst)
    every = all(f for _, _, f in worst)
    print(f"inverses: worst block err {err:.2e} (block {t}, finite {finite}); all finite: {every}")

    # The GEMMs one by one, each checked against CuPy on the state before it.
    work_b = b.copy(order="F")
    w = work.view(dtype)
    ops = Operands(a.data.ptr, m, work_b.data.ptr, m, inverse.data.ptr, work.data.ptr, size)
    gemm = driver._gemm
    gemm.set_stream(stream.ptr)
    flagged = False
    arrays = (inv, a, work_b, w)
    for i, step in enumerate(block_schedule(m, nb)):
        if isinstance(step, Inverse):
            args = (step.rows, n, step.rows, 1.0,
                    ops.inverses + step.block * nb * nb * size, nb,
                    ops.b + step.row0 * size, m, 0.0, ops.w + step.row0 * size, m)  # fmt: skip
        else:
            args = (step.rows, n, step.cols, -1.0,
                    ops.a + (step.col0 * m + step.row0) * size, m,
                    ops.w + step.col0 * size, m, 1.0, ops.b + step.row0 * size, m)  # fmt: skip
        rows, cols, k, alpha, pa, lda, pb, ldb, beta, pc, ldc = args
        opa = view(cupy, owner(pa, arrays), pa, rows, k, lda).astype(wide)
        opb = view(cupy, owner(pb, arrays), pb, k, cols, ldb).astype(wide)
        c_before = view(cupy, owner(pc, arrays), pc, rows, cols, ldc).astype(wide)
        expect = alpha * (opa @ opb) + (beta * c_before if beta else 0)
        gemm.gemm(*args)
        stream.synchronize()
        got = view(cupy, owner(pc, arrays), pc, rows, cols, ldc).astype(wide)
        scale = float(cupy.abs(expect).max()) or 1.0
        err = float(cupy.abs(got - expect).max()) / scale
        nonfinite = not bool(cupy.isfinite(got).all())
        if (err > 1e3 * eps or nonfinite) and not flagged:
            flagged = True
            print(f"step {i} {step}: rel err {err:.2e}, non-finite {nonfinite}; gemm(m={rows}, "
                  f"n={cols}, k={k}, alpha={alpha}, lda={lda}, ldb={ldb}, beta={beta}, "
                  f"ldc={ldc})")  # fmt: skip
    if not flagged:
        print("every GEMM step matches CuPy")

    # A whole solve: stray writes, and the error per block row against cuBLAS.
    x = b.copy(order="F")
    driver.solve_raw(a.data.ptr, x.data.ptr, m, n, m, m, stream)
    ref = b.copy(order="F")
    vendor.set_stream(stream)
    vendor.solve_raw(a.data.ptr, ref.data.ptr, m, n, m, m)
    stream.synchronize()
    same_a = bool(((a == a0) | (cupy.isnan(a) & cupy.isnan(a0))).all())
    print(f"A unchanged: {same_a}; B unchanged: {bool((b == b0).all())}")
    rows_err = []
    for t in range(blocks):
        r0, r1 = t * nb, min((t + 1) * nb, m)
        d = cupy.abs(x[r0:r1].astype(wide) - ref[r0:r1].astype(wide)).max()
        rows_err.append(float(d / (cupy.abs(ref[r0:r1]).max() + 1e-300)))
    bad = [t for t, e in enumerate(rows_err) if not e < 1e3 * eps]
    print(f"block rows off cuBLAS beyond 1e3·eps: {bad[:12]} (of {blocks}); "
          f"worst {max(rows_err):.2e}")  # fmt: skip


def main() -> int:
    """Run the diagnosis for every (dtype, shape) asked for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="+", default=["float64"])
    parser.add_argument("--shapes", nargs="+", type=parse_shape, required=True)
    parser.add_argument("--source", type=Path)
    args = parser.parse_args()
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    import cupy

    spec = get_path("trsm_blocked")
    source = args.source.read_text() if args.source else spec.seed_source()
    arch = "sm_{}{}".format(*cupy.cuda.Device().compute_capability)
    for dtype in args.dtype:
        compiled = compile_cubin(source, spec.compile_options(dtype, arch), arch)
        driver, vendor = spec.driver(compiled.cubin, dtype), spec.baseline(dtype)
        for m, n in args.shapes:
            diagnose(driver, vendor, dtype, m, n)
        driver.close()
        vendor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
