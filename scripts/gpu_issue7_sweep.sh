#!/usr/bin/env bash
# On the lent H200, issue 7 part 3 of 3 (after part 2; `.whl` and `.gpu` carried: .gpu/kernevo.db
# and .gpu/keys from part 2's $OUT): `kernevo serve` on that database, then `kernevo.load("trsm",
# dtype)` over shapes from 1x1 to 16384x16384 (scripts/trsm_sweep.py), the route of every shape
# printed with its LAPACK ratio; routed to three paths and cuBLAS in complex128 (trsm_small,
# trsm_small_z64, trsm_blocked) and to two paths and cuBLAS in the real dtypes. Then Nsight
# Compute on the seed's inversion kernel at 1024 and 8192 (float64), what limits it.
# Writes sweep.md and ncu.txt under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out" /tmp/kv
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc KERNEVO_KEY_DIR=$PWD/.gpu/keys
mkdir -p "$HOME"
cp .gpu/kernevo.db /tmp/kv/kernevo.db
export KERNEVO_DATABASE_URL=sqlite:////tmp/kv/kernevo.db
api=http://127.0.0.1:8765
kernevo serve --port 8765 >/tmp/serve.log 2>&1 &
server=$!
for _ in $(seq 60); do curl -sf $api/healthz >/dev/null && break; sleep 0.5; done
for dtype in complex128 float64 float32 complex64; do
  expect="trsm_small trsm_blocked cublas"
  [ "$dtype" = complex128 ] && expect="$expect trsm_small_z64"
  echo "### $dtype" >>"$out/sweep.md"
  timeout 150 python3 scripts/trsm_sweep.py --dtype $dtype --api $api --cache /tmp/kcache \
    --expect-paths $expect 2>&1 | tee -a "$out/sweep.md" | tail -1
done
kill $server; wait $server 2>/dev/null
for shape in 1024x1024 8192x8192; do
  timeout 90 ncu --clock-control none -k trsm_blocked_diag_kernel -c 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats \
    python3 scripts/bench_blocked.py --dtype float64 --shapes $shape --rounds 1 \
    >>"$out/ncu.txt" 2>&1
done
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy" "$out/ncu.txt"
