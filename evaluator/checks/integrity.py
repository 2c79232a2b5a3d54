"""Memory-integrity checks: finite output, untouched guard bands, unchanged inputs."""

from __future__ import annotations

from typing import Any

import numpy as np

from evaluator.report import CheckFailure

# Guard values: signaling NaNs with a tag in the payload. A read past an array brings NaN into
# X (the finite check); a write there changes the exact bytes (the guard check) -- a write of a
# value computed from the guard itself included, the kind a kernel's spare threads store past
# the end after solving with what they read there: IEEE 754 (6.2) has arithmetic on a signaling
# NaN deliver a quiet one, so the quiet bit flips even where the hardware keeps the payload. The
# H200's float64 arithmetic keeps it: with quiet-NaN guards such a write left every byte as it
# was (RESULTS 24). Only a plain copy of a guard word onto itself stays invisible (memcheck,
# docs/EVALUATOR.md, sees addresses). The tags keep the payload nonzero (0 would be infinity)
# and no guard word equals a NaN that arithmetic makes (CUDA's canonical float32 0x7FFFFFFF,
# NumPy's 0x7FF8000000000000). One value per width: sets sliced out of a timing buffer compare
# against a fresh allocation of their own layout.
_GUARD_BITS = {4: (np.uint32, 0x7F90_4B56), 8: (np.uint64, 0x7FF4_4B56_0000_4B56)}
# Elements of guard band on each side of an array (verification) or of each timed input set.
GUARD_ELEMENTS = 256


def guard_pattern(dtype: np.dtype, elements: int) -> bytes:
    """``elements`` guard values of ``dtype`` (real or complex: both parts): tagged signaling
    NaNs. Host code must only move them (NumPy arithmetic or a cast on one warns, and quiets
    it)."""
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


# Unsigned integers of each width: inputs are compared as the integers their bytes spell, so a
# changed NaN payload, a -0.0 written over 0.0 or a NaN written over a NaN all count as changes.
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _as_words(array: Any) -> Any:
    """``array``'s bytes, flat, as unsigned integers of its element width (half of it for a
    complex dtype: one per real or imaginary part). NumPy or CuPy; contiguous arrays only."""
    dtype = np.dtype(array.dtype)
    word = dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
    return array.reshape(-1).view(_UNSIGNED[word])


def first_changed(before: Any, after: Any, xp: Any = np) -> int | None:
    """Index of the first element (flat, in memory order) whose bytes differ between ``before``
    and ``after``, two contiguous arrays of one dtype and size; None when every byte is the same.

    Compared where the arrays live (``xp``: NumPy, or CuPy for device arrays, so a device input
    is never copied to the host to be compared), as unsigned integers of the element's width:
    bit for bit, NaN payloads and the sign of zero included. Temporary memory: one bool per word.
    """
    if before.dtype != after.dtype or before.size != after.size:
        raise ValueError(
            f"cannot compare {before.dtype}[{before.size}] with {after.dtype}[{after.size}]"
        )
    p, q = _as_words(before), _as_words(after)
    if p.size == 0:
        return None
    differs = p != q
    # The first True, 0 when there is none (as bytes: argmax of an integer array is every
    # array module's).
    index = int(xp.argmax(differs.view(np.uint8)))
    changed = bool(differs[index])
    del differs
    if not changed:
        return None
    return index * p.dtype.itemsize // np.dtype(before.dtype).itemsize


def check_input_unchanged(
    first: int | None, shape: tuple[int, int], where: str | None = None
) -> CheckFailure | None:
    """A (including its unread upper triangle) byte-identical after the run: ``first`` is the
    index of its first changed element (:func:`first_changed`), None when none changed;
    ``where`` names that element in the detail (default: its index)."""
    if first is None:
        return None
    where = where if where is not None else f"element {first}"
    return CheckFailure(
        "input_modified", shape, None, None, f"A changed during the solve (first at {where})"
    )
