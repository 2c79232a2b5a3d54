"""The operations kernevo knows (:data:`OPS`, in registry order: ``trsm`` first), each with its
shape parameters, dtypes and the loader's call (``seeds.ops.spec.OpSpec``).

A path serves one op (``PathSpec.op``); the op says what a shape is for every path of it, the
API's best-kernel query takes the op's parameters by name, and ``kernevo.load(op, dtype)``
returns the op's callable. A new op is one module here (its ``OpSpec`` and its loader call
class) plus one entry in :data:`OPS` (docs/CONTRACTS.md, "Adding an op").
"""

from __future__ import annotations

from .band_bidiag import BAND_BIDIAG
from .solve_tri import SOLVE_TRI
from .spec import (
    BOUND_KEY,
    OpCall,
    OpSpec,
    ShapeError,
    ShapeParam,
    ShapeRelation,
    UnknownOpError,
)
from .trsm import TRSM
from .trsm_batched import TRSM_BATCHED

__all__ = [
    "BAND_BIDIAG", "BOUND_KEY", "OPS", "SOLVE_TRI", "TRSM", "OpCall", "OpSpec", "ShapeError",
    "ShapeParam", "ShapeRelation", "TRSM_BATCHED", "UnknownOpError", "get_op", "not_a_param",
    "ops_with_param", "param_names",
]  # fmt: skip

OPS: dict[str, OpSpec] = {spec.name: spec for spec in (TRSM, SOLVE_TRI, BAND_BIDIAG, TRSM_BATCHED)}


def get_op(name: str) -> OpSpec:
    """The op called ``name``.

    Raises:
        UnknownOpError: one line naming the known ops, in registry order.
    """
    try:
        return OPS[name]
    except (KeyError, TypeError):
        raise UnknownOpError(f"unknown op {name!r}; known ops: {', '.join(OPS)}") from None


def param_names() -> tuple[str, ...]:
    """Every shape parameter name of every op, each once, in registry order (trsm's ``m``,
    ``n``, then solve_tri's ``k``, ``b2``, ``b3``, then ``bandwidth``, then trsm_batched's
    ``batch``): the best-kernel query's shape parameters."""
    names: list[str] = []
    for spec in OPS.values():
        names += [name for name in spec.param_names if name not in names]
    return tuple(names)


def ops_with_param(name: str) -> list[str]:
    """The ops that have a shape parameter called ``name``, in registry order."""
    return [spec.name for spec in OPS.values() if name in spec.param_names]


def not_a_param(spec: OpSpec, name: str) -> str:
    """Why ``name`` is refused as a shape parameter of ``spec``'s op, one line naming the op's
    parameters and the ops that have ``name`` (none for a name no op has): the best-kernel
    query's 422 (``api.shape_query``) and ``kernevo best --shape`` say it in these words."""
    line = f"{name} is not a shape parameter of {spec.name} (its parameters: "
    line += f"{', '.join(spec.param_names)})"
    owners = ops_with_param(name)
    return f"{line}; {name} is a parameter of {', '.join(owners)}" if owners else line
