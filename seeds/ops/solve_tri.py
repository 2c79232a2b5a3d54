"""The op ``solve_tri``: ggml's SOLVE_TRI, a batched A·X = B with A n×n lower triangular
(non-unit diagonal) and B, X n×k, each matrix row-major (column index fastest), over batch
indices (i2, i3); its shapes are ``(n, k, b2, b3)``.

ggml writes tensors by ``ne`` (fastest dimension first): ``ne_lhs = [n, n, b2, b3]``,
``ne_rhs = [k, n, b2, b3]``. The loader's callable takes them as CuPy arrays shaped as ``ne``
reversed, row-major: ``a`` of shape (b3, b2, n, n), ``b`` of shape (b3, b2, n, k), and solves in
place in ``b`` (:class:`SolveTriCall`). The fallback is cuBLAS's batched TRSM through CuPy.
"""

from __future__ import annotations

from typing import Any

from .spec import INT32_MAX, OpSpec, ShapeParam, ShapeRelation, device_copy, device_index

SOLVE_TRI = OpSpec(
    name="solve_tri",
    params=(
        ShapeParam("n", 1, INT32_MAX, "rows and columns of each A, rows of each B"),
        ShapeParam("k", 1, INT32_MAX, "columns of each B (right-hand sides)"),
        ShapeParam("b2", 1, INT32_MAX, "batch size in ggml's third dimension"),
        ShapeParam("b3", 1, INT32_MAX, "batch size in ggml's fourth dimension"),
    ),
    dtypes=("float32",),
    semantics=(
        "ggml SOLVE_TRI: for each batch index (i2, i3), A n x n lower triangular with a "
        "non-unit diagonal, B and X n x k, each matrix row-major; A*X = B. ne_lhs = "
        "[n, n, b2, b3], ne_rhs = [k, n, b2, b3]."
    ),
    shape_words="{b2}x{b3} batch of A {n}x{n}, B {n}x{k}",
    call_factory="ops.solve_tri:SolveTriCall",
    fallback_library="cuBLAS batched TRSM (through CuPy)",
    fallback_route="cublas",
    # cuBLAS's batch count is a 32-bit int.
    relations=(ShapeRelation("b2 * b3 <= 2147483647", lambda s: s["b2"] * s["b3"] <= INT32_MAX),),
)

# CuPy solves batches of triangular systems with cuBLAS's batched TRSM from version 14
# (cupy/cupy#8329); before, one system at a time.
_BATCHED_CUPY_MAJOR = 14


def check_operands(a: Any, b: Any) -> tuple[int, int, int, int]:
    """Check the SOLVE_TRI operands and return (n, k, b2, b3).

    ``a`` must be a 4-D device array (CuPy) of shape (b3, b2, n, n) and ``b`` one of shape
    (b3, b2, n, k) on the same device, ``b`` of float32 or float64, ``a``'s dtype casting safely
    to ``b``'s.

    Raises:
        TypeError: host arrays, arrays on different devices, or dtypes that cannot be solved
            in place in ``b``.
        ValueError: shapes that do not form a batch of triangular systems.
    """
    import numpy

    a_device, b_device = device_index(a), device_index(b)
    if a_device is None or b_device is None:
        raise TypeError(f"expected CuPy arrays, got {type(a).__name__} and {type(b).__name__}")
    if a_device != b_device:
        raise TypeError(f"a is on device {a_device}, b on device {b_device}")
    if a.ndim != 4 or a.shape[2] != a.shape[3]:
        raise ValueError(f"a must be (b3, b2, n, n) (ggml's ne reversed), got shape {a.shape}")
    b3, b2, n, _ = a.shape
    if b.ndim != 4 or b.shape[:3] != (b3, b2, n):
        raise ValueError(f"b must be (b3, b2, n, k) = ({b3}, {b2}, {n}, k), got shape {b.shape}")
    if b.dtype.char not in "fd":
        raise TypeError(f"b must be float32 or float64, got {b.dtype}")
    if not numpy.can_cast(a.dtype, b.dtype, "safe"):
        raise TypeError(f"cannot solve in place: a is {a.dtype}, b is {b.dtype}")
    return int(n), int(b.shape[3]), int(b2), int(b3)


def cublas_solve_tri(a: Any, b: Any) -> Any:
    """Solve A·X = B for every batch index in place in ``b`` and return ``b``: cuBLAS's batched
    TRSM through ``cupyx.scipy.linalg.solve_triangular`` (lower, on the row-major matrices), one
    call for the whole batch on CuPy 14 or later, one per matrix before.

    Raises:
        TypeError, ValueError: see :func:`check_operands`.
    """
    check_operands(a, b)
    return solve_lower_batches(a, b)


def solve_lower_batches(a: Any, b: Any) -> Any:
    """A·X = B for every leading (batch) index of CuPy arrays ``a`` (…, n, n; its lower
    triangle read) and ``b`` (…, n, k), in place in ``b``, returned: cuBLAS's batched TRSM
    through ``cupyx.scipy.linalg.solve_triangular``, one call for the whole batch on CuPy 14 or
    later, one per matrix before. Unchecked (the caller's op checks its operands); ``a`` is cast
    to ``b``'s dtype first."""
    import cupy
    import numpy
    from cupyx.scipy.linalg import solve_triangular

    if b.size == 0:
        return b
    if a.dtype != b.dtype:
        a = a.astype(b.dtype)
    if int(cupy.__version__.split(".")[0]) >= _BATCHED_CUPY_MAJOR:
        b[...] = solve_triangular(a, b, lower=True)
        return b
    for index in numpy.ndindex(*b.shape[:-2]):
        b[index] = solve_triangular(a[index], b[index], lower=True)
    return b


class SolveTriCall:
    """The loader's call of ``solve_tri`` (``seeds.ops.spec.OpCall``): ``solver(a, b)`` solves
    every batch index's system in place in ``b`` and returns ``b``. A champion kernel takes
    C-contiguous (packed, row-major) arrays of the loaded dtype on the solver's device; the
    batched cuBLAS TRSM takes the rest (any strides)."""

    def shape(self, a: Any, b: Any) -> tuple[int, int, int, int]:
        """(n, k, b2, b3) (:func:`check_operands`)."""
        return check_operands(a, b)

    def kernel_ready(self, dtype: str, device: int, a: Any, b: Any) -> bool:
        """The loaded dtype, packed row-major tensors, the solver's device."""
        return (
            a.dtype == dtype
            and b.dtype == dtype
            and a.flags.c_contiguous
            and b.flags.c_contiguous
            and device_index(b) == device
        )

    def run(self, driver: Any, a: Any, b: Any) -> Any:
        """The path driver's ``solve(a, b, out=b)``: X written over ``b`` (the driver writes X
        to ``out``, which may be ``b`` itself); returns ``b``."""
        driver.solve(a, b, out=b)
        return b

    def fallback(self, a: Any, b: Any) -> Any:
        """cuBLAS's batched TRSM in place in ``b`` (:func:`cublas_solve_tri`)."""
        return cublas_solve_tri(a, b)

    def snapshot(self, a: Any, b: Any) -> Any:
        """A copy of ``b``, which the kernel overwrites."""
        return device_copy(b)

    def restore(self, snapshot: Any, a: Any, b: Any) -> None:
        """``b`` as it was given."""
        b[...] = snapshot
