"""trsm_blocked's seed keeps every scalar in registers in every dtype: no local-memory spills
(the diagonal-block kernel's steps are a latency chain, and a spill would put a memory round
trip into each of them). Both ends of its tunables' ranges compile in every dtype in
``tests/test_ops_registered.py`` (the largest spills in complex128: 4 columns of 8 complex
doubles per lane at 512 threads; legal, and timed like any other candidate)."""

from __future__ import annotations

import pytest

from evaluator.compile import compile_cubin
from seeds.spec import DTYPES
from seeds.trsm_blocked.spec import TRSM_BLOCKED

SEED = TRSM_BLOCKED.seed_source()


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_seed_compiles_without_spills(dtype, tmp_path):
    result = compile_cubin(SEED, TRSM_BLOCKED.compile_options(dtype, "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
    kernel = result.resources[TRSM_BLOCKED.kernel_name]
    assert kernel.spill_store_bytes == 0 and kernel.stack_bytes == 0, kernel
