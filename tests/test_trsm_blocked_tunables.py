"""trsm_blocked's tunables (seeds/trsm_blocked/kernel.cu): the seed and the corners of its tunable
space compile with NVRTC in every dtype within the evaluator's compile limit, and the seed's
defaults keep every scalar in registers (no local-memory spills: the diagonal-block kernel's
steps are a latency chain, and a spill would put a memory round trip into each of them).

The corners: the smallest work per thread block (NB = 128, 2 warps of 1 column, 8-column
panels) and the largest (NB = 256, 16 warps of 4 columns, 32-column panels, unrolled by 4). The
largest spills in complex128 (4 columns of 8 complex doubles per lane, 128 registers at 512
threads): legal, and the evaluator times it like any other candidate.
"""

from __future__ import annotations

import re

import pytest

from evaluator.compile import compile_cubin
from seeds.spec import DTYPES
from seeds.trsm_blocked.spec import TRSM_BLOCKED
from seeds.tunables import parse_tunables

SEED = TRSM_BLOCKED.seed_source()
SMALLEST = {"TB_NB": 128, "TB_WARPS": 2, "TB_COLS": 1, "TB_PANEL": 8, "TB_UNROLL": 1}
LARGEST = {"TB_NB": 256, "TB_WARPS": 16, "TB_COLS": 4, "TB_PANEL": 32, "TB_UNROLL": 4}


def with_values(values: dict[str, int]) -> str:
    """The seed with each ``#define NAME value`` of ``values`` replaced."""
    source = SEED
    for name, value in values.items():
        source, count = re.subn(rf"#define {name} \d+", f"#define {name} {value}", source, count=1)
        assert count == 1, name
    return source


def test_the_corners_are_legal_tunable_values():
    choices = {t.name: {int(c) for c in t.choices} for t in parse_tunables(SEED)}
    for corner in (SMALLEST, LARGEST):
        assert set(corner) == set(choices)
        assert all(value in choices[name] for name, value in corner.items())


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_seed_compiles_without_spills(dtype, tmp_path):
    result = compile_cubin(SEED, TRSM_BLOCKED.compile_options(dtype, "sm_90"), "sm_90",
                           cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
    kernel = result.resources[TRSM_BLOCKED.kernel_name]
    assert kernel.spill_store_bytes == 0 and kernel.stack_bytes == 0, kernel


@pytest.mark.parametrize("corner", [SMALLEST, LARGEST], ids=["smallest", "largest"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_corners_compile(corner, dtype, tmp_path):
    result = compile_cubin(with_values(corner), TRSM_BLOCKED.compile_options(dtype, "sm_90"),
                           "sm_90", cache_dir=tmp_path)  # fmt: skip
    assert result.ok, result.log
