"""The `band_bidiag` path's check of one output, as the evaluator reports it: the path's own
check (``seeds.band_bidiag.reference.check_bidiagonal``: the output's shape, finite entries, the
singular values of (d, e) against DGBBRD + DBDSQR in float64 within 4·max(n, 32)·ε) turned into
an :class:`~evaluator.report.CheckFailure` whose detail names the op's parameters.

``CheckFailure.describe()`` reads any shape of two values as trsm's ``m=…, n=…``, so a failure
here carries no ``shape`` and says ``n=…, bandwidth=…`` in its detail instead (docs/CONTRACTS.md,
"Adding an op", point 6).

The name ``band_bidiag_singular_values`` (``BAND_BIDIAG.reference_check``) resolves to
:func:`check_output` through ``evaluator.checks.accuracy.SOLUTION_CHECKS``.
"""

from __future__ import annotations

import numpy as np

from evaluator.report import CheckFailure
from seeds.band_bidiag.inputs import BandProblem
from seeds.band_bidiag.reference import CHECK_NAME, FINITE_CHECK, SHAPE_CHECK, check_bidiagonal

# The checks of one output, in the order they run.
CHECK_NAMES: tuple[str, ...] = (SHAPE_CHECK, FINITE_CHECK, CHECK_NAME)


def where(n: int, bandwidth: int) -> str:
    """``n=…, bandwidth=…``: the op's parameters as a failure's detail names them."""
    return f"n={n}, bandwidth={bandwidth}"


def check_output(
    problem: BandProblem, output: tuple[np.ndarray, np.ndarray], sigma: np.ndarray | None = None
) -> CheckFailure | None:
    """The first failing check of ``output`` = (d, e), the candidate's bidiagonal of
    ``problem.band`` (in the candidate's dtype), or ``None``; ``sigma``: the band's reference
    singular values when already computed (``reference.reference_singular_values``).

    Raises:
        ValueError: a malformed band.
        seeds.band_bidiag.lapack.LapackError: the reference's LAPACK failed.
    """
    d, e = output
    failure = check_bidiagonal(problem.band, np.asarray(d), np.asarray(e), sigma=sigma)
    if failure is None:
        return None
    n, bandwidth = failure.shape
    return CheckFailure(
        failure.check, None, failure.value, failure.bound,
        f"at {where(n, bandwidth)} ({problem.kind} input): {failure.detail}",
    )  # fmt: skip
