#!/usr/bin/env bash
# On a lent GPU (after `. scripts/device_env.sh`, `.whl` carried): the GPU tests (`-m gpu`) of
# one shard of the test files, one line per test (-v), so a call cut at its deadline still says
# which tests passed and failed (RESULTS 23: the whole suite is past one 600 s call; a cut -q run
# tells nothing). The files holding GPU tests, sorted, are dealt round-robin into N shards:
#   SHARD=1/3 bash scripts/gpu_tests.sh, then 2/3 and 3/3 (RESULTS 24: 490, 436 and 535 s)
# (default 1/1: every file). Only those files are collected: the browser and schema tests,
# whose imports (selenium, schemathesis) the lent machine lacks, hold no GPU test.
# XDIST=K runs the shard's files on K pytest-xdist workers sharing the GPU, except the files
# in SERIAL, whose tests time host or device work against a bound (a noise floor, 50 ms) that
# other workers' kernels and CPU use would disturb: those run after, alone. The evaluator's
# own timing holds the GPU lock alone in any case (evaluator.gpu_lock), so the other workers'
# evaluations wait for it; direct launches by other tests do not.
# Shards with XDIST: still three; XDIST=3 SHARD=2/2 did not fit one call (RESULTS 25: 1/2 took 186 s,
# 2/2 was cut at 560 s with 17 tests left, 358 s more on four workers).
# Writes $OUT/machine.txt, $OUT/pytest_gpu_<k>of<N>.txt (the summary line before the step's
# exit line; with XDIST, the parallel run's, then the serial run's) and $OUT/files_<k>of<N>.txt;
# DEADLINE_S (575) bounds the call.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 575
IFS=/ read -r k n <<<"${SHARD:-1/1}"
mapfile -t files < <(grep -l "mark\.gpu" tests/test_*.py | sort)
shard=()
for i in "${!files[@]}"; do (( i % n == k - 1 )) && shard+=("${files[$i]}"); done
printf '%s\n' "${shard[@]}" >"$out/files_${k}of${n}.txt"
log="pytest_gpu_${k}of${n}.txt"
pytest_gpu=(python3 -m pytest -v -p no:cacheprovider -m gpu -rfE --durations=20)
if [[ -z "${XDIST:-}" ]]; then
  step 560 "$log" "${pytest_gpu[@]}" "${shard[@]}"
else
  SERIAL=(tests/test_evaluator_timing.py tests/test_loader_startup.py
    tests/test_loader_fast_path_gpu.py)
  parallel=() alone=()
  for f in "${shard[@]}"; do
    if [[ " ${SERIAL[*]} " == *" $f "* ]]; then alone+=("$f"); else parallel+=("$f"); fi
  done
  (( ${#parallel[@]} )) && step 560 "$log" "${pytest_gpu[@]}" -n "$XDIST" "${parallel[@]}"
  (( ${#alone[@]} )) && step 560 "$log" "${pytest_gpu[@]}" "${alone[@]}"
fi
grep -E "^(FAILED|ERROR) |^=+ .*(passed|failed|error|skipped).* =+$" "$out/$log"
