"""The op, path, dtype and shape-bucket filters of the listing routes, checked against the
registry (``GET /v1/champions``, ``GET /v1/manifest``; ``GET /v1/jobs``'s path and dtype): filters
that contradict each other (a path of another op, a dtype the path or the op's paths do not
implement), or name a bucket no allowed path has, are refused rather than answered with an empty
list, which would read as "no champion yet".
"""

from __future__ import annotations

from seeds.registry import PATHS, get_op, get_path, not_implementing
from seeds.spec import DTYPES, MissingDtypeError, check_dtype


class FilterError(ValueError):
    """Filters that cannot match any champion key by the registry alone (a 422)."""


def path_of_op(op: str, path: str) -> None:
    """Refuse ``path`` when it implements another op than ``op`` (both known).

    Raises:
        FilterError: ``path trsm_blocked implements trsm, not solve_tri``.
    """
    implemented = get_path(path).op
    if implemented != op:
        raise FilterError(f"path {path} implements {implemented}, not {op}")


def allowed_paths(op: str | None, path: str | None) -> list[str] | None:
    """The paths the op and path filters allow, in registry order (``None``: any).

    Raises:
        UnknownOpError, UnknownPathError: an op or path the registry does not know.
        FilterError: ``path`` implements another op than ``op``.
    """
    if path is not None:
        get_path(path)
    if op is None:
        return None if path is None else [path]
    get_op(op)
    if path is not None:
        path_of_op(op, path)
        return [path]
    return [p for p, spec in PATHS.items() if spec.op == op]


def check_bucket(bucket: str | None, paths: list[str] | None, op: str | None) -> None:
    """Refuse a shape bucket that none of ``paths`` (``None``: any path) has.

    Raises:
        FilterError: with one path, the registry's words (``unknown shape bucket 'nope' of path
            trsm_small; its buckets: m64n64``); else naming each allowed path's buckets.
    """
    if bucket is None:
        return
    candidates = list(PATHS) if paths is None else paths
    if any(bucket in get_path(p).bucket_names for p in candidates):
        return
    if len(candidates) == 1:
        [path] = candidates
        known = ", ".join(get_path(path).bucket_names)
        raise FilterError(f"unknown shape bucket {bucket!r} of path {path}; its buckets: {known}")
    each = "; ".join(f"{p}: {', '.join(get_path(p).bucket_names)}" for p in candidates)
    whose = "any path" if op is None else f"any path of op {op}"
    raise FilterError(f"unknown shape bucket {bucket!r} of {whose}; their buckets: {each}")


def check_dtype_filter(dtype: str | None, op: str | None, path: str | None) -> None:
    """Refuse a ``dtype`` the registry does not know, or one that ``path`` (else every path of
    ``op``) does not implement; ``op`` and ``path`` known and agreeing (:func:`allowed_paths`).
    A path's dtypes are the ones ``POST /v1/jobs`` accepts for it, so no job or champion of a
    refused pair can exist.

    Raises:
        UnknownDtypeError: ``unknown dtype 'float16'; expected one of float32, …``.
        FilterError: with ``path``, ``GET /v1/kernels/best``'s words
            (``seeds.registry.not_implementing``: ``path solve_tri does not implement solve_tri
            in float64 (it implements solve_tri in float32)``); with ``op`` alone, the words of
            ``seeds.spec.MissingDtypeError`` (``op solve_tri has no complex128 kernel; it
            implements float32``), listing the dtypes of the op's paths.
    """
    if dtype is None:
        return
    check_dtype(dtype)
    if path is not None:
        if why := not_implementing(path, get_path(path).op if op is None else op, dtype):
            raise FilterError(why)
        return
    if op is None:
        return
    # The dtypes of the op's paths, not the op's own list: a refused filter is one no stored row
    # can match, and jobs (hence champions) are made per path (POST /v1/jobs checks its dtypes).
    implemented = tuple(
        known
        for known in DTYPES
        if any(spec.op == op and known in spec.dtypes for spec in PATHS.values())
    )
    if dtype not in implemented:
        raise FilterError(str(MissingDtypeError(dtype, implemented, f"op {op}")))
