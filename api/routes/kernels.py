"""``GET /v1/kernels/best``: the verified champion kernel for a problem.

The problem (op, dtype, m, n) is routed to the path and shape bucket that serve it by
``seeds.registry.route``; the GPU name is normalized to its key by
``seeds.hardware.normalize_gpu_name`` ("NVIDIA H200" → "nvidia-h200"). The service only reads
stored cubins: it never compiles or runs code. It serves each champion's signature and signing
key id as stored at promotion, and its certificate (what verification covered, signed with it);
it holds no key and checks nothing — the loader verifies.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from api.deps import SessionDep
from api.schemas import KernelOut
from db.repository import best_champion
from seeds.hardware import normalize_gpu_name
from seeds.registry import UnknownOpError, route
from seeds.spec import UnknownDtypeError

router = APIRouter(prefix="/v1/kernels", tags=["kernels"])

_UNPROCESSABLE = status.HTTP_422_UNPROCESSABLE_CONTENT


@router.get("/best", response_model=KernelOut)
def best_kernel(
    s: SessionDep,
    op: Annotated[str, Query(description="operation, e.g. trsm")],
    dtype: Annotated[str, Query(description="float32 | float64 | complex64 | complex128")],
    gpu: Annotated[str, Query(description="GPU name or key: 'NVIDIA H200' or 'nvidia-h200'")],
    m: Annotated[int, Query(description="rows of A and B")],
    n: Annotated[int, Query(description="columns of B")],
) -> KernelOut:
    """The champion serving ``op`` in ``dtype`` at (m, n) on ``gpu``.

    Raises:
        HTTPException: 422 for an unknown op or dtype, an invalid GPU name, or a shape no path
            serves; 404 when the serving path has no champion for this GPU yet.
    """
    try:
        gpu_key = normalize_gpu_name(gpu)
    except ValueError as exc:
        raise HTTPException(_UNPROCESSABLE, detail=str(exc)) from exc
    try:
        served = route(op, dtype, m, n)
    except (UnknownOpError, UnknownDtypeError) as exc:
        raise HTTPException(_UNPROCESSABLE, detail=str(exc)) from exc
    if served is None:
        raise HTTPException(_UNPROCESSABLE, detail=f"no path serves {op} {dtype} at m={m}, n={n}")
    champion = best_champion(
        s, path=served.path_id, dtype=dtype, gpu_key=gpu_key, shape_bucket=served.shape_bucket
    )
    if champion is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=(
                f"no champion yet for path {served.path_id} {dtype} on {gpu_key} "
                f"(shape bucket {served.shape_bucket})"
            ),
        )
    return KernelOut.from_champion(champion, champion.program)
