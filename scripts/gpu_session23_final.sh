#!/usr/bin/env bash
# Session 23's last call, one H200 (after `. scripts/device_env.sh`; `.whl` and `.gpu` carried,
# .gpu/k8j.tar.gz being the database, work folder and key pair of scripts/gpu_issue8_jobs.sh's
# call):
#   1. issue 8: `kernevo serve` on the ops' job database, then scripts/ops_serve_load.py (the
#      best-kernel query per op answered from it, the loader's results checked against the
#      float64 reference at the timed shapes, a shape past every envelope to the fallback);
#   2. issue 7: trsm_blocked float32 at bucket m128_2048, 30 iterations, promoted every 10, on
#      a database of its own, until the deadline; then its stats.
# Files under $OUT: machine.txt, serve_load.md, blocked.log, stats.txt.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 515
step 60 stats.txt python3 -m compileall -q -j 0 /tmp/site kernevo seeds evaluator api

tar -xzf .gpu/k8j.tar.gz -C /tmp
KERNEVO_DATABASE_URL=sqlite:////tmp/k8j/kernevo.db KERNEVO_KEY_DIR=/tmp/k8j/keys \
  kernevo serve --port 8765 >/tmp/k8j/serve.log 2>&1 &
server=$!
for _ in $(seq 60); do curl -sf http://127.0.0.1:8765/healthz >/dev/null && break; sleep 0.5; done
step 100 serve_load.md python3 scripts/ops_serve_load.py --api http://127.0.0.1:8765 \
  --cache /tmp/k8j/cache --key-dir /tmp/k8j/keys
kill "$server"; wait "$server" 2>/dev/null
tail -20 /tmp/k8j/serve.log >>"$out/serve_load.md"

export KERNEVO_WORK_DIR=/tmp/k7f/runs KERNEVO_DATABASE_URL=sqlite:////tmp/k7f/kernevo.db
export KERNEVO_KEY_DIR=/tmp/k7f/keys
mkdir -p "$KERNEVO_KEY_DIR"
deadline=$(( deadline - 25 ))  # room for the stats
STEP_GRACE_S=60 step 600 blocked.log kernevo evolve --path trsm_blocked --dtype float32 --bucket m128_2048 \
  --iterations 30 --promote-every 10 --gpu 0
deadline=$(( deadline + 25 ))
step 20 stats.txt python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL"
