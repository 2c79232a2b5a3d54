"""The `trsm_small` path: TRSM for m, n ≤ 64 by a shared-memory direct solve."""

from __future__ import annotations

from pathlib import Path

from ..spec import DTYPES, PathSpec

TRSM_SMALL = PathSpec(
    path_id="trsm_small",
    op="trsm",
    dtypes=DTYPES,
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="trsm_small_kernel",
    config_kernel_name="kernevo_launch_config",
    shape_bucket="m64n64",
    envelope={"m_max": 64, "n_max": 64},
    # Cheap cascade stage: one ragged shape, one non-square shape.
    quick_shapes=((7, 5), (33, 64)),
    # Ragged sizes from the set {1, 2, 7, 16, 31, 33, 48, 63, 64}, square and not.
    verify_shapes=(
        (1, 1),
        (1, 64),
        (2, 7),
        (7, 2),
        (16, 16),
        (31, 33),
        (33, 31),
        (48, 64),
        (63, 1),
        (63, 48),
        (64, 63),
        (64, 64),
        (64, 1),
    ),
    timed_shapes=((16, 16), (48, 48), (64, 64)),
    # Never used in scoring: checked only before a program becomes a champion.
    held_out_shapes=((5, 40), (40, 5), (57, 64), (64, 17), (11, 11), (64, 32)),
    semantics=(
        "TRSM with BLAS semantics: side=Left, uplo=Lower, trans=N, diag=Non-unit, alpha=1. "
        "Solve A*X = B for X, A is m x m lower triangular (upper triangle holds garbage and must "
        "not be read), B is m x n, both column-major with lda = ldb = m; X overwrites B in "
        'place. Sizes 1 <= m, n <= 64. Kernel signature: extern "C" __global__ void '
        "trsm_small_kernel(const scalar_t* A, scalar_t* B, int m, int n, int lda, int ldb). "
        "Launch geometry comes from kernevo_launch_config(m, n, cfg) which writes grid xyz, "
        "block xyz and dynamic shared bytes into cfg[0..6]."
    ),
    driver_factory="trsm_small.driver:TrsmSmallDriver",
    baseline_factory="trsm_small.baseline:CublasTrsm",
    reference_check="host_reference",
)
