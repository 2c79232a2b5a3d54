"""The paths kernevo knows, and which path and shape bucket serve a problem."""

from __future__ import annotations

from dataclasses import dataclass

from .spec import DTYPES, PathSpec, check_dtype
from .trsm_small.spec import TRSM_SMALL

PATHS: dict[str, PathSpec] = {spec.path_id: spec for spec in (TRSM_SMALL,)}
OPS: tuple[str, ...] = tuple(sorted({spec.op for spec in PATHS.values()}))


class UnknownPathError(ValueError):
    """A path id that the registry does not hold."""


class UnknownOpError(ValueError):
    """An operation name that no path implements."""


@dataclass(frozen=True)
class Route:
    """The path and shape bucket that serve one problem."""

    path_id: str
    shape_bucket: str


def get_path(path_id: str) -> PathSpec:
    """The spec of ``path_id``.

    Raises:
        UnknownPathError: one line naming the known paths.
    """
    try:
        return PATHS[path_id]
    except KeyError:
        known = ", ".join(sorted(PATHS))
        raise UnknownPathError(f"unknown path {path_id!r}; known paths: {known}") from None


def route(op: str, dtype: str, m: int, n: int) -> Route | None:
    """The path serving ``op`` in ``dtype`` at shape (m, n); ``None`` when no path does.

    Raises:
        UnknownOpError: ``op`` is not an operation of any path.
        UnknownDtypeError: ``dtype`` is not a known dtype.
    """
    if op not in OPS:
        raise UnknownOpError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    check_dtype(dtype, DTYPES)
    for spec in PATHS.values():
        if spec.op == op and dtype in spec.dtypes and spec.serves(m, n):
            return Route(spec.path_id, spec.shape_bucket)
    return None
