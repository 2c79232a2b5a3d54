#!/usr/bin/env bash
# On the lent H200 (issue 6 in progress: the cubin's device-state check, fresh inputs for every
# timed replay, audit pairs), after `. scripts/device_env.sh`: every GPU test; the seed in each
# dtype and the recorded best kernels (.gpu/best_<dtype>.cu, the seed patched with
# docs/results/2026-11-30_best_<dtype>.diff) timed against cuBLAS; a 20-iteration complex64 job
# for the per-candidate cost of each phase (compare RESULTS section 8, same job before).
# Writes pytest_gpu.log, bench.md, evolve_complex64.log and stats.txt under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
timeout 330 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests 2>&1 |
  tee "$out/pytest_gpu.log" | grep -E "passed|failed|FAILED|ERROR" | tail -12
{
  python3 -m evaluator.bench --label seed | tail -n +3
  for dtype in float64 complex128; do
    python3 -m evaluator.bench --dtype $dtype --source .gpu/best_$dtype.cu --label best |
      tail -n +3
  done
} 2>&1 | tee "$out/bench.md"
export KERNEVO_DATABASE_URL=sqlite:////tmp/k6/kernevo.db KERNEVO_WORK_DIR=/tmp/k6/runs
mkdir -p /tmp/k6
timeout 150 kernevo evolve --path trsm_small --dtype complex64 --iterations 20 \
  --promote-every 100 2>&1 | tee "$out/evolve_complex64.log" | tail -2
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
