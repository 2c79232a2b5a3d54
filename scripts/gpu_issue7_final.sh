#!/usr/bin/env bash
# On the lent H200 (after `. scripts/device_env.sh`; `.whl` and `.gpu` carried, .gpu/jobs.tar.gz
# being scripts/gpu_jobs.sh's archive of RESULTS 22's jobs): issue 7's sweep and readings on that
# database's champions (trsm_small, trsm_small_z64 and trsm_blocked m128_2048 in complex128;
# trsm_blocked m2049_16384 in float32 and float64).
#   1. `kernevo serve`, then scripts/trsm_sweep.py (kernevo.load over 1x1 .. 16384x16384, every
#      shape's route and LAPACK ratio) in complex128 (three paths and cuBLAS), float64, float32.
#   2. The m2049_16384 champions and the seed against cuBLAS at 8192² and 16384²
#      (scripts/bench_blocked.py, cuBLAS timed in the same run).
#   3. Nsight Compute on the float32 seed at 16384² (the 1.2x target's miss).
# Files under $OUT: machine.txt, sweep.md, bench.md, ncu.txt, stats.txt, champion_*.cu.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 540
tar -xzf .gpu/jobs.tar.gz -C /tmp
export KERNEVO_WORK_DIR=/tmp/kj/runs KERNEVO_DATABASE_URL=sqlite:////tmp/kj/kernevo.db
export KERNEVO_KEY_DIR=/tmp/kj/keys
api=http://127.0.0.1:8765
kernevo serve --port 8765 >/tmp/serve.log 2>&1 &
server=$!
for _ in $(seq 60); do curl -sf $api/healthz >/dev/null && break; sleep 0.5; done
sweep() {  # limit, dtype, expected paths...
  local limit=$1 dtype=$2; shift 2
  echo "### $dtype" >>"$out/sweep.md"
  step "$limit" sweep.md python3 scripts/trsm_sweep.py --dtype "$dtype" --api $api \
    --cache /tmp/kcache --expect-paths "$@"
}
sweep 150 complex128 trsm_small trsm_small_z64 trsm_blocked cublas
sweep 90 float64 trsm_blocked cublas
sweep 90 float32 trsm_blocked cublas
kill $server; wait $server 2>/dev/null
python3 - "$out" <<'PY'
import sqlite3, sys
db = sqlite3.connect("/tmp/kj/kernevo.db")
for dtype, bucket, program, source in db.execute(
    "select c.dtype, c.shape_bucket, p.id, p.source from champion c join program p"
    " on p.id = c.program_id where c.path = 'trsm_blocked'"):
    open(f"{sys.argv[1]}/champion_{dtype}_{bucket}_p{program}.cu", "w").write(source)
PY
for f in "$out"/champion_float*_m2049_16384_p*.cu; do
  d=$(basename "$f" | cut -d_ -f2)
  step 60 bench.md python3 scripts/bench_blocked.py --dtype "$d" --shapes 8192x8192 16384x16384 \
    --source "$f" --label "$(basename "$f" .cu)" --rounds 5
done
step 60 bench.md python3 scripts/bench_blocked.py --dtype float32 float64 \
  --shapes 8192x8192 16384x16384 --label seed --rounds 5
step 120 ncu.txt ncu --clock-control none --profile-from-start off -c 12 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy \
  python3 scripts/profile_blocked.py --dtype float32 --shape 16384x16384
