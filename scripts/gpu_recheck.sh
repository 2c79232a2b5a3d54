#!/usr/bin/env bash
# On the lent H200, after the evaluator's hardening: every GPU test, the recorded best kernels
# (.gpu/best_*.cu) timed again against the seed and cuBLAS, and one more 60-iteration job
# (complex64). Writes pytest_gpu.log, bench.md, evolve_complex64.log and stats.txt under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
timeout 300 python3 -m pytest -q -m gpu tests 2>&1 | tee "$out/pytest_gpu.log" | tail -4
{
  for dtype in float64 complex128; do
    python3 -m evaluator.bench --dtype $dtype --label seed | tail -n +3
    python3 -m evaluator.bench --dtype $dtype --source .gpu/best_$dtype.cu --label best | tail -n +3
  done
} 2>&1 | tee "$out/bench.md"
export KERNEVO_DATABASE_URL=sqlite:////tmp/kc/kernevo.db KERNEVO_WORK_DIR=/tmp/kc/runs
mkdir -p /tmp/kc
timeout 200 kernevo evolve --path trsm_small --dtype complex64 --iterations 60 --promote-every 30 \
  2>&1 | tee "$out/evolve_complex64.log" | tail -3
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
