"""Numerical acceptance of a TRSM result against a float64/complex128 reference.

Two criteria, both must hold:

1. Scaled residual, per column j (LAPACK's xTRT02 test ratio):
       ‖b_j − A·x̂_j‖₁ / (‖A‖₁ · ‖x̂_j‖₁ · m · ε) ≤ 30,
   with ε the dtype's machine epsilon and 30 LAPACK's default test threshold (THRESH in
   dtest.in). Substitution is backward stable, so any correct summation order passes.
2. Per-row forward error against the reference X, with a componentwise bound:
       max_j |x̂_ij − x_ij| ≤ 4 · γ_{m+2} · max_j (|A⁻¹|·|A|·|X|)_ij ,
   γ_k = k·u/(1 − k·u), u the unit roundoff. Forward substitution in any summation order
   satisfies (A + ΔA)·x̂ = b with |ΔA| ≤ γ_m·|A| (Higham, *Accuracy and Stability of Numerical
   Algorithms*, 2nd ed., Thm 8.5), hence |x̂ − x| ≤ γ_m·|A⁻¹|·|A|·|x̂| to first order; m+2 and
   the factor 4 cover complex multiplication (Higham §3.6), a reciprocal-multiply instead of a
   division, and the reference's own rounding. The bound follows each row's conditioning, so it
   stays sharp on well-conditioned rows: a kernel that zeroes or skips a row has relative error
   1 there, far past the bound, even when X grows so fast that the residual cannot see it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import solve_triangular

from evaluator.checks.integrity import check_finite
from evaluator.inputs import Problem
from evaluator.report import CheckFailure

RESIDUAL_THRESHOLD = 30.0
FORWARD_SAFETY = 4.0


def unit_roundoff(dtype: np.dtype) -> float:
    """u = ε/2 of the dtype's real part (2⁻²⁴ for float32, 2⁻⁵³ for float64)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """X = A⁻¹·B and |A⁻¹|·|A|·|X| in float64/complex128 from the stored inputs."""
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    lower = np.tril(np.nan_to_num(a.astype(wide)))
    x = solve_triangular(lower, b.astype(wide), lower=True)
    inv = solve_triangular(lower, np.eye(a.shape[0], dtype=wide), lower=True)
    growth = np.abs(inv) @ (np.abs(lower) @ np.abs(x))
    return x, growth


def check_residual(a: np.ndarray, b: np.ndarray, x_hat: np.ndarray) -> CheckFailure | None:
    """Criterion 1 on the worst column; ``x_hat`` in the candidate's dtype."""
    wide = np.complex128 if np.iscomplexobj(a) else np.float64
    m = a.shape[0]
    lower = np.tril(np.nan_to_num(a.astype(wide)))
    x = x_hat.astype(wide)
    r = b.astype(wide) - lower @ x
    norm_a = np.abs(lower).sum(axis=0).max()
    eps = 2 * unit_roundoff(a.dtype)
    denom = norm_a * np.abs(x).sum(axis=0) * m * eps
    ratio = np.abs(r).sum(axis=0) / np.where(denom > 0, denom, np.inf)
    worst = int(np.argmax(ratio))
    if not ratio[worst] <= RESIDUAL_THRESHOLD:
        return CheckFailure(
            "scaled_residual",
            tuple(b.shape),  # type: ignore[arg-type]
            float(ratio[worst]),
            RESIDUAL_THRESHOLD,
            f"column {worst}: ||b - A x||_1 / (||A||_1 ||x||_1 m eps) (LAPACK xTRT02)",
        )
    return None


def forward_bound(a: np.ndarray, growth: np.ndarray) -> np.ndarray:
    """Criterion 2's bound per row: 4·γ_{m+2}·max_j (|A⁻¹|·|A|·|X|)_ij, a float64 vector of
    length m, for ``a`` (m×m, the candidate's dtype) and ``growth`` from :func:`reference`."""
    m = a.shape[0]
    u = unit_roundoff(a.dtype)
    gamma = (m + 2) * u / (1 - (m + 2) * u)
    return FORWARD_SAFETY * gamma * growth.max(axis=1)


def check_forward_error(
    a: np.ndarray, x_hat: np.ndarray, x_ref: np.ndarray, growth: np.ndarray
) -> CheckFailure | None:
    """Criterion 2 on the worst row, reported as relative error against its relative bound."""
    err = np.abs(x_hat.astype(x_ref.dtype) - x_ref).max(axis=1)
    bound = forward_bound(a, growth)
    scale = np.abs(x_ref).max(axis=1)
    scale = np.where(scale > 0, scale, 1.0)
    excess = err / bound
    worst = int(np.argmax(excess))
    if not excess[worst] <= 1.0:
        return CheckFailure(
            "forward_error",
            tuple(x_ref.shape),  # type: ignore[arg-type]
            float(err[worst] / scale[worst]),
            float(bound[worst] / scale[worst]),
            f"row {worst}: max_j |x - x_ref| / max_j |x_ref| over its componentwise bound "
            "4 gamma_(m+2) (|inv(A)| |A| |X|)_i",
        )
    return None


def check_solution(problem: Problem, x: np.ndarray) -> CheckFailure | None:
    """Every numerical check on one output X (m×n, Fortran order) of ``problem``: finite, then
    the scaled residual, then the per-row forward error against the problem's own reference.

    On the trap (kind ``trap``, ``evaluator.inputs``) the forward error comes before the
    residual: its rows span 2^235, so the normwise residual is dominated by the largest rows
    and sees a float64 kernel that solves in float32 and refines once at 0-12 times its
    threshold (below it in some columns and seeds) while the forward error is ~1e9 times over
    its bound: the failure names the check that measures the fault.
    """
    m, n = problem.shape
    if failure := check_finite(x, (m, n)):
        return failure
    x_ref, growth = reference(problem.a, problem.b)
    residual = check_residual(problem.a, problem.b, x)
    forward = check_forward_error(problem.a, x, x_ref, growth)
    return (forward or residual) if problem.kind == "trap" else (residual or forward)


SolutionCheck = Callable[[Problem, np.ndarray], "CheckFailure | None"]
"""``(problem, x) -> failure or None``: every numerical check on one output X of ``problem``."""

# The checks a path's spec may name as its ``reference_check`` (seeds.spec.PathSpec): the
# name is the spec's, the code the evaluator's, since ``seeds`` imports nothing of ours.
SOLUTION_CHECKS: dict[str, SolutionCheck] = {"host_reference": check_solution}


def solution_check(name: str) -> SolutionCheck:
    """The check a path's spec names (``PathSpec.reference_check``), e.g. ``"host_reference"``:
    :func:`check_solution`, against a float64/complex128 reference computed on the host.

    Raises:
        ValueError: no check of that name, with the known names.
    """
    try:
        return SOLUTION_CHECKS[name]
    except KeyError:
        known = ", ".join(sorted(SOLUTION_CHECKS))
        raise ValueError(f"unknown reference check {name!r}; known: {known}") from None
