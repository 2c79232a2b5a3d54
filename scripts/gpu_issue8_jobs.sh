#!/usr/bin/env bash
# Issue 8's ≥ 30-iteration evolution jobs with the offline mutator, one SQLite database, lineage
# stored, promoted every 10 (after `. scripts/device_env.sh`, `.whl` carried). A job that does
# not finish in one call goes on in the next: the database, work folder and key pair come back
# as $OUT/k8j.tar.gz; carry it back as .gpu/k8j.tar.gz (an excluded folder: it holds a private
# key, never committed) and the script restores it before anything runs.
#   SOLVE_TRI=new|resume|skip  solve_tri float32 (issue 8's (64, 6, 4, 2) target)
#   BAND=new|resume|skip       band_bidiag float32, default bucket n1_2048 (its best is then
#                              benched at n = 8192, BW = 32 by scripts/bench_band_bidiag.py)
#   BLOCKED=skip|new|resume    issue 7's trsm_blocked float32 job at bucket m128_2048, beside
#                              them (same database)
#   GPUS=0 | GPUS=0,1          the GPU (--gpu) or GPUs (--gpus, a Dask cluster of them) each job
#                              evaluates on; the jobs run at the same time
#   IN_FLIGHT=N                with GPUS=0: each job's --in-flight (candidates evaluated at once
#                              on the GPU; verifications share it, timings take turns), default 1
#   TESTS="pytest args"        GPU tests, at most 240 s, beside the jobs (they take the same GPU
#                              lock: timings one at a time); none by default
# Then scripts/job_stats.py (best vs seed vs baseline per job).
# Files under $OUT: machine.txt, [pytest_gpu.txt,] solve_tri.log, band.log, [blocked.log,]
# stats.txt, k8j.tar.gz.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 570
step 60 stats.txt python3 -m compileall -q -j 0 /tmp/site kernevo seeds evaluator
[ -f .gpu/k8j.tar.gz ] && tar -xzf .gpu/k8j.tar.gz -C /tmp
export KERNEVO_WORK_DIR=/tmp/k8j/runs KERNEVO_DATABASE_URL=sqlite:////tmp/k8j/kernevo.db
export KERNEVO_KEY_DIR=/tmp/k8j/keys
mkdir -p "$KERNEVO_KEY_DIR"
gpus=${GPUS:-0}
gpu_args=(--gpu "$gpus" --in-flight "${IN_FLIGHT:-1}")
[[ $gpus == *,* ]] && gpu_args=(--gpus "$gpus")
# Room at the end for the stats and the archive.
deadline=$(( deadline - 40 ))

job() {  # mode, log, path, dtype[, more options of a new job]
  local mode=$1 log=$2 path=$3 dtype=$4
  shift 4
  case $mode in
    # A job stops after its evaluations in flight (up to a minute or so): SIGTERM 90 s early.
    new) STEP_GRACE_S=90 step 600 "$log" kernevo evolve --path "$path" --dtype "$dtype" "$@" \
           --iterations 30 --promote-every 10 "${gpu_args[@]}" ;;
    resume) STEP_GRACE_S=90 step 600 "$log" kernevo evolve --resume --path "$path" \
              --dtype "$dtype" "${gpu_args[@]}" ;;
    skip) ;;
    *) echo "unknown mode $mode for $path" >>"$out/$log" ;;
  esac
}
# The jobs run at once on one database (the GPU lock takes their timed candidates one at a
# time, their verifications side by side): the schema and the key pair are made first, so they
# do not race to make them.
step 30 stats.txt python3 -c "import sys; from db.migrate import upgrade; upgrade(sys.argv[1])" \
  "$KERNEVO_DATABASE_URL"
step 30 stats.txt kernevo keys
if [[ -n ${TESTS:-} ]]; then
  # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
  step 240 pytest_gpu.txt python3 -m pytest -v -p no:cacheprovider -m gpu $TESTS &
fi
job "${SOLVE_TRI:-new}" solve_tri.log solve_tri float32 &
job "${BAND:-new}" band.log band_bidiag float32 &
job "${BLOCKED:-skip}" blocked.log trsm_blocked float32 --bucket m128_2048 &
wait

deadline=$(( deadline + 40 ))
step 20 stats.txt python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL"
tar -czf "$out/k8j.tar.gz" -C /tmp k8j/kernevo.db k8j/keys k8j/runs
