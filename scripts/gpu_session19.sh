#!/usr/bin/env bash
# On the lent H200 (after `. scripts/device_env.sh`, `.whl` carried), this session's last call
# (about 300 s of device time were left): the redesigned trsm_small_batched seed against cuBLAS
# ?trsmBatched in four dtypes (evaluator.bench: the whole suite, then timing) and where an
# application calls it (scripts/bench_batched_loader.py); the loader's start-up from its disk
# cache with the per-phase line; trsm_small_z64's job best against trsm_small's best complex128
# in one run. Steps as in gpu_session18.sh (process groups killed whole, DEADLINE_S). Four files
# under $OUT: machine.txt, batched.md, startup.txt, z64.md (the call returns at most 8 files).
set -uo pipefail
source scripts/gpu_steps.sh
call_start 290

for dtype in float32 float64 complex64 complex128; do
  step 35 batched.md python3 -m evaluator.bench --path trsm_small_batched --dtype "$dtype" \
    --label seed
done
step 60 batched.md python3 scripts/bench_batched_loader.py --calls 1000
step 20 startup.txt python3 scripts/loader_startup.py --dtype float64
step 20 startup.txt python3 scripts/loader_startup.py --dtype complex128
patch -s -o /tmp/small_best_c128.cu seeds/trsm_small/kernel.cu docs/results/2026-11-30_best_complex128.diff
step 25 z64.md python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 \
  --source docs/results/2026-11-30_s14d_best_trsm_small_z64.cu --label "z64 best"
step 25 z64.md python3 -m evaluator.bench --path trsm_small --dtype complex128 \
  --source /tmp/small_best_c128.cu --label "trsm_small best"
