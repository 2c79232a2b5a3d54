#!/usr/bin/env bash
# On the lent H200, issue 7 part 2 of 3 (after `. scripts/device_env.sh`, `.whl` and `.gpu`
# carried): evolution jobs of 30 iterations with the offline mutator, promoted at the end, into
# one SQLite database that travels between calls in .gpu/ (with the signing key pair, so part 3's
# loader trusts the champions). Which jobs: JOBS, e.g.
#   JOBS="trsm_small:complex128:- trsm_small_z64:complex128:- trsm_blocked:float32:m128_2048"
#   JOBS="trsm_blocked:float64:m128_2048 trsm_blocked:float32:m2049_16384 trsm_blocked:float64:m2049_16384"
# (path:dtype:bucket, "-" for the path's only bucket), each under `timeout ${JOB_S:-170}`; a job
# cut off is resumable (`kernevo evolve --resume ID`). Then each promoted champion is exported and
# benched against the seed and cuBLAS in one run (evaluator.bench, the bucket's timed shapes).
# Writes kernevo.db, keys/, evolve.log, stats.txt and best.md under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out" .gpu
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc KERNEVO_WORK_DIR=/tmp/k7/runs
mkdir -p "$HOME" /tmp/k7
[ -f .gpu/kernevo.db ] && cp .gpu/kernevo.db /tmp/k7/kernevo.db
mkdir -p "$out/keys" && [ -d .gpu/keys ] && cp .gpu/keys/* "$out/keys/"
export KERNEVO_DATABASE_URL=sqlite:////tmp/k7/kernevo.db KERNEVO_KEY_DIR=$out/keys
for job in ${JOBS:?set JOBS}; do
  IFS=: read -r path dtype bucket <<<"$job"
  extra=(); [ "$bucket" != "-" ] && extra=(--bucket "$bucket")
  echo "=== $path $dtype ${bucket}" | tee -a "$out/evolve.log"
  timeout "${JOB_S:-170}" kernevo evolve --path "$path" --dtype "$dtype" "${extra[@]}" \
    --iterations 30 --promote-every 30 2>&1 | grep -v " | iter" | tail -6 | tee -a "$out/evolve.log"
done
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
for job in $JOBS; do
  IFS=: read -r path dtype bucket <<<"$job"
  rm -rf /tmp/export && kernevo export --dtype "$dtype" --path "$path" -o /tmp/export >/dev/null 2>&1
  best=$(find /tmp/export -name kernel.cu -path "*${bucket/-/}*" | head -1)
  extra=(); [ "$bucket" != "-" ] && extra=(--bucket "$bucket")
  {
    timeout 90 python3 -m evaluator.bench --path "$path" "${extra[@]}" --dtype "$dtype" --label seed | tail -n +3
    [ -n "$best" ] && timeout 90 python3 -m evaluator.bench --path "$path" "${extra[@]}" --dtype "$dtype" \
      --source "$best" --label "best $path" | tail -n +3
  } 2>&1 | tee -a "$out/best.md"
done
cp /tmp/k7/kernevo.db "$out/kernevo.db"
