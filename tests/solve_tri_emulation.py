"""A NumPy emulation of the `solve_tri` seed kernel (``seeds/solve_tri/kernel.cu``), for the CPU
tests: the same launch configuration, tiling, column ownership, lane-row mapping and byte-stride
address arithmetic, run on the host buffers of a ``seeds.solve_tri.inputs.Problem``.

What it asserts while it runs (each an ``AssertionError`` naming what broke):

- every shared-memory read hits an entry staged in the current phase and inside the dynamic
  allocation the launch configuration asks for (shared memory is reset to NaN before every
  staging, so a read of a stale or unstaged entry would also show in X);
- every element of B and X is touched by one thread only (``by * warps * 32 + warp * 32 +
  lane``), across all tiles: so no thread reads another's global writes, and the column groups of
  one phase may run in any order, which is what lets this emulation run them all at once;
- nothing is read from A's strict upper triangle.

Arithmetic is float32 as the kernel's: each multiply-subtract is computed in float64 and rounded
once to float32 (a float32 product is exact in float64, so this is ``fmaf`` up to a double
rounding), each division (or, with ``recip_diag``, reciprocal and product) in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seeds.solve_tri.inputs import Problem, Tensor

WARP = 32


@dataclass(frozen=True)
class Tunables:
    """The seed's tunables that change what is computed: ``ST_WARPS``, ``ST_COLS_PER_WARP``,
    ``ST_TILE`` and ``ST_RECIP_DIAG`` (``recip_diag``: multiply by a float32 reciprocal of the
    diagonal instead of dividing), and ``ST_FILL_BLOCKS`` (``fill_blocks``: the blocks per matrix
    the launch asks for). ``ST_UNROLL``, ``ST_STAGE_VEC``, ``ST_STAGE_BATCH`` and
    ``ST_PREFETCH_B`` change only how and when the same elements are loaded: the staging reads
    of a 16-byte load in the diagonal tile are the lower triangle's elements, as the 4-byte
    ones."""

    warps: int = 6
    cols_per_warp: int = 1
    tile: int = 64
    recip_diag: bool = False
    fill_blocks: int = 0

    @property
    def lds(self) -> int:
        """The transposed tile's leading dimension (``ST_LDS``)."""
        return self.tile + 1


def launch_config(n: int, k: int, b2: int, b3: int, tun: Tunables) -> list[int]:
    """The seed's ``kernevo_launch_config``: grid xyz, block xyz, dynamic shared bytes."""
    tile_rows = min(n, tun.tile)
    split = 1
    if tun.fill_blocks > 0:
        groups = -(-k // tun.cols_per_warp)
        busy = -(-groups // tun.warps)
        split = max(1, min(busy, -(-tun.fill_blocks // (b2 * b3))))
    return [b2 * b3, split, 1, WARP, tun.warps, 1, tile_rows * tun.lds * 4]


class _Owners:
    """Which thread touched each float of a buffer (-1: none yet)."""

    def __init__(self, size: int, name: str) -> None:
        self.owner = np.full(size, -1, dtype=np.int64)
        self.name = name

    def touch(self, positions: np.ndarray, threads: np.ndarray) -> None:
        current = self.owner[positions]
        clash = (current != -1) & (current != threads)
        assert not clash.any(), f"{self.name} element touched by two threads"
        self.owner[positions] = threads


def _read(
    smem: np.ndarray, staged: np.ndarray, positions: np.ndarray, mask: np.ndarray
) -> np.ndarray:
    """Shared memory ``smem`` (batches, floats) at ``positions`` where ``mask``, 0 elsewhere:
    (batches, *positions.shape); every position read must be inside the allocation and staged
    in the current phase (``staged``)."""
    pos = np.where(mask, positions, 0)
    hit = pos[mask]
    assert (hit < smem.shape[1]).all() and staged[hit].all(), "unstaged shared read"
    return np.where(mask, smem[:, pos], np.float32(0))


def emulate(problem: Problem, tun: Tunables, grid_y: int | None = None) -> np.ndarray:
    """X's buffer after the kernel's run on ``problem`` with tunables ``tun`` and ``grid_y``
    blocks per matrix (default: what the launch configuration asks for, 1 unless
    ``tun.fill_blocks``; the kernel takes any): a float32 copy of ``problem.x.buffer`` (of
    ``problem.b.buffer`` when in place) with X's elements written."""
    n, k, b2, b3 = problem.shape
    cfg = launch_config(n, k, b2, b3, tun)
    grid_y = cfg[1] if grid_y is None else grid_y
    assert cfg[0] == b2 * b3 and cfg[3] == WARP
    smem_floats = cfg[6] // 4
    rows_per_lane = tun.tile // WARP
    lds, warps, cpw, tile = tun.lds, tun.warps, tun.cols_per_warp, tun.tile
    a_buf = problem.a.buffer
    b_buf = problem.b.buffer.copy()
    x_buf = b_buf if problem.in_place else problem.x.buffer.copy()
    owners_b = _Owners(b_buf.size, "B")
    owners_x = owners_b if problem.in_place else _Owners(x_buf.size, "X")

    def origin(tensor: Tensor) -> np.ndarray:
        """Per block (i3 * b2 + i2 = blockIdx.x), the float index of its matrix's (0, 0)."""
        _, nb2, nb3 = (s // 4 for s in tensor.nb)
        block = np.arange(b2 * b3)
        return tensor.offset + (block % b2) * nb2 + (block // b2) * nb3

    a0, b0, x0 = origin(problem.a), origin(problem.b), origin(problem.x)
    lda, ldb, ldx = (t.nb[0] // 4 for t in (problem.a, problem.b, problem.x))

    # All column groups of a block at once: cg = by * warps + warp + round * grid_y * warps.
    groups = np.arange(-(-k // cpw))
    warp_of = groups % warps
    by_of = (groups // warps) % grid_y
    lane = np.arange(WARP)
    s_idx = np.arange(rows_per_lane)
    # thread[g, s, lane] and the same for every column c of the group
    thread = ((by_of * warps + warp_of) * WARP)[:, None, None] + lane[None, None, :]
    thread = np.broadcast_to(thread, (groups.size, rows_per_lane, WARP))
    cols = groups[:, None] * cpw + np.arange(cpw)[None, :]  # (G, C)
    row_in_tile = s_idx[:, None] * WARP + lane[None, :]  # (S, L)
    batches = b2 * b3

    for r0 in range(0, n, tile):
        rows = min(tile, n - r0)
        for j0 in range(0, r0 + 1, tile):
            diag = j0 == r0
            tcols = rows if diag else tile
            # Staging: the whole block, idx = tid, tid + threads, ... (order irrelevant).
            smem = np.full((batches, smem_floats), np.nan, dtype=np.float32)
            idx = np.arange(rows * tcols)
            i, j = idx // tcols, idx % tcols
            dest = j * lds + i
            assert dest.max(initial=-1) < smem_floats, "staging writes past the allocation"
            keep = (j <= i) | (not diag)
            assert (j0 + j[keep] <= r0 + i[keep]).all(), "staging reads A's upper triangle"
            src = a0[:, None] + (r0 + i[keep])[None, :] * lda + (j0 + j[keep])[None, :]
            smem[:, dest[keep]] = a_buf[src]
            smem[:, dest[~keep]] = 0.0
            staged = np.zeros(smem_floats, dtype=bool)
            staged[dest] = True

            # Load: B at the first column tile, X's partial sums otherwise. (G, C, S, L)
            valid = (row_in_tile < rows)[None, None] & (cols < k)[:, :, None, None]
            rel = (r0 + row_in_tile)[None, None] * 1 + 0 * cols[:, :, None, None]
            owner = np.broadcast_to(thread[:, None], valid.shape)
            base, ld, own = (b0, ldb, owners_b) if j0 == 0 else (x0, ldx, owners_x)
            buf = b_buf if j0 == 0 else x_buf
            pos = base[:, None, None, None, None] + (rel * ld + cols[:, :, None, None])[None]
            for bi in range(batches):
                own.touch(pos[bi][valid], owner[valid])
            acc = np.where(valid[None], buf[np.where(valid[None], pos, 0)], np.float32(0))
            acc = acc.astype(np.float32)

            if not diag:
                # X_J rows j0 + lane + 32 s of the group's columns, stored by the same lanes.
                xvalid = np.broadcast_to((cols < k)[:, :, None, None], valid.shape)
                xrows = (j0 + row_in_tile)[None, None] + 0 * cols[:, :, None, None]
                xpos = x0[:, None, None, None, None] + (xrows * ldx + cols[:, :, None, None])[None]
                for bi in range(batches):
                    owners_x.touch(xpos[bi][xvalid], owner[xvalid])
                xj = np.where(xvalid[None], x_buf[np.where(xvalid[None], xpos, 0)], 0)
                xj = xj.astype(np.float32)
                for jj_full in range(tile):
                    t, jj = divmod(jj_full, WARP)
                    av = _read(
                        smem, staged, jj_full * lds + row_in_tile, row_in_tile < rows
                    )  # (B, S, L)
                    v = xj[..., t, jj]  # shuffle from lane jj: (B, G, C)
                    acc = (
                        acc.astype(np.float64)
                        - av[:, None, None].astype(np.float64) * v[..., None, None]
                    ).astype(np.float32)
            else:
                for t in range(rows_per_lane):
                    for jj in range(min(WARP, rows - WARP * t)):
                        jrow = WARP * t + jj
                        d = _read(
                            smem, staged, np.full(1, jrow * lds + jrow), np.ones(1, dtype=bool)
                        )[:, 0]
                        mask = (s_idx[:, None] >= t) & (row_in_tile > jrow) & (row_in_tile < rows)
                        av = _read(smem, staged, jrow * lds + row_in_tile, mask)  # (B, S, L)
                        if tun.recip_diag:  # staged as a float32 1 / a_jj, then multiplied
                            inv = (np.float32(1) / d).astype(np.float32)
                            v = (acc[..., t, jj] * inv[:, None, None]).astype(np.float32)
                        else:
                            v = (acc[..., t, jj] / d[:, None, None]).astype(np.float32)
                        acc[..., t, jj] = v
                        below = (s_idx[:, None] >= t) & (row_in_tile > jrow)
                        update = (
                            acc.astype(np.float64)
                            - av[:, None, None].astype(np.float64) * v[..., None, None]
                        ).astype(np.float32)
                        acc = np.where(below, update, acc)

            # Store to X: the lanes that loaded.
            xpos = x0[:, None, None, None, None] + (rel * ldx + cols[:, :, None, None])[None]
            for bi in range(batches):
                owners_x.touch(xpos[bi][valid], owner[valid])
            targets = xpos[np.broadcast_to(valid[None], xpos.shape)]
            x_buf[targets] = acc[np.broadcast_to(valid[None], acc.shape)]
    return x_buf
