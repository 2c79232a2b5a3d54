"""The order of trsm_blocked's GEMMs: recursive halving over the diagonal blocks.

Once every diagonal block D_t (NB×NB, the last one ragged) is inverted, X = A⁻¹·B is formed by
two kinds of GEMM on a workspace W (m×n) that receives X:

- ``Inverse(t)``: W_t = inv(D_t)·B_t (block row t, ``rows`` = its height), written into W
  because a GEMM cannot overwrite its own input;
- ``Update(r, c)``: B_r −= A[r, c]·W_c, where the row range r lies below the column range c
  and W_c already holds X_c.

Recursive halving (a triangular solve split at a block boundary near the middle: solve the top,
update the bottom with one GEMM, solve the bottom; the schedule of recursive TRSM, e.g. Elmroth,
Gustavson, Jonsson, Kågström, "Recursive blocked algorithms and hybrid data structures for
dense matrix library software", SIAM Review 46(1), 2004) uses 2·L − 1 GEMMs for L diagonal
blocks, as the left-looking block-row loop does, but its updates are as large as the split
allows: half of them have k ≥ m/4 and the first one is (m/2)×n×(m/2), where the left-looking
loop's are all NB rows tall. Thin right-hand sides (n = 17) get NB-row GEMMs with a long k
from the left-looking loop, which cuBLAS can only spread by split-K.

The driver copies W back into B after the last step (one 2-D copy instead of one per block).
Every row range is a whole number of blocks except where it ends at m.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Inverse:
    """W[row0 : row0 + rows] = inv(D_block)[:rows, :rows] · B[row0 : row0 + rows]."""

    block: int
    row0: int
    rows: int


@dataclass(frozen=True)
class Update:
    """B[row0 : row0 + rows] −= A[row0 : row0 + rows, col0 : col0 + cols] · W[col0 : col0 + cols]
    (the row range below the column range)."""

    row0: int
    rows: int
    col0: int
    cols: int


Step = Inverse | Update


def block_schedule(m: int, nb: int) -> tuple[Step, ...]:
    """The GEMMs that form X from the inverted diagonal blocks of an m×m A, in order.

    Args:
        m: rows of A and B (m > nb: at m ≤ nb the kernel solves directly, no GEMM).
        nb: the diagonal block size NB.

    Returns:
        2·L − 1 steps for L = ceil(m / nb) blocks: one ``Inverse`` per block, in block order,
        each preceded by the ``Update`` steps that bring every block above it into its rows.

    Raises:
        ValueError: m ≤ nb or nb < 1.
    """
    if nb < 1 or m <= nb:
        raise ValueError(f"a blocked schedule needs m > NB >= 1 (m = {m}, NB = {nb})")
    blocks = -(-m // nb)
    steps: list[Step] = []

    def rows_of(first: int, last: int) -> tuple[int, int]:
        """Row offset and height of blocks first..last − 1 (the last block may be ragged)."""
        return first * nb, min(last * nb, m) - first * nb

    def solve(first: int, last: int) -> None:
        if last - first == 1:
            row0, rows = rows_of(first, last)
            steps.append(Inverse(first, row0, rows))
            return
        middle = (first + last) // 2
        solve(first, middle)
        col0, cols = rows_of(first, middle)
        row0, rows = rows_of(middle, last)
        steps.append(Update(row0, rows, col0, cols))
        solve(middle, last)

    solve(0, blocks)
    return tuple(steps)


# cuBLAS ?gemm's arguments as seeds.cublas.VendorGemm.gemm takes them: (m, n, k, alpha, A, lda,
# B, ldb, beta, C, ldc), pointers as integers, column-major, no transposes.
Gemm = Callable[[int, int, int, float, int, int, int, int, float, int, int], None]


@dataclass(frozen=True)
class Operands:
    """Device addresses (bytes) and leading dimensions (elements) one blocked solve works on:
    A (m×m, ``lda``), B (m×n, ``ldb``), the inverses (NB×NB per diagonal block, leading
    dimension NB, block t at ``inverses + t·NB²·itemsize``) and W (m×n, leading dimension m);
    ``itemsize`` in bytes."""

    a: int
    lda: int
    b: int
    ldb: int
    inverses: int
    w: int
    itemsize: int


def issue_gemms(
    steps: tuple[Step, ...], gemm: Gemm, ops: Operands, m: int, n: int, nb: int
) -> None:
    """Call ``gemm`` once per step of ``steps`` (from :func:`block_schedule`) on ``ops``; W then
    holds X. The driver passes cuBLAS; the CPU tests pass a NumPy GEMM over simulated memory, so
    the address arithmetic they check is the driver's."""
    size = ops.itemsize
    for step in steps:
        if isinstance(step, Inverse):
            inv_t = ops.inverses + step.block * nb * nb * size
            b_t, w_t = ops.b + step.row0 * size, ops.w + step.row0 * size
            gemm(step.rows, n, step.rows, 1.0, inv_t, nb, b_t, ops.ldb, 0.0, w_t, m)
        else:
            a_rc = ops.a + (step.col0 * ops.lda + step.row0) * size
            w_c, b_r = ops.w + step.col0 * size, ops.b + step.row0 * size
            gemm(step.rows, n, step.cols, -1.0, a_rc, ops.lda, w_c, m, 1.0, b_r, ops.ldb)
