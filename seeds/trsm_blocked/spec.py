"""The `trsm_blocked` path: TRSM for 128 ≤ m ≤ 16384, 1 ≤ n ≤ 16384 in all four dtypes, by the
HSMA-TRSM paper's blocked algorithm: diagonal NB×NB blocks inverted in parallel by the
candidate's kernel, block rows formed by cuBLAS GEMMs (``driver.py``, ``kernel.cu``).

Shape buckets (issue 7): a job targets one (dtype, bucket) and its champion holds the best NB
there, so the paper's compiled-in block-size table becomes a query to the API. Two buckets by m,
every n from 1 to 16384 in each (``BUCKETS``):

- ``m128_2048`` (128 ≤ m ≤ 2048), the registry's default: timed at 256², 1024² and the wide
  (129, 8192) (two block rows at NB = 128, one of them a single row); verified at ragged shapes
  up to m = 1000, where the host reference also checks every row.
- ``m2049_16384`` (2049 ≤ m ≤ 16384): timed at (8192, 1024), GEMM-bound, and the thin
  (4096, 17), where the inversion weighs most; verified at the same small shapes plus ragged
  ones up to m = 4100, judged there by LAPACK's ratio on the GPU alone
  (``evaluator.checks.accuracy.check_solution_lapack``, ``HOST_REFERENCE_MAX_M``). Timed at
  n = 1024 rather than 8192² to bound an evaluation: a 16384² float64 solve takes ~90 ms; by
  m²·n an 8192² one takes ~11 ms (complex128 about four times that) and (8192, 1024) ~1.4 ms.

Both sanitize at (600, 40): two or more block rows for every NB choice (128, 256, 512), the last
one ragged. The reference check is ``lapack_ratio``; the verification adds the ill-conditioned
kinds ``ill_conditioned`` and ``graded`` (``verify_kinds``; docs/EVALUATOR.md).

Below m = 128 the evaluator still runs its fixed cases (4×4 and 33×2 audits and sweeps, 64×8
containment): m ≤ NB is one diagonal block, which the kernel solves
directly, so they are real checks of the same kernel.
"""

from __future__ import annotations

from pathlib import Path

from ..spec import DTYPES, PathSpec, Shape, ShapeBucket

# The envelope of the path: every bucket's shapes lie inside it.
ENVELOPE = {"m_min": 128, "m_max": 16384, "n_max": 16384}
# Ragged small shapes (m not a multiple of any NB choice, n from 1 to 256, square and not) where
# the host reference checks each row and the scaled inputs and metamorphic relations run.
_SMALL_VERIFY: tuple[Shape, ...] = (
    (128, 7), (129, 64), (200, 33), (256, 256), (300, 17), (512, 5), (777, 1), (1000, 96),
)  # fmt: skip

# The large bucket's: some of the small ones, then ragged shapes past m = 2048 (2049 = 8·256 + 1,
# 3001, 4100), judged by LAPACK's ratio on the GPU alone.
_LARGE_VERIFY: tuple[Shape, ...] = (
    (129, 64), (300, 17), (777, 1), (1000, 96), (2049, 16), (3001, 5), (4100, 33),
)  # fmt: skip

M128_2048 = ShapeBucket(
    name="m128_2048",
    envelope={"m_min": 128, "m_max": 2048, "n_max": 16384},
    # Cheap cascade stage: one ragged block row at the default NB, one thin solve.
    quick_shapes=((300, 17), (128, 7)),
    verify_shapes=_SMALL_VERIFY,
    timed_shapes=((256, 256), (1024, 1024), (129, 8192)),
    # Never used in scoring: checked only before a program becomes a champion.
    held_out_shapes=((130, 130), (385, 3), (640, 200), (1537, 31)),
    sanitizer_shape=(600, 40),
)
M2049_16384 = ShapeBucket(
    name="m2049_16384",
    envelope={"m_min": 2049, "m_max": 16384, "n_max": 16384},
    # 2049 = 8·256 + 1: a last block row of one row at NB = 128 and 256.
    quick_shapes=((2049, 3), (300, 17)),
    verify_shapes=_LARGE_VERIFY,
    # The largest first: memcheck before a new best runs there; determinism at the last.
    timed_shapes=((8192, 1024), (4096, 17)),
    held_out_shapes=((1537, 31), (2500, 40), (5000, 3)),
    sanitizer_shape=(600, 40),
)
BUCKETS: tuple[ShapeBucket, ...] = (M128_2048, M2049_16384)

TRSM_BLOCKED = PathSpec(
    path_id="trsm_blocked",
    op="trsm",
    dtypes=DTYPES,
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="trsm_blocked_diag_kernel",
    config_kernel_name="kernevo_launch_config",
    shape_bucket=M128_2048.name,
    envelope=ENVELOPE,
    quick_shapes=M128_2048.quick_shapes,
    verify_shapes=M128_2048.verify_shapes,
    timed_shapes=M128_2048.timed_shapes,
    held_out_shapes=M128_2048.held_out_shapes,
    sanitizer_shape=M128_2048.sanitizer_shape,
    semantics=(
        "TRSM with BLAS semantics: side=Left, uplo=Lower, trans=N, diag=Non-unit, alpha=1. "
        "Solve A*X = B for X, A is m x m lower triangular (upper triangle holds garbage and must "
        "not be read), B is m x n, column-major with leading dimensions lda, ldb; X overwrites B "
        "in place. The path serves 128 <= m <= 16384, 1 <= n <= 16384; the evaluator also checks "
        "fixed cases at m < 128, which the kernel solves directly (m <= NB). The candidate is "
        'the diagonal-block kernel: extern "C" __global__ void trsm_blocked_diag_kernel(const '
        "scalar_t* A, int lda, int m, scalar_t* Y, int ldy, int ncols, int solve): solve == 0 "
        "writes inv(D_t) of each NB x NB diagonal block into Y (NB x NB per block, leading "
        "dimension NB, zeros outside the block); solve != 0 (m <= NB) solves B = Y in place. "
        "The driver then forms X_i = inv(D_i) * (B_i - A_i,0:i * X_0:i) with cuBLAS GEMMs. "
        "kernevo_launch_config(m, n, cfg) writes the kernel's grid xyz, block xyz and dynamic "
        "shared bytes into cfg[0..6]; kernevo_block_size(cfg) writes NB into cfg[0]."
    ),
    driver_factory="trsm_blocked.driver:TrsmBlockedDriver",
    baseline_factory="cublas:VendorTrsm",
    reference_check="lapack_ratio",
    buckets=BUCKETS,
    verify_kinds=("growth", "trap", "ill_conditioned", "graded"),
)
