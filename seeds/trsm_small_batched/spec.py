"""The `trsm_small_batched` path: the op ``trsm_batched`` (many independent A_i·X_i = B_i, m, n
≤ 64, packed row-major matrices) in one launch: a block solves as many matrices as fit its
thread budget, each staged once in shared memory, every right-hand-side column owned by one to
four threads holding its rows in registers (``kernel.cu``).

Shapes are ``(m, n, batch)``. The verified shapes mix m, n in {1, 7, 16, 33, 48, 64} with batch
in {1, 3, 1000}: a batch of 1, one that leaves most of a block's matrix slots empty and is not a
multiple of 2, 4 or 8, and a large one; 33 and 48 rows span the row halves and quarters a split
column's threads hold, and odd column counts leave lanes of a warp spare.
The timed shapes are issue 11's, at batch 1000.

The envelope: 1 ≤ m, n ≤ 64 (the op's own limits) and every batch the op takes (up to 2^31 − 1):
the batch only sets grid.x (up to 2^31 − 1 blocks) and each matrix's offset (64-bit in the
kernel), both verified where a batch tile ends early (batch 1 and 3) and at batch 1000.
"""

from __future__ import annotations

from pathlib import Path

from ..ops.spec import INT32_MAX
from ..spec import DTYPES, PathSpec

TrsmBatchedShape = tuple[int, int, int]

TIMED_SHAPES: tuple[TrsmBatchedShape, ...] = (
    (16, 16, 1000),
    (32, 32, 1000),
    (64, 64, 1000),
    (64, 16, 1000),
)
SANITIZER_SHAPE: TrsmBatchedShape = (33, 31, 3)

SEMANTICS = (
    "Batched TRSM with BLAS semantics per matrix: side=Left, uplo=Lower, trans=N, diag=Non-unit, "
    "alpha=1. For every batch index 0 <= i < batch solve A_i*X_i = B_i, A_i m x m lower "
    "triangular (its strict upper triangle holds garbage, NaN included, and must not be read), "
    "B_i m x n, X_i overwriting B_i in place. Both arrays packed, each matrix ROW-major: "
    "A_i(r, c) at A + i*m*m + r*m + c, B_i(r, c) at B + i*m*n + r*n + c. Sizes 1 <= m, n <= 64, "
    "batch >= 1 (1, 3 and 1000 are checked: every batch index on different data, so a kernel "
    "must be right for a batch that is not a multiple of any tile it uses). Kernel signature: "
    'extern "C" __global__ void trsm_small_batched_kernel(const scalar_t* A, scalar_t* B, '
    "int m, int n, int batch). Launch geometry comes from kernevo_launch_config(m, n, batch, "
    "cfg), which writes grid xyz, block xyz and dynamic shared bytes into cfg[0..6]."
)

TRSM_SMALL_BATCHED = PathSpec(
    path_id="trsm_small_batched",
    op="trsm_batched",
    dtypes=DTYPES,
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="trsm_small_batched_kernel",
    config_kernel_name="kernevo_launch_config",
    shape_bucket="m64n64",
    envelope={"m_max": 64, "n_max": 64, "batch_max": INT32_MAX},
    # Cheap cascade stage: ragged sizes at a batch of 3, and one matrix with two row halves.
    quick_shapes=((7, 5, 3), (33, 64, 1)),
    verify_shapes=(
        (1, 1, 1),
        (1, 64, 3),
        (7, 16, 1000),
        (16, 7, 3),
        (16, 16, 1000),
        (33, 33, 3),
        (33, 48, 1000),
        (48, 64, 1),
        (48, 1, 1000),
        (64, 33, 3),
        (64, 64, 1000),
        (64, 1, 1),
        (7, 64, 1),
    ),
    timed_shapes=TIMED_SHAPES,
    # Never used in scoring: checked only before a program becomes a champion.
    held_out_shapes=((5, 40, 2), (40, 5, 7), (57, 64, 100), (64, 17, 5), (11, 11, 33)),
    semantics=SEMANTICS,
    driver_factory="trsm_small_batched.driver:TrsmSmallBatchedDriver",
    baseline_factory="trsm_small_batched.baseline:CublasBatchedTrsm",
    reference_check="trsm_batched",
    sanitizer_shape=SANITIZER_SHAPE,
    verify_kinds=(),
)
