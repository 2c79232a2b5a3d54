#!/usr/bin/env bash
# Issue 8's seed tables and issue 11's re-check, one H200 (after `. scripts/device_env.sh`,
# `.whl` carried):
#   1. solve_tri A/B in one process per source, each against cuBLAS strsmBatched timed in the
#      same run (`evaluator.bench`: the full verification, then the four timed shapes): the seed,
#      three latency tunables alone (ST_RECIP_DIAG, ST_STAGE_VEC + ST_STAGE_BATCH,
#      ST_PREFETCH_B) and all of them, to set the seed's values by measurement;
#   2. band_bidiag at every (n, BW, dtype) of issue 8 against LAPACK ?gbbrd, each reduction
#      checked (singular values against DGBBRD + DBDSQR in float64), the host side in 12 worker
#      processes while the GPU times the kernels, n = 8192, BW = 32 re-timed alone;
#   3. issue 11 after RESULTS 19's loader changes: the start-up from the disk cache (two fresh
#      processes, the second replaying the warm-start memo) and the loader's GPU tests;
#   4. until the deadline, the two ops' GPU tests (seeds against SciPy and cuBLAS on every shape
#      and layout, every warp count at the sanitizer shape, a missing barrier refused by
#      racecheck, the suites and red-team kernels).
# Files under $OUT: machine.txt, solve_tri_ab.md, band.md, loader.txt, tests.txt.
set -uo pipefail
source scripts/gpu_steps.sh
call_start 565
step 60 tests.txt python3 -m compileall -q -j 0 /tmp/site kernevo seeds evaluator

variants=/tmp/k8/variants
mkdir -p "$variants"
make_variant() {  # name, NAME=VALUE...
  local name=$1; shift
  python3 scripts/seed_variant.py --path solve_tri --out "$variants/$name.cu" --set "$@"
}
make_variant recip ST_RECIP_DIAG=1
make_variant vec8 ST_STAGE_VEC=4 ST_STAGE_BATCH=8
make_variant prefetch ST_PREFETCH_B=1
make_variant all ST_RECIP_DIAG=1 ST_STAGE_VEC=4 ST_STAGE_BATCH=8 ST_PREFETCH_B=1
step 45 solve_tri_ab.md python3 -m evaluator.bench --path solve_tri --label seed
for name in recip vec8 prefetch all; do
  step 45 solve_tri_ab.md python3 -m evaluator.bench --path solve_tri --label "$name" \
    --source "$variants/$name.cu"
done

step 220 band.md python3 scripts/bench_band_bidiag.py --n 1024 4096 8192 16384 --bw 32 64 128 \
  --dtype float32 float64 --repeats 3 --check --lapack-jobs 12 --solo 8192 32

step 30 loader.txt python3 scripts/loader_startup.py --dtype float64
pytest_gpu=(python3 -m pytest -v -p no:cacheprovider -rs -m gpu --tb=short -s)
step 90 loader.txt "${pytest_gpu[@]}" tests/test_loader_startup.py tests/test_loader_gpu.py \
  tests/test_loader_fast_path_gpu.py

step 400 tests.txt "${pytest_gpu[@]}" tests/test_solve_tri.py tests/test_band_bidiag_gpu.py \
  tests/test_ops_registered_gpu.py -k "not evolution"
