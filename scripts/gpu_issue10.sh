#!/usr/bin/env bash
# Issue 10 on a lent machine with two H200s (after `. scripts/device_env.sh`, `.whl` carried:
# it holds dask's and distributed's wheels since issue 10). In one call:
#   part 1: one trsm_small job of $ITER (60) iterations on one GPU (the local path, no Dask),
#           then the same job on two GPUs (`--gpus 0,1`: a local Dask cluster, 2 workers, 4
#           candidates in flight); candidates per minute of each and their ratio (target >= 1.7);
#   part 2: the same job on an external cluster (`dask scheduler` + one `kernevo dask-worker`
#           per GPU), the worker of GPU 1 SIGKILLed while it evaluates a candidate once 20
#           programs are recorded: the job must complete with no program lost or recorded twice.
# PART=1 or PART=2 runs one part (each fits the 10-minute limit alone; both usually do too).
# Each job runs under `timeout $JOB_S` (280 s) with promotions only at its end; its own compile
# cache, so no run profits from another's cubins. Writes evolve.log, kill.log, worker*.log,
# results.md (the table and the ratio) and kernevo.db under $OUT.
# REHEARSE=1 runs the same steps compile-only on a CPU machine (no GPU: checks the script).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
ITER=${ITER:-60}; DTYPE=${DTYPE:-float64}; PART=${PART:-all}; JOB_S=${JOB_S:-280}
export HOME=/tmp/khome KERNEVO_WORK_DIR=/tmp/k10/runs
mkdir -p "$HOME" /tmp/k10
export KERNEVO_DATABASE_URL=sqlite:////tmp/k10/kernevo.db
one=(--gpu 0); two=(--gpus 0,1); w0=(--gpu 0); w1=(--gpu 1)
if [ "${REHEARSE:-0}" = 1 ]; then
  one=(--compile-only); two=(--gpus 0,1 --compile-only); w0=(--compile-only); w1=(--compile-only)
else
  nvidia-smi -L | tee "$out/gpus.txt"
fi
host=$(hostname)

evolve() {  # label, then kernevo evolve's extra options; prints the job id
  local label=$1; shift
  echo "=== $label: kernevo evolve --path trsm_small --dtype $DTYPE --iterations $ITER $*" >>"$out/evolve.log"
  KERNEVO_COMPILE_CACHE=/tmp/kcc-$label timeout "$JOB_S" kernevo evolve --path trsm_small \
    --dtype "$DTYPE" --iterations "$ITER" --promote-every 100000 --seed 11 "$@" \
    >>"$out/evolve.log" 2>&1
  echo "=== $label: exit $?" >>"$out/evolve.log"
}
last_job() {
  python3 -c "import sqlite3; print(sqlite3.connect('/tmp/k10/kernevo.db').execute('select max(id) from job').fetchone()[0])"
}

stop() {  # SIGTERM, then SIGKILL after 10 s: a process that ignores the first must not hold the call
  kill -TERM "$@" 2>/dev/null
  local pid
  for pid in "$@"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
  done
}

jobs=()
if [ "$PART" = all ] || [ "$PART" = 1 ]; then
  evolve one-gpu "${one[@]}"; jobs+=("one-gpu=$(last_job)")
  evolve two-gpus "${two[@]}"; jobs+=("two-gpus=$(last_job)")
fi

if [ "$PART" = all ] || [ "$PART" = 2 ]; then
  rm -f /tmp/k10/scheduler.json
  python3 -m distributed.cli.dask_scheduler --host 127.0.0.1 --port 8786 --no-dashboard \
    --scheduler-file /tmp/k10/scheduler.json >"$out/scheduler.log" 2>&1 &
  scheduler=$!
  for i in $(seq 1 100); do [ -s /tmp/k10/scheduler.json ] && break; sleep 0.2; done
  KERNEVO_COMPILE_CACHE=/tmp/kcc-killed kernevo dask-worker --scheduler tcp://127.0.0.1:8786 \
    "${w0[@]}" --name "$host-gpu0" >"$out/worker0.log" 2>&1 &
  worker0=$!
  KERNEVO_COMPILE_CACHE=/tmp/kcc-killed kernevo dask-worker --scheduler tcp://127.0.0.1:8786 \
    "${w1[@]}" --name "$host-gpu1" >"$out/worker1.log" 2>&1 &
  worker1=$!
  # Both workers joined before the job starts: it keeps 2 candidates in flight per worker.
  python3 -c "from distributed import Client; Client('tcp://127.0.0.1:8786', timeout=60).wait_for_workers(2, timeout=120)" \
    >>"$out/kill.log" 2>&1
  python3 scripts/dask_job_check.py kill tcp://127.0.0.1:8786 "$host-gpu1" \
    "$KERNEVO_DATABASE_URL" --after $(( $(python3 -c "import sqlite3; print(sqlite3.connect('/tmp/k10/kernevo.db').execute('select count(*) from program').fetchone()[0])" 2>/dev/null || echo 0) + ${KILL_AFTER:-20} )) \
    --timeout-s "$JOB_S" >"$out/kill.log" 2>&1 &
  killer=$!
  opts=(--scheduler tcp://127.0.0.1:8786)
  [ "${REHEARSE:-0}" = 1 ] && opts+=(--compile-only)
  evolve killed "${opts[@]}"; jobs+=("worker-killed=$(last_job)")
  wait "$killer"; echo "killer exit $?" >>"$out/kill.log"
  stop "$worker0" "$worker1"; stop "$scheduler"
fi

{
  echo "# Issue 10 on $(hostname), $(date -u +%Y-%m-%dT%H:%MZ): trsm_small $DTYPE, $ITER iterations, offline mutator"
  echo
  python3 scripts/dask_job_check.py table "$KERNEVO_DATABASE_URL" "${jobs[@]}"
  echo "table check exit $?"
  echo
  python3 - "$KERNEVO_DATABASE_URL" "${jobs[@]}" <<'EOF'
import sys
from sqlalchemy import create_engine, text
url, *pairs = sys.argv[1:]
ids = dict(p.split("=") for p in pairs)
def rate(job):
    with create_engine(url).connect() as c:
        rows = c.execute(text("select created_at from program where job_id = :j and iteration > 0 order by created_at"), {"j": int(job)}).all()
    from datetime import datetime
    t = [r[0] if not isinstance(r[0], str) else datetime.fromisoformat(r[0]) for r in rows]
    return (len(t) - 1) / ((t[-1] - t[0]).total_seconds() / 60) if len(t) > 1 else 0.0
if "one-gpu" in ids and "two-gpus" in ids:
    a, b = rate(ids["one-gpu"]), rate(ids["two-gpus"])
    print(f"candidates per minute: one GPU {a:.1f}, two GPUs {b:.1f}: ratio {b / a:.2f} (target >= 1.7)")
EOF
  echo
  echo '```'; cat "$out/kill.log" 2>/dev/null; grep -E "complete|failed|stopped|evaluating on" "$out/evolve.log"; echo '```'
} | tee "$out/results.md"
cp /tmp/k10/kernevo.db "$out/kernevo.db"
