"""band_bidiag against LAPACK ?gbbrd (issue 8, item 3 and Show): seconds per reduction and the
speedup, for every (n, BW, dtype).

    python3 scripts/bench_band_bidiag.py --n 1024 4096 8192 16384 --bw 32 64 128 \\
        --dtype float32 float64 [--source FILE] [--repeats 5] [--check] [--lapack-only] \\
        [--json OUT.json]

Per (n, BW, dtype), on one random band (``seeds.band_bidiag.inputs.random_band``, entries
uniform in [−1, 1], seed fixed by the shape):

- **LAPACK**: ?gbbrd in the same precision (SGBBRD / DGBBRD, VECT = 'N') through SciPy's
  ``cython_lapack`` capsules, wall-clock seconds of one call (``baseline.LapackGbbrd``). It is
  LAPACK's reference code, single-threaded: the speedup is over one CPU core, and it is timed
  once per (n, BW, dtype), not interleaved with the kernel (27 s at n = 16384, BW = 32 on the
  machine issue 8 measured; about 45 s on the development machine).
- **kernel** (unless ``--lapack-only``; without a usable GPU the script then stops at once,
  one line on stderr, exit 1: ``needs a GPU: no CUDA GPU found: …``): the seed (or ``--source``)
  compiled for the device, the whole reduction captured once in a CUDA graph
  (``BandBidiagDriver.graph``; capture and instantiation seconds reported apart), then
  ``--repeats`` replays, each on a freshly loaded band (the reduction works in place; the load
  is outside the timed events), CUDA events around the replay alone: the median in seconds.
  ``launches``: kernel launches in one reduction (``schedule.launches``).
- ``--check``: the kernel's (d, e) judged by the path's check (``reference.check_bidiagonal``:
  singular values against DGBBRD + DBDSQR in float64; in float64 the baseline's own DGBBRD is
  that reference, in float32 it costs one more DGBBRD).
- ``--lapack-jobs J`` (default 1): the host work (each ?gbbrd timing and, with ``--check``, each
  float32 row's float64 reference, a task of its own) runs in J worker processes, largest sizes
  first, while the GPU times the kernels; each ?gbbrd is still one single-threaded call, but J
  of them share the host's cores, caches and memory bandwidth, which can only slow each one down
  (and so raise the speedup): ``--solo N BW`` also times that one (n, BW) alone in every dtype
  after the pool has finished, and the table prints both, so the effect is measured, not
  assumed.

Prints a Markdown table headed by the command, the GPU, the CPU and the date.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from seeds.band_bidiag import inputs, schedule
from seeds.band_bidiag.baseline import LapackGbbrd
from seeds.band_bidiag.lapack import bdsqr_singular_values
from seeds.band_bidiag.reference import check_bidiagonal, reference_singular_values
from seeds.band_bidiag.spec import BAND_BIDIAG


@dataclass
class Row:
    """One (n, BW, dtype): seconds per reduction and what the check said."""

    n: int
    bw: int
    dtype: str
    lapack_s: float
    tw: int | None = None
    launches: int | None = None
    capture_s: float | None = None
    kernel_s: float | None = None
    speedup: float | None = None
    check: str = "not run"

    def markdown(self) -> str:
        def fmt(value: float | None, spec: str) -> str:
            return "—" if value is None else format(value, spec)

        return (
            f"| {self.n} | {self.bw} | {self.dtype} | {fmt(self.lapack_s, '.3f')} | "
            f"{self.tw or '—'} | {self.launches or '—'} | {fmt(self.capture_s, '.2f')} | "
            f"{fmt(self.kernel_s, '.4f')} | {fmt(self.speedup, '.1f')} | {self.check} |"
        )


HEADER = (
    "| n | BW | dtype | LAPACK ?gbbrd s (1 core) | TW | launches | graph capture s | "
    "kernel s (median) | speedup | check |\n|---|---|---|---|---|---|---|---|---|---|"
)


def gpu_driver(source: str, dtype: str) -> tuple[Any, str]:
    """The candidate's driver on device 0 and the device's name.

    Raises:
        RuntimeError: the compile failed (with its log).
    """
    import cupy

    from evaluator.compile import compile_cubin
    from seeds.hardware import arch_for_compute_capability

    major, minor = divmod(int(cupy.cuda.Device().compute_capability), 10)
    arch = arch_for_compute_capability(major, minor)
    result = compile_cubin(source, BAND_BIDIAG.compile_options(dtype, arch), arch)
    if not result.ok:
        raise RuntimeError(f"compile failed:\n{result.log}")
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    return BAND_BIDIAG.driver(result.cubin, dtype), name


def time_kernel(driver: Any, band: np.ndarray, repeats: int) -> tuple[float, float, Any, Any]:
    """(capture seconds, median replay seconds, d, e) of the graph of one (n, BW)."""
    import cupy

    n, bw = band.shape[1], band.shape[0] - 1
    device_band = cupy.asfortranarray(cupy.asarray(band))
    cupy.cuda.Device().synchronize()  # made on the legacy stream, which `stream` does not wait for
    stream = cupy.cuda.Stream(non_blocking=True)
    start = time.perf_counter()
    graph = driver.graph(n, bw)
    if graph is None:  # bandwidth <= 1: nothing to launch
        ab, layout = driver.load(device_band, stream)
        return 0.0, 0.0, ab[layout.ku, :].get(), ab[layout.ku - 1, 1:].get()
    graph.upload(stream)
    stream.synchronize()
    capture = time.perf_counter() - start
    samples = []
    for _ in range(repeats + 1):  # the first replay warms up
        ab, layout = driver.load(device_band, stream)
        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        begin.record(stream)
        graph.launch(stream)
        end.record(stream)
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(begin, end) / 1e3)
    d, e = ab[layout.ku, :].get(), ab[layout.ku - 1, 1:].get()
    return capture, statistics.median(samples[1:]), d, e


def band_of(n: int, bw: int, dtype: str) -> np.ndarray:
    """The benchmark's band of (n, BW) in ``dtype``: random entries, seed fixed by the shape."""
    rng = np.random.default_rng(n * 1000 + bw)
    return inputs.random_band(n, bw, np.dtype(dtype).type, rng)


def host_time(n: int, bw: int, dtype: str, want_sigma: bool) -> tuple[float, np.ndarray | None]:
    """Seconds of one ?gbbrd in ``dtype`` on the (n, BW) band (the host copy and dtype
    conversion not counted, as ``LapackGbbrd.time``), and, when ``want_sigma`` and the dtype is
    float64, the reference singular values from that same DGBBRD's (d, e). Runs in a worker
    process of its own."""
    lapack = LapackGbbrd(dtype)
    lapack.reduce(band_of(8, 2, dtype))  # loads SciPy's LAPACK and the capsule untimed
    seconds, d, e = lapack.timed_reduce(band_of(n, bw, dtype))
    sigma = bdsqr_singular_values(d, e) if want_sigma and dtype == "float64" else None
    return seconds, sigma


def host_reference(n: int, bw: int, dtype: str) -> np.ndarray:
    """The float64 reference singular values of the (n, BW) band in ``dtype`` (widened, DGBBRD,
    DBDSQR): a task of its own, so a float32 row's reference runs beside its timing."""
    return reference_singular_values(band_of(n, bw, dtype))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the Markdown table (and write ``--json``). Exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    parser.add_argument("--bw", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--dtype", nargs="+", default=list(BAND_BIDIAG.dtypes),
                        choices=BAND_BIDIAG.dtypes)  # fmt: skip
    parser.add_argument("--source", type=Path, help="a candidate kernel (default: the seed)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="judge the kernel's (d, e)")
    parser.add_argument("--lapack-only", action="store_true", help="time LAPACK alone")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--lapack-jobs", type=int, default=1,
                        help="host worker processes for ?gbbrd and the references")  # fmt: skip
    parser.add_argument("--solo", type=int, nargs=2, metavar=("N", "BW"),
                        help="time this (n, BW) alone again after the pool")  # fmt: skip
    args = parser.parse_args(argv)
    if not 1 <= args.lapack_jobs <= (os.cpu_count() or 1):
        parser.error(f"--lapack-jobs must be 1 to {os.cpu_count()}; got {args.lapack_jobs}")
    if args.solo and (args.solo[0] not in args.n or args.solo[1] not in args.bw):
        parser.error(f"--solo {args.solo[0]} {args.solo[1]} is not one of the --n x --bw sizes")
    source = args.source.read_text() if args.source else BAND_BIDIAG.seed_source()

    gpu = "none"
    use_gpu = not args.lapack_only
    if use_gpu:
        # Without a GPU the table would be LAPACK's alone, the default sizes minutes of one core
        # each: asked for, not fallen back to in silence.
        from needs_gpu import exit_without_gpu

        exit_without_gpu(__file__, hint="; --lapack-only times LAPACK ?gbbrd alone")
    keys = [(n, bw, dtype) for dtype in args.dtype for n in args.n for bw in args.bw]
    if args.lapack_only:  # on stderr, at once: the first row may be minutes away
        print(
            f"bench_band_bidiag.py: timing LAPACK ?gbbrd alone (--lapack-only) at {len(keys)} "
            f"(n, BW, dtype) in {args.lapack_jobs} CPU process(es), largest first (n = 16384, "
            "BW = 32 takes 30 to 45 s)",
            file=sys.stderr,
            flush=True,
        )

    print(f"command: python3 {shlex.join(['scripts/bench_band_bidiag.py', *sys.argv[1:]])}")
    print(f"date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}")
    print(f"cpu: {platform.processor() or platform.machine()} ({platform.platform()})")
    print(f"lapack: {args.lapack_jobs} worker process(es) on {os.cpu_count()} cores")
    check = args.check and use_gpu
    # The host work starts first, largest first (n²·BW), so the pool ends about when the GPU does.
    pool = concurrent.futures.ProcessPoolExecutor(args.lapack_jobs)
    largest_first = sorted(keys, key=lambda k: -k[0] * k[0] * k[1])
    host = {key: pool.submit(host_time, *key, check) for key in largest_first}
    references = {
        key: pool.submit(host_reference, *key)
        for key in largest_first
        if check and key[2] != "float64"
    }
    kernel: dict[tuple[int, int, str], tuple[int, int, float, float, Any, Any]] = {}
    if use_gpu:
        for dtype in args.dtype:
            driver, gpu = gpu_driver(source, dtype)
            for n, bw, key_dtype in keys:
                if key_dtype == dtype:
                    timed = time_kernel(driver, band_of(n, bw, dtype), args.repeats)
                    launches = schedule.launches(n, bw, driver.tw)
                    kernel[(n, bw, dtype)] = (driver.tw, launches, *timed)
                    print(f"kernel {n} {bw} {dtype}: {timed[1]:.4f} s", file=sys.stderr)
                    driver.close()
    rows: list[Row] = []
    for key in keys:
        lapack_s, sigma = host[key].result()
        if key in references:
            sigma = references[key].result()
        row = Row(*key, lapack_s)
        if key in kernel:
            row.tw, row.launches, row.capture_s, row.kernel_s, d, e = kernel[key]
            row.speedup = row.lapack_s / row.kernel_s if row.kernel_s else None
            if check:
                failure = check_bidiagonal(band_of(*key), d, e, sigma=sigma)
                row.check = "pass" if failure is None else f"FAIL {failure.check}"
        rows.append(row)
    pool.shutdown()
    print(f"gpu: {gpu}\n")
    print(HEADER)
    for row in rows:
        print(row.markdown())
    if args.solo:
        n, bw = args.solo
        print(f"\n?gbbrd at n = {n}, BW = {bw}, alone (after the pool) vs in the pool:\n")
        print("| dtype | alone s | in the pool s |\n|---|---|---|")
        for dtype in args.dtype:
            alone, _ = host_time(n, bw, dtype, False)
            pooled = next(r.lapack_s for r in rows if (r.n, r.bw, r.dtype) == (n, bw, dtype))
            print(f"| {dtype} | {alone:.3f} | {pooled:.3f} |")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
