#!/usr/bin/env bash
# On the lent H200 (after `. scripts/device_env.sh`, `.whl` carried), the next session's first
# call: what RESULTS 18 left unverified, in order of need, under DEADLINE_S (540 s):
#   1. the trsm_small_batched seed as fixed after call 4 (shared-memory budget per block): its
#      GPU tests (suite in four dtypes, the two red-team kernels, the loader at batch 1000);
#   2. the seed against cuBLAS ?trsmBatched through the evaluator (the whole suite, then timing)
#      in four dtypes, and where an application calls it (bench_batched_loader.py);
#   3. the loader's start-up from its disk cache after the launch-config slots and the snapshot
#      stopped launching CuPy kernels (the first call was 132 ms, 126 of them after the driver
#      build), with its GPU tests (test_loader_startup: the 50 ms bound is an xfail(strict));
#   4. bench-loader's complex64 16x16 (2.13 us over the prepared launch in call 3).
# The batched seed now bounds its unrolled solve by 16, 32 or 64 rows as m asks (it ran 64 at
# every m: 0.4-0.5x cuBLAS at m = 16).
# Four files under $OUT: machine.txt, batched.md, startup.md, loader.md (a call returns at
# most 8 files).
set -uo pipefail
source scripts/gpu_steps.sh
call_start 540

pytest_gpu=(python3 -m pytest -v -p no:cacheprovider -rs -m gpu --tb=short)
step 200 batched.md "${pytest_gpu[@]}" tests/test_trsm_batched_gpu.py
for dtype in float32 float64 complex64 complex128; do
  step 45 batched.md python3 -m evaluator.bench --path trsm_small_batched --dtype "$dtype" \
    --label seed
done
step 60 batched.md python3 scripts/bench_batched_loader.py --calls 1000
# Byte-compiled first, as pip's install does (the wheelhouse goes in with --no-compile): RESULTS
# 18's 608 ms of load imports included compiling them.
step 60 startup.md python3 -m compileall -q -j 0 /tmp/site kernevo seeds
step 20 startup.md bash -c 'python3 -X importtime -c "import kernevo.solver, kernevo.cache, \
kernevo.client, kernevo.resolver, kernevo.settings, kernevo.trust" 2>&1 | sort -t"|" -k2 -n | tail -25'
step 20 startup.md python3 scripts/loader_startup.py --dtype float64
step 20 startup.md python3 scripts/loader_startup.py --dtype complex128
step 60 startup.md "${pytest_gpu[@]}" -s tests/test_loader_startup.py tests/test_loader_gpu.py
step 30 loader.md kernevo bench-loader --seed --dtype complex64 --shapes 16x16 64x64
