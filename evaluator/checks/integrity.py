"""Memory-integrity checks: finite output, untouched guard bands, unchanged inputs."""

from __future__ import annotations

import hashlib

import numpy as np

from evaluator.report import CheckFailure

# A quiet NaN with a payload no arithmetic produces: a guard word that still holds exactly these
# bytes after the run was not written (a kernel writing its own NaN there is still caught).
GUARD_BYTE = 0x7B


def guard_pattern(nbytes: int) -> bytes:
    """The byte pattern guard bands are filled with."""
    return bytes([GUARD_BYTE]) * nbytes


def check_finite(x: np.ndarray, shape: tuple[int, int]) -> CheckFailure | None:
    """Every element of X finite (inputs are finite; a NaN or Inf means a bad read or race)."""
    bad = ~np.isfinite(x)
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        return CheckFailure(
            "non_finite_output", shape, float(bad.sum()), 0.0, f"first at row {row}, col {col}"
        )
    return None


def check_guards(before: bytes, after: bytes, shape: tuple[int, int]) -> CheckFailure | None:
    """Guard bands around B unchanged byte for byte (no write outside B)."""
    if before != after:
        first = next(i for i, (p, q) in enumerate(zip(before, after, strict=True)) if p != q)
        return CheckFailure(
            "out_of_bounds_write", shape, None, None, f"guard band byte {first} was overwritten"
        )
    return None


def digest(data: bytes) -> str:
    """sha256 of a buffer, to compare inputs before and after a run."""
    return hashlib.sha256(data).hexdigest()


def check_input_unchanged(before: str, after: str, shape: tuple[int, int]) -> CheckFailure | None:
    """A (including its unread upper triangle) byte-identical after the run."""
    if before != after:
        return CheckFailure("input_modified", shape, None, None, "A changed during the solve")
    return None
