#!/usr/bin/env bash
# On the lent H200: two 60-iteration evolution jobs with the offline mutator (float64, then
# complex128), evaluator throughput from the lineage store, and the best kernels timed against
# the seed and cuBLAS twice each (the spread between two timings of one kernel is the noise).
# Writes evolve_*.log, stats.txt, bench.md, best_*.cu and kernevo.db under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
work=${WORK:-/tmp/kv}; mkdir -p "$work"
export KERNEVO_DATABASE_URL=sqlite:///$work/kernevo.db KERNEVO_WORK_DIR=$work/runs
iters=${ITERATIONS:-60}
for dtype in ${DTYPES:-float64 complex128}; do
  timeout ${JOB_TIMEOUT:-240} kernevo evolve --path trsm_small --dtype "$dtype" \
    --iterations "$iters" --promote-every 30 2>&1 | tee "$out/evolve_$dtype.log" | tail -4
done
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
python3 - "$out" <<'PY'
import sys
from sqlalchemy import select
from db.models import Champion, Evaluation, Program, Job
from db.session import make_engine, session_scope
out = sys.argv[1]
with session_scope(make_engine(__import__("os").environ["KERNEVO_DATABASE_URL"])) as s:
    for job in s.scalars(select(Job)):
        best = s.execute(
            select(Program, Evaluation).join(Evaluation).where(Program.job_id == job.id)
            .order_by(Evaluation.score.desc())
        ).first()
        if best:
            prog, ev = best
            open(f"{out}/best_{job.dtype}.cu", "w").write(prog.source)
            print(f"job {job.id} {job.dtype}: best program {prog.id} score {ev.score:.3f}")
    for c in s.scalars(select(Champion)):
        print(f"champion {c.path} {c.dtype} {c.gpu_key} {c.shape_bucket}: program {c.program_id}")
PY
{
  for round in 1 2; do
    for dtype in ${DTYPES:-float64 complex128}; do
      python3 -m evaluator.bench --dtype "$dtype" --label "seed (round $round)" | tail -n +3
      [ -f "$out/best_$dtype.cu" ] && python3 -m evaluator.bench --dtype "$dtype" \
        --source "$out/best_$dtype.cu" --label "best (round $round)" | tail -n +3
    done
  done
} 2>&1 | tee "$out/bench.md"
cp "$work/kernevo.db" "$out/kernevo.db"
