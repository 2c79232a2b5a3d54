"""The vendor baseline for `trsm_small`: cuBLAS ?trsm, called through ctypes
(``seeds.cublas``, shared with the other paths, explains why ctypes)."""

from __future__ import annotations

from ..cublas import VendorTrsm as CublasTrsm

__all__ = ["CublasTrsm"]
