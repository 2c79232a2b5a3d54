"""Host stand-ins for the CPU tests of the solve_tri and band_bidiag suites: a NumPy module in
CuPy's place (arrays whose ``data.ptr`` is their host address) and drivers that solve on those
addresses as the real drivers do on the device's, right or with a planted fault.

The suites take raw pointers and byte strides, exactly as on a GPU; here the pointers address
host memory, so the suites' own code (inputs copied whole with their guard bands, pointers at
``buffer + offset``, buffers read back and judged) runs unchanged without a device.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from seeds.band_bidiag.lapack import gbbrd
from seeds.solve_tri.reference import forward_substitution


class HostArray(np.ndarray):
    """A NumPy array standing in for a CuPy one: ``data.ptr`` is its address, ``data.mem.size``
    its size, ``get()`` a NumPy copy, ``set(host)`` a copy in."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return types.SimpleNamespace(
            ptr=self.ctypes.data, mem=types.SimpleNamespace(size=self.nbytes)
        )

    def get(self) -> np.ndarray:
        return np.array(self)

    def set(self, host: np.ndarray) -> None:
        self[...] = host


def host_cupy() -> types.ModuleType:
    """A module with what the suites call of CuPy (``asarray``, ``empty``, ``cuda.Device``)."""
    module = types.ModuleType("cupy")
    module.asarray = lambda a, dtype=None: np.array(a, dtype=dtype).view(HostArray)  # type: ignore[attr-defined]
    module.empty = lambda shape, dtype=float, order="C": np.empty(shape, dtype, order=order).view(  # type: ignore[attr-defined]
        HostArray
    )
    device = types.SimpleNamespace(synchronize=lambda: None)
    module.cuda = types.SimpleNamespace(Device=lambda *args: device)  # type: ignore[attr-defined]
    return module


def at_address(ptr: int, shape: Sequence[int], strides: Sequence[int], dtype: Any) -> np.ndarray:
    """A writable view of host memory at ``ptr`` with ``shape`` and byte ``strides`` (each a
    multiple of the item size)."""
    itemsize = np.dtype(dtype).itemsize
    count = 1 + sum(
        (extent - 1) * stride // itemsize for extent, stride in zip(shape, strides, strict=True)
    )
    flat = np.frombuffer((ctypes.c_char * (count * itemsize)).from_address(ptr), dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, shape=tuple(shape), strides=tuple(strides))


def ggml_tensor(ptr: int, ne: tuple[int, int, int, int], nb: Sequence[int]) -> np.ndarray:
    """The ggml tensor [cols, rows, b2, b3] at ``ptr`` as a (b3, b2, rows, cols) float32 view."""
    cols, rows, b2, b3 = ne
    return at_address(ptr, (b3, b2, rows, cols), (nb[2], nb[1], nb[0], 4), np.float32)


class HostSolveTri:
    """A solve_tri driver (and baseline) on host addresses: X = A⁻¹·B per batch in float64,
    rounded to float32. ``fault``: ``first_batch_a`` (every batch solved with batch (0, 0)'s A),
    ``columns_past_32`` (columns 32 and up left as they were), ``pad_write`` (a float written
    just past each batch's last row of X), ``packed_strides`` (X written as if packed)."""

    def __init__(self, fault: str | None = None) -> None:
        self.fault = fault
        self.calls: list[tuple[int, ...]] = []
        self.closed = False

    def solve_raw(
        self, a_ptr: int, b_ptr: int, x_ptr: int, n: int, k: int, b2: int, b3: int,
        nb_a: Sequence[int], nb_b: Sequence[int], nb_x: Sequence[int], stream: Any = None,
    ) -> None:  # fmt: skip
        self.calls.append((n, k, b2, b3))
        a = ggml_tensor(a_ptr, (n, n, b2, b3), nb_a)
        b = ggml_tensor(b_ptr, (k, n, b2, b3), nb_b)
        if self.fault == "first_batch_a":
            a = np.broadcast_to(a[:1, :1], a.shape)
        x_values = forward_substitution(a, b).astype(np.float32)
        if self.fault == "packed_strides":
            nb_x = (4 * k, 4 * k * n, 4 * k * n * b2)
        x = ggml_tensor(x_ptr, (k, n, b2, b3), nb_x)
        if self.fault == "columns_past_32":
            x[..., :32] = x_values[..., :32]
        else:
            x[...] = x_values
        if self.fault == "pad_write" and nb_x[0] > 4 * k:
            ggml_tensor(x_ptr + 4 * k, (1, n, b2, b3), nb_x)[...] = 0.0

    def set_stream(self, stream: Any) -> None:
        """The baseline's protocol: nothing to bind on the host."""

    def close(self) -> None:
        self.closed = True


class HostBandBidiag:
    """A band_bidiag driver on host addresses: the padded band at the pointer reduced by LAPACK
    ?gbbrd in the driver's dtype, d and e written where the kernel leaves them. ``fault``:
    ``unreduced`` (d, e left as the band's diagonal and superdiagonal), ``guard_write`` (a write
    one element past the storage), ``writes_band`` (``solve`` changes the caller's band),
    ``graph_bits`` (``solve``'s d one ulp off the launch-by-launch result), ``alternating``
    (every other ``solve`` one ulp off)."""

    tw = 32

    def __init__(self, dtype: str, fault: str | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.fault = fault
        self.solves = 0
        self.reduced: list[tuple[int, int, int, int]] = []

    def reduce_raw(
        self, ab_ptr: int, n: int, bw: int, ldab: int, ku: int, stream: Any = None
    ) -> None:
        self.reduced.append((n, bw, ldab, ku))
        item = self.dtype.itemsize
        self._reduce(at_address(ab_ptr, (ldab, n), (item, ldab * item), self.dtype), bw, ku)
        if self.fault == "guard_write":
            at_address(ab_ptr + ldab * n * item, (1,), (item,), self.dtype)[0] = 1.0

    def _reduce(self, ab: np.ndarray, bw: int, ku: int) -> None:
        """d and e of the band held by the padded storage ``ab`` written into it (by ?gbbrd)."""
        n = ab.shape[1]
        eff = min(bw, n - 1)
        band = np.zeros((eff + 1, n), dtype=self.dtype, order="F")
        for off in range(eff + 1):
            band[eff - off, :] = ab[ku - off, :]
        if self.fault != "unreduced":
            d, e = gbbrd(band)
            ab[ku, :] = d
            ab[ku - 1, 1:] = e

    def solve(self, band: Any) -> tuple[Any, Any]:
        self.solves += 1
        host = np.asfortranarray(np.array(band))
        n, bw = host.shape[1], host.shape[0] - 1
        eff = min(bw, n - 1)
        ku = 2 * max(eff, 1) - 1
        padded = np.zeros((ku + 1 + max(eff, 1), n), dtype=self.dtype, order="F")
        padded[ku - eff : ku + 1, :] = host[bw - eff : bw + 1, :]
        self._reduce(padded, bw, ku)
        d, e = padded[ku, :].copy(), padded[ku - 1, 1:].copy()
        if self.fault == "writes_band":
            band[0, -1] += 1
        if self.fault == "graph_bits" or (self.fault == "alternating" and self.solves % 2 == 0):
            d[0] = np.nextafter(d[0], np.inf, dtype=self.dtype)
        return d.view(HostArray), e.view(HostArray)
