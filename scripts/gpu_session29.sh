#!/usr/bin/env bash
# Session 29 (2026-12-02), one lent-H200 call (after `. scripts/device_env.sh`, `.whl` carried):
# the stop path after b913440 (the job closes its copy of the pool's result pipe once the
# workers are gone) on real GPU evaluations, whose results are large:
# 1. the stop tests and every test of tests/test_process_lifecycle.py (CPU and GPU), and the
#    other GPU tests that start `kernevo` processes (RESULTS 26's set);
# 2. scripts/kill_resume.py --signal TERM twice on trsm_small float32 (GPU evaluations): exit
#    143 within 30 s of SIGTERM, then a resume that loses and repeats nothing.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 570
export KERNEVO_WORK_DIR=/tmp/kwork
step 260 pytest_stop.txt python3 -m pytest -v -p no:cacheprovider -rfE --durations=10 -n 4 \
  --dist worksteal tests/test_stop_robustness.py tests/test_process_lifecycle.py \
  tests/test_cli_errors.py tests/test_dask_backend.py tests/test_loader_gpu.py -m "gpu or not gpu"
for kill_after in 3 8; do
  export KERNEVO_DATABASE_URL=sqlite:////tmp/kr_$kill_after.db
  step 140 "kill_resume_term_$kill_after.txt" python3 scripts/kill_resume.py --dtype float32 \
    --iterations 12 --kill-after "$kill_after" --signal TERM
done
grep -hE "^(FAILED|ERROR) |^=+ .*(passed|failed|error).* =+$|SIGTERM: exit|kill/resume|resume exit" \
  "$out"/pytest_stop.txt "$out"/kill_resume_term_*.txt
