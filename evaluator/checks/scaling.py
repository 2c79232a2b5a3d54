"""Scale invariance: the same problem scaled by a power of two must give the same X.

A = s·A0, B = s·B0 has the solution X of (A0, B0) for every s ≠ 0. Issue 6 found kernels right
on the drawn inputs that break there: the textbook complex division by |a|² overflows or
underflows (complex64 at s = 1e20 and 1e-23: NaN from the seed, X = 0 from a promoted
champion; complex128 at 1e160 and 1e-170), and a float64 kernel that computes in float32 leaves
float32's range. ``evaluator.inputs.SCALE_EXPONENTS`` holds the exponents per dtype and why.

The scaled output is judged by the checks of ``evaluator.checks.accuracy`` on the *unscaled*
problem: the scaled residual ‖b − A·x‖₁ / (‖A‖₁·‖x‖₁·m·ε) and the forward-error bound
4·γ_{m+2}·|A⁻¹|·|A|·|X| are both invariant under A, B → s·A, s·B, and s is a power of two, so
(A0, B0) is exactly the scaled problem divided by s, while computing its reference at s = 2^900
would overflow |A|·|X| in float64.
"""

from __future__ import annotations

import numpy as np

from evaluator.checks.accuracy import check_solution
from evaluator.inputs import Problem
from evaluator.report import CheckFailure


def check_scale_invariance(unscaled: Problem, exponent: int, x: np.ndarray) -> CheckFailure | None:
    """``scale_invariance`` when ``x``, the output for ``unscaled`` with A and B multiplied by
    2^``exponent``, fails any check of ``check_solution`` on ``unscaled``; None when it passes.

    The failure keeps the underlying check's value and bound and names it, with the scale, in
    its detail (e.g. ``non_finite_output on A = s·A0, B = s·B0, s = 2^67: …``).
    """
    failure = check_solution(unscaled, x)
    if failure is None:
        return None
    return CheckFailure(
        "scale_invariance",
        failure.shape,
        failure.value,
        failure.bound,
        f"{failure.check} on A = s·A0, B = s·B0, s = 2^{exponent} (X must be that of A0, B0): "
        f"{failure.detail}",
    )
