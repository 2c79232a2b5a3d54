#!/usr/bin/env bash
# Issue 8, first call (one H200 is enough; after `. scripts/device_env.sh`, `.whl` carried):
#   1. solve_tri A/B in one process per source, each against cuBLAS strsmBatched timed in the
#      same run (`evaluator.bench`: the full verification, then the four timed shapes): the seed,
#      each of the four latency tunables alone (ST_RECIP_DIAG, ST_STAGE_VEC + ST_STAGE_BATCH,
#      ST_PREFETCH_B) and all of them, to set the seed's values by measurement;
#   2. band_bidiag at every (n, BW, dtype) of issue 8 against LAPACK ?gbbrd, each reduction
#      checked (singular values against DGBBRD + DBDSQR in float64), the host side in 12 worker
#      processes while the GPU times the kernels, n = 8192, BW = 32 re-timed alone;
#   3. the two ops' GPU tests (seeds against SciPy and cuBLAS on every shape and layout, every
#      warp count at the sanitizer shape, the suites and red-team kernels, a short evolution of
#      each op promoted, served and run by the loader, fallbacks past the envelope).
# Files under $OUT: machine.txt, solve_tri_ab.md, band.md, tests.txt, batched_ab.md.
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
make_variant batch4 ST_STAGE_BATCH=4
make_variant prefetch ST_PREFETCH_B=1
make_variant all ST_RECIP_DIAG=1 ST_STAGE_VEC=4 ST_STAGE_BATCH=8 ST_PREFETCH_B=1
make_variant all_vec4 ST_RECIP_DIAG=1 ST_STAGE_VEC=4 ST_STAGE_BATCH=4 ST_PREFETCH_B=1
step 40 solve_tri_ab.md python3 -m evaluator.bench --path solve_tri --label seed
for name in recip vec8 batch4 prefetch all all_vec4; do
  step 40 solve_tri_ab.md python3 -m evaluator.bench --path solve_tri --label "$name" \
    --source "$variants/$name.cu"
done

step 240 band.md python3 scripts/bench_band_bidiag.py --n 1024 4096 8192 16384 --bw 32 64 128 \
  --dtype float32 float64 --repeats 3 --check --lapack-jobs 12 --solo 8192 32

pytest_gpu=(python3 -m pytest -v -p no:cacheprovider -rs -m gpu --tb=short -s)
step 400 tests.txt "${pytest_gpu[@]}" tests/test_solve_tri.py tests/test_band_bidiag_gpu.py \
  tests/test_ops_registered_gpu.py

# The batched TRSM seed's compile (issue 11's entry): its full-bound solve in a function of its
# own compiles 3.5x faster on the CI machine (TRSM_FULL_NOINLINE=1); is it as fast on the GPU?
mkdir -p /tmp/k8/batched
python3 scripts/seed_variant.py --path trsm_small_batched --set TRSM_FULL_NOINLINE=1 \
  --out /tmp/k8/batched/noinline.cu
step 90 batched_ab.md python3 -m evaluator.bench --path trsm_small_batched --dtype float32 \
  --label inline
step 90 batched_ab.md python3 -m evaluator.bench --path trsm_small_batched --dtype float32 \
  --label noinline --source /tmp/k8/batched/noinline.cu
