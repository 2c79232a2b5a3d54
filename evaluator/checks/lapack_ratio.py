"""LAPACK's xTRT02 test ratio of a triangular solve, per column, with NumPy or CuPy.

For A·X = B (A m×m lower triangular, non-unit diagonal, no transpose; B and X m×n), LAPACK's
test routine DTRT02 / ZTRT02 (Reference-LAPACK, ``TESTING/LIN/dtrt02.f``, ``ztrt02.f``)
computes, for every column j,

    RESID_j = ‖b_j − A·x_j‖₁ / (‖A‖₁ · ‖x_j‖₁ · EPS),

and the test passes when max_j RESID_j < THRESH, 30 in LAPACK's testing input (``dtest.in``).
The norms are exactly LAPACK's:

- ‖A‖₁ = xLANTR('1', 'L', 'N'): the largest column sum of |a_ij| over the lower triangle, the
  modulus for complex entries (ZLANTR uses ABS). The strict upper triangle is never read
  (BLAS semantics: it holds NaN in every check here).
- ‖v‖₁ of a column of the residual or of X = DASUM (real) or DZASUM (complex), which sums
  |Re v_i| + |Im v_i|, not the modulus.
- EPS = xLAMCH('Epsilon') of the working precision. DLAMCH assumes rounding and returns
  EPSILON(0)·0.5: the unit roundoff u = 2⁻⁵³ (float64, complex128), 2⁻²⁴ (float32, complex64).
- A zero ‖A‖₁ gives 1/EPS for every column, as in DTRT02; a zero ‖x_j‖₁ gives 1/EPS there unless
  the residual is zero too (DTRT02 gives 1/EPS always: LAPACK never tests a zero right-hand
  side, our containment and metamorphic inputs do, and x_j = 0 is then the exact answer).

No factor m in the denominator, unlike issue 7's text ‖b − A·x‖/(‖A‖·‖x‖·m·ε): LAPACK's ratio
has none, and with it the test goes blind at the sizes ``trsm_blocked`` serves. A float32 solve
of a bounded problem (``evaluator.inputs``, n = 1) that skips the last block row's update
(NB = 256) has a ratio of 4.2e4 at m = 2048, 6.2e3 at 8192 and 2.2e3 at 16384; divided by m
it would be 20, 0.76 and 0.13, under 30 at every size (measured on the host). Correct solves
stay far below 30 without it: 0.003–0.21 for substitution and for the seed's inversion-based
blocked algorithm (NB 128–512) at m = 300–2048 in float32 and float64, on bounded and on
ill-conditioned inputs (κ₁ up to ~1e10), 0.04–0.07 for substitution at m = 2048–16384 in
float32 (``tests/test_lapack_ratio.py`` emulates both); the ratio falls with m on these inputs
(‖A‖₁ grows like √m while the rounding of a row does not).

Where it is computed (issue 7, Build item 4: on the GPU). The residual b − A·x is one matrix
product, done in float64 (float32 inputs) or complex128 (complex64 inputs) after widening every
operand, with ``xp.matmul``: cuBLAS DGEMM / ZGEMM under CuPy, BLAS under NumPy. Why widen: the
check's own rounding is then 2⁻²⁹ of what it measures in the single precisions, and CuPy's
``CUPY_TF32`` switch, which would let a float32 GEMM round its inputs to 10 bits, cannot touch a
float64 product. float64 and complex128 are checked in their own precision, as LAPACK computes
DTRT02's residual in the working precision (DTRMV, DAXPY): the check's rounding is then of the
order of a correct solve's, well below the threshold (a double-word residual would cost far
more than the solve). The full product reads A's lower triangle with zeros above it (``tril``
of A, whose NaN upper triangle ``tril`` replaces rather than multiplies); a triangular product
would do half the flops, CuPy exposes no TRMM. Cost at m = n = 16384 on an H200: about 8.8
TFLOP in float64 (~0.1–0.2 s at the FP64 peak; not measured yet), 4× that in complex128, and 5
arrays of m² elements.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from evaluator.report import CheckFailure

LAPACK_THRESHOLD = 30.0
CHECK_NAME = "lapack_ratio"


def lapack_eps(dtype: Any) -> float:
    """xLAMCH('Epsilon') of ``dtype``'s precision: the unit roundoff u (2⁻⁵³ for float64 and
    complex128, 2⁻²⁴ for float32 and complex64), as DLAMCH returns it (EPSILON(0)·0.5)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def _asum(xp: Any, v: Any) -> Any:
    """DASUM / DZASUM of every column of ``v``: Σ|v_ij| (real), Σ|Re v_ij| + |Im v_ij|
    (complex); float64, one per column."""
    if xp.iscomplexobj(v):
        return (xp.abs(v.real) + xp.abs(v.imag)).sum(axis=0)
    return xp.abs(v).sum(axis=0)


def lapack_ratios(a: Any, b: Any, x: Any, xp: Any = None) -> Any:
    """RESID_j of DTRT02/ZTRT02 for every column j of ``x`` (module docstring).

    Args:
        a: A, m×m, only its lower triangle read (NaN or anything above it is ignored).
        b: B, m×n, the right-hand sides as the solve received them.
        x: X, m×n, the solve's output, same dtype as ``a`` and ``b``.
        xp: ``numpy`` or ``cupy``; default: the module of ``a`` (``cupy.get_array_module``
            when CuPy is importable, else NumPy). Host arrays given with ``xp=cupy`` are
            copied to the device.

    Returns:
        A float64 vector of length n in ``xp``: the ratio per column (not compared with any
        threshold): 1/ε where the column of X holds NaN (its norm is not > 0: DTRT02's exit
        for XNORM ≤ 0), NaN or inf where B or A's lower triangle holds NaN or Inf.
    """
    xp = xp if xp is not None else _module_of(a)
    wide = np.complex128 if np.dtype(a.dtype).kind == "c" else np.float64
    eps = lapack_eps(a.dtype)
    lower = xp.tril(xp.asarray(a).astype(wide, copy=False))
    xw = xp.asarray(x).astype(wide, copy=False)
    residual = xp.asarray(b).astype(wide, copy=False) - xp.matmul(lower, xw)
    anorm = xp.abs(lower).sum(axis=0).max()
    rnorm, xnorm = _asum(xp, residual), _asum(xp, xw)
    if float(anorm) <= 0:  # DTRT02's exit; a NaN norm goes on and gives NaN ratios
        return xp.full(xnorm.shape, 1 / eps)
    # DTRT02's order, ((BNORM / ANORM) / XNORM) / EPS: no product that could overflow.
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = rnorm / anorm / xp.where(xnorm > 0, xnorm, 1.0) / eps
    exact_zero = (xnorm == 0) & (rnorm == 0)
    return xp.where(xnorm > 0, ratio, xp.where(exact_zero, 0.0, 1 / eps))


def check_lapack_ratio(a: Any, b: Any, x: Any, xp: Any = None) -> CheckFailure | None:
    """``lapack_ratio`` when some column's RESID_j (:func:`lapack_ratios`) is not below
    ``LAPACK_THRESHOLD`` (30, LAPACK's THRESH), naming the worst column; None otherwise.

    A NaN ratio (a non-finite entry of A's lower triangle or of B) fails too, as 1/ε does;
    callers check X is finite first (``non_finite_output`` names that better).
    """
    xp = xp if xp is not None else _module_of(a)
    ratios = lapack_ratios(a, b, x, xp)
    host = np.asarray(ratios.get() if hasattr(ratios, "get") else ratios, dtype=np.float64)
    bad = ~(host < LAPACK_THRESHOLD)
    if not bad.any():
        return None
    worst = int(np.argmax(np.where(np.isnan(host), np.inf, host)))
    where = "the device" if xp is not np else "the host"
    return CheckFailure(
        CHECK_NAME,
        tuple(b.shape),  # type: ignore[arg-type]
        float(host[worst]),
        LAPACK_THRESHOLD,
        f"column {worst}: ||b - A x||_1 / (||A||_1 ||x||_1 eps) (LAPACK xTRT02, eps = u; "
        f"{int(bad.sum())} of {host.size} columns at or over 30; computed on {where})",
    )


def _module_of(a: Any) -> Any:
    """``cupy`` for a CuPy array, else ``numpy``."""
    if type(a).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


@functools.cache
def device_module() -> Any:
    """``cupy`` when CuPy imports and a CUDA device answers in this process, else ``numpy``:
    where :func:`check_lapack_ratio` runs when the caller holds host arrays (the GPU worker has
    a device; CI has none). Asked once per process."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:  # no CuPy, no driver, no device: the host computes the same ratio
        return np
    return np
