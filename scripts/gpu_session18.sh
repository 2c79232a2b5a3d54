#!/usr/bin/env bash
# On the lent H200 (after `. scripts/device_env.sh`, `.whl` carried), the session's last call:
# issue 11 first (the batched entry's first GPU run, its bench and loader table, start-up from the
# disk cache, the four-dtype loader table), then issue 7's z64 comparison, then why the ops'
# 3-iteration evolutions failed in call 1, then the solve_tri and band_bidiag seed benches.
# Each step runs in its own process group, killed whole at its limit (call 1 of this session lost
# everything after its pytest step: the evolution's children kept the pytest pipe open past the
# step's `timeout`), and no step starts past DEADLINE_S (540 s) from the script's start. Writes
# one file per step under $OUT, each ending with the step's exit status.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 540

pytest_gpu=(python3 -m pytest -v -p no:cacheprovider -rs -m gpu --tb=short)
step 80 batched_tests.log "${pytest_gpu[@]}" tests/test_trsm_batched_gpu.py
for dtype in float32 float64 complex64 complex128; do
  step 25 batched_bench.md python3 -m evaluator.bench --path trsm_small_batched --dtype "$dtype" \
    --label seed
done
step 50 batched_loader.md python3 scripts/bench_batched_loader.py --calls 1000
step 20 startup.txt python3 scripts/loader_startup.py --dtype float64
step 20 startup.txt python3 scripts/loader_startup.py --dtype complex128
step 90 loader.md kernevo bench-loader --seed --dtype float32 float64 complex64 complex128 \
  --shapes 16x16 32x32 48x48 64x64
patch -s -o /tmp/small_best_c128.cu seeds/trsm_small/kernel.cu docs/results/2026-11-30_best_complex128.diff
step 25 z64.md python3 -m evaluator.bench --path trsm_small_z64 --dtype complex128 \
  --source docs/results/2026-11-30_s14d_best_trsm_small_z64.cu --label "z64 best"
step 25 z64.md python3 -m evaluator.bench --path trsm_small --dtype complex128 \
  --source /tmp/small_best_c128.cu --label "trsm_small best"
step 90 ops_evolution.log "${pytest_gpu[@]}" -x tests/test_ops_registered_gpu.py -k "short"
step 40 ops.md python3 -m evaluator.bench --path solve_tri --label solve_tri-seed
step 60 ops.md python3 -m evaluator.bench --path band_bidiag --label band_bidiag-seed
