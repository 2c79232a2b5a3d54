"""trsm_blocked's TB_PREFETCH tunable: both of its values compile with NVRTC in every dtype, and
the prefetching variant stays free of spills where the default geometry leaves it registers
(float32, float64, complex64 at NB = 256, 256 threads: 127, 225 and 219 registers with NVRTC 13).
"""

from __future__ import annotations

import pytest

from evaluator.compile import compile_cubin
from seeds.spec import DTYPES
from seeds.trsm_blocked.spec import TRSM_BLOCKED
from seeds.tunables import parse_tunables

SEED = TRSM_BLOCKED.seed_source()


def with_prefetch(value: int) -> str:
    return SEED.replace("#define TB_PREFETCH 0", f"#define TB_PREFETCH {value}")


def test_prefetch_is_a_tunable_off_in_the_seed():
    (prefetch,) = [t for t in parse_tunables(SEED) if t.name == "TB_PREFETCH"]
    assert prefetch.value == "0" and set(prefetch.choices) == {"0", "1"}
    assert with_prefetch(1) != SEED


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_prefetching_kernel_compiles(dtype, tmp_path):
    options = TRSM_BLOCKED.compile_options(dtype, "sm_90")
    result = compile_cubin(with_prefetch(1), options, "sm_90", cache_dir=tmp_path)
    assert result.ok, result.log
    kernel = result.resources[TRSM_BLOCKED.kernel_name]
    if dtype != "complex128":  # 2 × 32 complex doubles of column k, k+1: past 255 registers
        assert kernel.spill_store_bytes == 0, kernel
