"""ggml tensor layouts of a SOLVE_TRI problem, and the checks the driver runs before a launch.

A solve_tri operand is a 4-D ggml tensor of float32: ne = [cols, rows, b2, b3] (ne[0] fastest),
byte strides nb = [4, nb1, nb2, nb3]. Element (r, c) of batch (i2, i3) sits at byte
``i3*nb3 + i2*nb2 + r*nb1 + 4*c`` from the tensor's pointer. A is [n, n, b2, b3], B and X are
[k, n, b2, b3]. Strides here are the triple (nb1, nb2, nb3) in bytes; nb[0] is 4 (ggml's CUDA
back end needs rows of adjacent elements, and so does the kernel).

What the driver accepts (:func:`check_launch`), each refusal one line naming the operand:

- n, k, b2, b3 ≥ 1; n, k ≤ 2^31 − 1; b2·b3 ≤ 2^31 − 1 (one thread block per matrix: the grid's
  x limit);
- every stride a non-negative multiple of 4 bytes, every pointer non-zero and 4-byte aligned
  (the kernel converts row strides to elements);
- X's elements all distinct: its dimensions, sorted by stride, nest (each stride at least the
  span of the dimensions inside it). Interleaved layouts that happen not to overlap are refused
  too: the check is sufficient, not necessary, and ggml never makes them;
- X either exactly B (same pointer and strides: an in-place solve, which the kernel supports,
  each element of B being read by the thread that later writes the same element of X) or
  disjoint from B's span; X disjoint from A's span. A and B may overlap each other and
  themselves (they are only read).
"""

from __future__ import annotations

from collections.abc import Sequence

FLOAT_BYTES = 4
INT32_MAX = 2**31 - 1

Strides = tuple[int, int, int]


class LayoutError(ValueError):
    """A problem the driver refuses to launch: a bad shape, stride, pointer or overlap."""


def check_shape(n: int, k: int, b2: int, b3: int) -> tuple[int, int, int, int]:
    """(n, k, b2, b3) once every value is an int ≥ 1, n and k fit an int32, and the batch count
    b2·b3 fits the grid (≤ 2^31 − 1 thread blocks).

    Raises:
        LayoutError: one line naming the value.
    """
    shape = (n, k, b2, b3)
    for name, value in zip(("n", "k", "b2", "b3"), shape, strict=True):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayoutError(f"solve_tri: {name} must be an integer >= 1; got {value!r}")
        if value > INT32_MAX:
            raise LayoutError(f"solve_tri: {name}={value} exceeds 2^31 - 1")
    if b2 * b3 > INT32_MAX:
        raise LayoutError(f"solve_tri: b2*b3 = {b2 * b3} matrices exceed 2^31 - 1 thread blocks")
    return shape


def packed_strides(cols: int, rows: int, b2: int) -> Strides:
    """ggml's packed strides (nb1, nb2, nb3) of a float32 tensor [cols, rows, b2, b3]."""
    nb1 = cols * FLOAT_BYTES
    return nb1, nb1 * rows, nb1 * rows * b2


def check_strides(name: str, nb: Sequence[int]) -> Strides:
    """``nb`` as (nb1, nb2, nb3) once each is a non-negative int multiple of 4 bytes.

    Raises:
        LayoutError: one line naming the operand and the stride.
    """
    if len(nb) != 3:
        raise LayoutError(f"solve_tri: {name}'s strides must be (nb1, nb2, nb3); got {nb!r}")
    for i, value in enumerate(nb, start=1):
        if isinstance(value, bool) or not isinstance(value, int):
            raise LayoutError(f"solve_tri: {name}'s nb{i} must be an integer; got {value!r}")
        if value < 0 or value % FLOAT_BYTES:
            raise LayoutError(
                f"solve_tri: {name}'s nb{i} = {value} bytes must be a non-negative multiple of 4"
            )
    return int(nb[0]), int(nb[1]), int(nb[2])


def span_bytes(cols: int, rows: int, b2: int, b3: int, nb: Strides) -> int:
    """Bytes from a tensor's first element to the end of its last (the memory it touches lies
    in [ptr, ptr + span))."""
    nb1, nb2, nb3 = nb
    return FLOAT_BYTES * cols + nb1 * (rows - 1) + nb2 * (b2 - 1) + nb3 * (b3 - 1)


def elements_distinct(cols: int, rows: int, b2: int, b3: int, nb: Strides) -> bool:
    """Whether the tensor's dimensions, sorted by stride, nest: each stride (of a dimension with
    more than one index) at least the span of the dimensions inside it, so no two elements share
    an address."""
    dims = sorted(
        (stride, extent)
        for stride, extent in ((FLOAT_BYTES, cols), (nb[0], rows), (nb[1], b2), (nb[2], b3))
        if extent > 1
    )
    span = FLOAT_BYTES
    for stride, extent in dims:
        if stride < span:
            return False
        span = stride * (extent - 1) + span
    return True


def check_launch(
    a_ptr: int,
    b_ptr: int,
    x_ptr: int,
    shape: Sequence[int],
    nb_a: Sequence[int],
    nb_b: Sequence[int],
    nb_x: Sequence[int],
) -> tuple[tuple[int, int, int, int], Strides, Strides, Strides]:
    """The checked shape and strides of a launch on raw device pointers (module docstring).

    Raises:
        LayoutError: one line naming what is wrong.
    """
    n, k, b2, b3 = check_shape(*shape)
    strides = check_strides("A", nb_a), check_strides("B", nb_b), check_strides("X", nb_x)
    for name, ptr in (("A", a_ptr), ("B", b_ptr), ("X", x_ptr)):
        if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr <= 0 or ptr % FLOAT_BYTES:
            raise LayoutError(f"solve_tri: {name}'s pointer must be non-zero and 4-byte aligned")
    sa, sb, sx = strides
    if not elements_distinct(k, n, b2, b3, sx):
        raise LayoutError(
            f"solve_tri: X's strides {sx} bytes make elements share memory at k={k}, n={n}, "
            f"b2={b2}, b3={b3}"
        )
    x_span = (x_ptr, x_ptr + span_bytes(k, n, b2, b3, sx))
    if not (x_ptr == b_ptr and sx == sb) and _overlap(
        x_span, (b_ptr, b_ptr + span_bytes(k, n, b2, b3, sb))
    ):
        raise LayoutError(
            "solve_tri: X overlaps B; X may be B itself (same pointer and strides) or disjoint"
        )
    if _overlap(x_span, (a_ptr, a_ptr + span_bytes(n, n, b2, b3, sa))):
        raise LayoutError("solve_tri: X overlaps A")
    return (n, k, b2, b3), sa, sb, sx


def _overlap(first: tuple[int, int], second: tuple[int, int]) -> bool:
    """Whether two half-open byte ranges intersect."""
    return first[0] < second[1] and second[0] < first[1]


def array_layout(
    name: str, shape: Sequence[int], strides: Sequence[int], itemsize: int
) -> tuple[tuple[int, int, int, int], Strides]:
    """A NumPy/CuPy array's ggml view: ``shape`` (rows, cols), (b2, rows, cols) or
    (b3, b2, rows, cols) with byte ``strides`` becomes ((cols, rows, b2, b3), (nb1, nb2, nb3)),
    a batch dimension of extent 1 getting stride 0.

    Raises:
        LayoutError: not 2-, 3- or 4-D, not float32-sized elements, a column stride other than
            4 bytes, or a negative stride.
    """
    if len(shape) not in (2, 3, 4):
        raise LayoutError(f"solve_tri: {name} must be 2-, 3- or 4-D; got shape {tuple(shape)}")
    if itemsize != FLOAT_BYTES:
        raise LayoutError(f"solve_tri: {name} must be float32; got {itemsize}-byte elements")
    if any(s < 0 for s in strides):
        raise LayoutError(f"solve_tri: {name} has a negative stride {tuple(strides)}")
    pad = 4 - len(shape)
    b3, b2, rows, cols = (1,) * pad + tuple(int(v) for v in shape)
    sb3, sb2, nb1, nb0 = (0,) * pad + tuple(int(v) for v in strides)
    if cols > 1 and nb0 != FLOAT_BYTES:
        raise LayoutError(
            f"solve_tri: {name}'s rows must be contiguous (column stride 4 bytes); got {nb0}"
        )
    return (cols, rows, b2, b3), (
        nb1 if rows > 1 else 0,
        sb2 if b2 > 1 else 0,
        sb3 if b3 > 1 else 0,
    )


def problem_of_arrays(
    a_shape: Sequence[int], a_strides: Sequence[int], b_shape: Sequence[int],
    b_strides: Sequence[int], itemsize: int,
) -> tuple[tuple[int, int, int, int], Strides, Strides]:  # fmt: skip
    """(n, k, b2, b3) and the strides of A and B given as arrays: A (…, n, n), B (…, n, k),
    the same leading (batch) dimensions, 2-, 3- or 4-D (leading dimensions b3, b2 in NumPy's
    order: ggml's ne[3], ne[2]).

    Raises:
        LayoutError: one line saying which dimensions disagree.
    """
    (an0, an1, ab2, ab3), nb_a = array_layout("A", a_shape, a_strides, itemsize)
    (k, n, b2, b3), nb_b = array_layout("B", b_shape, b_strides, itemsize)
    if len(a_shape) != len(b_shape):
        raise LayoutError(
            f"solve_tri: A and B must have the same number of dimensions; got shapes "
            f"{tuple(a_shape)}, {tuple(b_shape)}"
        )
    if an0 != an1 or an1 != n or (ab2, ab3) != (b2, b3):
        raise LayoutError(
            f"solve_tri: A must be (..., n, n) and B (..., n, k) with the same batch "
            f"dimensions; got {tuple(a_shape)}, {tuple(b_shape)}"
        )
    return check_shape(n, k, b2, b3), nb_a, nb_b
