#!/usr/bin/env bash
# On the lent H200 (issue 5: sealed compile, signed kernels, processes that hold up), after
# `. scripts/device_env.sh`. MODE=smoke: the sandbox/compile tests, which must also hold where
# packages come from PYTHONPATH, and every GPU test. MODE=full adds a signed evolution job with
# promotion, `kernevo serve` + the loader on its signed champion, and the job's throughput.
# Writes env.txt, pytest_cpu_side.log, pytest_gpu.log (and evolve.log, stats.txt,
# serve_load.txt in full mode) under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
# Nothing of this run may touch the machine's real home: keys, caches and locks live here.
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  python3 -c "import cupy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__)"
  command -v compute-sanitizer || echo "compute-sanitizer: not on PATH"
  uname -r; date -u +%FT%TZ
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs tests/test_evaluator_sandbox.py \
  tests/test_evaluator_compile.py tests/test_env_marker.py tests/test_evaluator_screen_nvrtc.py \
  2>&1 | tee "$out/pytest_cpu_side.log" | tail -8
timeout 360 python3 -m pytest -q -p no:cacheprovider -rs -s -m gpu tests 2>&1 |
  tee "$out/pytest_gpu.log" | grep -E "^RESULTS|passed|failed|error" | tail -20
[ "${MODE:-smoke}" = full ] || exit 0
export KERNEVO_DATABASE_URL=sqlite:////tmp/k5/kernevo.db KERNEVO_WORK_DIR=/tmp/k5/runs
mkdir -p /tmp/k5
timeout 240 kernevo evolve --path trsm_small --dtype float64 --iterations "${ITERATIONS:-40}" \
  --promote-every 20 2>&1 | tee "$out/evolve.log" | tail -4
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
api=http://127.0.0.1:8765
{
  kernevo serve --port 8765 >/tmp/serve.log 2>&1 &
  server=$!
  for _ in $(seq 60); do curl -sf $api/healthz >/dev/null && break; sleep 0.5; done
  curl -s "$api/v1/kernels/best?op=trsm&dtype=float64&gpu=nvidia-h200&m=64&n=64" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d.get(k) for k in ("path","program_id","cubin_sha256","signing_key_id")}, "signed:", bool(d.get("signature")))'
  python3 scripts/loader_demo.py --dtype float64 --api $api --cache /tmp/kcache
  kill $server; wait $server 2>/dev/null || true
} 2>&1 | tee "$out/serve_load.txt"
