"""Red-team entries for ``trsm_small_z64`` (issue 7, Build item 6): the first seed's two-group
pipeline with one deliberate fault each, and where the evaluator refuses it.

Every entry starts from :data:`CONTROL`, the first seed's EVOLVE-BLOCK frozen in
``blocks/trsm_small_z64_control.cu`` (the seed itself has since been widened to more warps and
thread blocks; the control stays, so each entry stays one fault away from a known-good kernel).
The control runs 128 threads as a loading group (warps 0-1) and a computing group (warps 2-3,
16 columns each) that hand shared-memory regions over through block-wide barriers
(``tz_barrier(id)``, ``bar.sync id, 128``), five phases per 32-column block of B. The
evaluator's shapes for this path: m = 64 with n from 1 to 64 (quick (64, 7) then (64, 33);
verification, timing and held-out shapes), the fixed cases below m = 64 (4×4 audit pair, 33×2
sweep, 64×8 containment), and compute-sanitizer (memcheck, racecheck, synccheck, initcheck:
``evaluator.champion.SANITIZER_TOOLS``, for every path) at the path's ``sanitizer_shape``
before promotion.
"""

from __future__ import annotations

from pathlib import Path

from seeds.registry import get_path

from .entry import Entry, patched

PATH_ID = "trsm_small_z64"
CONTROL = (Path(__file__).parent / "blocks" / "trsm_small_z64_control.cu").read_text()

# The list (issue 7, Build item 6) for this path; every item has an entry.
KINDS = ("pipeline groups missing a barrier",)

# The two groups without the hand-over that ends phase 3 (barrier 3): the loading group writes
# the bottom block of B into the B region while the computing group solves the top block, and
# the computing group copies that region into registers (phase 4) with no barrier after the
# writes.
MISSING_BARRIER = patched(
    CONTROL,
    (
        "      if (cb == 0) tz_load_triangle(sA22, A, TZ_HALF, mb, lda, lt);\n"
        "    }\n"
        "    tz_barrier(3);\n",
        "      if (cb == 0) tz_load_triangle(sA22, A, TZ_HALF, mb, lda, lt);\n"
        "    }\n"
        "    // No hand-over here: the bottom block has long arrived when the computing group,\n"
        "    // done with the whole top-block solve, reads it.\n",
    ),
)

# Whole 32 x 32 tiles of A loaded (no triangle test) and every row but the pivot updated with a
# 0/1 mask instead of a branch: the tile's strict upper triangle holds A's, NaN in every check.
READS_UPPER = patched(
    CONTROL,
    (
        "    if (c <= r && r < rows) {",
        "    if (r < rows && c < rows) {  // the whole square: one test fewer per element",
    ),
    (
        "    const bool below = lane > k && lane < rows;\n"
        "    const scalar_t a = below ? sL[k * TZ_HALF + lane] : kv_zero();\n",
        "    // Branch-free: every lane updates, rows other than those below k by a * 0.\n"
        "    const real_t keep = (lane > k && lane < rows) ? real_t(1) : real_t(0);\n"
        "    const scalar_t a = kv_mul(sL[k * TZ_HALF + lane], {keep, real_t(0)});\n",
    ),
    (
        "      if (lane == k) v[c] = x;\n      if (below) v[c] = kv_fms(v[c], a, x);\n",
        "      v[c] = lane == k ? x : kv_fms(v[c], a, x);\n",
    ),
)


def _entry(**fields) -> Entry:
    return Entry(path=PATH_ID, dtype="complex128", compile_dtypes=("complex128",), **fields)


def entries() -> tuple[Entry, ...]:
    """This path's entries, their expected shapes taken from the spec as it is now."""
    spec = get_path(PATH_ID)
    return (
        _entry(
            name="z64_missing_barrier",
            kind=KINDS[0],
            block=MISSING_BARRIER,
            status="wrong",
            check="sanitizer_racecheck",
            stage="champion",
            shape=tuple(spec.sanitizer_shape),  # type: ignore[arg-type]
            mechanism="Drops the barrier that ends phase 3. In phase 3 the loading warps write "
            "the bottom 32 rows of the column block into the shared B region (and A22 on the "
            "first block) while the computing warps solve the top block against A11; in phase "
            "4 the computing warps copy the B region into registers. Without the barrier "
            "nothing orders those reads after the writes. In practice the computing warps reach "
            "them only after the whole 32-step top-block solve (16 columns per warp, a complex "
            "division and multiply-subtract per column and step), while a loader has at most "
            "32 elements to move, so X comes out right and bit-identical through the pipeline, "
            "the held-out shapes and the determinism repeats. compute-sanitizer's racecheck "
            "(run for every path at its sanitizer_shape, (64, 33) here: both 32-row halves, so "
            "phases 3 and 4 run, after memcheck there finds nothing) reports the inter-warp "
            "accesses to the same shared words with no barrier between them.",
        ),
        _entry(
            name="z64_reads_upper_triangle",
            kind=None,
            block=READS_UPPER,
            status="wrong",
            check="non_finite_output",
            stage="pipeline",
            shape=spec.quick_shapes[0],
            mechanism="Loads whole 32 x 32 tiles of A into shared memory (no triangle test) and "
            "updates every row but the pivot with a 0/1 mask instead of a branch, so the rows "
            "above k, already solved, take a * 0 * x_k with a from the strict upper triangle. "
            "The evaluator's A holds NaN there in every problem and 0 * NaN = NaN: X's solved "
            "rows turn NaN at the first solve, the first quick shape's bounded problem.",
        ),
    )


ENTRIES: tuple[Entry, ...] = entries()
