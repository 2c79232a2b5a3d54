#!/usr/bin/env bash
# Evolution jobs at once on one lent GPU, one SQLite database, offline mutator, 30 iterations
# (or a job's own), promoted every 10 (or at its end when it has fewer) (after `. scripts/device_env.sh`, `.whl` carried). The jobs share GPU 0
# through its lock (timing one candidate at a time, verification side by side: RESULTS 21).
# A job that does not finish in one call goes on in the next: the database, work folders and
# key pair come back as $OUT/jobs.tar.gz; carry it back as .gpu/jobs.tar.gz (an excluded
# folder: it holds a private key, never committed) and the script restores it first.
#   JOBS="path:dtype:bucket:mode:in_flight[:iterations] ..."  bucket "-" for the path's first;
#        mode new or resume; iterations 30 by default (new jobs only); e.g. JOBS="trsm_blocked:float32:m2049_16384:new:3 trsm_blocked:float64:m2049_16384:new:3"
#   TESTS="node ..."  GPU tests (files or pytest node ids, no -k: words are split) run first,
#        at most TESTS_S (240) seconds
#   DEADLINE_S        the call's length (575 by default)
# Files under $OUT: machine.txt, [pytest_gpu.txt,] one <path>_<dtype>_<bucket>.log per job,
# stats.txt, jobs.tar.gz.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 575
step 60 stats.txt python3 -m compileall -q -j 0 /tmp/site kernevo seeds evaluator
[ -f .gpu/jobs.tar.gz ] && tar -xzf .gpu/jobs.tar.gz -C /tmp
export KERNEVO_WORK_DIR=/tmp/kj/runs KERNEVO_DATABASE_URL=sqlite:////tmp/kj/kernevo.db
export KERNEVO_KEY_DIR=/tmp/kj/keys
mkdir -p "$KERNEVO_KEY_DIR"
# The schema and the key pair first, so the jobs do not race to make them.
step 30 stats.txt python3 -c "import sys; from db.migrate import upgrade; upgrade(sys.argv[1])" \
  "$KERNEVO_DATABASE_URL"
step 30 stats.txt kernevo keys
if [[ -n ${TESTS:-} ]]; then
  read -ra tests <<<"$TESTS"
  step "${TESTS_S:-240}" pytest_gpu.txt python3 -m pytest -v -p no:cacheprovider -m gpu "${tests[@]}"
fi
# Room at the end for the stats and the archive.
deadline=$(( deadline - 40 ))
for job in ${JOBS:?set JOBS}; do
  IFS=: read -r path dtype bucket mode in_flight iterations <<<"$job"
  iterations=${iterations:-30}
  where=(); [[ $bucket != - ]] && where=(--bucket "$bucket")
  run=(--gpu 0 --in-flight "${in_flight:-1}")
  log="${path}_${dtype}_${bucket/-/first}.log"
  case $mode in
    # A job stops after its evaluations in flight (a minute or so): SIGTERM 90 s early.
    new) STEP_GRACE_S=90 step 600 "$log" kernevo evolve --path "$path" --dtype "$dtype" \
           "${where[@]}" --iterations "$iterations" \
           --promote-every $(( iterations < 10 ? iterations : 10 )) "${run[@]}" & ;;
    resume) STEP_GRACE_S=90 step 600 "$log" kernevo evolve --resume --path "$path" \
              --dtype "$dtype" "${where[@]}" "${run[@]}" & ;;
    *) echo "unknown mode $mode in $job" >>"$out/stats.txt" ;;
  esac
done
wait
deadline=$(( deadline + 40 ))
step 20 stats.txt python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL"
tar -czf "$out/jobs.tar.gz" -C /tmp kj/kernevo.db kj/keys kj/runs
