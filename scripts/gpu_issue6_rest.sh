#!/usr/bin/env bash
# On the lent H200, issue 6's remaining parts (numerics across the range, memcheck before a new
# job best, noise floor and plausibility, red-team corpus, certificate v2), after
# `. scripts/device_env.sh`, in two calls that each fit the device's 10-minute limit:
#   bash scripts/gpu_issue6_rest.sh tests   every GPU test; the red-team corpus's table
#   bash scripts/gpu_issue6_rest.sh jobs    the tests the first call failed, after their fixes;
#                                           the seed and the re-derived best kernels against
#                                           cuBLAS; 20-iteration jobs from the new seed (cost
#                                           per candidate, a champion, its certificate through
#                                           the API and `kernevo best`)
# The best kernels are the new seed patched with docs/results/2026-11-30_best_<dtype>.diff (the
# offline mutator's tunables of section 2), written to /tmp/best_<dtype>.cu here.
# Writes under $OUT.
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc
mkdir -p "$HOME"
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  compute-sanitizer --version | tail -1; } >"$out/machine.txt" 2>&1

case "${1:?tests or jobs}" in
tests)
  # The corpus runs once, in the table (tests/test_redteam_gpu.py asserts the same entries).
  timeout 400 python3 -m pytest -q -p no:cacheprovider -rs -m gpu --durations=15 tests \
    --ignore=tests/test_redteam_gpu.py 2>&1 |
    tee "$out/pytest_gpu.log" | grep -E "passed|failed|FAILED|ERROR" | tail -25
  timeout 150 python3 scripts/redteam_table.py "$out/redteam.md" 2>&1 | tail -30
  ;;
jobs)
  # The three GPU tests the first call failed, after their fixes.
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu \
    "tests/test_evaluator_gpu.py::test_kernel_that_skips_work_only_while_timed_is_caught" \
    "tests/test_evaluator_gpu.py::test_timed_replays_never_see_the_same_inputs_twice" \
    "tests/test_process_lifecycle.py::test_kill_9_of_the_evolve_process_alone_leaves_no_gpu_worker" \
    2>&1 | tee "$out/pytest_gpu_rerun.log" | tail -3
  for dtype in float64 complex128; do
    patch -s -o "/tmp/best_$dtype.cu" seeds/trsm_small/kernel.cu \
      "docs/results/2026-11-30_best_$dtype.diff"
  done
  {
    python3 -m evaluator.bench --label seed --json "$out/bench_seed.json" | tail -n +3
    for dtype in float64 complex128; do
      python3 -m evaluator.bench --dtype $dtype --source "/tmp/best_$dtype.cu" --label best \
        --json "$out/bench_best_$dtype.json" | tail -n +3
    done
  } 2>&1 | tee "$out/bench.md"
  export KERNEVO_DATABASE_URL=sqlite:////tmp/k6/kernevo.db KERNEVO_WORK_DIR=/tmp/k6/runs
  mkdir -p /tmp/k6
  timeout 170 kernevo evolve --path trsm_small --dtype complex64 --iterations 20 \
    --promote-every 100 2>&1 | tee "$out/evolve_complex64.log" | tail -2
  timeout 170 kernevo evolve --path trsm_small --dtype float64 --iterations 16 \
    --promote-every 16 2>&1 | tee "$out/evolve_float64.log" | tail -3
  python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL" | tee "$out/stats.txt"
  (kernevo serve --host 127.0.0.1 --port 8765 >"$out/serve.log" 2>&1 &)
  for _ in $(seq 50); do curl -sf http://127.0.0.1:8765/healthz >/dev/null && break; sleep 0.2; done
  kernevo best --dtype float64 --m 64 --n 64 --api-url http://127.0.0.1:8765 2>&1 | tee "$out/kernevo_best.txt"
  curl -s "http://127.0.0.1:8765/v1/kernels/best?op=trsm&dtype=float64&gpu=nvidia-h200&m=64&n=64" \
    >"$out/best_response.json"
  python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['certificate'], indent=2))" \
    "$out/best_response.json" >"$out/certificate.json"
  pkill -f "kernevo.cli serve" || true
  ;;
esac
