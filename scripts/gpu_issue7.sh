#!/usr/bin/env bash
# On the lent H200, issue 6's re-check and issue 7 part 1 of 3 (after `. scripts/device_env.sh`,
# `.whl` carried; one 10-minute call, the steps in order of need, each under its own timeout so
# a slow one cannot starve the rest): the red-team table (every entry refused by its expected
# check, each path's control passing); every other GPU test (the path refactor, trsm_small_z64,
# trsm_blocked, solve_tri and band_bidiag have never run on a GPU); each path's seed against
# cuBLAS in one run: trsm_small_z64 and trsm_small at complex128 (evaluator.bench, their timed
# shapes), trsm_blocked in float32 and float64 at the Show's shapes with the inversion/GEMM split
# (scripts/bench_blocked.py).
# Parts 2 and 3: scripts/gpu_issue7_jobs.sh, scripts/gpu_issue7_sweep.sh.
# Writes machine.txt, redteam.md (+ .log), pytest_gpu.log, bench.md and blocked.md under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  compute-sanitizer --version | tail -1
  # The kernel filter evaluator.tools.kernel_filter passes (syntax as this version documents it).
  compute-sanitizer --help | grep -A3 -- "--kernel-name"; } >"$out/machine.txt" 2>&1
timeout 170 python3 scripts/redteam_table.py "$out/redteam.md" >"$out/redteam.log" 2>&1
tail -1 "$out/redteam.log"
timeout 220 python3 -m pytest -q -p no:cacheprovider -rs -m gpu --durations=15 tests \
  --ignore=tests/test_redteam_gpu.py 2>&1 | tee "$out/pytest_gpu.log" |
  grep -E "passed|failed|FAILED|ERROR" | tail -30
{
  timeout 20 python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 --label z64-seed | tail -n +3
  timeout 20 python3 -m evaluator.bench --path trsm_small --dtype complex128 --label small-seed | tail -n +3
} 2>&1 | tee "$out/bench.md"
timeout 130 python3 scripts/bench_blocked.py --dtype float32 float64 \
  --shapes 256x256 1024x1024 2048x2048 4096x4096 8192x8192 16384x16384 4096x17 129x8192 \
  2>&1 | tee "$out/blocked.md"
