#!/usr/bin/env bash
# As run on the lent H200 for docs/RESULTS.md section 16 (after `. scripts/device_env.sh`, `.whl` and
# `.gpu` carried; .gpu/blocked_prev.cu was the seed of commit 1ed2fa2). Kept as run.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc KERNEVO_WORK_DIR=/tmp/k7/runs
mkdir -p "$HOME" /tmp/k7
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >"$out/machine.txt"
timeout 80 python3 scripts/bench_blocked.py --dtype float32 float64 \
  --shapes 256x256 1024x1024 16384x16384 129x8192 2>&1 | tee "$out/blocked.md" | tail -9
timeout 50 python3 scripts/bench_blocked.py --label prev --source .gpu/blocked_prev.cu --dtype float32 float64 \
  --shapes 256x256 1024x1024 2>&1 | tail -n +3 | tee -a "$out/blocked.md"
export KERNEVO_DATABASE_URL=sqlite:////tmp/k7/kernevo.db KERNEVO_KEY_DIR=$out/keys
mkdir -p "$out/keys"
for job in "trsm_small_z64 complex128 165" "solve_tri float32 110"; do
  set -- $job
  echo "=== $1 $2" | tee -a "$out/evolve.log"
  timeout "$3" kernevo evolve --path "$1" --dtype "$2" --iterations 30 --promote-every 10 2>&1 |
    grep -v " | iter" | tail -4 | tee -a "$out/evolve.log"
done
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" 2>&1 | tee "$out/stats.txt" | tail -12
for job in "trsm_small_z64 complex128" "solve_tri float32"; do
  set -- $job
  rm -rf /tmp/export && kernevo export --dtype "$2" --path "$1" -o /tmp/export >/dev/null 2>&1
  best=$(find /tmp/export -name kernel.cu | head -1)
  [ -n "$best" ] && cp "$best" "$out/best_$1.cu" && timeout 45 python3 -m evaluator.bench --path "$1" \
    --dtype "$2" --source "$best" --label "best $1" 2>&1 | tail -n +3 | tee -a "$out/bench.md"
done
(kernevo serve --host 127.0.0.1 --port 8765 >"$out/serve.log" 2>&1 &)
for _ in $(seq 50); do curl -sf http://127.0.0.1:8765/healthz >/dev/null && break; sleep 0.2; done
kernevo best --dtype complex128 --m 64 --n 64 --api-url http://127.0.0.1:8765 2>&1 | tee "$out/kernevo_best.txt" | head -30
pkill -f "kernevo.cli serve" || true
cp /tmp/k7/kernevo.db "$out/kernevo.db"
timeout 100 python3 -m pytest -v -p no:cacheprovider -rs -m gpu tests/test_ops_registered_gpu.py \
  tests/test_trsm_small_z64.py 2>&1 | tee "$out/pytest_gpu.log" | grep -E "PASSED|FAILED|ERROR|passed|failed" | cut -c1-160 | tail -20
