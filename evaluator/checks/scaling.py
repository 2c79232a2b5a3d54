"""Scale invariance: the same problem scaled by a power of two must give the same X.

A = s·A0, B = s·B0 has the solution X of (A0, B0) for every s ≠ 0. Issue 6 found kernels right
on the drawn inputs that break there: the textbook complex division by |a|² overflows or
underflows (complex64 at s = 1e20 and 1e-23: NaN from the seed, X = 0 from a promoted
champion; complex128 at 1e160 and 1e-170), and a float64 kernel that computes in float32 leaves
float32's range. ``evaluator.inputs`` holds the exponents and why: ``SCALE_EXPONENTS`` at every
shape, and ``sweep_exponents`` once (every integer exponent of the bands where the textbook
complex division breaks; exponents drawn from the seed for the real dtypes).

The scaled output is judged by the checks of ``evaluator.checks.accuracy`` on the *unscaled*
problem: the scaled residual ‖b − A·x‖₁ / (‖A‖₁·‖x‖₁·m·ε) and the forward-error bound
4·γ_{m+2}·|A⁻¹|·|A|·|X| are both invariant under A, B → s·A, s·B, and s is a power of two, so
(A0, B0) is exactly the scaled problem divided by s, while computing its reference at s = 2^900
would overflow |A|·|X| in float64.
"""

from __future__ import annotations

import numpy as np

from evaluator.checks.accuracy import (
    check_forward_error,
    check_residual,
    check_solution,
)
from evaluator.checks.integrity import check_finite
from evaluator.inputs import Problem
from evaluator.report import CheckFailure


def check_scale_invariance(
    unscaled: Problem,
    exponent: int,
    x: np.ndarray,
    reference: tuple[np.ndarray, np.ndarray] | None = None,
) -> CheckFailure | None:
    """``scale_invariance`` when ``x``, the output for ``unscaled`` with A and B multiplied by
    2^``exponent``, fails any check of ``check_solution`` on ``unscaled``; None when it passes.

    ``reference``: ``evaluator.checks.accuracy.reference(unscaled.a, unscaled.b)`` computed once
    by a caller that checks many exponents on the same problem (the same checks in the same
    order, for a bounded ``unscaled``); None computes it here.

    The failure keeps the underlying check's value and bound and names it, with the scale, in
    its detail (e.g. ``non_finite_output on A = s·A0, B = s·B0, s = 2^67: …``).
    """
    if reference is None:
        failure = check_solution(unscaled, x)
    else:
        x_ref, growth = reference
        failure = (
            check_finite(x, unscaled.shape)
            or check_residual(unscaled.a, unscaled.b, x)
            or check_forward_error(unscaled.a, x, x_ref, growth)
        )
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
