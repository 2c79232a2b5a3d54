"""LAPACK ?gbbrd (band → bidiagonal) and ?bdsqr (singular values of a bidiagonal) through
SciPy's ``scipy.linalg.cython_lapack`` capsules, called with ctypes on each capsule's function
pointer (SciPy's Python-level ``scipy.linalg.lapack`` wraps neither routine).

The one binding of ?gbbrd in the repository: the path's reference and baseline call it, and so
does the op's loader fallback (``seeds.ops.band_bidiag.BandBidiagCall.fallback``).

These are the LAPACK SciPy links (OpenBLAS's bundled reference LAPACK in SciPy's wheels):
?gbbrd is reference code built on plane rotations (xLARTG, xROT), single-threaded whatever
BLAS threading is set to; ?bdsqr with no vectors runs dqds (xLASQ1). SciPy is imported on first
call only, so importing this module costs nothing.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

_LETTER = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}


class LapackError(RuntimeError):
    """A LAPACK routine returned INFO ≠ 0."""


@functools.cache
def _function(name: str, nargs: int) -> Callable[..., None]:
    """The C function behind ``cython_lapack.__pyx_capi__[name]``: ``nargs`` pointer
    arguments, no result (every Fortran argument is passed by address)."""
    from scipy.linalg import cython_lapack

    capsule = cython_lapack.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get_pointer(capsule, get_name(capsule))
    return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs))(address)


def _letter(dtype: Any) -> str:
    try:
        return _LETTER[np.dtype(dtype)]
    except KeyError:
        raise ValueError(
            f"LAPACK band reduction here takes float32 or float64; got {dtype}"
        ) from None


def _int(value: int) -> ctypes.c_int:
    return ctypes.c_int(value)


def _ptr(obj: Any) -> int:
    """Address of a ctypes scalar or a NumPy array's data."""
    if isinstance(obj, np.ndarray):
        return obj.ctypes.data
    return ctypes.addressof(obj)


def gbbrd(band: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reduce an n×n upper band matrix to upper bidiagonal form with LAPACK ?gbbrd
    (VECT = 'N', M = N = n, KL = 0, KU = BW, NCC = 0) in the band's own precision.

    Args:
        band: LAPACK upper band layout, shape (BW + 1, n), float32 or float64
            (``band[BW + i − j, j] = a_ij``); not modified (a Fortran-ordered copy is reduced).

    Returns:
        (d, e): the diagonal (n,) and superdiagonal (n − 1,) in the band's dtype.

    Raises:
        ValueError: a dtype other than float32/float64, or a band that is not 2-D or is empty
            (no row: no diagonal; no column: n = 0).
        LapackError: INFO ≠ 0 (an illegal argument: a bug here).
        ModuleNotFoundError: SciPy is not installed.
    """
    letter = _letter(band.dtype)
    if band.ndim != 2 or band.shape[0] < 1 or band.shape[1] < 1:
        raise ValueError(f"band must be (BW + 1, n) with n >= 1; got shape {band.shape}")
    ldab, n = band.shape
    ab = np.array(band, dtype=band.dtype, order="F", copy=True)
    d = np.zeros(n, dtype=band.dtype)
    e = np.zeros(max(n - 1, 1), dtype=band.dtype)
    dummy = np.zeros(1, dtype=band.dtype)
    work = np.zeros(2 * n, dtype=band.dtype)
    info = _int(0)
    vect = ctypes.c_char(b"N")
    args = [vect, _int(n), _int(n), _int(0), _int(0), _int(ldab - 1), ab, _int(ldab), d, e,
            dummy, _int(1), dummy, _int(1), dummy, _int(1), work, info]  # fmt: skip
    _function(f"{letter}gbbrd", len(args))(*[_ptr(a) for a in args])
    if info.value != 0:
        raise LapackError(f"{letter}gbbrd: INFO = {info.value}")
    return d, e[: n - 1]


def bdsqr_singular_values(d: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Singular values of the upper bidiagonal matrix with diagonal ``d`` (n,) and
    superdiagonal ``e`` (n − 1,), by LAPACK DBDSQR (UPLO = 'U', no vectors) in float64
    (inputs are widened exactly), in decreasing order.

    Raises:
        ValueError: ``e`` is not of length n − 1, or n = 0.
        LapackError: DBDSQR did not converge (INFO > 0) or got an illegal argument.
    """
    n = d.shape[0]
    if n < 1 or e.shape != (n - 1,):
        raise ValueError(f"need d (n,) and e (n-1,) with n >= 1; got {d.shape}, {e.shape}")
    dd = np.array(d, dtype=np.float64, copy=True)
    ee = np.zeros(max(n, 1), dtype=np.float64)
    ee[: n - 1] = e
    dummy = np.zeros(1, dtype=np.float64)
    work = np.zeros(4 * n, dtype=np.float64)
    info = _int(0)
    uplo = ctypes.c_char(b"U")
    args = [uplo, _int(n), _int(0), _int(0), _int(0), dd, ee, dummy, _int(1), dummy, _int(1),
            dummy, _int(1), work, info]  # fmt: skip
    _function("dbdsqr", len(args))(*[_ptr(a) for a in args])
    if info.value != 0:
        raise LapackError(f"dbdsqr: INFO = {info.value}")
    return dd
