"""The `trsm_small_z64` path: complex128 TRSM at m = 64, n ≤ 64, by the HSMA-TRSM paper's
double-complex design: A split 2×2 into 16 KB blocks, B streamed through one region of at most
16 KB, a loading and a computing thread group, several thread blocks over B's columns
(``kernel.cu`` describes the pipeline and its tunables).

It overlaps ``trsm_small`` at complex128 64 × n; which one answers a call is the champions'
measured comparison (``seeds.registry``), not this spec. It launches through ``trsm_small``'s
driver (the geometry comes from the kernel's ``kernevo_launch_config``, the signature is the
same) and is timed against the same cuBLAS binding (``cublasZtrsm_v2``).
"""

from __future__ import annotations

from pathlib import Path

from ..spec import PathSpec

TRSM_SMALL_Z64 = PathSpec(
    path_id="trsm_small_z64",
    op="trsm",
    dtypes=("complex128",),
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="trsm_small_z64_kernel",
    config_kernel_name="kernevo_launch_config",
    # m = 64 exactly, 1 ≤ n ≤ 64.
    shape_bucket="m64eq_n64",
    envelope={"m_min": 64, "m_max": 64, "n_max": 64},
    # Cheap cascade stage: a ragged n inside one 32-column block and one past it.
    quick_shapes=((64, 7), (64, 33)),
    # n from the ragged set {1, 2, 7, 31, 33, 63, 64} plus 16 and 48: one and two
    # 32-column blocks, full and partial, thread blocks of 8 to 64 columns ending full and
    # ragged, and compute warps left with part of their columns or none.
    verify_shapes=(
        (64, 1),
        (64, 2),
        (64, 7),
        (64, 16),
        (64, 31),
        (64, 33),
        (64, 48),
        (64, 63),
        (64, 64),
    ),
    timed_shapes=((64, 16), (64, 48), (64, 64)),
    # Never used in scoring: checked only before a program becomes a champion.
    held_out_shapes=((64, 3), (64, 17), (64, 29), (64, 40), (64, 57)),
    # Both 32-row halves, so phases 3-5 run; at TZ_CTA_COLS 64 two column blocks in one thread
    # block (the barrier between them crossed), at every width a ragged last thread block.
    sanitizer_shape=(64, 33),
    semantics=(
        "TRSM with BLAS semantics in complex128: side=Left, uplo=Lower, trans=N, diag=Non-unit, "
        "alpha=1. Solve A*X = B for X, A is m x m lower triangular (upper triangle holds garbage "
        "and must not be read), B is m x n, both column-major with lda = ldb = m; X overwrites B "
        "in place. The path serves m = 64 and 1 <= n <= 64; the evaluator also checks fixed "
        "cases at m < 64 (4 x 4, 33 x 2), so the kernel must stay right for any "
        '1 <= m <= 64. Kernel signature: extern "C" __global__ void '
        "trsm_small_z64_kernel(const scalar_t* A, scalar_t* B, int m, int n, int lda, int ldb). "
        "Launch geometry comes from kernevo_launch_config(m, n, cfg) which writes grid xyz, "
        "block xyz and dynamic shared bytes into cfg[0..6]. The seed splits shared memory into "
        "four regions (A11, A21, A22: 16 KB each; one 32-row B block of up to 32 columns) and "
        "its threads into a loading group and a computing group of several warps, each warp "
        "holding a few columns of B in registers; the groups hand over through block-wide "
        "barriers (bar.sync with the block's thread count), and one thread block serves "
        "TZ_CTA_COLS columns of B."
    ),
    driver_factory="trsm_small.driver:TrsmSmallDriver",
    baseline_factory="trsm_small.baseline:CublasTrsm",
    reference_check="host_reference",
)
