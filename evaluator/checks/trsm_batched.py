"""The `trsm_small_batched` path's checks of one output (op ``trsm_batched``): every batch index
judged on its own against the float64/complex128 reference (``seeds.solve_tri.reference``, the
same batched lower solve), every failure naming the batch index.

An output is B's whole host buffer after a run (X overwrote B; guard bands included), for a
problem of ``evaluator.trsm_batched_inputs``. The checks, in order:

- ``out_of_bounds_write``: the guard bands around B byte-identical to what they held.
- ``input_modified``: A's buffer (its NaN upper triangles and guard bands included)
  byte-identical after the run.
- ``non_finite_output``: every element of X finite (inputs are finite; a NaN is a read of a
  guard band, of A's upper triangle or of an unwritten element).
- ``row_relative_error``: per batch index and row, max_j |x̂_ij − x_ij| / max_j |x_ij| within
  4·γ_{m+2}·max_j (|A⁻¹|·|A|·|X|)_ij / max_j |x_ij| with the dtype's unit roundoff (Higham,
  Thm 8.5, as ``evaluator.checks.accuracy``'s forward error). Bounded inputs keep X O(1), so a
  row that is skipped, zeroed or solved with another batch index's A is wrong by ~1.

Failures carry the shape (m, n, batch) and their detail starts ``m=…, n=…, batch=…``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluator.report import CheckFailure
from evaluator.trsm_batched_inputs import BatchedProblem
from seeds.solve_tri.reference import reference, row_error_bounds, row_relative_errors

CHECK_NAMES: tuple[str, ...] = (
    "out_of_bounds_write", "input_modified", "non_finite_output", "row_relative_error",
)  # fmt: skip


def shape_words(shape: Sequence[int]) -> str:
    """``m=…, n=…, batch=…``: a trsm_batched shape by its parameters' names."""
    m, n, batch = shape
    return f"m={m}, n={n}, batch={batch}"


def _failure(
    check: str, problem: BatchedProblem, value: float | None, bound: float | None, detail: str
) -> CheckFailure:
    return CheckFailure(
        check, problem.shape, value, bound, f"{shape_words(problem.shape)}: {detail}"
    )


def check_output(
    problem: BatchedProblem, x_buffer: np.ndarray, a_buffer: np.ndarray | None = None
) -> CheckFailure | None:
    """Every check of one run's output, in :data:`CHECK_NAMES`'s order (module docstring):
    ``x_buffer`` is B's whole buffer after the run, ``a_buffer`` A's (None: not compared)."""
    a_layout, b_layout = problem.layouts
    dtype = problem.a.dtype
    x_buffer = np.asarray(x_buffer, dtype=dtype)
    fresh = b_layout.allocate(np, dtype)
    if b_layout.guard_bytes(x_buffer) != b_layout.guard_bytes(fresh):
        return _failure(
            "out_of_bounds_write", problem, None, None, "a guard band around B was written"
        )
    if a_buffer is not None:
        changed = np.flatnonzero(
            np.asarray(a_buffer, dtype=dtype).view(np.uint8).reshape(-1, dtype.itemsize)
            != problem.buffers()[0].view(np.uint8).reshape(-1, dtype.itemsize)
        )
        if changed.size:
            m = problem.shape[0]
            first = (int(changed[0]) - a_layout.guard) // (m * m)
            where = f"batch index {first}" if 0 <= first < problem.shape[2] else "a guard band"
            return _failure(
                "input_modified", problem, None, None, f"A changed during the solve ({where})"
            )
    x = b_layout.payload(x_buffer)[0].reshape(problem.b.shape)
    bad = ~np.isfinite(x)
    if bad.any():
        i, row, col = (int(v) for v in np.argwhere(bad)[0])
        detail = f"batch index {i}: first at row {row}, column {col}"
        return _failure("non_finite_output", problem, float(bad.sum()), 0.0, detail)
    x_ref, growth = reference(problem.a, problem.b)
    u = float(np.finfo(dtype).eps) / 2
    errors = row_relative_errors(x, x_ref)
    bounds = row_error_bounds(problem.shape[0], x_ref, growth, u)
    over = ~(errors <= bounds)
    if not over.any():
        return None
    i = int(np.argwhere(over.any(axis=1))[0, 0])
    row = int(np.argmax(np.where(over[i], errors[i] / bounds[i], -np.inf)))
    return _failure(
        "row_relative_error", problem, float(errors[i, row]), float(bounds[i, row]),
        f"batch index {i}: row {row}: max_j |x - x_ref| / max_j |x_ref| over its bound "
        "4 gamma_(m+2) max_j (|inv(A)| |A| |X|)_ij / max_j |x_ref|",
    )  # fmt: skip
