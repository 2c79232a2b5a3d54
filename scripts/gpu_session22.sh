#!/usr/bin/env bash
# On a lent machine with two H200s (kind nvidia-h200-x2; after `. scripts/device_env.sh`, `.whl`
# carried), this session's last call:
#   1. issue 11: the loader's warm start (kernevo.warm_start) from its disk cache: two processes
#      each (the first decides the full way and writes the memo, the second replays it), float64
#      and complex128, and the loader's GPU tests (the 50 ms bound on load + first call);
#   2. issue 7: trsm_blocked jobs at bucket m128_2048 (timed at 256², 1024², 129 x 8192), float32
#      then float64, each on both GPUs (`--gpus 0,1`: 2.41x one GPU's rate, RESULTS 18), 30
#      iterations, promoted every 10: the champions' verification (four sanitizer tools at
#      600 x 40) after the workspace fix (call 2's promotions all failed initcheck on cuBLAS's
#      TMA stores), NB per bucket in the champions table; then scripts/job_stats.py.
# Files under $OUT: machine.txt, startup.md, evolve.log, stats.txt, kernevo.db, keys/ (a key pair
# made for this run).
set -uo pipefail
source scripts/gpu_steps.sh
call_start 565
pytest_gpu=(python3 -m pytest -v -p no:cacheprovider -rs -m gpu --tb=short)
# Byte-compiled first, as pip's install does (the wheelhouse goes in with --no-compile).
step 60 startup.md python3 -m compileall -q -j 0 /tmp/site kernevo seeds
step 30 startup.md python3 scripts/loader_startup.py --dtype float64
step 30 startup.md python3 scripts/loader_startup.py --dtype complex128
step 90 startup.md "${pytest_gpu[@]}" -s tests/test_loader_startup.py tests/test_loader_gpu.py

export KERNEVO_WORK_DIR=/tmp/k22/runs KERNEVO_DATABASE_URL=sqlite:////tmp/k22/kernevo.db
export KERNEVO_KEY_DIR=$out/keys
mkdir -p /tmp/k22 "$KERNEVO_KEY_DIR"
step 200 evolve.log kernevo evolve --path trsm_blocked --dtype float32 --bucket m128_2048 \
  --iterations 30 --promote-every 10 --gpus 0,1
deadline=$(( deadline - 25 ))
step 600 evolve.log kernevo evolve --path trsm_blocked --dtype float64 --bucket m128_2048 \
  --iterations 30 --promote-every 10 --gpus 0,1
deadline=$(( deadline + 25 ))
step 20 stats.txt python3 scripts/job_stats.py "$KERNEVO_DATABASE_URL"
cp /tmp/k22/kernevo.db "$out/kernevo.db"
