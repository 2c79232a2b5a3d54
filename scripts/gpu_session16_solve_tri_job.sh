#!/usr/bin/env bash
# As run on the lent H200 for docs/RESULTS.md section 16 (after `. scripts/device_env.sh`, `.whl` and
# `.gpu` carried; .gpu/blocked_prev.cu was the seed of commit 1ed2fa2). Kept as run.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc KERNEVO_WORK_DIR=/tmp/k8/runs
mkdir -p "$HOME" /tmp/k8
export KERNEVO_DATABASE_URL=sqlite:////tmp/k8/kernevo.db KERNEVO_KEY_DIR=/tmp/k8/keys
timeout 150 kernevo evolve --path solve_tri --dtype float32 --iterations 30 --promote-every 10 2>&1 |
  grep -v " | iter" | tail -5 | tee "$out/evolve.log"
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" 2>&1 | tee "$out/stats.txt" | tail -6
rm -rf /tmp/export && kernevo export --dtype float32 --path solve_tri -o /tmp/export >/dev/null 2>&1
best=$(find /tmp/export -name kernel.cu | head -1)
[ -n "$best" ] && cp "$best" "$out/best_solve_tri.cu" && timeout 50 python3 -m evaluator.bench \
  --path solve_tri --dtype float32 --source "$best" --label "best solve_tri" 2>&1 | tail -n +3 | tee "$out/bench.md"
cp /tmp/k8/kernevo.db "$out/kernevo.db"
timeout 110 python3 -m pytest -v -p no:cacheprovider -rs -m gpu tests/test_ops_registered_gpu.py \
  -k "not seed_passes_its_suite" 2>&1 | tee "$out/pytest_gpu.log" | grep -E "PASSED|FAILED|ERROR|passed|failed" | cut -c1-170 | tail -12
