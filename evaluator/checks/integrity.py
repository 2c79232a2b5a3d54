"""Memory-integrity checks: finite output, untouched guard bands, unchanged inputs."""

from __future__ import annotations

import hashlib

import numpy as np

from evaluator.report import CheckFailure

# Quiet NaNs with a payload arithmetic does not produce (a computed NaN has payload 0). Guard
# bands around A and B hold them: a kernel that reads past an array gets NaN, which flows into X
# and fails the finite check; one that writes there changes the exact bytes.
_GUARD_BITS = {4: (np.uint32, 0x7FC0_4B56), 8: (np.uint64, 0x7FF8_0000_4B56_4B56)}
# Elements of guard band on each side of an array (verification) or of each timed input set.
GUARD_ELEMENTS = 256


def guard_pattern(dtype: np.dtype, elements: int) -> bytes:
    """``elements`` guard values of ``dtype`` (real or complex): payload-tagged quiet NaNs."""
    dtype = np.dtype(dtype)
    word = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    bits_type, bits = _GUARD_BITS[word]
    words = elements * dtype.itemsize // word
    return np.full(words, bits, dtype=bits_type).tobytes()


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
