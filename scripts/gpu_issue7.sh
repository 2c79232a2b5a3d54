#!/usr/bin/env bash
# On the lent H200, issue 7's first parts (paths own their parts, trsm_small_z64, trsm_blocked,
# routing),
# after `. scripts/device_env.sh` with `.whl` carried; fits one 10-minute call:
#   every GPU test (the path refactor touched the worker's and the loader's GPU code, never run
#   on a GPU when written); the trsm_small_z64 seed and trsm_small's seed against cuBLAS at
#   complex128 64 x n, the trsm_blocked seed at its timed shapes; a 30-iteration trsm_small_z64 job (its champion then competes with
#   trsm_small's at complex128 64 x 64 in the routing); the red-team corpus again.
# Writes pytest_gpu.log, bench.md, evolve_z64.log, stats.txt and redteam.md under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
timeout 300 python3 -m pytest -q -p no:cacheprovider -rs -m gpu --durations=10 tests \
  --ignore=tests/test_redteam_gpu.py 2>&1 | tee "$out/pytest_gpu.log" |
  grep -E "passed|failed|FAILED|ERROR" | tail -15
{
  python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 --label z64-seed | tail -n +3
  python3 -m evaluator.bench --path trsm_small --dtype complex128 --label small-seed | tail -n +3
  python3 -m evaluator.bench --path trsm_blocked --dtype float32 float64 --label blocked-seed |
    tail -n +3
} 2>&1 | tee "$out/bench.md"
export KERNEVO_DATABASE_URL=sqlite:////tmp/k8/kernevo.db KERNEVO_WORK_DIR=/tmp/k8/runs
mkdir -p /tmp/k8
timeout 150 kernevo evolve --path trsm_small_z64 --dtype complex128 --iterations 30 \
  --promote-every 30 2>&1 | tee "$out/evolve_z64.log" | tail -3
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
timeout 120 python3 scripts/redteam_table.py "$out/redteam.md" 2>&1 | tail -1
