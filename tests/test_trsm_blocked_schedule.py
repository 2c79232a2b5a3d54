"""trsm_blocked's GEMM schedule (seeds/trsm_blocked/schedule.py), run on the CPU exactly as the
driver issues it: the steps of ``block_schedule`` through ``issue_gemms`` with a NumPy GEMM over
one simulated memory (addresses are byte offsets into it), so the address arithmetic, leading
dimensions and order tested are the driver's. A and B get leading dimensions larger than m, as a
caller's sub-matrices have.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from seeds.trsm_blocked.schedule import Inverse, Operands, Update, block_schedule, issue_gemms


class Memory:
    """A flat device memory of ``dtype`` scalars; an address is a byte offset into it."""

    def __init__(self, dtype: type, scalars: int) -> None:
        self.data = np.zeros(scalars, dtype=dtype)
        self.itemsize = self.data.itemsize
        self.top = 0

    def alloc(self, scalars: int) -> int:
        address = self.top * self.itemsize
        self.top += scalars
        return address

    def matrix(self, address: int, rows: int, cols: int, ld: int) -> np.ndarray:
        """A writable column-major view of rows×cols at ``address`` with leading dimension ld."""
        start = address // self.itemsize
        assert start + ld * (cols - 1) + rows <= self.data.size, "read past the memory's end"
        return np.lib.stride_tricks.as_strided(
            self.data[start:], shape=(rows, cols), strides=(self.itemsize, ld * self.itemsize)
        )

    def gemm(self, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) -> None:  # noqa: ANN001
        """cuBLAS ?gemm (no transposes) on this memory; beta = 0 ignores C as cuBLAS does."""
        product = alpha * (self.matrix(a, m, k, lda) @ self.matrix(b, k, n, ldb))
        out = self.matrix(c, m, n, ldc)
        out[...] = product if beta == 0 else beta * out + product


def solve_through_schedule(a: np.ndarray, b: np.ndarray, nb: int, pad: int = 3) -> np.ndarray:
    """X for lower ``a`` and ``b`` by the driver's steps: exact inverses of the diagonal blocks
    (the kernel's job, tested elsewhere) in NB×NB slots, the GEMMs of the schedule, then W."""
    m, n = b.shape
    blocks = -(-m // nb)
    lda, ldb = m + pad, m + pad
    mem = Memory(a.dtype.type, lda * m + ldb * n + blocks * nb * nb + m * n)
    ops = Operands(mem.alloc(lda * m), lda, mem.alloc(ldb * n), ldb, mem.alloc(blocks * nb * nb),
                   mem.alloc(m * n), mem.itemsize)  # fmt: skip
    mem.matrix(ops.a, m, m, lda)[...] = a
    mem.matrix(ops.b, m, n, ldb)[...] = b
    for t in range(blocks):
        r0, r1 = t * nb, min((t + 1) * nb, m)
        inverse = np.linalg.inv(np.tril(a[r0:r1, r0:r1]))
        mem.matrix(ops.inverses + t * nb * nb * mem.itemsize, r1 - r0, r1 - r0, nb)[...] = inverse
    issue_gemms(block_schedule(m, nb), mem.gemm, ops, m, n, nb)
    return mem.matrix(ops.w, m, n, m).copy()


def problem(m: int, n: int, dtype: type, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A well-conditioned lower A (upper triangle zero: the GEMMs read only below it) and B."""
    rng = np.random.default_rng(seed)
    a = np.tril(rng.standard_normal((m, m))) / np.sqrt(m) + np.diag(2.0 + rng.random(m))
    b = rng.standard_normal((m, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * np.tril(rng.standard_normal((m, m))) / np.sqrt(m)
        b = b + 1j * rng.standard_normal((m, n))
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize(
    ("m", "n", "nb"), [(129, 5, 128), (300, 17, 64), (777, 1, 128), (1000, 33, 96), (513, 8, 32)]
)
def test_the_schedule_solves_as_scipy(dtype, m, n, nb):
    a, b = problem(m, n, dtype, seed=m + n + nb)
    x = solve_through_schedule(a, b, nb)
    ref = solve_triangular(a.astype(np.complex128), b.astype(np.complex128), lower=True)
    eps = np.finfo(a.dtype).eps
    assert np.max(np.abs(x - ref)) / np.max(np.abs(ref)) < 50 * m * eps


@pytest.mark.parametrize(("m", "nb"), [(129, 128), (256, 128), (1000, 96), (16384, 256), (777, 7)])
def test_every_block_is_inverted_once_after_every_update_into_it(m, nb):
    steps = block_schedule(m, nb)
    blocks = -(-m // nb)
    inverses = [s for s in steps if isinstance(s, Inverse)]
    assert [s.block for s in inverses] == list(range(blocks))
    assert len(steps) == 2 * blocks - 1
    # Row r of B has received every column range 0..r0 of its block before its Inverse step.
    for position, inv in enumerate(steps):
        if not isinstance(inv, Inverse):
            continue
        covered = sorted(
            (s.col0, s.col0 + s.cols)
            for s in steps[:position]
            if isinstance(s, Update) and s.row0 <= inv.row0 < s.row0 + s.rows
        )
        edge = 0
        for lo, hi in covered:
            assert lo == edge, (inv, covered)
            edge = hi
        assert edge == inv.row0
    # ... and every Update reads only blocks already solved.
    solved_to = 0
    for s in steps:
        if isinstance(s, Inverse):
            solved_to = s.row0 + s.rows
        else:
            assert s.col0 + s.cols <= solved_to and s.row0 >= s.col0 + s.cols
    assert inverses[-1].row0 + inverses[-1].rows == m


def test_the_updates_are_as_large_as_the_halving_allows():
    m, nb = 16384, 256
    updates = [s for s in block_schedule(m, nb) if isinstance(s, Update)]
    largest = max(updates, key=lambda s: s.rows * s.cols)
    assert (largest.rows, largest.cols) == (m // 2, m // 2)
    # Together they cover A below its diagonal blocks once: m²/2 − L·NB²/2 entries.
    assert sum(s.rows * s.cols for s in updates) == (m * m - (m // nb) * nb * nb) // 2


@pytest.mark.parametrize(("m", "nb"), [(128, 128), (5, 128), (100, 0)])
def test_no_schedule_where_the_kernel_solves_directly(m, nb):
    with pytest.raises(ValueError, match="m > NB"):
        block_schedule(m, nb)
