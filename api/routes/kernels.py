"""``GET /v1/kernels/best``: the verified champion kernel for a problem.

The problem (op, dtype, m, n) is routed by ``seeds.registry.route`` to every path that serves
it, each at the shape bucket holding (m, n); among those paths' champions on the GPU, the one
measured fastest at the shape answers (``seeds.registry.fastest``: the least time recorded at
(m, n) when every champion was timed there, else the highest combined score), and the answer
lists every path compared. The GPU name is normalized to its key by
``seeds.hardware.normalize_gpu_name`` ("NVIDIA H200" → "nvidia-h200"). The service only reads
stored cubins: it never compiles or runs code. It serves each champion's signature and signing
key id as stored at promotion, and its certificate (what verification covered, signed with it);
it holds no key and checks nothing — the loader verifies. Open to anyone unless
``KERNEVO_API_KERNELS_REQUIRE_READ`` (``api.deps.kernels_access``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from api.deps import KernelsScope, SessionDep
from api.responses import KERNELS_ERRORS, NOT_FOUND
from api.schemas import CandidateOut, KernelOut
from db.models import Champion
from db.repository import best_champion
from seeds.hardware import normalize_gpu_name
from seeds.registry import (
    Measured,
    Route,
    UnknownOpError,
    UnknownPathError,
    fastest,
    get_path,
    measured,
    route,
)
from seeds.spec import UnknownDtypeError

router = APIRouter(
    prefix="/v1/kernels", tags=["kernels"], dependencies=[KernelsScope], responses=KERNELS_ERRORS
)

_UNPROCESSABLE = status.HTTP_422_UNPROCESSABLE_CONTENT


@router.get("/best", response_model=KernelOut, responses=NOT_FOUND)
def best_kernel(
    s: SessionDep,
    op: Annotated[str, Query(description="operation, e.g. trsm")],
    dtype: Annotated[str, Query(description="float32 | float64 | complex64 | complex128")],
    gpu: Annotated[str, Query(description="GPU name or key: 'NVIDIA H200' or 'nvidia-h200'")],
    m: Annotated[int, Query(description="rows of A and B")],
    n: Annotated[int, Query(description="columns of B")],
    path: Annotated[
        str | None,
        Query(
            max_length=256,
            description="only this path's champion (the loader compares paths itself)",
        ),
    ] = None,
) -> KernelOut:
    """The champion measured fastest among the paths serving ``op`` in ``dtype`` at (m, n) on
    ``gpu`` (only ``path``'s when given), with the paths compared.

    Raises:
        HTTPException: 422 for an unknown op, dtype or path, an invalid GPU name, or a shape no
            path (or not ``path``) serves; 404 when no serving path has a champion for this GPU.
    """
    try:
        gpu_key = normalize_gpu_name(gpu)
    except ValueError as exc:
        raise HTTPException(_UNPROCESSABLE, detail=str(exc)) from exc
    try:
        routes = route(op, dtype, m, n)
        if path is not None:
            get_path(path)
    except (UnknownOpError, UnknownDtypeError, UnknownPathError) as exc:
        raise HTTPException(_UNPROCESSABLE, detail=str(exc)) from exc
    if path is not None:
        routes = [served for served in routes if served.path_id == path]
    if not routes:
        which = "no path" if path is None else f"path {path}"
        raise HTTPException(_UNPROCESSABLE, detail=f"{which} serves {op} {dtype} at m={m}, n={n}")
    champions = {
        served: best_champion(
            s, path=served.path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=served.shape_bucket
        )
        for served in routes
    }
    compared = [
        measured(served, champion.metrics, m, n)
        for served, champion in champions.items()
        if champion is not None
    ]
    chosen = fastest(compared)
    if chosen is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=_no_champion(routes, dtype, gpu_key))
    winner, rule = chosen
    champion = champions[winner.route]
    assert champion is not None  # fastest() chose among the routes that have one
    return KernelOut.from_champion(
        champion,
        champion.program,
        candidates=_candidates(champions, compared, winner),
        compared_by=rule,
    )


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
                status="chosen" if candidate is winner else "compared",
                program_id=champion.program_id,
                combined_score=candidate.combined_score,
                time_us=candidate.time_us,
            )
        )
    return out


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
