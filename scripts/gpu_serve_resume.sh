#!/usr/bin/env bash
# On the lent H200, after gpu_evolve.sh: serve that job database, query the best kernel, use it
# through kernevo.load (then again with the service stopped, from the cache), kill and resume a
# job, and run every GPU test. Needs the evolution database at $DB (default .gpu/kernevo.db).
# Writes serve_load.txt, kill_resume.txt and pytest_gpu.log under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
mkdir -p /tmp/kv /tmp/kr && cp "${DB:-.gpu/kernevo.db}" /tmp/kv/kernevo.db
api=http://127.0.0.1:8765
{
  export KERNEVO_DATABASE_URL=sqlite:////tmp/kv/kernevo.db
  kernevo serve --port 8765 >/tmp/serve.log 2>&1 &
  server=$!
  for _ in $(seq 60); do curl -sf $api/healthz >/dev/null && break; sleep 0.5; done
  curl -s $api/healthz; echo
  kernevo jobs --api-url $api
  for dtype in float64 complex128; do
    kernevo best --dtype $dtype --m 64 --n 64 --api-url $api
    curl -s "$api/v1/kernels/best?op=trsm&dtype=$dtype&gpu=NVIDIA%20H200&m=48&n=48" |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print({k: d[k] for k in ("path","dtype","gpu","program_id","arch","nvrtc_version","cubin_sha256")}, "metrics.score", d["metrics"].get("score"))'
    python3 scripts/loader_demo.py --dtype $dtype --api $api --cache /tmp/kcache
  done
  curl -s "$api/v1/kernels/best?op=trsm&dtype=float64&gpu=nvidia-h200&m=65&n=64"; echo
  pid=$(curl -s "$api/v1/kernels/best?op=trsm&dtype=complex128&gpu=nvidia-h200&m=64&n=64" | python3 -c 'import json,sys; print(json.load(sys.stdin)["program_id"])')
  curl -s "$api/v1/programs/$pid/lineage" | python3 -c 'import json,sys; d=json.load(sys.stdin); items=d if isinstance(d,list) else d.get("lineage", d.get("programs", [])); print("lineage of", '"$pid"', ":", [p["id"] for p in items])'
  kill $server; wait $server 2>/dev/null
  echo "--- service stopped ---"
  for dtype in float64 complex128; do
    python3 scripts/loader_demo.py --dtype $dtype --api $api --cache /tmp/kcache --service-stopped
  done
} 2>&1 | tee "$out/serve_load.txt"
KERNEVO_DATABASE_URL=sqlite:////tmp/kr/kernevo.db KERNEVO_WORK_DIR=/tmp/kr/runs \
  timeout 200 python3 scripts/kill_resume.py --dtype float32 --iterations 24 --kill-after 12 2>&1 |
  grep -v "^job .* | iter" | tee "$out/kill_resume.txt"
timeout 300 python3 -m pytest -q -m gpu tests 2>&1 | tee "$out/pytest_gpu.log" | tail -15
