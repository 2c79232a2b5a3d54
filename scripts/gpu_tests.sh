#!/usr/bin/env bash
# On the lent H200: every GPU test, then a short job to read the evaluator's per-phase times.
# Writes pytest_gpu.log, evolve.log and stats.txt under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
timeout 300 python3 -m pytest -q -m gpu tests 2>&1 | tee "$out/pytest_gpu.log" | tail -4
export KERNEVO_DATABASE_URL=sqlite:////tmp/kt/kernevo.db KERNEVO_WORK_DIR=/tmp/kt/runs
mkdir -p /tmp/kt
timeout 150 kernevo evolve --path trsm_small --dtype ${DTYPE:-complex64} \
  --iterations ${ITERATIONS:-20} --promote-every 100 2>&1 | tee "$out/evolve.log" | tail -2
python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
