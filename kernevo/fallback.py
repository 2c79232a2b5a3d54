"""trsm's library path (cuBLAS ``?trsm`` through CuPy) and its operand checks, as the loader has
always named them: they live with the op (``seeds.ops.trsm``, the op's call adapter), where
every op keeps its own (``seeds.ops.OpSpec.call``)."""

from __future__ import annotations

from kernevo.paths import ops_spec
from kernevo.paths import package as _package

_trsm = __import__(f"{_package.__name__}.ops.trsm", fromlist=["check_operands"])

check_operands = _trsm.check_operands
cublas_trsm = _trsm.cublas_trsm
device_index = ops_spec.device_index

__all__ = ["check_operands", "cublas_trsm", "device_index"]
