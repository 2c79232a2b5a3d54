"""``GET /v1/champions``: the champion table — every champion per GPU, op, path, dtype and shape
bucket, with its speedups, its verification facts (what its certificate says) and its promotion
history — for the web page and for people; no cubins or sources (``/v1/kernels/best`` and
``/v1/manifest`` serve those to loaders).

Access: as the best-kernel query and the manifest (``api.deps.KernelsScope``): open unless
``KERNEVO_API_KERNELS_REQUIRE_READ`` is true, since it says less than they do (the same
champions and certificates, without bytes); the promotion history adds program and job ids and
scores, no source or report.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response, status
from sqlalchemy import Select, select
from sqlalchemy.orm import Session, defer, joinedload

from api.deps import KernelsScope, SessionDep
from api.gpu_names import gpu_key_of
from api.key_filters import FilterError, allowed_paths, check_bucket, check_dtype_filter
from api.pagination import TOTAL_HEADER, total_header
from api.responses import KERNELS_ERRORS
from api.schemas_champions import ChampionSummary, PromotionOut
from db.models import Champion, ChampionPromotion, Program
from seeds.registry import PATHS, UnknownOpError, UnknownPathError
from seeds.spec import UnknownDtypeError

router = APIRouter(tags=["kernels"], dependencies=[KernelsScope], responses=KERNELS_ERRORS)

Key = tuple[str, str, str, str]  # (gpu_key, path, dtype, shape_bucket)


@dataclass(frozen=True)
class KeyFilter:
    """Which champion keys a request asks for (``None``: any); ``paths`` from the op and path
    filters (``api.key_filters.allowed_paths``)."""

    gpu_key: str | None
    paths: list[str] | None
    dtype: str | None
    shape_bucket: str | None

    def apply(
        self, query: Select[Any], model: type[Champion] | type[ChampionPromotion]
    ) -> Select[Any]:
        """``query`` restricted to the rows of ``model`` whose key matches every filter."""
        if self.gpu_key is not None:
            query = query.where(model.gpu_key == self.gpu_key)
        if self.paths is not None:
            query = query.where(model.path.in_(self.paths))
        if self.dtype is not None:
            query = query.where(model.dtype == self.dtype)
        if self.shape_bucket is not None:
            query = query.where(model.shape_bucket == self.shape_bucket)
        return query


def _history(s: Session, keys: KeyFilter) -> dict[Key, list[PromotionOut]]:
    """Every promotion of the keys the filters match, newest first per key, with its
    program's job id."""
    query = (
        select(ChampionPromotion, Program.job_id)
        .outerjoin(Program, Program.id == ChampionPromotion.program_id)
        .order_by(ChampionPromotion.promoted_at.desc(), ChampionPromotion.id.desc())
    )
    query = keys.apply(query, ChampionPromotion)
    history: dict[Key, list[PromotionOut]] = defaultdict(list)
    for row, job_id in s.execute(query):
        key = (row.gpu_key, row.path, row.dtype, row.shape_bucket)
        history[key].append(PromotionOut.from_row(row, job_id))
    return history


@router.get(
    "/v1/champions", response_model=list[ChampionSummary], responses=total_header("champions")
)
def champions(
    s: SessionDep,
    response: Response,
    gpu: Annotated[
        str | None,
        Query(max_length=256, description="GPU name or key: 'NVIDIA H200' or 'nvidia-h200'"),
    ] = None,
    op: Annotated[str | None, Query(max_length=256, description="only this op's paths")] = None,
    path: Annotated[str | None, Query(max_length=256, description="only this path's")] = None,
    dtype: Annotated[str | None, Query(max_length=256, description="only this dtype's")] = None,
    shape_bucket: Annotated[
        str | None, Query(max_length=64, description="only this shape bucket's, e.g. m64n64")
    ] = None,
) -> list[ChampionSummary]:
    """Every champion matching the filters, ordered by (GPU, path, dtype, shape bucket), each
    with its speedups, its certificate's facts and its promotions (newest first); their number
    is also the ``X-Total-Count`` header. An empty list when none matches.

    Raises:
        HTTPException: 422 for an invalid GPU name (no letter or digit, or a control
            character), an unknown op, path or dtype, a path of another op than ``op``, a
            shape bucket that no path allowed has, or a dtype that ``path`` (else no path of
            ``op``) implements (``api.key_filters``).
    """
    gpu_key = gpu_key_of(gpu) if gpu is not None else None
    try:
        paths = allowed_paths(op, path)
        check_bucket(shape_bucket, paths, op)
        check_dtype_filter(dtype, op, path)
    except (UnknownOpError, UnknownPathError, UnknownDtypeError, FilterError) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
    keys = KeyFilter(gpu_key=gpu_key, paths=paths, dtype=dtype, shape_bucket=shape_bucket)
    query = (
        select(Champion)
        .options(defer(Champion.cubin), joinedload(Champion.program).defer(Program.source))
        .order_by(Champion.gpu_key, Champion.path, Champion.dtype, Champion.shape_bucket)
    )
    rows = list(s.scalars(keys.apply(query, Champion)).unique())
    history = _history(s, keys)
    response.headers[TOTAL_HEADER] = str(len(rows))
    return [
        ChampionSummary.build(
            champion,
            op=PATHS[champion.path].op if champion.path in PATHS else None,
            promotions=history.get(
                (champion.gpu_key, champion.path, champion.dtype, champion.shape_bucket), []
            ),
        )
        for champion in rows
    ]
