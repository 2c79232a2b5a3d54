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

Criterion 1 is the LAPACK ratio divided by 2m (m·ε with ε = 2u, where DTRT02 divides by u
alone), as ``trsm_small``'s contract has it since issue 1. ``trsm_blocked`` (m up to 16384) is
judged by :func:`check_solution_lapack` instead: LAPACK's ratio exactly
(:mod:`evaluator.checks.lapack_ratio`, check ``lapack_ratio``) on the GPU at every size, then
both criteria above where the host reference is affordable and fair.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import solve_triangular

from evaluator.checks import band_bidiag as band_bidiag_checks
from evaluator.checks import solve_tri as solve_tri_checks
from evaluator.checks import trsm_batched as trsm_batched_checks
from evaluator.checks.integrity import check_finite
from evaluator.checks.lapack_ratio import CHECK_NAME as LAPACK_RATIO
from evaluator.checks.lapack_ratio import check_lapack_ratio, device_module
from evaluator.inputs import BACKWARD_ERROR_ONLY_KINDS, Problem
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


# The largest m at which the host reference (X and |A^-1|·|A|·|X| in float64/complex128, O(m³)
# for the inverse) is computed per output: about 0.1 s on one core at m = 1024 (the GPU worker's
# BLAS runs on one thread, evaluator.child_env), 8 times that at 2048. Above it only device-side
# checks judge an output, and the verification's host-reference extras (scaled inputs,
# metamorphic relations: evaluator.gpu_tasks) are not run at that shape.
HOST_REFERENCE_MAX_M = 1024


def check_solution_lapack(problem: Problem, x: np.ndarray) -> CheckFailure | None:
    """``trsm_blocked``'s check of one output X (m×n, Fortran order): finite
    (``non_finite_output``), then LAPACK's xTRT02 ratio below 30 in every column
    (``lapack_ratio``, :mod:`evaluator.checks.lapack_ratio`), computed on the GPU when this
    process has one; then, where the host reference is affordable (m ≤
    ``HOST_REFERENCE_MAX_M``) and the inputs are not ill-conditioned on purpose
    (``inputs.BACKWARD_ERROR_ONLY_KINDS``), everything :func:`check_solution` checks
    (``scaled_residual``, per-row ``forward_error``).

    Why both. The normwise ratio cannot see a small error confined to a few rows of a tall X:
    one row wrong by a relative δ moves it by about δ/(m·u), so at m = 16384 in float32 a row
    off by 3 % is not seen; the per-row forward error sees it, but needs the inverse of A on
    the host, and its bound assumes a componentwise backward-stable solve, which a blocked solve
    through explicitly inverted diagonal blocks is not (its residual grows with the condition of
    the blocks: J. J. Du Croz and N. J. Higham, IMA J. Numer. Anal. 12 (1992) 1-19). So the
    ratio judges every output at every size and kind, the forward error the outputs where it
    is both affordable and fair. On the trap (kind ``trap``) the forward error comes first, as
    in :func:`check_solution`, so a float64 kernel that solves in float32 fails as
    ``forward_error``.
    """
    m, n = problem.shape
    if failure := check_finite(x, (m, n)):
        return failure
    host = m <= HOST_REFERENCE_MAX_M and problem.kind not in BACKWARD_ERROR_ONLY_KINDS
    if host and problem.kind == "trap" and (failure := check_solution(problem, x)):
        return failure
    if failure := check_lapack_ratio(problem.a, problem.b, x, device_module()):
        return failure
    return check_solution(problem, x) if host else None


SolutionCheck = Callable[[Problem, np.ndarray], "CheckFailure | None"]
"""``(problem, x) -> failure or None``: every numerical check on one output X of ``problem``."""

# The checks a path's spec may name as its ``reference_check`` (seeds.spec.PathSpec): the
# name is the spec's, the code the evaluator's, since ``seeds`` imports nothing of ours.
SOLUTION_CHECKS: dict[str, SolutionCheck] = {
    "host_reference": check_solution,
    "lapack_ratio": check_solution_lapack,
    # Other ops' checks take their op's problem and output; the op's suite calls them so
    # (evaluator.op_suites.SUITES): solve_tri's (seeds.solve_tri.inputs.Problem, X's buffer),
    # band_bidiag's (seeds.band_bidiag.inputs.BandProblem, (d, e)), trsm_batched's
    # (evaluator.trsm_batched_inputs.BatchedProblem, B's buffer).
    "solve_tri": solve_tri_checks.check_output,
    "trsm_batched": trsm_batched_checks.check_output,
    "band_bidiag_singular_values": band_bidiag_checks.check_output,
}
# The names of the checks each reference check runs beyond those every report that is ok has
# run (``evaluator.certificate.PIPELINE_CHECKS``, which hold ``scaled_residual`` and
# ``forward_error``): a passing report lists them in ``checks_run``, so its certificate states
# them (``evaluator.pipeline``).
ADDED_CHECK_NAMES: dict[str, tuple[str, ...]] = {
    "host_reference": (),
    "lapack_ratio": (LAPACK_RATIO,),
    "solve_tri": (),
    "band_bidiag_singular_values": (),
}


def solution_check(name: str) -> SolutionCheck:
    """The check a path's spec names (``PathSpec.reference_check``): ``"host_reference"``,
    :func:`check_solution`, against a float64/complex128 reference computed on the host;
    ``"lapack_ratio"``, :func:`check_solution_lapack`, LAPACK's xTRT02 ratio on the GPU at every
    size plus the host reference where affordable; ``"solve_tri"`` and
    ``"band_bidiag_singular_values"``, the checks of those ops' outputs
    (``evaluator.checks.solve_tri``, ``evaluator.checks.band_bidiag``), called by their suites.

    Raises:
        ValueError: no check of that name, with the known names.
    """
    try:
        return SOLUTION_CHECKS[name]
    except KeyError:
        known = ", ".join(sorted(SOLUTION_CHECKS))
        raise ValueError(f"unknown reference check {name!r}; known: {known}") from None


def added_check_names(name: str) -> tuple[str, ...]:
    """:data:`ADDED_CHECK_NAMES` of the reference check ``name`` (``()`` for one without).

    Raises:
        ValueError: no check of that name, with the known names.
    """
    solution_check(name)
    return ADDED_CHECK_NAMES.get(name, ())
