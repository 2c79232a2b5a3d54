"""The `trsm_blocked` path: TRSM for 128 ≤ m ≤ 16384, 1 ≤ n ≤ 16384 in all four dtypes, by the
HSMA-TRSM paper's blocked algorithm: diagonal NB×NB blocks inverted in parallel by the
candidate's kernel, block rows formed by cuBLAS GEMMs (``driver.py``, ``kernel.cu``).

Shape buckets: a job targets one (dtype, bucket) and its champion holds the best NB there (the
paper's compiled-in block-size table becomes a query to the API). This spec is the bucket
``m128_16384``, the whole envelope, timed at m = 256, 1024 and 2048: a spec has one bucket,
and per-size buckets (e.g. m1024, m8192, each its own spec with timed shapes at its size) need
timed shapes beyond what the evaluator's float64 host reference verifies in seconds (up to about
2048); they wait for the LAPACK ratio computed on the GPU (issue 7, Build item 4).

Below m = 128 the evaluator still runs its fixed cases (4×4 and 33×2 audits and sweeps, 64×8
containment, the 33×31 sanitizer shape): m ≤ NB is one diagonal block, which the kernel solves
directly, so they are real checks of the same kernel.
"""

from __future__ import annotations

from pathlib import Path

from ..spec import DTYPES, PathSpec

TRSM_BLOCKED = PathSpec(
    path_id="trsm_blocked",
    op="trsm",
    dtypes=DTYPES,
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="trsm_blocked_diag_kernel",
    config_kernel_name="kernevo_launch_config",
    shape_bucket="m128_16384",
    envelope={"m_min": 128, "m_max": 16384, "n_max": 16384},
    # Cheap cascade stage: one ragged block row at the default NB, one thin solve.
    quick_shapes=((300, 17), (128, 7)),
    # Ragged m (not a multiple of any NB choice) and n from 1 to 256, square and not.
    verify_shapes=(
        (128, 7),
        (129, 64),
        (200, 33),
        (256, 256),
        (300, 17),
        (512, 5),
        (777, 1),
        (1000, 96),
    ),  # fmt: skip
    timed_shapes=((256, 256), (1024, 1024), (2048, 256)),
    # Never used in scoring: checked only before a program becomes a champion.
    held_out_shapes=((130, 130), (385, 3), (640, 200), (1537, 31)),
    # Two block rows at every NB choice ≤ 256, a ragged last one, and a partial IB column block.
    sanitizer_shape=(300, 40),
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
    reference_check="host_reference",
)
