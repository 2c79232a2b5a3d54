#!/usr/bin/env bash
# As run on the lent H200 for docs/RESULTS.md section 16 (after `. scripts/device_env.sh`, `.whl` and
# `.gpu` carried; .gpu/blocked_prev.cu was the seed of commit 1ed2fa2). Kept as run.
set -uo pipefail
out=${OUT:-gpu-out}
export HOME=/tmp/khome KERNEVO_COMPILE_CACHE=/tmp/kcc; mkdir -p $HOME
timeout 90 python3 scripts/diagnose_blocked.py --dtype float64 float32 --shapes 2048x17 4096x17 8192x17 2>&1 | tee $out/diagnose.txt
timeout 400 python3 -m pytest -q -p no:cacheprovider -rs -m gpu --durations=15 tests \
  --ignore=tests/test_redteam_gpu.py --ignore=tests/test_api_openapi.py --ignore=tests/test_web_page.py 2>&1 | tee "$out/pytest_gpu.log" |
  grep -E "passed|failed|FAILED|ERROR" | tail -40
