#!/usr/bin/env bash
# On a lent machine with two H200s (kind nvidia-h200-x2; after `. scripts/device_env.sh`, `.whl`
# carried): issue 7's trsm_blocked evolution jobs, one lane per GPU, into one SQLite database:
#   GPU 0: float32 at bucket m128_2048 (timed at 1024² among others), then m2049_16384 (8192 x 1024)
#   GPU 1: float64, the same two buckets.
# Each job asks for 30 iterations with the offline mutator and promotes every 10 (a job cut off
# by its limit keeps the champions it promoted and is resumable: `kernevo evolve --resume ID`).
# Then per job: throughput, outcomes, phase costs, and the seed's and the best program's device
# µs against cuBLAS per timed shape from their own evaluations (scripts/job_stats.py).
# Files under $OUT: machine.txt, evolve_float32.log, evolve_float64.log, stats.txt, kernevo.db,
# keys/ (the signing pair the champions carry; a test key made for this run, not a secret kept).
set -uo pipefail
source scripts/gpu_steps.sh
call_start 560
export KERNEVO_WORK_DIR=/tmp/k21/runs KERNEVO_DATABASE_URL=sqlite:////tmp/k21/kernevo.db
export KERNEVO_KEY_DIR=$out/keys
mkdir -p /tmp/k21 "$KERNEVO_KEY_DIR"
# Migrate once before the lanes start (the two jobs would otherwise race to create the schema).
step 60 stats.txt kernevo jobs
first_s=${FIRST_S:-300}

lane() {  # gpu, dtype
  local gpu=$1 dtype=$2
  step "$first_s" "evolve_$dtype.log" kernevo evolve --path trsm_blocked --dtype "$dtype" \
    --bucket m128_2048 --iterations 30 --promote-every 10 --gpu "$gpu"
  step 600 "evolve_$dtype.log" kernevo evolve --path trsm_blocked --dtype "$dtype" \
    --bucket m2049_16384 --iterations 30 --promote-every 10 --gpu "$gpu"
}
# The lanes stop 30 s before the deadline so that the statistics still run.
deadline=$(( deadline - 30 ))
lane 0 float32 & lane 1 float64 & wait
deadline=$(( deadline + 30 ))
step 25 stats.txt python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL"
cp /tmp/k21/kernevo.db "$out/kernevo.db"
