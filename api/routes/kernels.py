"""``GET /v1/kernels/best``: the verified champion kernel for a problem.

The problem (op, dtype and the op's shape parameters by name: ``m``, ``n`` for trsm; ``n``, ``k``,
``b2``, ``b3`` for solve_tri; ``n``, ``bandwidth`` for band_bidiag; ``api.shape_query``) is routed
by ``seeds.registry.route`` to every path that serves it, each at the shape bucket holding the
shape; among those paths' champions on the GPU, the one measured fastest at the shape answers
(``seeds.registry.fastest``: the least time recorded at the shape when every champion was timed
there, else the highest combined score), and the answer lists every path compared. A champion whose
own evaluation timed it slower than the vendor library at this very shape (beyond its noise floor)
never answers there; when every serving champion is, the answer is a 404 saying so. Asked for one
path (``path=``, as the loader asks), that path's champion is sent whatever the shape, since the
loader applies the rule itself to every later shape. The GPU name is normalized to its key by
``seeds.hardware.normalize_gpu_name`` ("NVIDIA H200" → "nvidia-h200", ``api.gpu_names``), never
completed ("H200" is the key "h200"): a 404 for want of a champion names the key it looked up and
the GPU keys that do have champions (of the paths asked, else of any), so a name that is not a
device's key shows. The service only reads stored
cubins: it never compiles or runs code. It serves each champion's signature and signing key id as
stored at promotion, and its certificate (what verification covered, signed with it); it holds no
key and checks nothing — the loader verifies. Open to anyone unless
``KERNEVO_API_KERNELS_REQUIRE_READ`` (``api.deps.kernels_access``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from api.deps import KernelsScope, SessionDep
from api.gpu_names import gpu_key_of
from api.responses import KERNELS_ERRORS, NOT_FOUND
from api.schemas import CandidateOut, KernelOut
from api.shape_query import ShapeValues, op_shape, shape_parameters
from db.models import Champion
from db.repository import best_champion
from seeds.ops import get_op
from seeds.registry import (
    Measured,
    Route,
    UnknownOpError,
    UnknownPathError,
    fastest,
    measured,
    not_implementing,
    route,
)
from seeds.spec import UnknownDtypeError, check_dtype

router = APIRouter(
    prefix="/v1/kernels", tags=["kernels"], dependencies=[KernelsScope], responses=KERNELS_ERRORS
)

_UNPROCESSABLE = status.HTTP_422_UNPROCESSABLE_CONTENT


@router.get("/best", response_model=KernelOut, responses=NOT_FOUND)
def best_kernel(
    s: SessionDep,
    op: Annotated[
        str,
        Query(max_length=256, description="operation: trsm, solve_tri, band_bidiag, trsm_batched"),
    ],
    dtype: Annotated[
        str, Query(max_length=256, description="float32 | float64 | complex64 | complex128")
    ],
    gpu: Annotated[
        str, Query(max_length=256, description="GPU name or key: 'NVIDIA H200' or 'nvidia-h200'")
    ],
    shape: Annotated[ShapeValues, Depends(shape_parameters)],
    path: Annotated[
        str | None,
        Query(
            max_length=256,
            description="only this path's champion (the loader compares paths itself)",
        ),
    ] = None,
) -> KernelOut:
    """The champion measured fastest among the paths serving ``op`` in ``dtype`` at the shape
    the op's parameters give on ``gpu`` (only ``path``'s when given), with the paths compared.

    Raises:
        HTTPException: 422 for an unknown op, dtype or path, a path that does not implement
            ``op`` in ``dtype``, an invalid GPU name, or a shape no path (or not ``path``)
            serves; 404 when no serving path has a champion for this GPU.
        RequestValidationError: 422 for a shape parameter of the op missing, one of another
            op, or a value outside its range (``api.shape_query.op_shape``).
    """
    gpu_key = gpu_key_of(gpu)
    try:
        spec = get_op(op)
    except UnknownOpError as exc:
        raise HTTPException(_UNPROCESSABLE, detail=str(exc)) from exc
    values = op_shape(spec, shape)
    try:
        # A known dtype the op has no kernel in is said so (seeds.spec.MissingDtypeError), as
        # the CLI and POST /v1/jobs say it, not "no path serves … at <shape>".
        check_dtype(dtype, spec.dtypes, owner=f"op {op}")
        routes = route(op, dtype, *values)
        if path is not None:
            _implements(path, op, dtype)
    except (UnknownOpError, UnknownDtypeError, UnknownPathError) as exc:
        raise HTTPException(_UNPROCESSABLE, detail=str(exc)) from exc
    if path is not None:
        routes = [served for served in routes if served.path_id == path]
    if not routes:
        where = spec.assignments(values, ", ")
        which = "no path serves" if path is None else f"path {path} does not serve"
        raise HTTPException(_UNPROCESSABLE, detail=f"{which} {op} {dtype} at {where}")
    champions = {
        served: best_champion(
            s, path=served.path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=served.shape_bucket
        )
        for served in routes
    }
    compared = [
        measured(served, champion.metrics, *values)
        for served, champion in champions.items()
        if champion is not None
    ]
    chosen = fastest(compared)
    if chosen is None and compared and path is not None:
        # The loader asks for one path's champion per shape bucket, at the first shape it
        # meets, and judges each later shape by the champion's signed certificate itself (the
        # same rule): the bucket's champion is sent even where it lost to the library.
        chosen = compared[0], "only_champion"
    if chosen is None and compared:
        # Every champion here was timed slower than the vendor library at this very shape by
        # its own evaluation: the library is the answer, as with no champion.
        detail = _all_slower(spec.fallback_library, spec.assignments(values, ", "), compared)
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=detail)
    if chosen is None:
        detail = _no_champion(routes, dtype, gpu_key) + _elsewhere(s, routes, dtype, gpu_key)
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=detail)
    winner, rule = chosen
    champion = champions[winner.route]
    assert champion is not None  # fastest() chose among the routes that have one
    return KernelOut.from_champion(
        champion,
        champion.program,
        candidates=_candidates(champions, compared, winner),
        compared_by=rule,
    )


def _implements(path: str, op: str, dtype: str) -> None:
    """Refuse ``path`` when it does not implement ``op`` in ``dtype`` at all, in the CLI's words
    (``seeds.registry.not_implementing``), so that the 422 does not read as a shape it misses.

    Raises:
        UnknownPathError: ``path`` is not a path of the registry.
        HTTPException: 422 ``path solve_tri does not implement trsm in float64 (it implements
            solve_tri in float32)``.
    """
    if why := not_implementing(path, op, dtype):
        raise HTTPException(_UNPROCESSABLE, detail=why)


def _candidates(
    champions: dict[Route, Champion | None], compared: list[Measured], winner: Measured
) -> list[CandidateOut]:
    """Every serving path, in registry order, as the comparison saw it."""
    by_route = {candidate.route: candidate for candidate in compared}
    out = []
    for served, champion in champions.items():
        candidate = by_route.get(served)
        if champion is None or candidate is None:
            out.append(
                CandidateOut(
                    path=served.path_id,
                    shape_bucket=served.shape_bucket,
                    status="no_champion",
                    program_id=None,
                    combined_score=None,
                    time_us=None,
                )
            )
            continue
        out.append(
            CandidateOut(
                path=served.path_id,
                shape_bucket=served.shape_bucket,
                status=(
                    "chosen"
                    if candidate is winner
                    else "slower_than_vendor"
                    if candidate.slower_than_vendor
                    else "compared"
                ),
                program_id=champion.program_id,
                combined_score=candidate.combined_score,
                time_us=candidate.time_us,
            )
        )
    return out


def _all_slower(library: str, where: str, compared: list[Measured]) -> str:
    """The 404 detail when every serving champion was measured slower than ``library`` at the
    shape (``where``: its parameters in words)."""
    each = "; ".join(
        f"{c.route.path_id}/{c.route.shape_bucket}: {c.against_vendor()}" for c in compared
    )
    return f"every champion serving {where} was measured slower than {library} there: {each}"


def _elsewhere(s: Session, routes: list[Route], dtype: str, gpu_key: str) -> str:
    """What follows the 404's words when another GPU key has champions: those of the serving
    paths' keys (``; champions exist for nvidia-h200``), else, when ``gpu_key`` has no champion
    at all, every key that has one (``; no champion of any path is for h200; champions exist
    for nvidia-a100``): ``gpu=H200`` asks for the key ``h200``, which no CUDA device's name
    gives. Empty when neither holds."""
    keys = [(served.path_id, served.shape_bucket) for served in routes]
    here = or_(*(and_(Champion.path == p, Champion.shape_bucket == b) for p, b in keys))
    same = select(Champion.gpu_key).where(here, Champion.dtype == dtype).distinct()
    others = sorted(s.scalars(same))  # gpu_key has none of these: _no_champion's premise
    if others:
        return f"; champions exist for {', '.join(others)}"
    every = sorted(s.scalars(select(Champion.gpu_key).distinct()))
    if not every or gpu_key in every:
        return ""
    return f"; no champion of any path is for {gpu_key}; champions exist for {', '.join(every)}"


def _no_champion(routes: list[Route], dtype: str, gpu_key: str) -> str:
    """The 404 detail: the keys that have no champion."""
    if len(routes) == 1:
        [served] = routes
        return (
            f"no champion yet for path {served.path_id} {dtype} on {gpu_key} "
            f"(shape bucket {served.shape_bucket})"
        )
    paths = ", ".join(served.path_id for served in routes)
    buckets = ", ".join(served.shape_bucket for served in routes)
    return f"no champion yet for paths {paths} {dtype} on {gpu_key} (shape buckets {buckets})"
