"""The `solve_tri` path: ggml's SOLVE_TRI, a batched lower-triangular solve A·X = B in float32,
one thread block per matrix (``kernel.cu``).

Shapes are ``(n, k, b2, b3)``: per batch index (i2, i3), A is n×n lower triangular with a
non-unit diagonal, B and X are n×k, each matrix row-major; ggml's tensors ne_lhs = [n, n, b2, b3]
and ne_rhs = ne_dst = [k, n, b2, b3], with byte strides nb[1..3] per tensor (``layout.py``).

The shape sets are issue 8's, plus two of ours in the verification: (1, 1, 1, 1), the smallest
problem, and the sanitizer shape (150, 70, 3, 2), where the warps hand over: 150 rows are 2, 3 or
5 row tiles for every ``ST_TILE`` choice (32, 64, 128), the last one ragged, so racecheck sees a
tile of A staged again while other warps still finish the previous one; 70 columns are more than
any block's columns per round (``ST_WARPS`` × ``ST_COLS_PER_WARP`` ≤ 64), so warps loop over
column groups unevenly; 3 × 2 batches with b2 > 1 and b3 > 1. The seed's own warp count, 6, is
not a power of two (the published kernel raced at such counts).

The envelope (what the path serves once verified): 1 ≤ n ≤ 256, 1 ≤ k ≤ 128 (the verified
shapes' extent), 1 ≤ b2, b3 ≤ 4096. The kernel itself is right for any n and k (row tiles and
column groups); the driver's own limits are ``layout.check_shape``'s.

The path is a :class:`~seeds.spec.PathSpec` of the op ``solve_tri`` (``seeds.ops``): its shape
sets hold (n, k, b2, b3) tuples, its envelope bounds each parameter (``n_max``, ``k_max``,
``b2_max``, ``b3_max``) and ``SOLVE_TRI.serves(n, k, b2, b3)`` says whether it serves a shape.
``reference_check`` names the evaluator's checks of this path
(``evaluator.checks.solve_tri.check_output``), ``verify_kinds`` the input kinds of
``seeds.solve_tri.inputs`` the verification adds beside the bounded problems.
"""

from __future__ import annotations

from pathlib import Path

from ..spec import PathSpec

PATH_ID = "solve_tri"
OP = "solve_tri"
# The op's shape parameters, in the order of the path's shapes.
SHAPE_PARAMS: tuple[str, ...] = ("n", "k", "b2", "b3")
SolveTriShape = tuple[int, int, int, int]

ENVELOPE: dict[str, int] = {"n_max": 256, "k_max": 128, "b2_max": 4096, "b3_max": 4096}

# Issue 8's shapes, in its order; the four timed ones are marked there.
ISSUE_SHAPES: tuple[SolveTriShape, ...] = (
    (64, 6, 4, 2),
    (64, 10, 2, 2),
    (64, 64, 2, 2),
    (11, 5, 1, 1),
    (17, 9, 2, 4),
    (30, 8, 7, 1),
    (42, 10, 5, 2),
    (64, 64, 8, 32),
    (128, 32, 4, 2),
    (256, 128, 4, 2),
)
TIMED_SHAPES: tuple[SolveTriShape, ...] = (
    (64, 6, 4, 2),
    (64, 64, 8, 32),
    (128, 32, 4, 2),
    (256, 128, 4, 2),
)
SANITIZER_SHAPE: SolveTriShape = (150, 70, 3, 2)

SEMANTICS = (
    "ggml SOLVE_TRI in float32: for every batch index (i2, i3) with 0 <= i2 < b2, 0 <= i3 < b3, "
    "solve A*X = B, A n x n lower triangular with a non-unit diagonal (its strict upper triangle "
    "holds garbage, NaN included, and must not be read), B and X n x k; every matrix is "
    "row-major (column index fastest). ggml tensors ne_lhs = [n, n, b2, b3], ne_rhs = ne_dst = "
    "[k, n, b2, b3]; strides nb1, nb2, nb3 per tensor in BYTES, not necessarily packed (rows "
    "may be padded, and b3 may be the inner batch dimension): element (r, c) of batch (i2, i3) "
    "of A is at (char*)A + i3*nb_a3 + i2*nb_a2 + r*nb_a1 + 4*c. X is its own tensor, or exactly "
    "B (same pointer and strides: in place); B must not be written otherwise. Shapes 1 <= n <= "
    "256, 1 <= k <= 128, and the kernel must stay right for any n and k (the evaluator checks "
    'ragged sizes such as 150 x 70). Kernel signature: extern "C" __global__ void '
    "solve_tri_kernel(const float* A, const float* B, float* X, int n, int k, int b2, "
    "long long nb_a1, long long nb_a2, long long nb_a3, long long nb_b1, long long nb_b2, "
    "long long nb_b3, long long nb_x1, long long nb_x2, long long nb_x3). Launch geometry "
    "comes from kernevo_launch_config(n, k, b2, b3, cfg), which writes grid xyz, block xyz and "
    "dynamic shared bytes into cfg[0..6]. Every __syncthreads() must be reached by every "
    "thread of the block, for every warp count."
)

SOLVE_TRI = PathSpec(
    path_id=PATH_ID,
    op=OP,
    dtypes=("float32",),
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="solve_tri_kernel",
    config_kernel_name="kernevo_launch_config",
    shape_bucket="n256_k128",
    envelope=ENVELOPE,
    # Cheap cascade stage: a ragged single matrix, and the published kernel's race shape
    # (10 columns, 2 x 2 batches).
    quick_shapes=((11, 5, 1, 1), (64, 10, 2, 2)),
    verify_shapes=(*ISSUE_SHAPES, (1, 1, 1, 1), SANITIZER_SHAPE),
    timed_shapes=TIMED_SHAPES,
    # Never used in scoring: checked only before a program becomes a champion.
    held_out_shapes=(
        (2, 3, 1, 1),
        (33, 33, 3, 1),
        (65, 1, 1, 2),
        (96, 40, 2, 3),
        (200, 100, 1, 1),
        (7, 128, 2, 1),
    ),
    semantics=SEMANTICS,
    driver_factory="solve_tri.driver:SolveTriDriver",
    baseline_factory="solve_tri.baseline:CublasSolveTri",
    reference_check="solve_tri",
    sanitizer_shape=SANITIZER_SHAPE,
    verify_kinds=("ggml",),
)
