#!/usr/bin/env bash
# On the lent H200 (after `. scripts/device_env.sh`, `.whl` carried; one call under 10 minutes):
# the re-designed seeds of this session against their baselines in one run each, and the GPU
# tests that touch them. Steps in order of need, each under its own timeout:
#   trsm_blocked (new diagonal-block kernel) against cuBLAS at issue 7's shapes with the
#   inversion/GEMM split (scripts/bench_blocked.py, real dtypes at every shape, complex at 1024²
#   and 4096²); trsm_small_z64 and trsm_small at complex128 (evaluator.bench); solve_tri against
#   cublasStrsmBatched and band_bidiag against LAPACK ?gbbrd through the evaluator
#   (evaluator.bench, their timed shapes); the GPU tests of trsm_blocked, trsm_small_z64, the
#   registered ops, and the four that failed in this session's second call.
# Writes machine.txt, blocked.md, bench.md and pytest_gpu.log under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$out/machine.txt"
timeout 120 python3 scripts/bench_blocked.py --dtype float32 float64 \
  --shapes 256x256 1024x1024 2048x2048 4096x4096 8192x8192 16384x16384 4096x17 129x8192 \
  2>&1 | tee "$out/blocked.md" | tail -3
timeout 60 python3 scripts/bench_blocked.py --label seed-complex --dtype complex64 complex128 \
  --shapes 1024x1024 4096x4096 2>&1 | tail -n +2 | tee -a "$out/blocked.md" | tail -2
{
  timeout 30 python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 --label z64-seed
  timeout 30 python3 -m evaluator.bench --path trsm_small --dtype complex128 --label small-seed | tail -n +3
  timeout 60 python3 -m evaluator.bench --path solve_tri --label solve_tri-seed
  timeout 90 python3 -m evaluator.bench --path band_bidiag --label band_bidiag-seed
} 2>&1 | tee "$out/bench.md" | grep -E "^\| (z64|small|solve|band)" | cut -c1-150
timeout 240 python3 -m pytest -q -p no:cacheprovider -rs -m gpu --durations=10 \
  tests/test_trsm_blocked.py tests/test_trsm_blocked_workspace.py tests/test_trsm_small_z64.py \
  tests/test_ops_registered_gpu.py tests/test_band_bidiag_gpu.py tests/test_loader_gpu.py \
  "tests/test_evaluator_gpu.py::test_replay_memo_passes_every_run_time_check_without_the_cubin_check" \
  2>&1 | tee "$out/pytest_gpu.log" | grep -E "passed|failed|FAILED|ERROR" | tail -25
