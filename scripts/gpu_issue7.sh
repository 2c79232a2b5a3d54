#!/usr/bin/env bash
# On the lent H200, issue 7 part 1 of 3 (after `. scripts/device_env.sh`, `.whl` carried; one
# 10-minute call): every GPU test (the path refactor, trsm_small_z64 and trsm_blocked have never
# run on a GPU); each path's seed against cuBLAS in one run: trsm_small_z64 and trsm_small at
# complex128 (evaluator.bench, its timed shapes), trsm_blocked in all four dtypes at the Show's
# shapes with the inversion/GEMM split (scripts/bench_blocked.py); the red-team table.
# Parts 2 and 3: scripts/gpu_issue7_jobs.sh, scripts/gpu_issue7_sweep.sh.
# Writes pytest_gpu.log, bench.md, blocked.md and redteam.md under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/bench.md"
# The kernel filter evaluator.tools.kernel_filter passes (syntax as this version documents it).
compute-sanitizer --help | grep -A3 -- "--kernel-name" | tee -a "$out/bench.md"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs -m gpu --durations=10 tests \
  --ignore=tests/test_redteam_gpu.py 2>&1 | tee "$out/pytest_gpu.log" |
  grep -E "passed|failed|FAILED|ERROR" | tail -15
{
  python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 --label z64-seed | tail -n +3
  python3 -m evaluator.bench --path trsm_small --dtype complex128 --label small-seed | tail -n +3
} 2>&1 | tee -a "$out/bench.md"
timeout 200 python3 scripts/bench_blocked.py --dtype float32 float64 complex64 complex128 \
  --shapes 256x256 1024x1024 2048x2048 4096x4096 8192x8192 16384x16384 4096x17 129x8192 \
  2>&1 | tee "$out/blocked.md"
timeout 240 python3 scripts/redteam_table.py "$out/redteam.md" 2>&1 | tail -1
# The seed with TB_PREFETCH=1 (column k+1 loaded during step k), against the seed rows above.
sed 's/#define TB_PREFETCH 0/#define TB_PREFETCH 1/' seeds/trsm_blocked/kernel.cu >/tmp/prefetch.cu
timeout 60 python3 scripts/bench_blocked.py --label prefetch --source /tmp/prefetch.cu \
  --dtype float32 float64 --shapes 1024x1024 8192x8192 2>&1 | tail -n +3 | tee -a "$out/blocked.md"
