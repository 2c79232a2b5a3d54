"""Audit pairs: results replayed from an earlier call instead of computed for this one.

A kernel can keep its last results in memory that outlives a launch (``__device__`` globals, or
memory it reaches through its own arguments) keyed on a few input elements, and hand them back
when the key matches. Independent random problems never match such a key, so verification also
solves pairs of problems back to back that share what a cheap key would look at — B's first and
last rows, A's first element and its diagonal — and differ inside (B's other rows, A's strict
lower triangle). Each is checked against its own reference; an output of the second problem that
fails its checks but solves the first is named ``replayed_result``.
"""

from __future__ import annotations

import numpy as np

from evaluator.checks.accuracy import check_solution, reference
from evaluator.inputs import Problem, make_problem
from evaluator.report import CheckFailure

# Mixed into a problem's seed to draw the inside of its partner, so the partner's draws are
# none of the verification's own seeds (those are independent 31-bit values).
_PARTNER_SEED_MIX = 0x5A5A_5A5A


def audit_partner(problem: Problem) -> Problem:
    """A problem equal to ``problem`` in B's first and last rows, A's diagonal (so A's first
    element) and A's strict upper triangle, with A's strict lower triangle and B's other rows
    drawn afresh from the same distribution. X differs in every row but the first.

    Raises:
        ValueError: m < 2 (a 1×1 A has nothing inside to change).
    """
    m, n = problem.shape
    if m < 2:
        raise ValueError("an audit pair needs m >= 2")
    seed = problem.seed ^ _PARTNER_SEED_MIX
    fresh = make_problem(m, n, problem.b.dtype.name, seed, problem.kind)
    # The fresh arrays are this function's own: the kept parts of ``problem`` are copied into
    # them, column j's diagonal and what lies above it (contiguous in Fortran order), B's first
    # and last rows.
    a, b = fresh.a, fresh.b
    for j in range(m):
        a[: j + 1, j] = problem.a[: j + 1, j]
    b[[0, m - 1]] = problem.b[[0, m - 1]]
    return Problem(a, b, "audit_pair", seed)


def issue_pair(dtype: str) -> tuple[Problem, Problem]:
    """The small case of issue 6, in ``dtype``: one 4×4 A, two right-hand sides with the same
    first and last rows. X(B1) = [[1,1],[0,0],[0.25,0.25],[1.75,1.75]];
    X(B2) = [[1,1],[4,4],[-2.75,-2.75],[4.75,4.75]] (all exact in binary)."""
    nan = np.nan
    a = np.array(
        [[2, nan, nan, nan], [1, 1, nan, nan], [0, 1, 4, nan], [1, 0, 1, 1]], dtype=dtype, order="F"
    )
    b1 = np.array([[2, 2], [1, 1], [1, 1], [3, 3]], dtype=dtype, order="F")
    b2 = np.array([[2, 2], [5, 5], [-7, -7], [3, 3]], dtype=dtype, order="F")
    return Problem(a, b1, "issue_4x4", 1), Problem(a, b2, "issue_4x4", 2)


def check_replayed(first: Problem, second: Problem, x_second: np.ndarray) -> CheckFailure | None:
    """``replayed_result`` when ``x_second``, an output for ``second`` that failed its checks, is
    an accepted solution of ``first`` (solved just before): the kernel returned a kept result.
    None otherwise, so an output that is merely wrong keeps the failure its own checks gave."""
    if check_solution(first, x_second) is not None:
        return None
    ref_first = np.linalg.norm(x_second.astype(np.complex128) - _exact(first))
    ref_second = np.linalg.norm(x_second.astype(np.complex128) - _exact(second))
    return CheckFailure(
        "replayed_result",
        second.shape,
        float(ref_first),
        None,
        "the output for the second problem of an audit pair (same first and last rows of B, "
        "same diagonal of A) solves the first one, solved just before: a result kept from an "
        f"earlier call (distance to the first's X {ref_first:.3g}, to its own {ref_second:.3g})",
    )


def _exact(problem: Problem) -> np.ndarray:
    """The reference X of ``problem``, widened to complex128 to compare any dtype."""
    return reference(problem.a, problem.b)[0].astype(np.complex128)
