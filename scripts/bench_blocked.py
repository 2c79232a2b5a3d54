"""trsm_blocked against cuBLAS at large shapes, with the inversion / GEMM split (issue 7, Show).

    python3 scripts/bench_blocked.py --dtype float32 float64 \\
        --shapes 256x256 1024x1024 2048x2048 4096x4096 8192x8192 16384x16384 4096x17 129x8192 \\
        [--source FILE] [--json OUT.json]

Per (dtype, shape): graph-replayed device µs per call, median over rounds, of the candidate's
whole solve (its diagonal-block kernel, the GEMMs, the copy back), of its inversion phase alone
(``TrsmBlockedDriver.invert_raw``: the paper's Table 3 split; GEMM time = solve − inversion),
and of cuBLAS ?trsm, interleaved in every round; GFLOP/s by LAWN 41's count for TRSM (side L:
m²·n flops real, 4·m²·n complex: a complex multiply-add is 8 real flops, a real one 2); and the
largest LAPACK xTRT02 ratio over B's columns of each solution, ‖b_j − A·x_j‖₁ / (‖A‖₁·‖x_j‖₁·ε)
with ε the unit roundoff and no factor m, computed on the GPU in float64 (complex128) by the
evaluator's own check (``evaluator.checks.lapack_ratio``), which must stay under its threshold
(30, LAPACK testing's). Every graph copies a pristine B into the work B before each solve (TRSM
works in place); a graph of the copies alone is timed and subtracted.

Inputs: A lower triangular with off-diagonals N(0, 1)/√m and diagonal magnitudes in [1, 2]
(bounded growth), NaN in the strict upper triangle (BLAS never reads it); B N(0, 1). This is a
benchmark, not the evaluator: it runs no integrity or replay checks (the evaluator's timing
does, at the path's timed shapes).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.checks.lapack_ratio import LAPACK_THRESHOLD, lapack_ratios
from evaluator.compile import compile_cubin
from seeds.registry import get_path

COMPLEX = ("complex64", "complex128")


@dataclass
class Row:
    """One (dtype, shape): µs per call (medians), GFLOP/s and the worst xTRT02 ratios."""

    dtype: str
    m: int
    n: int
    calls: int
    cublas_us: float
    kernel_us: float
    inversion_us: float | None
    speedup: float
    cublas_gflops: float
    kernel_gflops: float
    kernel_ratio: float
    cublas_ratio: float

    def markdown(self) -> str:
        if self.inversion_us is None:
            split = "direct solve (m ≤ NB)"
        else:
            gemm, share = self.kernel_us - self.inversion_us, self.inversion_us / self.kernel_us
            split = f"{self.inversion_us:.1f} / {gemm:.1f} ({100 * share:.0f} % inv.)"
        return (
            f"| {self.dtype} | {self.m}×{self.n} | {self.cublas_us:.1f} | {self.kernel_us:.1f} "
            f"| {self.speedup:.2f}× | {self.cublas_gflops:.0f} | {self.kernel_gflops:.0f} "
            f"| {split} | {self.kernel_ratio:.2f} | {self.cublas_ratio:.2f} |"
        )


HEADER = (
    "| dtype | m×n | cuBLAS µs | kernel µs | speedup | cuBLAS GFLOP/s | kernel GFLOP/s "
    "| inversion / GEMM µs | xTRT02 kernel | xTRT02 cuBLAS |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def flops(m: int, n: int, dtype: str) -> float:
    """LAWN 41 operation count of TRSM, side L (real m²·n; complex 4·m²·n)."""
    return (4.0 if dtype in COMPLEX else 1.0) * m * m * n


def make_problem(m: int, n: int, dtype: str, seed: int) -> tuple[Any, Any]:
    """A (m×m, NaN above the diagonal) and B (m×n), Fortran order, on the device."""
    import cupy

    rng = cupy.random.default_rng(seed)
    real = np.float32 if dtype in ("float32", "complex64") else np.float64

    def normal(*shape: int) -> Any:
        z = rng.standard_normal(shape, dtype=real)
        if dtype in COMPLEX:
            z = z + 1j * rng.standard_normal(shape, dtype=real)
        return z

    a = cupy.tril(normal(m, m), -1) / np.sqrt(m)
    diagonal = 1.0 + rng.random(m, dtype=real)
    if dtype in COMPLEX:
        phase = cupy.exp(2j * np.pi * rng.random(m, dtype=real))
        diagonal = diagonal * phase
    a += cupy.diag(diagonal)
    above = cupy.arange(m)[None, :] > cupy.arange(m)[:, None]
    a = cupy.where(above, np.nan, a)
    return cupy.asfortranarray(a.astype(dtype)), cupy.asfortranarray(normal(m, n).astype(dtype))


def trt02_ratio(a: Any, b: Any, x: Any) -> float:
    """The largest LAPACK xTRT02 ratio over the columns of ``x`` (``lapack_ratios``: no factor
    m, ε = u, the products widened to float64 / complex128), computed where the arrays live
    (CuPy on the device, NumPy on the host); inf when ``x`` holds a non-finite value."""
    if not bool(np.isfinite(x).all()):  # NumPy's ufunc runs as CuPy's on a device array
        return math.inf
    return float(lapack_ratios(a, b, x).max())


def calls_per_graph(m: int, n: int, dtype: str) -> int:
    """Enough solves per graph that launch overhead is small, few enough for large shapes."""
    return int(max(1, min(50, 2e10 // flops(m, n, dtype))))


def bench_shape(driver: Any, vendor: Any, dtype: str, m: int, n: int, rounds: int) -> Row:
    """One row: the graphs captured and replayed ``rounds`` times after two warm-up rounds."""
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    vendor.set_stream(stream)
    a, b = make_problem(m, n, dtype, seed=m * 100003 + n)
    work = cupy.empty_like(b)
    # make_problem ran on the legacy stream, which a non-blocking stream does not wait for: the
    # first solves read A and B while they were still being written (a kernel ratio of 72 at
    # 4096² float32, inf at 8192², on the H200: docs/RESULTS.md section 16).
    cupy.cuda.Device().synchronize()
    calls = calls_per_graph(m, n, dtype)

    def restore() -> None:
        cupy.cuda.runtime.memcpyAsync(
            work.data.ptr, b.data.ptr, b.nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr
        )

    def kernel() -> None:
        driver.solve_raw(a.data.ptr, work.data.ptr, m, n, m, m, stream)

    def cublas() -> None:
        vendor.solve_raw(a.data.ptr, work.data.ptr, m, n, m, m)

    def inversion() -> None:
        driver.invert_raw(a.data.ptr, m, n, m, stream)

    blocked = m > driver.nb
    bodies = {"kernel": kernel, "cublas": cublas, "copy": lambda: None}
    if blocked:
        bodies["inversion"] = inversion
    ratios = {}
    with stream:
        for key in ("kernel", "cublas"):  # first calls outside capture (workspaces, modules)
            restore()
            bodies[key]()
            stream.synchronize()
            ratios[key] = trt02_ratio(a, b, work)
        if blocked:
            inversion()
        graphs = {}
        for key, body in bodies.items():
            stream.begin_capture()
            for _ in range(calls):
                if key != "inversion":
                    restore()
                body()
            graphs[key] = stream.end_capture()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    samples: dict[str, list[float]] = {key: [] for key in graphs}
    order = list(graphs)
    for r in range(rounds + 2):
        for key in order[r % len(order) :] + order[: r % len(order)]:
            start.record(stream)
            graphs[key].launch(stream)
            stop.record(stream)
            stop.synchronize()
            if r >= 2:
                samples[key].append(cupy.cuda.get_elapsed_time(start, stop) * 1e3 / calls)
    median = {key: float(np.median(v)) for key, v in samples.items()}
    kernel_us = median["kernel"] - median["copy"]
    cublas_us = median["cublas"] - median["copy"]
    work_flops = flops(m, n, dtype)
    return Row(
        dtype, m, n, calls, cublas_us, kernel_us, median.get("inversion"), cublas_us / kernel_us,
        work_flops / cublas_us / 1e3, work_flops / kernel_us / 1e3, ratios["kernel"],
        ratios["cublas"],
    )  # fmt: skip


def parse_shape(text: str) -> tuple[int, int]:
    """``"4096x17"`` → (4096, 17)."""
    try:
        m, n = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r} is not MxN") from None
    return m, n


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when a solution's ratio reaches the threshold."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", nargs="+", default=["float32", "float64"])
    parser.add_argument("--shapes", nargs="+", type=parse_shape, required=True)
    parser.add_argument("--source", type=Path, help="a candidate kernel (default: the seed)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--label", default="seed")
    args = parser.parse_args(argv)
    from needs_gpu import exit_without_gpu

    exit_without_gpu(__file__)
    import cupy

    spec = get_path("trsm_blocked")
    source = args.source.read_text() if args.source else spec.seed_source()
    arch = "sm_{}{}".format(*cupy.cuda.Device().compute_capability)
    rows: list[Row] = []
    print(f"{args.label}: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(HEADER)
    for dtype in args.dtype:
        compiled = compile_cubin(source, spec.compile_options(dtype, arch), arch)
        if not compiled.ok:
            print(f"| {dtype} | compile failed: {compiled.log.splitlines()[:1]} |")
            return 1
        driver, vendor = spec.driver(compiled.cubin, dtype), spec.baseline(dtype)
        try:
            for m, n in args.shapes:
                row = bench_shape(driver, vendor, dtype, m, n, args.rounds)
                rows.append(row)
                print(row.markdown(), flush=True)
                cupy.get_default_memory_pool().free_all_blocks()  # 16384² complex128: 4 GiB each
        finally:
            driver.close()
            vendor.close()
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    bad = [r for r in rows if not max(r.kernel_ratio, r.cublas_ratio) < LAPACK_THRESHOLD]
    for r in bad:
        print(f"xTRT02 ratio >= {LAPACK_THRESHOLD} at {r.dtype} {r.m}x{r.n}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
