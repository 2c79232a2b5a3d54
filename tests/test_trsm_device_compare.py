"""A compared where it lives: ``gpu_tasks.run_candidate`` and ``timing.audit_outputs`` refuse a
changed input bit for bit, without copying A back and hashing it (issue 7 follow-up).

``run_candidate`` runs here with NumPy as its array module (``xp=np``): the same buffers, guard
bands, copies and comparison as on the device, in host memory, and a driver that takes host
addresses and writes through them as a kernel would (ctypes). What the GPU runs differs only in
the array module (CuPy) and in the synchronization; not measured on a GPU yet.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from evaluator import gpu_tasks
from evaluator.checks.accuracy import check_solution
from evaluator.checks.integrity import (
    GUARD_ELEMENTS,
    check_input_unchanged,
    first_changed,
)
from evaluator.inputs import NUMPY_DTYPES, Problem, make_problem
from evaluator.timing import Compared, SetLayout, audit_outputs
from seeds.driver import GeometryError

DTYPES = ["float32", "float64", "complex64", "complex128"]


def _bytes_at(address: int, count: int) -> np.ndarray:
    """``count`` writable bytes of host memory at ``address``, as a kernel sees its pointer."""
    return np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint8)), (count,))


class HostDriver:
    """A candidate on host addresses: solves B in place, then ``tamper(a_ptr, b_ptr, m, n)``."""

    def __init__(self, dtype: str, tamper: Callable[[int, int, int, int], None] | None = None):
        self.dtype = np.dtype(NUMPY_DTYPES[dtype])
        self.tamper = tamper

    def solve_raw(self, a_ptr: int, b_ptr: int, m: int, n: int, lda: int, ldb: int) -> None:
        size = self.dtype.itemsize
        a = _bytes_at(a_ptr, m * m * size).view(self.dtype).reshape((m, m), order="F")
        b = _bytes_at(b_ptr, m * n * size).view(self.dtype).reshape((m, n), order="F")
        b[...] = solve_triangular(np.tril(np.nan_to_num(a)), b, lower=True)
        if self.tamper is not None:
            self.tamper(a_ptr, b_ptr, m, n)


def _set_bytes(address: int, data: bytes) -> None:
    _bytes_at(address, len(data))[...] = np.frombuffer(data, np.uint8)


def _run(problem: Problem, tamper=None):
    driver = HostDriver(problem.b.dtype.name, tamper)
    return gpu_tasks.run_candidate(driver, problem, xp=np)


# ---- first_changed -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_first_changed_sees_every_bit_and_only_changes(dtype):
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    before = np.arange(40, dtype=np_dtype)
    before[7] = np.nan
    assert first_changed(before, before.copy()) is None
    for element in (0, 7, 23, 39):
        for byte in range(np_dtype.itemsize):
            after = before.copy()
            after.view(np.uint8)[element * np_dtype.itemsize + byte] ^= 0x01
            assert first_changed(before, after) == element
    assert first_changed(before[:0], before[:0]) is None
    with pytest.raises(ValueError):
        first_changed(before, before[:-1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_first_changed_counts_nan_payloads_and_signed_zeros(dtype):
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    bits = {4: np.uint32, 8: np.uint64}[np_dtype.itemsize]
    before = np.array([0.0, 1.0, np.nan, 2.0], np_dtype)
    negative_zero = before.copy()
    negative_zero[0] = -0.0  # == 0.0, another bit pattern
    assert negative_zero[0] == before[0] and first_changed(before, negative_zero) == 0
    payload = before.copy()
    payload.view(bits)[2] ^= 1  # still a NaN, another payload
    assert np.isnan(payload[2]) and first_changed(before, payload) == 2
    assert first_changed(before, payload, np) == 2


def test_check_input_unchanged_keeps_its_name_and_says_where():
    assert check_input_unchanged(None, (4, 2)) is None
    failure = check_input_unchanged(5, (4, 2), "row 1, col 1")
    assert failure.check == "input_modified"
    assert failure.detail == "A changed during the solve (first at row 1, col 1)"
    assert check_input_unchanged(5, (4, 2)).detail.endswith("(first at element 5)")


# ---- run_candidate -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_right_candidate_passes_and_returns_its_x(dtype):
    problem = make_problem(37, 5, dtype, 3)
    failure, x = _run(problem)
    assert failure is None
    assert check_solution(problem, x) is None
    assert x.shape == (37, 5) and x.dtype == problem.b.dtype


def _a_offset(m: int, itemsize: int, row: int, col: int) -> int:
    return (col * m + row) * itemsize


# (m, n, dtype): a small shape, and one whose A is past 16 MiB (2049² float64: 33.6 MB).
SHAPES = [(37, 5, "float64"), (33, 3, "float32"), (21, 2, "complex64"), (2049, 2, "float64")]


@pytest.mark.parametrize(("m", "n", "dtype"), SHAPES)
def test_one_byte_written_into_a_is_input_modified_with_its_place(m, n, dtype):
    problem = make_problem(m, n, dtype, 5)
    size = problem.a.dtype.itemsize
    row, col = m - 2, 1  # lower triangle

    def tamper(a_ptr, b_ptr, m, n):
        _bytes_at(a_ptr + _a_offset(m, size, row, col) + size - 1, 1)[0] ^= 0x40

    failure, x = _run(problem, tamper)
    assert failure.check == "input_modified"
    assert failure.detail == f"A changed during the solve (first at row {row}, col {col})"
    assert x is not None


@pytest.mark.parametrize(("m", "n", "dtype"), SHAPES)
def test_a_nan_of_the_upper_triangle_rewritten_is_input_modified(m, n, dtype):
    """A NaN of another sign written over the NaN upper triangle (to a float compare nothing
    changed), or a NaN's payload flipped in place."""
    problem = make_problem(m, n, dtype, 6)
    size = problem.a.dtype.itemsize
    row, col = 0, m - 1
    assert np.isnan(problem.a[row, col])
    other_nan = -problem.a[row : row + 1, col]  # the sign bit flipped: still a NaN
    assert np.isnan(other_nan).all()
    assert other_nan.tobytes() != problem.a[row : row + 1, col].tobytes()

    def overwrite(a_ptr, b_ptr, m, n):
        _set_bytes(a_ptr + _a_offset(m, size, row, col), other_nan.tobytes())

    def flip(a_ptr, b_ptr, m, n):
        _bytes_at(a_ptr + _a_offset(m, size, 1, m - 1), 1)[0] ^= 0x01  # lowest mantissa bit

    for tamper, where in ((overwrite, (row, col)), (flip, (1, m - 1))):
        failure, _ = _run(problem, tamper)
        assert failure.check == "input_modified"
        assert failure.detail.endswith(f"(first at row {where[0]}, col {where[1]})")


@pytest.mark.parametrize(("m", "n", "dtype"), SHAPES)
def test_negative_zero_over_zero_is_input_modified(m, n, dtype):
    base = make_problem(m, n, dtype, 7)
    a = base.a.copy(order="F")
    a[m - 1, 0] = 0.0
    problem = Problem(a, base.b, base.kind, base.seed)
    size = a.dtype.itemsize
    negative_zero = np.array([-0.0], a.dtype).tobytes()

    def tamper(a_ptr, b_ptr, m, n):
        _set_bytes(a_ptr + _a_offset(m, size, m - 1, 0), negative_zero)

    failure, _ = _run(problem, tamper)
    assert failure.check == "input_modified"
    assert failure.detail.endswith(f"(first at row {m - 1}, col 0)")


@pytest.mark.parametrize(("m", "n", "dtype"), SHAPES)
def test_the_same_bytes_written_back_into_a_pass(m, n, dtype):
    problem = make_problem(m, n, dtype, 8)
    size = problem.a.dtype.itemsize
    same = problem.a[:, 1:2].tobytes(order="F")  # column 1, NaN above the diagonal included

    def tamper(a_ptr, b_ptr, m, n):
        _set_bytes(a_ptr + _a_offset(m, size, 0, 1), same)

    assert _run(problem, tamper)[0] is None


@pytest.mark.parametrize(("m", "n", "dtype"), SHAPES)
@pytest.mark.parametrize(
    ("where", "byte"),
    [("a", -1), ("a", "end"), ("b", -1), ("b", "end")],
    ids=["before A", "after A", "before B", "after B"],
)
def test_a_write_into_a_guard_band_is_out_of_bounds_write(m, n, dtype, where, byte):
    """As before: a guard band of A or of B written is ``out_of_bounds_write`` (checked first, so
    a write just past A is not ``input_modified``); the detail names the byte of the four bands
    (A before, A after, B before, B after)."""
    problem = make_problem(m, n, dtype, 9)
    size = problem.a.dtype.itemsize
    g = GUARD_ELEMENTS * size
    length = (m * m if where == "a" else m * n) * size

    def tamper(a_ptr, b_ptr, m, n):
        base = a_ptr if where == "a" else b_ptr
        _bytes_at(base + (length if byte == "end" else byte), 1)[0] ^= 0x01

    failure, _ = _run(problem, tamper)
    assert failure.check == "out_of_bounds_write"
    band = {("a", -1): 0, ("a", "end"): 1, ("b", -1): 2, ("b", "end"): 3}[where, byte]
    first = band * g + (g - 1 if byte == -1 else 0)
    assert failure.detail == f"guard band byte {first} was overwritten"


def test_a_geometry_error_is_launch_geometry():
    class Refuses(HostDriver):
        def solve_raw(self, *args):
            raise GeometryError("m too large")

    problem = make_problem(9, 2, "float64", 1)
    failure, x = gpu_tasks.run_candidate(Refuses("float64"), problem, xp=np)
    assert failure.check == "launch_geometry" and x is None


def test_the_candidate_reads_the_problems_bytes_between_guard_bands():
    """The buffer the driver gets holds A's and B's bytes in Fortran order, NaN triangle and all
    (copied from the host in pieces, no host copy of A made)."""
    problem = make_problem(6, 3, "float32", 2)
    seen = {}

    def record(a_ptr, b_ptr, m, n):
        seen["a"] = _bytes_at(a_ptr, m * m * 4).tobytes()

    _run(problem, record)
    assert seen["a"] == problem.a.tobytes(order="F")


# ---- audit_outputs -------------------------------------------------------------------------


def _timed(dtype: str, m: int, n: int, calls: int):
    np_dtype = np.dtype(NUMPY_DTYPES[dtype])
    layouts = a_layout, b_layout = (
        SetLayout(calls, m * m, np_dtype.itemsize),
        SetLayout(calls, m * n, np_dtype.itemsize),
    )
    a_buf, b_buf = a_layout.allocate(np, np_dtype), b_layout.allocate(np, np_dtype)
    x_buf = b_buf.copy()
    for i in range(calls):
        problem = make_problem(m, n, dtype, 20 + i)
        a_layout.payload(a_buf)[i] = problem.a.ravel(order="F")
        b_layout.payload(b_buf)[i] = problem.b.ravel(order="F")
        x = solve_triangular(np.tril(np.nan_to_num(problem.a)), problem.b, lower=True)
        b_layout.payload(x_buf)[i] = x.ravel(order="F")
    return layouts, (a_buf, b_buf), x_buf


def _audit(layouts, inputs, a_after, x_after, shape):
    return audit_outputs("r", layouts, shape, inputs, (a_after, x_after), range(2),
                         check_solution, 1)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_audit_compares_a_bit_for_bit_on_the_host_copy(dtype):
    m, n = 9, 4
    layouts, inputs, x = _timed(dtype, m, n, 2)
    a_layout = layouts[0]
    assert _audit(layouts, inputs, inputs[0].copy(), x, (m, n)) is None
    itemsize = inputs[0].dtype.itemsize
    word = itemsize // 2 if dtype.startswith("complex") else itemsize
    bits = {4: np.uint32, 8: np.uint64}[word]
    nan_element = a_layout.offset(1) // itemsize + m * (m - 1)  # set 1, row 0, col m - 1
    negative_zero = inputs[0].copy()
    negative_zero[a_layout.offset(0) // itemsize + 3] = 0.0
    zero_inputs = (negative_zero, inputs[1])
    signed = negative_zero.copy()
    signed[a_layout.offset(0) // itemsize + 3] = -0.0
    payload = inputs[0].copy()
    payload.view(bits)[nan_element * (itemsize // word)] ^= 1
    guard = inputs[0].copy()
    guard.view(np.uint8)[a_layout.offset(1) + m * m * itemsize] ^= 1  # A's band after set 1
    cases = [
        (inputs, payload, "input set 1, row 0, col 8"),
        (zero_inputs, signed, "input set 0, row 3, col 0"),
        (inputs, guard, "in the guard band after input set 1"),
    ]
    for ins, a_after, where in cases:
        failure = _audit(layouts, ins, a_after, x, (m, n))
        assert failure.check == "timed_output_input_modified", where
        assert where in failure.detail and failure.detail.startswith("r: A changed")


def test_the_audit_takes_a_comparison_made_on_the_device():
    m, n = 8, 3
    layouts, inputs, x = _timed("float64", m, n, 2)
    a_layout, b_layout = layouts
    assert _audit(layouts, inputs, Compared(None), x, (m, n)) is None
    element = a_layout.guard + a_layout.stride + 2 * m + 5  # set 1, row 5, col 2
    failure = _audit(layouts, inputs, Compared(element), x, (m, n))
    assert failure.check == "timed_output_input_modified"
    assert failure.detail == "r: A changed during the solve (first at input set 1, row 5, col 2)"
    # B's guard bands come first, as before.
    x_bad = x.copy()
    x_bad[b_layout.offset(0) // 8 + b_layout.size] = 1.0
    failure = _audit(layouts, inputs, Compared(element), x_bad, (m, n))
    assert failure.check == "timed_output_out_of_bounds_write"
    # A passing comparison leaves the outputs' checks to run.
    x_wrong = x.copy()
    b_layout.payload(x_wrong)[1] += 1.0
    failure = _audit(layouts, inputs, Compared(None), x_wrong, (m, n))
    assert failure.check.startswith("timed_output_") and "input set 1" in failure.detail


def test_a_layout_locates_every_element():
    layout = SetLayout(3, 12, 8, guard=4)
    assert layout.locate(0) == "buffer element 0, in the guard band before input set 0"
    assert layout.locate(4) == "input set 0, element 0"
    assert layout.locate(4 + 11, rows=4) == "input set 0, row 3, col 2"
    assert layout.locate(4 + 12) == "buffer element 16, in the guard band after input set 0"
    assert layout.locate(4 + layout.stride + 1) == "input set 1, element 1"
    assert layout.locate(layout.total - 1).endswith("in the guard band after input set 2")
