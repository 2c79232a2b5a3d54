#!/usr/bin/env bash
# On the lent H200, the first call of the session after this file was written (after
# `. scripts/device_env.sh`, `.whl` carried; under 10 minutes, steps in order of need, each under
# its own timeout, pytest verbose so a cut-off run still names what passed):
#   1. the GPU tests of what changed since RESULTS section 16 and never ran on a GPU: the
#      loader's fast path and capture (issue 11), the ops' 3-iteration evolutions, the memo
#      test, the new-best gate;
#   2. issue 11's table: `kernevo bench-loader --seed` in all four dtypes at 16..64;
#   3. trsm_small_z64's job best (docs/results/2026-11-30_s14d_best_trsm_small_z64.cu) against
#      trsm_small's best complex128 (the seed patched with docs/results/2026-11-30_best_
#      complex128.diff) and cuBLAS, in one run (issue 7's z64 target);
#   4. solve_tri (inputs drawn 16 replays at a time now) and band_bidiag (per-node launch
#      floor now) seeds against their baselines through the evaluator.
# Next: scripts/gpu_issue7_jobs.sh with JOBS="solve_tri:float32:- band_bidiag:float32:n2049_16384
# trsm_blocked:float32:m128_2048 trsm_blocked:float64:m2049_16384", then gpu_issue7_sweep.sh,
# then scripts/gpu_issue10.sh on the two-GPU kind.
# Writes machine.txt, pytest_gpu.log, loader.md, z64.md and ops.md under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$out/machine.txt"
timeout 200 python3 -m pytest -v -p no:cacheprovider -rs -m gpu --durations=10 \
  tests/test_loader_fast_path_gpu.py tests/test_evaluator_new_best.py \
  "tests/test_evaluator_gpu.py::test_replay_memo_passes_every_run_time_check_without_the_cubin_check" \
  tests/test_ops_registered_gpu.py tests/test_trsm_blocked.py tests/test_trsm_blocked_workspace.py \
  2>&1 | tee "$out/pytest_gpu.log" | grep -E "PASSED|FAILED|ERROR|passed|failed" | cut -c1-150 | tail -30
timeout 120 kernevo bench-loader --seed --dtype float32 float64 complex64 complex128 \
  --shapes 16x16 32x32 48x48 64x64 2>&1 | tee "$out/loader.md" | tail -25
patch -s -o /tmp/small_best_c128.cu seeds/trsm_small/kernel.cu docs/results/2026-11-30_best_complex128.diff
{
  timeout 30 python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 \
    --source docs/results/2026-11-30_s14d_best_trsm_small_z64.cu --label "z64 best"
  timeout 30 python3 -m evaluator.bench --path trsm_small --dtype complex128 \
    --source /tmp/small_best_c128.cu --label "trsm_small best" | tail -n +3
} 2>&1 | tee "$out/z64.md" | grep "^| .* best"
{
  timeout 60 python3 -m evaluator.bench --path solve_tri --label solve_tri-seed
  timeout 120 python3 -m evaluator.bench --path band_bidiag --label band_bidiag-seed | tail -n +3
} 2>&1 | tee "$out/ops.md" | grep -E "^\| (solve|band)" | cut -c1-160
