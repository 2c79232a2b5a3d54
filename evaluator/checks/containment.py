"""Containment of a non-finite input: rows of X that do not depend on it come out as without it.

Forward substitution computes x_i = (b_i − Σ_{j<i} a_ij·x_j) / a_ii, row after row. An entry
A[r, c] of the strict lower triangle (c < r) enters x_r directly and every x_i with i > r
through x_r; rows i < r never read it, in any column and in any summation order. So the rows
that depend on A[r, c] are structurally rows r..m−1 of *every* column: in a column where
x_c ≠ 0 the entry makes x_r infinite, and where x_c = 0 (a zero column of B has X = 0 down to
row r) IEEE arithmetic gives Inf·0 = NaN, which cuBLAS returns in rows r..m−1 (issue 6's 64×8
case: A[40, 3] = +Inf, B's column 0 zero; NaN in rows 40–63). Those rows are not constrained.

Rows 0..r−1 are the solution of the leading r×r block, A[:r, :r]·X[:r] = B[:r], which holds
no non-finite entry: exactly the rows the same problem with A[r, c] = 0 would give. They must
pass every check of ``evaluator.checks.accuracy`` on that block (finite, scaled residual,
per-row forward error). A kernel that multiplies by the zeros of the triangle instead of
skipping them (an update of the already solved rows with a_ik = 0 masked in, or a triangular
block used as a dense one) turns them into 0·NaN = NaN: issue 6 found NaN in all 64 rows from
the seed and both champions.

An entry B[r, j] enters x_rj and, through it, rows r..m−1 of column j only: the other columns
are separate solves with the same A, and rows above r never read b_r. So every column other
than j must pass every check as a problem of its own, and rows 0..r−1 of column j the checks
of the leading block. A kernel that mixes columns (one scaling for all of B, a shared
reduction) or spreads 0·x_k upward fails there.

Where the entry is drawn: ``evaluator.inputs.containment_cases``.
"""

from __future__ import annotations

import numpy as np

from evaluator.checks.accuracy import check_solution
from evaluator.inputs import Problem
from evaluator.report import CheckFailure


def _sub(problem: Problem, rows: int, columns: list[int]) -> Problem:
    """The problem of the leading ``rows`` rows of A and B, ``columns`` of B."""
    a = np.asfortranarray(problem.a[:rows, :rows])
    return Problem(a, np.asfortranarray(problem.b[:rows, columns]), problem.kind, problem.seed)


def check_containment(
    problem: Problem, entry: tuple[int, int], x: np.ndarray, matrix: str = "A"
) -> CheckFailure | None:
    """``nonfinite_containment`` when the rows of ``x`` (m×n) that do not depend on the
    non-finite ``entry`` of ``matrix`` ("A": A[r, c]; "B": B[r, j]) of ``problem`` fail the
    checks of ``evaluator.checks.accuracy`` as a problem of their own; None otherwise.

    A[r, c]: rows 0..r−1 of every column, against the leading r×r block. B[r, j]: every column
    other than j against the whole A, then rows 0..r−1 of column j against the leading block.
    The detail names the entry, its value and the rows that failed.

    Raises:
        ValueError: ``entry`` not in the strict lower triangle of A (``matrix`` "A") or not in
            B ("B"); ``matrix`` neither.
    """
    m, n = problem.shape
    r, c = entry
    if matrix == "A":
        if not 0 <= c < r < m:
            raise ValueError(f"entry {entry} is not in the strict lower triangle of a {m}x{m} A")
        parts = [(_sub(problem, r, list(range(n))), x[:r], f"rows 0-{r - 1}")]
    elif matrix == "B":
        if not (0 <= r < m and 0 <= c < n):
            raise ValueError(f"entry {entry} is not in a {m}x{n} B")
        others = [j for j in range(n) if j != c]
        parts = [(_sub(problem, m, others), x[:, others], f"columns other than {c}")]
        parts += [(_sub(problem, r, [c]), x[:r, [c]], f"rows 0-{r - 1} of column {c}")]
    else:
        raise ValueError(f"matrix must be 'A' or 'B', not {matrix!r}")
    value = (problem.a if matrix == "A" else problem.b)[r, c]
    for sub, rows_x, rows in parts:
        if sub.b.size == 0:  # B's entry in row 0, or a single column: nothing there
            continue
        failure = check_solution(sub, np.asfortranarray(rows_x))
        if failure is not None:
            return CheckFailure(
                "nonfinite_containment",
                (m, n),
                failure.value,
                failure.bound,
                f"{rows} do not depend on {matrix}[{r}, {c}] = {value} but fail "
                f"{failure.check}: {failure.detail}",
            )
    return None
