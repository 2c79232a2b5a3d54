"""trsm_blocked's inverse workspace keeps nothing from one call to the next (GPU).

The driver fills it with NaN before every launch (seeds/trsm_blocked/driver.py), so a kernel
that counts its calls there to reuse stale inverses later (``redteam.blocked
.counts_calls_in_workspace``, the channel issue 7's red team found) finds 0 every time and
inverts every time, and a kernel that skips the inversion gets NaN, never last call's inverses.
"""

from __future__ import annotations

import numpy as np
import pytest
from redteam.blocked import REUSES_INVERSES, counts_calls_in_workspace
from redteam.entry import with_block

from evaluator.compile import compile_cubin
from evaluator.inputs import make_problem
from seeds.trsm_blocked.spec import TRSM_BLOCKED

SHAPE = (300, 17)  # two block rows at NB = 256, the second ragged


def solves(block: str, dtype: str, problems: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """X and the float64 reference for ``problems`` different problems at :data:`SHAPE`, solved
    one after another by one driver over the kernel with EVOLVE-BLOCK ``block``."""
    import cupy

    from evaluator.checks.accuracy import reference

    compiled = compile_cubin(
        with_block(block, TRSM_BLOCKED.path_id), TRSM_BLOCKED.compile_options(dtype, "sm_90"),
        "sm_90",
    )  # fmt: skip
    assert compiled.ok, compiled.log
    driver = TRSM_BLOCKED.driver(compiled.cubin, dtype)
    out = []
    try:
        for seed in range(problems):
            problem = make_problem(*SHAPE, dtype, seed=1000 + seed)
            a, b = cupy.array(problem.a, order="F"), cupy.array(problem.b, order="F")
            x = driver.solve(a, b).get()
            out.append((x, reference(problem.a, problem.b)[0]))
    finally:
        driver.close()
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_the_counting_kernel_compiles(dtype, tmp_path):
    source = with_block(counts_calls_in_workspace(1), TRSM_BLOCKED.path_id)
    options = TRSM_BLOCKED.compile_options(dtype, "sm_90")
    assert compile_cubin(source, options, "sm_90", cache_dir=tmp_path).ok


@pytest.mark.gpu
def test_a_kernel_counting_its_calls_in_the_workspace_inverts_every_time():
    # Warm-up 1: without the wipe, every call after the first would reuse the first call's A.
    for x, expected in solves(counts_calls_in_workspace(1), "float64", 4):
        assert np.all(np.isfinite(x))
        assert np.max(np.abs(x - expected)) <= 1e-10 * np.max(np.abs(expected))


@pytest.mark.gpu
def test_a_kernel_skipping_the_inversion_gets_nan_not_the_last_calls_inverses():
    for x, _ in solves(REUSES_INVERSES, "float64", 2):
        assert np.all(np.isnan(x))
