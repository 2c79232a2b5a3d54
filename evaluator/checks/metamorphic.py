"""Metamorphic relations: outputs of related problems must relate as their solutions do.

On fresh random inputs every evaluation (drawn from the evaluation's seed, so a report
reproduces them), the candidate solves a few problems derived from one bounded problem
(A, B1), and its outputs must satisfy:

- ``metamorphic_linearity``: X(A, α·B1 + β·B2) = α·X(A, B1) + β·X(A, B2). B2 shares B1's first
  row (a result kept per column and keyed on it comes back for B2), and α ∈ [0.5, 1],
  β ∈ [1.5, 2] keep α + β away from 1, so an output offset by a constant does not cancel.
- ``metamorphic_row_scaling``: X(D·A, D·B1) = X(A, B1) for D diagonal, once with powers of two
  2^k, k ∈ [−30, 30] (exact in the dtype) and once with 2^t, t uniform in [−30, 30] (rounded):
  rows of very different magnitude, which the drawn inputs never have.
- ``metamorphic_column_permutation``: X(A, B1·P) = X(A, B1)·P for a random permutation P of the
  columns (a shortcut that depends on the column index shows).

A relation Σ_k c_k·X̂_k·P_k = 0 holds within a slack per row i of
    Σ_k |c_k|·bound_k,i + max_j |Σ_k c_k·(X_k·P_k)_ij| ,
bound_k,i the per-row forward-error bound of output k (``accuracy.forward_bound``) and X_k the
reference solutions of the problems as stored (the last term is what rounding the derived inputs
into the dtype moves the exact relation by; 0 where they are exact). Compared, like the
forward-error check, as the row's largest deviation against that slack. By the triangle
inequality outputs that all pass their own forward-error checks pass every relation, so a
relation never refuses a correct kernel; what it adds is inputs of its own and a name for the
kind of fault. Relations are checked before each output's own reference checks (only a
non-finite output is named first, as ``non_finite_output``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluator.checks.accuracy import forward_bound, reference
from evaluator.inputs import Problem, make_problem
from evaluator.report import CheckFailure

# Mixed into the evaluation's seed for the relations' base problem, and the stream of their
# other draws, so that none is a problem the verification also solves.
_RELATION_SEED_MIX = 0x3C3C_3C3C
_ROW_SCALE_EXPONENT = 30


@dataclass(frozen=True)
class Term:
    """One output in a relation: ``coefficient``·X̂(``problem``), its columns taken in the order
    ``columns`` (None: as they are)."""

    coefficient: float
    problem: Problem
    columns: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Relation:
    """Σ over ``terms`` of coefficient·X̂·P = 0; ``check`` names a failure, ``statement`` says
    what must hold, with the drawn constants."""

    check: str
    terms: tuple[Term, ...]
    statement: str


def _fortran(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.asfortranarray(x.astype(dtype))


def linearity(base: Problem, rng: np.random.Generator) -> Relation:
    """X(A, α·B1 + β·B2) − α·X(A, B1) − β·X(A, B2) = 0 with B2 fresh but for B1's first row."""
    m, n = base.shape
    dtype = base.b.dtype
    fresh = make_problem(m, n, dtype.name, int(rng.integers(2**31)))
    b2 = fresh.b.copy(order="F")
    b2[0] = base.b[0]
    alpha, beta = float(rng.uniform(0.5, 1.0)), float(rng.uniform(1.5, 2.0))
    wide = np.complex128 if np.iscomplexobj(b2) else np.float64
    b3 = alpha * base.b.astype(wide) + beta * b2.astype(wide)
    second = Problem(base.a, b2, "linearity", base.seed)
    combined = Problem(base.a, _fortran(b3, dtype), "linearity", base.seed)
    return Relation(
        "metamorphic_linearity",
        (Term(1.0, combined), Term(-alpha, base), Term(-beta, second)),
        f"X(A, a B1 + b B2) = a X(A, B1) + b X(A, B2), a = {alpha:.4g}, b = {beta:.4g}, "
        "B2 sharing B1's first row",
    )


def row_scaling(base: Problem, rng: np.random.Generator, powers_of_two: bool) -> Relation:
    """X(D·A, D·B) − X(A, B) = 0 for D = diag(2^k) with k integer (exact) or real (rounded)."""
    m, _ = base.shape
    dtype = base.b.dtype
    span = _ROW_SCALE_EXPONENT
    if powers_of_two:
        d = np.ldexp(1.0, rng.integers(-span, span + 1, m))
    else:
        d = np.exp2(rng.uniform(-span, span, m))
    scaled = Problem(
        _fortran(d[:, None] * base.a, dtype), _fortran(d[:, None] * base.b, dtype),
        "row_scaling", base.seed,
    )  # fmt: skip
    kind = "powers of two" if powers_of_two else "not powers of two"
    return Relation(
        "metamorphic_row_scaling",
        (Term(1.0, scaled), Term(-1.0, base)),
        f"X(D A, D B) = X(A, B), D diagonal in [2^-{span}, 2^{span}], {kind}",
    )


def column_permutation(base: Problem, rng: np.random.Generator) -> Relation:
    """X(A, B·P) − X(A, B)·P = 0 for a random permutation P ≠ I of B's n ≥ 2 columns.

    Raises:
        ValueError: n < 2.
    """
    _, n = base.shape
    if n < 2:
        raise ValueError("a column permutation needs n >= 2")
    order = rng.permutation(n)
    if (order == np.arange(n)).all():
        order = np.roll(order, 1)
    columns = tuple(int(j) for j in order)
    permuted = Problem(base.a, np.asfortranarray(base.b[:, order]), "permuted", base.seed)
    return Relation(
        "metamorphic_column_permutation",
        (Term(1.0, permuted), Term(-1.0, base, columns)),
        "X(A, B P) = X(A, B) P, P a random permutation of the columns",
    )


def relations(m: int, n: int, dtype: str, seed: int) -> list[Relation]:
    """Every relation on one fresh bounded (m, n) problem drawn from ``seed``: linearity, row
    scaling by powers of two and by other factors, and (n ≥ 2) a column permutation. Terms share
    the base problem object, so a caller solves each distinct problem once (5 + 1 for n ≥ 2)."""
    base = make_problem(m, n, dtype, seed ^ _RELATION_SEED_MIX)
    rng = np.random.default_rng([seed, m, n, _RELATION_SEED_MIX])
    found = [linearity(base, rng), row_scaling(base, rng, True), row_scaling(base, rng, False)]
    if n >= 2:
        found.append(column_permutation(base, rng))
    return found


def check_relation(relation: Relation, outputs: list[np.ndarray]) -> CheckFailure | None:
    """``relation.check`` when the outputs (``outputs[k]`` the candidate's X̂ for
    ``relation.terms[k].problem``, m×n) break the relation beyond its slack; None otherwise."""
    references = [reference(term.problem.a, term.problem.b) for term in relation.terms]
    lhs: np.ndarray | float = 0.0
    exact: np.ndarray | float = 0.0
    slack: np.ndarray | float = 0.0
    for term, x_hat, (x_ref, growth) in zip(relation.terms, outputs, references, strict=True):
        cols = list(term.columns) if term.columns is not None else slice(None)
        lhs = lhs + term.coefficient * x_hat.astype(x_ref.dtype)[:, cols]
        exact = exact + term.coefficient * x_ref[:, cols]
        slack = slack + abs(term.coefficient) * forward_bound(term.problem.a, growth)
    deviation = np.abs(lhs).max(axis=1)
    slack = slack + np.abs(exact).max(axis=1)
    excess = deviation / slack
    worst = int(np.argmax(excess))
    if excess[worst] <= 1.0:
        return None
    scale = float(np.abs(references[0][0][worst]).max()) or 1.0
    return CheckFailure(
        relation.check,
        relation.terms[0].problem.shape,
        float(deviation[worst] / scale),
        float(slack[worst] / scale),
        f"row {worst}: {relation.statement}; the row's largest deviation over max_j |X_ij| "
        "against the sum of the outputs' forward-error bounds",
    )
