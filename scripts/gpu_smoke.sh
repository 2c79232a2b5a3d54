#!/usr/bin/env bash
# On the lent H200: time the seed against cuBLAS in every dtype and run the evaluator's GPU tests.
# Writes bench_seed.md, bench_seed.json and pytest_gpu.log under $OUT (or ./gpu-out).
set -uo pipefail
out=${OUT:-gpu-out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
which ncu compute-sanitizer | tee -a "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"
python3 -m evaluator.bench --path trsm_small --json "$out/bench_seed.json" 2>&1 | tee "$out/bench_seed.md"
python3 -m pytest -q -m gpu ${PYTEST_ARGS:-tests/test_evaluator_gpu.py} 2>&1 | tee "$out/pytest_gpu.log"
