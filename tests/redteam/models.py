"""NumPy stand-ins for the ``trsm_blocked`` red-team faults, so that the evaluator's own
verification (``evaluator.gpu_tasks.verify``) can be run on them without a GPU and asked which
check refuses each and at which shape (``tests/test_redteam.py``).

A model is the driver (``seeds/trsm_blocked/driver.py``) with the candidate's kernel replaced by
what the faulty kernel leaves in the inverse workspace: per diagonal block D_t, the lower
triangular matrix whose inverse it holds (None: the identity). X is formed block row by block
row, X_t = solve(D_used_t, B_t − A_t,<t·X_<t), in float64/complex128 and rounded to the
problem's dtype, so a block the fault leaves alone is solved as exactly as the dtype allows.
At m ≤ NB the kernel solves directly, which no modelled fault touches: X is the exact solve.
Non-finite entries are handled as the host stand-in of ``test_redteam.py``'s whitelist test
does (NaN in A read as 0); the faults modelled here are refused on bounded inputs before any
non-finite input is solved.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular

from evaluator.inputs import Problem

FAULTS = ("none", "skips_last_block_row", "reuses_inverses", "ragged_block_shifted")


class BlockedModel:
    """The trsm_blocked driver with a kernel that has ``fault`` (one of :data:`FAULTS`) at block
    size ``nb``; one instance per driver, as the evaluator loads one per task.
    ``reuses_inverses`` inverts nothing: the driver's wipe leaves NaN in every slot.

    Raises:
        ValueError: unknown ``fault`` or ``nb`` < 1.
    """

    def __init__(self, fault: str, nb: int) -> None:
        if fault not in FAULTS or nb < 1:
            raise ValueError(f"unknown fault {fault!r} or NB {nb}")
        self.fault, self.nb = fault, nb

    def solve(self, problem: Problem) -> np.ndarray:
        """X for ``problem`` (m×n, Fortran order, the problem's dtype) as the faulty candidate
        leaves it in B."""
        m, n = problem.shape
        wide = np.complex128 if np.iscomplexobj(problem.a) else np.float64
        lower = np.tril(np.nan_to_num(problem.a.astype(wide), nan=0.0, posinf=np.inf))
        x = problem.b.astype(wide)
        with np.errstate(all="ignore"):
            if m <= self.nb:
                x = solve_triangular(lower, x, lower=True, check_finite=False)
            else:
                for t, used in enumerate(self._diagonal_blocks(lower)):
                    r0, r1 = t * self.nb, min(m, (t + 1) * self.nb)
                    x[r0:r1] -= lower[r0:r1, :r0] @ x[:r0]
                    if used is not None:
                        x[r0:r1] = solve_triangular(used, x[r0:r1], lower=True, check_finite=False)
        return np.asfortranarray(x.astype(problem.b.dtype))

    def _diagonal_blocks(self, lower: np.ndarray) -> list[np.ndarray | None]:
        """Per diagonal block, the matrix whose inverse the faulty kernel leaves in its slot
        (top-left rows×rows, as the driver's GEMM reads it)."""
        m, nb = lower.shape[0], self.nb
        starts = range(0, m, nb)
        blocks: list[np.ndarray | None] = [lower[r0 : r0 + nb, r0 : r0 + nb] for r0 in starts]
        last_rows = m - starts[-1]
        if self.fault == "skips_last_block_row":
            blocks[-1] = None  # the identity the kernel starts from
        elif self.fault == "ragged_block_shifted" and last_rows < nb:
            # The slot holds inv(A[m-NB:m, m-NB:m]); its top-left corner is the inverse of
            # that block's top-left corner.
            blocks[-1] = lower[m - nb : m - nb + last_rows, m - nb : m - nb + last_rows]
        elif self.fault == "reuses_inverses":
            # Nothing inverted: every slot holds the driver's wipe, NaN.
            blocks = [np.full_like(b, np.nan) for b in blocks]  # type: ignore[arg-type]
        return blocks
