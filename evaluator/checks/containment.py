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
"""

from __future__ import annotations

import numpy as np

from evaluator.checks.accuracy import check_solution
from evaluator.inputs import Problem
from evaluator.report import CheckFailure


def check_containment(
    problem: Problem, entry: tuple[int, int], x: np.ndarray
) -> CheckFailure | None:
    """``nonfinite_containment`` when the rows of ``x`` (m×n) that do not depend on the
    non-finite A[``entry``] of ``problem`` fail the checks of the leading block; None otherwise.

    Raises:
        ValueError: ``entry`` not in the strict lower triangle.
    """
    m, n = problem.shape
    r, c = entry
    if not 0 <= c < r < m:
        raise ValueError(f"entry {entry} is not in the strict lower triangle of a {m}x{m} A")
    leading = Problem(
        np.asfortranarray(problem.a[:r, :r]), np.asfortranarray(problem.b[:r]), problem.kind,
        problem.seed,
    )  # fmt: skip
    failure = check_solution(leading, np.asfortranarray(x[:r]))
    if failure is None:
        return None
    return CheckFailure(
        "nonfinite_containment",
        (m, n),
        failure.value,
        failure.bound,
        f"rows 0-{r - 1} do not depend on A[{r}, {c}] = {problem.a[r, c]} but fail "
        f"{failure.check}: {failure.detail}",
    )
