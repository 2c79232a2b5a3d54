"""The op ``trsm_batched``: many independent small triangular solves of one shape, one launch.
For every batch index i in [0, batch): A_i·X_i = B_i with A_i m×m lower triangular (non-unit
diagonal; its strict upper triangle is never read), B_i m×n, X_i overwriting B_i. Its shapes
are ``(m, n, batch)``; the small regime only: 1 ≤ m, n ≤ 64 (a larger solve is one
``trsm`` call), batch ≥ 1.

The loader's callable (:class:`TrsmBatchedCall`): ``solver(a, b)`` on CuPy arrays ``a`` of shape
(batch, m, m) and ``b`` of shape (batch, m, n), each matrix row-major (as
``torch.linalg.solve_triangular``'s batches), X written over ``b``, which is returned. The
champion kernel takes C-contiguous arrays of the loaded dtype; cuBLAS's batched TRSM through
CuPy takes the rest (any strides).
"""

from __future__ import annotations

from typing import Any

from .solve_tri import solve_lower_batches
from .spec import INT32_MAX, OpSpec, ShapeParam, device_copy, device_index

# CuPy dtype characters cuBLAS ?trsmBatched serves: s, d, c, z.
_BLAS_CHARS = "fdFD"
# The small regime (HSMA-TRSM's m, n <= 64): a matrix and its right-hand sides fit one block.
SMALL_MAX = 64

TRSM_BATCHED = OpSpec(
    name="trsm_batched",
    params=(
        ShapeParam("m", 1, SMALL_MAX, "rows of each A and B (the small regime, m <= 64)"),
        ShapeParam("n", 1, SMALL_MAX, "columns of each B (the small regime, n <= 64)"),
        # cuBLAS's batch count is a 32-bit int.
        ShapeParam("batch", 1, INT32_MAX, "independent systems solved in one call"),
    ),
    dtypes=("float32", "float64", "complex64", "complex128"),
    semantics=(
        "Batched TRSM: for each i < batch, A_i m x m lower triangular with a non-unit diagonal, "
        "B_i m x n, A_i*X_i = B_i with X_i overwriting B_i; A (batch, m, m) and B (batch, m, n) "
        "packed, each matrix row-major; 1 <= m, n <= 64."
    ),
    shape_words="{batch} x (A {m}x{m}, B {m}x{n})",
    call_factory="ops.trsm_batched:TrsmBatchedCall",
    fallback_library="cuBLAS ?trsmBatched (through CuPy)",
    fallback_route="cublas",
)


def check_operands(a: Any, b: Any) -> tuple[int, int, int]:
    """Check the batched TRSM operands and return (m, n, batch).

    ``a`` must be a 3-D device array (CuPy) of shape (batch, m, m) and ``b`` one of shape
    (batch, m, n) on the same device, 1 ≤ m, n ≤ 64, batch ≥ 1, ``b`` of float32, float64,
    complex64 or complex128, ``a``'s dtype casting safely to ``b``'s.

    Raises:
        TypeError: host arrays, arrays on different devices, or dtypes that cannot be solved
            in place in ``b``.
        ValueError: shapes that do not form a batch of small triangular systems.
    """
    import numpy

    a_device, b_device = device_index(a), device_index(b)
    if a_device is None or b_device is None:
        raise TypeError(f"expected CuPy arrays, got {type(a).__name__} and {type(b).__name__}")
    if a_device != b_device:
        raise TypeError(f"a is on device {a_device}, b on device {b_device}")
    if a.ndim != 3 or a.shape[1] != a.shape[2]:
        raise ValueError(f"a must be (batch, m, m), got shape {a.shape}")
    batch, m, _ = a.shape
    if b.ndim != 3 or b.shape[:2] != (batch, m):
        raise ValueError(f"b must be (batch, m, n) = ({batch}, {m}, n), got shape {b.shape}")
    n = b.shape[2]
    if not (1 <= m <= SMALL_MAX and 1 <= n <= SMALL_MAX and batch >= 1):
        raise ValueError(
            f"trsm_batched takes 1 <= m, n <= {SMALL_MAX} and batch >= 1; got m={m}, n={n}, "
            f"batch={batch}"
        )
    if b.dtype.char not in _BLAS_CHARS:
        raise TypeError(f"b must be float32/64 or complex64/128, got {b.dtype}")
    if not numpy.can_cast(a.dtype, b.dtype, "safe"):
        raise TypeError(f"cannot solve in place: a is {a.dtype}, b is {b.dtype}")
    return int(m), int(n), int(batch)


def cublas_trsm_batched(a: Any, b: Any) -> Any:
    """Solve A_i·X_i = B_i for every i in place in ``b`` and return ``b``: cuBLAS's batched TRSM
    through CuPy (``seeds.ops.solve_tri.solve_lower_batches``).

    Raises:
        TypeError, ValueError: see :func:`check_operands`.
    """
    check_operands(a, b)
    return solve_lower_batches(a, b)


class TrsmBatchedCall:
    """The loader's call of ``trsm_batched`` (``seeds.ops.spec.OpCall``): ``solver(a, b)``
    solves every batch index's system in place in ``b`` and returns ``b``."""

    def shape(self, a: Any, b: Any) -> tuple[int, int, int]:
        """(m, n, batch) (:func:`check_operands`)."""
        return check_operands(a, b)

    def kernel_ready(self, dtype: str, device: int, a: Any, b: Any) -> bool:
        """The loaded dtype, C-contiguous (packed, row-major) arrays, the solver's device."""
        return (
            a.dtype == dtype
            and b.dtype == dtype
            and a.flags.c_contiguous
            and b.flags.c_contiguous
            and device_index(b) == device
        )

    def run(self, driver: Any, a: Any, b: Any) -> Any:
        """The path driver's ``solve(a, b)``, in place in ``b``; returns ``b``."""
        driver.solve(a, b)
        return b

    def fallback(self, a: Any, b: Any) -> Any:
        """cuBLAS's batched TRSM in place in ``b`` (:func:`cublas_trsm_batched`)."""
        return cublas_trsm_batched(a, b)

    def snapshot(self, a: Any, b: Any) -> Any:
        """A copy of ``b``, which the kernel overwrites."""
        return device_copy(b)

    def restore(self, snapshot: Any, a: Any, b: Any) -> None:
        """``b`` as it was given."""
        b[...] = snapshot
