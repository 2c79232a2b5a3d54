"""The op ``trsm``: BLAS ?trsm with side=L, uplo=L, trans=N, diag=N, alpha=1 on an m×m lower
triangular A and an m×n B, X overwriting B; its shapes are ``(m, n)``.

The loader's call (:class:`TrsmCall`): ``solver(a, b)`` on CuPy arrays, the champion kernel on
Fortran-ordered arrays of the loaded dtype, cuBLAS ?trsm (through CuPy) for everything else.
"""

from __future__ import annotations

from typing import Any

from .spec import INT32_MAX, OpSpec, ShapeParam, device_copy, device_index

# CuPy dtype characters cuBLAS ?trsm serves: s, d, c, z.
_BLAS_CHARS = "fdFD"

TRSM = OpSpec(
    name="trsm",
    params=(
        # BLAS takes m = 0 or n = 0 (a quick return); cuBLAS's dimensions are 32-bit ints.
        ShapeParam("m", 0, INT32_MAX, "rows of A and B"),
        ShapeParam("n", 0, INT32_MAX, "columns of B"),
    ),
    dtypes=("float32", "float64", "complex64", "complex128"),
    semantics=(
        "TRSM with BLAS semantics: side=Left, uplo=Lower, trans=N, diag=Non-unit, alpha=1; "
        "A m x m lower triangular, B m x n, X overwrites B."
    ),
    shape_words="A {m}x{m}, B {m}x{n}",
    call_factory="ops.trsm:TrsmCall",
    fallback_library="cuBLAS ?trsm (through CuPy)",
    fallback_route="cublas",
)


def check_operands(a: Any, b: Any) -> tuple[int, int]:
    """Check the TRSM operands and return (m, n).

    ``a`` must be a 2-D m×m device array (CuPy) and ``b`` a 2-D m×n device array on the same
    device, of dtype float32, float64, complex64 or complex128, able to hold the solution
    (``a.dtype`` casts safely to ``b.dtype``).

    Raises:
        TypeError: host arrays, arrays on different devices, or dtypes that cannot be solved
            in place in ``b``.
        ValueError: ``a`` not square, ``b`` not 2-D, or row counts that differ.
    """
    import numpy

    a_device, b_device = device_index(a), device_index(b)
    if a_device is None or b_device is None:
        raise TypeError(f"expected CuPy arrays, got {type(a).__name__} and {type(b).__name__}")
    if a_device != b_device:
        raise TypeError(f"a is on device {a_device}, b on device {b_device}")
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"a must be square m×m, got shape {a.shape}")
    if b.ndim != 2 or b.shape[0] != a.shape[0]:
        raise ValueError(f"b must be m×n with m={a.shape[0]}, got shape {b.shape}")
    if b.dtype.char not in _BLAS_CHARS:
        raise TypeError(f"b must be float32/64 or complex64/128, got {b.dtype}")
    if not numpy.can_cast(a.dtype, b.dtype, "safe"):
        raise TypeError(f"cannot solve in place: a is {a.dtype}, b is {b.dtype}")
    return int(b.shape[0]), int(b.shape[1])


def cublas_trsm(a: Any, b: Any) -> Any:
    """Solve A·X = B in place in ``b`` with cuBLAS ?trsm (side=L, uplo=L, trans=N, diag=N,
    alpha=1) and return ``b``.

    ``a`` (m×m, only its lower triangle is read) and ``b`` (m×n) are CuPy arrays passing
    :func:`check_operands`; any memory order. ``cupyx.scipy.linalg.solve_triangular`` works in
    ``a``'s dtype and overwrites ``b`` only when ``b`` is Fortran-contiguous of that dtype
    (CuPy 13/14 source); so ``a`` is first cast to ``b``'s dtype, and a result that came back
    in a new array is copied into ``b``.

    Raises:
        TypeError, ValueError: see :func:`check_operands`.
    """
    from cupyx.scipy.linalg import solve_triangular

    check_operands(a, b)
    if b.size == 0:
        return b
    if a.dtype != b.dtype:
        a = a.astype(b.dtype, order="F")
    x = solve_triangular(a, b, lower=True, overwrite_b=True)
    if x.data.ptr != b.data.ptr:
        b[...] = x
    return b


class TrsmCall:
    """The loader's call of ``trsm`` (``seeds.ops.spec.OpCall``): ``solver(a, b)`` solves
    A·X = B in place in ``b`` and returns ``b``. A champion kernel takes Fortran-contiguous
    arrays (lda = ldb = m) of the loaded dtype on the solver's device; cuBLAS takes the rest."""

    def shape(self, a: Any, b: Any) -> tuple[int, int]:
        """(m, n) (:func:`check_operands`)."""
        return check_operands(a, b)

    def kernel_ready(self, dtype: str, device: int, a: Any, b: Any) -> bool:
        """The loaded dtype, Fortran order, the solver's device."""
        return (
            a.dtype == dtype
            and b.dtype == dtype
            and a.flags.f_contiguous
            and b.flags.f_contiguous
            and device_index(b) == device
        )

    def run(self, driver: Any, a: Any, b: Any) -> Any:
        """The path driver's ``solve(a, b, stream)``, in place in ``b``; returns ``b``."""
        driver.solve(a, b, None)
        return b

    def fallback(self, a: Any, b: Any) -> Any:
        """cuBLAS ?trsm in place in ``b`` (:func:`cublas_trsm`)."""
        return cublas_trsm(a, b)

    def snapshot(self, a: Any, b: Any) -> Any:
        """A copy of ``b``, which the kernel overwrites."""
        return device_copy(b)

    def restore(self, snapshot: Any, a: Any, b: Any) -> None:
        """``b`` as it was given."""
        b[...] = snapshot
