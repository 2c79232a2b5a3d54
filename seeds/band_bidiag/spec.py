"""The `band_bidiag` path: reduction of an n×n upper band matrix of bandwidth BW to upper
bidiagonal form (d, e) by Householder bulge chasing (``kernel.cu``, ``schedule.py``), float32
and float64.

Shapes are ``(n, bandwidth)``, the op's shape parameters (``seeds.ops.band_bidiag``); the
envelope and buckets bound them by ``n_min``/``n_max`` and ``bandwidth_min``/``bandwidth_max``.
The op requires bandwidth ≤ n − 1; every shape here keeps it (the kernel and the driver would
also take a wider band, as the whole upper triangle).

Shape buckets, by n (the reference, DGBBRD on the host, costs O(n²·BW): 2.8 s at (4096, 32) on
the development machine, ~11 s at (8192, 32) and (4096, 128), ~45 s at (16384, 32)):

- ``n1_2048`` (the registry's default): quick (64, 8), (129, 32); verified at ragged n (not
  multiples of any TW), BW = 0 and 1 (nothing to reduce), BW = n − 1 (the whole upper
  triangle) and up to (2048, 33); timed at (1024, 32), (1024, 128), (2048, 64).
- ``n2049_16384``: the same small shapes plus (2049, 32), (3001, 64), (4100, 17); timed at
  (8192, 32) (the issue's target: within 0.34 s in float32, the paper's H100 figure) and
  (4096, 128).

Both sanitize at (150, 40): several stages for TW ≤ 32 (40 → 8 → 1 at TW = 32; 40 → 24 → 8
→ 1 at 16), a ragged last block, blocks of one launch on several sweeps.
"""

from __future__ import annotations

from pathlib import Path

from ..spec import PathSpec, Shape, ShapeBucket

DTYPES: tuple[str, ...] = ("float32", "float64")
# Bandwidth 0 (a diagonal) and 1 (already bidiagonal) launch nothing; 128 is issue 8's largest.
ENVELOPE = {"n_min": 1, "n_max": 16384, "bandwidth_min": 0, "bandwidth_max": 128}

_SMALL_VERIFY: tuple[Shape, ...] = (
    (1, 0), (2, 1), (7, 3), (33, 1), (40, 39), (64, 63), (100, 7), (257, 32), (300, 64),
    (1000, 128), (2048, 33),
)  # fmt: skip
_LARGE_VERIFY: tuple[Shape, ...] = (
    (2, 1), (33, 1), (64, 63), (257, 32), (1000, 128), (2049, 32), (3001, 64), (4100, 17),
)  # fmt: skip

N1_2048 = ShapeBucket(
    name="n1_2048",
    envelope={"n_min": 1, "n_max": 2048, "bandwidth_min": 0, "bandwidth_max": 128},
    quick_shapes=((64, 8), (129, 32)),
    verify_shapes=_SMALL_VERIFY,
    timed_shapes=((1024, 32), (1024, 128), (2048, 64)),
    held_out_shapes=((500, 17), (777, 128), (1500, 100)),
    sanitizer_shape=(150, 40),
)
N2049_16384 = ShapeBucket(
    name="n2049_16384",
    envelope={"n_min": 2049, "n_max": 16384, "bandwidth_min": 0, "bandwidth_max": 128},
    quick_shapes=((2049, 32), (129, 32)),
    verify_shapes=_LARGE_VERIFY,
    # The largest first, as trsm_blocked's (memcheck before a new best runs there).
    timed_shapes=((8192, 32), (4096, 128)),
    held_out_shapes=((2500, 40), (5000, 17)),
    sanitizer_shape=(150, 40),
)
BUCKETS: tuple[ShapeBucket, ...] = (N1_2048, N2049_16384)

BAND_BIDIAG = PathSpec(
    path_id="band_bidiag",
    op="band_bidiag",
    dtypes=DTYPES,
    seed_file=Path(__file__).with_name("kernel.cu"),
    kernel_name="band_bidiag_kernel",
    config_kernel_name="kernevo_launch_config",
    shape_bucket=N1_2048.name,
    envelope=ENVELOPE,
    quick_shapes=N1_2048.quick_shapes,
    verify_shapes=N1_2048.verify_shapes,
    timed_shapes=N1_2048.timed_shapes,
    held_out_shapes=N1_2048.held_out_shapes,
    sanitizer_shape=N1_2048.sanitizer_shape,
    semantics=(
        "Reduce an n x n upper band matrix A of bandwidth BW (a_ij = 0 unless 0 <= j - i <= BW) "
        "to upper bidiagonal form by two-sided Householder bulge chasing; the singular values of "
        "the bidiagonal (d, e) must be A's. Real: float32 or float64. Storage: the padded band "
        "layout, column-major, a_ij at ab[j * ldab + ku + i - j], ku = 2 * BW - 1, "
        "ldab = 3 * BW, zero outside the band on entry (room for the bulges); afterwards "
        "d_i = ab[ku + i * ldab], e_i = ab[ku - 1 + (i + 1) * ldab]. The driver runs stages "
        "(b, t): bandwidth b reduced to b - t, t = min(TW, b - 1), from b = BW down to 1; a "
        "stage is 3 * (n - 2 - (b - t)) + 1 launches of "
        'extern "C" __global__ void band_bidiag_kernel(scalar_t* ab, int ldab, int ku, int n, '
        "int b, int t, int cycle); in launch `cycle`, sweep R (0 <= R <= n - 2 - (b - t)) runs "
        "its step k = cycle - 3 * R (if k < (n - 2 - R + t) / b) on the block c0 = R - t + "
        "(k + 1) * b, c1 = min(c0 + t, n - 1): a right reflector annihilates a(row, c0+1..c1) "
        "(row = R at k = 0, else c0 - b), applied to rows row+1..c1, then a left reflector "
        "annihilates a(c0+1..c1, c0), applied to columns c0+1..min(c1 + b, n - 1). Sweeps "
        "start 3 launches apart so the blocks of one launch touch disjoint rows. "
        "kernevo_launch_config(n, bw, cfg) writes grid xyz, block xyz and dynamic shared bytes "
        "into cfg[0..6]; kernevo_tile_width(cfg) writes TW into cfg[0] (1 <= TW <= 1024)."
    ),
    driver_factory="band_bidiag.driver:BandBidiagDriver",
    baseline_factory="band_bidiag.baseline:LapackGbbrd",
    reference_check="band_bidiag_singular_values",
    buckets=BUCKETS,
    # seeds.band_bidiag.inputs kinds (not evaluator.inputs'): the spectra up to n = 4096.
    verify_kinds=(
        "random",
        "zero_rows",
        "repeated_blocks",
        "arithmetic",
        "log_decay",
        "quarter_circle",
        "repeated",
        "rank_deficient",
    ),  # fmt: skip
)
