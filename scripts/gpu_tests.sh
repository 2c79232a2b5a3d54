#!/usr/bin/env bash
# On a lent GPU (after `. scripts/device_env.sh`, `.whl` carried): the GPU tests (`-m gpu`) of
# one shard of the test files, one line per test (-v), so a call cut at its deadline still says
# which tests passed and failed (RESULTS 23: the whole suite is past one 600 s call; a cut -q run
# tells nothing). The files holding GPU tests, sorted, are dealt round-robin into N shards:
#   SHARD=1/3 bash scripts/gpu_tests.sh, then 2/3 and 3/3 (91 of 230 tests took 520 s in
#   RESULTS 23: the whole suite is about 1300 s, so three shards of about a third each)
# (default 1/1: every file). Only those files are collected: the browser and schema tests,
# whose imports (selenium, schemathesis) the lent machine lacks, hold no GPU test.
# Writes $OUT/machine.txt, $OUT/pytest_gpu_<k>of<N>.txt (the summary line before the step's exit line) and
# $OUT/files_<k>of<N>.txt; DEADLINE_S (575) bounds the call.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 575
IFS=/ read -r k n <<<"${SHARD:-1/1}"
mapfile -t files < <(grep -l "mark\.gpu" tests/test_*.py | sort)
shard=()
for i in "${!files[@]}"; do (( i % n == k - 1 )) && shard+=("${files[$i]}"); done
printf '%s\n' "${shard[@]}" >"$out/files_${k}of${n}.txt"
step 560 "pytest_gpu_${k}of${n}.txt" python3 -m pytest -v -p no:cacheprovider -m gpu -rfE \
  --durations=10 "${shard[@]}"
tail -3 "$out/pytest_gpu_${k}of${n}.txt"
