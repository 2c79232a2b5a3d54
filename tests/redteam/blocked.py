"""Red-team entries for ``trsm_blocked`` (issue 7, Build item 6): the seed's diagonal-block
kernel with one deliberate fault each, and where the evaluator refuses it.

What a candidate of this path controls: the diagonal-block kernel, its launch configuration
and NB (``kernevo_block_size``). The driver (``seeds/trsm_blocked/driver.py``) inverts the
diagonal blocks with the kernel when m > NB and forms every block row of X with cuBLAS GEMMs
from the inverses it wrote into the driver's workspace (one per (m, n), kept while the driver
lives); at m ≤ NB the kernel solves B directly. So each fault below is planted in the kernel,
and it shows only where the kernel's part is used: m > NB for the inverses, a ragged last block
(m not a multiple of NB) for the ragged faults.

Every entry starts from :data:`CONTROL`, the seed's EVOLVE-BLOCK frozen in
``blocks/trsm_blocked_control.cu`` (NB = 256, IB = 32, 256 threads: 8 row groups), and the
expected shape is computed from the path's spec (``seeds/trsm_blocked/spec.py``) in the order
the evaluator runs its shapes: the quick shapes first, then the verification shapes
(``evaluator.pipeline``, ``evaluator.gpu_tasks.verify``). The fixed cases below m = 128 (the 4×4
audit pair, the 33×2 sweep, the 64×8 containment cases) are direct solves at NB = 256, which
none of the faults touches except :data:`READS_PAST_A` (reads only, inside the guard bands).
``tests/test_redteam.py`` checks the expected failure of each fault that changes X against the
GPU worker's own task code (``evaluator.gpu_tasks.run``) run on a NumPy model of the fault
(``redteam.models``), under each reference check the path may have.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from seeds.registry import get_path
from seeds.spec import DTYPES

from .entry import Entry, patched

PATH_ID = "trsm_blocked"
CONTROL = (Path(__file__).parent / "blocks" / "trsm_blocked_control.cu").read_text()

# The list (issue 7, Build item 6) for this path; every item has an entry.
KINDS = (
    "blocked solve that skips the last block row",
    "inverted diagonal blocks reused from the previous call",
    "right only when m is a multiple of NB",
)


def _define(name: str) -> int:
    """The integer value of ``#define name`` in :data:`CONTROL`."""
    match = re.search(rf"^#define {name} (\d+)", CONTROL, re.MULTILINE)
    if match is None:
        raise ValueError(f"the control defines no {name}")
    return int(match.group(1))


NB = _define("TB_NB")


def first_shape(predicate: Callable[[int, int], bool]) -> tuple[tuple[int, int], str]:
    """The first shape the evaluator solves on which ``predicate(m, n)`` holds, among the path's
    quick shapes (stage ``"quick"``) and then its verification shapes (``"verify"``).

    Raises:
        LookupError: no such shape: the fault would not be exercised before the held-out shapes.
    """
    spec = get_path(PATH_ID)
    for stage, shapes in (("quick", spec.quick_shapes), ("verify", spec.verify_shapes)):
        for m, n in shapes:
            if predicate(m, n):
                return (m, n), stage
    raise LookupError(f"no quick or verification shape of {PATH_ID} satisfies the predicate")


# The name an accuracy refusal of a finite X carries under each reference check this path's spec
# may name (``PathSpec.reference_check``, ``evaluator.checks.accuracy.SOLUTION_CHECKS``): the
# first residual criterion that check applies (``check_solution``: the scaled residual;
# ``check_solution_lapack``: LAPACK's ratio, 2m times the scaled residual, before it).
ACCURACY_CHECKS = {"host_reference": "scaled_residual", "lapack_ratio": "lapack_ratio"}


def accuracy_check() -> str:
    """The check that refuses a wrong, finite X of this path under its current reference check
    (the reference check's own name where :data:`ACCURACY_CHECKS` does not know it, which
    ``tests/test_redteam.py`` refuses)."""
    name = get_path(PATH_ID).reference_check
    return ACCURACY_CHECKS.get(name, name)


def blocked(m: int, n: int) -> bool:
    """The kernel inverts diagonal blocks (and the GEMMs use them) at this shape: m > NB."""
    return m > NB


def ragged(m: int, n: int) -> bool:
    """m > NB and the last diagonal block is short: m not a multiple of NB."""
    return m > NB and m % NB != 0


# ---- faults -----------------------------------------------------------------------------------

# (a) The last diagonal block's substitution runs no step, so its "inverse" is the identity
# the kernel starts from: the last block row of X is B's updated rows, never solved.
SKIPS_LAST_BLOCK_ROW = patched(
    CONTROL,
    (
        "  KV_UNROLL(TB_UNROLL)\n  for (int k = k0; k < mb; ++k) {",
        "  // The last diagonal block is the tail, finished by the block-row GEMMs.\n"
        "  const int k_end = (!solve && t + 1 == (int)gridDim.x) ? k0 : mb;\n"
        "  KV_UNROLL(TB_UNROLL)\n  for (int k = k0; k < k_end; ++k) {",
    ),
)

# (b) Inverses reused from the previous call: the kernel skips the inversion, taking the driver's
# workspace to still hold the last call's inverses (a caller solving many B against one A pays
# for them once). The driver fills the workspace with all-ones bytes (NaN) before every launch,
# so the inverses are never there: every X past one block is NaN. A kernel that counts its
# calls in the workspace to reuse only later (after verification's calls) finds the count
# wiped as well: :func:`counts_calls_in_workspace` is that kernel, and the GPU test
# ``tests/test_trsm_blocked_workspace.py`` shows it right on every call.
REUSES_INVERSES = patched(
    CONTROL,
    (
        "  scalar_t y[TB_ROWS];\n",
        "  // The inverses depend on A alone: the last call's are still in the workspace.\n"
        "  if (!solve) return;\n"
        "\n"
        "  scalar_t y[TB_ROWS];\n",
    ),
)


def counts_calls_in_workspace(warm: int) -> str:
    """The control trusting its inverses from call ``warm`` + 1 at a shape on, counting its
    calls in the workspace: row 0 of each thread block's last column of inv(D_t) (the strict
    upper triangle, written as zero) holds a subnormal k * 2^-1074 (2^-149 in single precision),
    which adds nothing to the GEMM; a slot of any other content counts as 0. No device-state
    symbol: the memory is the driver's, reached through the kernel's arguments. The driver's
    wipe before each launch makes every count 0, so the kernel always inverts.
    """
    return patched(
        CONTROL,
        (
            'extern "C" __global__ void kernevo_block_size(int* cfg) { cfg[0] = TB_NB; }\n',
            'extern "C" __global__ void kernevo_block_size(int* cfg) { cfg[0] = TB_NB; }\n'
            "\n"
            f"#define RT_WARM {warm}\n"
            "#if KERNEVO_DTYPE == 0 || KERNEVO_DTYPE == 2\n"
            "#define RT_TINY 0x1p-149f\n"
            "#else\n"
            "#define RT_TINY 0x1p-1074\n"
            "#endif\n"
            "#define RT_MAX_COUNT (1 << 20)\n"
            "#if KV_COMPLEX\n"
            "__device__ __forceinline__ real_t rt_re(scalar_t v) { return v.re; }\n"
            "__device__ __forceinline__ scalar_t rt_real(real_t r) { return {r, real_t(0)}; }\n"
            "#else\n"
            "__device__ __forceinline__ real_t rt_re(scalar_t v) { return v; }\n"
            "__device__ __forceinline__ scalar_t rt_real(real_t r) { return r; }\n"
            "#endif\n"
            "// The count a slot holds: k for k * RT_TINY with 0 < k < RT_MAX_COUNT, else 0.\n"
            "__device__ __forceinline__ int rt_count(scalar_t v) {\n"
            "  const real_t r = rt_re(v);\n"
            "  return r > real_t(0) && r < RT_MAX_COUNT * RT_TINY ? (int)(r / RT_TINY) : 0;\n"
            "}\n",
        ),
        (
            "  scalar_t y[TB_ROWS];\n",
            "  scalar_t* counter = solve ? nullptr\n"
            "                            : Y + (long)t * TB_NB * TB_NB +\n"
            "                                  (long)(blockIdx.y * TB_IB + TB_IB - 1) * TB_NB;\n"
            "  __shared__ int calls;\n"
            "  if (tid == 0) calls = counter != nullptr ? rt_count(*counter) : 0;\n"
            "  __syncthreads();\n"
            "  if (counter != nullptr && calls >= RT_WARM) return;  // the last call's A, again\n"
            "\n"
            "  scalar_t y[TB_ROWS];\n",
        ),
        (
            "      out[row] = (active && row < mb) ? y[s] : kv_zero();\n    }\n",
            "      out[row] = (active && row < mb) ? y[s] : kv_zero();\n    }\n"
            "    if (c == TB_IB - 1 && g == 0) *counter = rt_real((calls + 1) * RT_TINY);\n",
        ),
    )


# (c) Every diagonal block taken as a full NB x NB one, the last one slid up to end at row m:
# right when NB divides m (the slide is zero); otherwise slot t holds the inverse of another
# block than the driver's D_t.
RAGGED_BLOCK_SHIFTED = patched(
    CONTROL,
    (
        "  const long r0 = (long)t * TB_NB;         // first row (and column) of D_t in A\n"
        "  const int mb = solve ? m : min(TB_NB, m - (int)r0);\n",
        "  // Every diagonal block a full NB x NB one: the last slides up to end at row m\n"
        "  // (overlapping the block before it), so no block is short.\n"
        "  const long r0 = solve || (long)(t + 1) * TB_NB <= m ? (long)t * TB_NB\n"
        "                                                      : (long)m - TB_NB;\n"
        "  const int mb = solve ? m : TB_NB;\n",
    ),
)

# (extra) The update loop's row test against the block's height dropped ("the slot has NB
# rows"): a short last block's columns are read down to row NB - 1 of the slot, past A's last
# row, and past A's end in its last column, by NB - (m mod NB) elements at most (NB - 1 < the
# guard bands' 256). Those values feed only rows past the block, which are never stored.
READS_PAST_A = patched(
    CONTROL,
    (
        "        if (row > k && row < mb) y[s] = kv_fms(y[s], dk[row], x);",
        "        if (row > k) y[s] = kv_fms(y[s], dk[row], x);  // every row of the slot",
    ),
)


def _entry(**fields) -> Entry:
    return Entry(path=PATH_ID, compile_dtypes=DTYPES, **fields)


def entries() -> tuple[Entry, ...]:
    """This path's entries, their expected shapes taken from the spec as it is now."""
    spec = get_path(PATH_ID)
    first_blocked, _ = first_shape(blocked)
    first_ragged, _ = first_shape(ragged)
    residual = accuracy_check()
    return (
        _entry(
            name="blocked_skips_last_block_row",
            kind=KINDS[0],
            dtype="float32",
            block=SKIPS_LAST_BLOCK_ROW,
            status="wrong",
            check=residual,
            stage="pipeline",
            shape=first_blocked,
            mechanism="The last diagonal block's substitution loop runs no step, so its slot in "
            "the workspace holds the identity the kernel starts from and the driver's last "
            "GEMM copies B's updated last block row into X unsolved: X_last = B_last - "
            "A_last,<last X_<last instead of inv(D_last) times it. Direct solves (m <= NB, "
            "every fixed case) are right. At the first shape with m > NB the residual of the "
            "last block row, (I - D_last) X_last, is O(1): the path's residual check "
            "(scaled_residual, bound 30 m eps; or LAPACK's ratio, bound 30 eps) refuses its "
            "first (bounded) problem.",
        ),
        _entry(
            name="blocked_reuses_inverses",
            kind=KINDS[1],
            dtype="float64",
            block=REUSES_INVERSES,
            status="wrong",
            check="non_finite_output",
            stage="pipeline",
            shape=first_blocked,
            mechanism="Skips the inversion, taking the driver's workspace to hold the previous "
            "call's inverses (right for a caller that solves many B against one A, if the "
            "workspace kept them). The driver fills the inverse workspace with all-ones bytes, "
            "NaN in every dtype, before every launch: the buffer is the one thing the kernel "
            "writes that outlives a call, so nothing survives there, neither inverses nor a "
            "call count (a kernel that counts its calls there to reuse only after "
            "verification's calls always finds 0: tests/test_trsm_blocked_workspace.py). Every "
            "block row's GEMM multiplies NaN into X: non_finite_output at the first shape with "
            "m > NB. Direct solves (m <= NB, every fixed case) are right.",
        ),
        _entry(
            name="blocked_ragged_block_shifted",
            kind=KINDS[2],
            dtype="complex64",
            block=RAGGED_BLOCK_SHIFTED,
            status="wrong",
            check=residual,
            stage="pipeline",
            shape=first_ragged,
            mechanism="Takes every diagonal block as a full NB x NB one, the last slid up to "
            "end at row m (the usual way to avoid a short tile). Right when NB divides m, and "
            "at m <= NB (direct solve). When m % NB != 0 the last slot holds the inverse of "
            "A[m-NB:m, m-NB:m], and the driver multiplies its top-left corner, which is the "
            "inverse of another block than D_last, into the last block row: the path's "
            "residual check refuses the first ragged shape with m > NB.",
        ),
        _entry(
            name="blocked_reads_past_a",
            kind=None,
            dtype="float64",
            block=READS_PAST_A,
            status="wrong",
            check="sanitizer_memcheck",
            stage="new_best",
            shape=tuple(spec.sanitizer_shape),  # type: ignore[arg-type]
            mechanism="Drops the update's test of the row against the block's height (the "
            "slot has NB rows anyway): whenever NB does not divide m, each column of the short "
            "last block (of the whole matrix at m < NB) is read down to row NB - 1 of the slot, "
            "past A's last row, and past A's end in its last column, by NB - (m mod NB) "
            "elements at most. Those values feed only rows past the block, which are never "
            "stored, so X is exactly the control's; inside A the extra rows are the next "
            "columns' tops, and past A's last column they fall in verification's and timing's "
            "guard bands (256 elements, more than NB - 1): every run-time check passes. "
            "compute-sanitizer's memcheck before a new job best, with A allocated at exactly "
            "m*m elements, reports the reads past A's end at the path's sanitizer shape, whose "
            "m is not a multiple of NB.",
        ),
    )


ENTRIES: tuple[Entry, ...] = entries()
