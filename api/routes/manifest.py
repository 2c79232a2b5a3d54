"""``GET /v1/manifest?gpu=``: every champion for one GPU in one answer, for bulk prefetch, with
an ``ETag`` so that a loader polling it gets ``304 Not Modified`` until a champion changes.

The entity tag is the sha256 (hex) of the canonical JSON (sorted keys, no spaces) of the
manifest's fields with each champion's cubin and source replaced by their sha256, which the
champion row and the program row store (``cubin_sha256``, ``source_sha256``): it changes
whenever a champion of the GPU is promoted, re-signed, or added. So a conditional request is
answered from the champions' metadata alone, without reading a cubin or a source; a 200 reads
the rows again in full and computes the tag from what it serves. Champions are open like the
best-kernel query (``KERNEVO_API_KERNELS_REQUIRE_READ`` makes both need a ``read`` token).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Query, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session, defer, joinedload

from api.deps import KernelsScope, SessionDep
from api.gpu_names import gpu_key_of
from api.key_filters import FilterError, allowed_paths, check_dtype_filter
from api.responses import KERNELS_ERRORS
from api.schemas import ChampionOut, ManifestOut
from db.models import Champion, Program
from seeds.registry import PATHS, UnknownOpError, UnknownPathError
from seeds.spec import UnknownDtypeError

router = APIRouter(tags=["kernels"], dependencies=[KernelsScope], responses=KERNELS_ERRORS)

FORMAT = "kernevo.manifest.v1"
# "no-cache": a client may keep the answer but must revalidate it (If-None-Match) before use.
CACHE_CONTROL = "no-cache"


def _tagged_fields(champion: Champion, program: Program) -> dict[str, Any]:
    """What the entity tag covers of one champion: every served field, with the cubin and the
    source as their stored sha256."""
    return {
        "path": champion.path,
        "dtype": champion.dtype,
        "gpu": champion.gpu_key,
        "shape_bucket": champion.shape_bucket,
        "program_id": program.id,
        "program_uid": program.uid,
        "evaluation_id": champion.evaluation_id,
        "arch": champion.arch,
        "nvrtc_version": champion.nvrtc_version,
        "cubin_sha256": champion.cubin_sha256,
        "source_sha256": program.source_sha256,
        "compile_options": champion.compile_options,
        "launch": champion.launch,
        "envelope": champion.envelope,
        "metrics": champion.metrics,
        "promoted_at": champion.promoted_at.isoformat(),
        "signature": champion.signature,
        "signing_key_id": champion.signing_key_id,
        "certificate": champion.certificate,
    }


def manifest_etag(gpu_key: str, champions: Sequence[tuple[Champion, Program]]) -> str:
    """The sha256 (hex) of the manifest's canonical JSON with cubins and sources as digests."""
    document = {
        "format": FORMAT,
        "gpu": gpu_key,
        "champions": [_tagged_fields(champion, program) for champion, program in champions],
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (RFC 9110 section 13.1.2: a list of
    entity tags compared weakly, so ``W/"x"`` matches ``"x"``; ``*`` matches any)."""
    if if_none_match is None:
        return False
    for candidate in if_none_match.split(","):
        tag = candidate.strip()
        if tag == "*":
            return True
        if tag.startswith("W/"):
            tag = tag[2:]
        if tag == f'"{etag}"':
            return True
    return False


def _champions(
    s: Session,
    gpu_key: str,
    path: str | None,
    dtype: str | None,
    *,
    full: bool,
    op: str | None = None,
) -> list[tuple[Champion, Program]]:
    """The GPU's champions with their programs, by (path, dtype, shape bucket); only ``op``'s
    paths when given; without the cubin and source columns unless ``full``."""
    program = joinedload(Champion.program)
    query = (
        select(Champion)
        .where(Champion.gpu_key == gpu_key)
        .order_by(Champion.path, Champion.dtype, Champion.shape_bucket)
    )
    if full:  # the rows a conditional request loaded without their bytes are loaded again
        query = query.options(program).execution_options(populate_existing=True)
    else:
        query = query.options(defer(Champion.cubin), program.defer(Program.source))
    if path is not None:
        query = query.where(Champion.path == path)
    if op is not None:
        query = query.where(Champion.path.in_([p for p, spec in PATHS.items() if spec.op == op]))
    if dtype is not None:
        query = query.where(Champion.dtype == dtype)
    return [(champion, champion.program) for champion in s.scalars(query).unique()]


@router.get(
    "/v1/manifest",
    response_model=ManifestOut,
    responses={
        200: {"headers": {"ETag": {"description": "etag, quoted", "schema": {"type": "string"}}}},
        304: {"description": "If-None-Match names the current ETag: nothing changed"},
    },
)
def manifest(
    s: SessionDep,
    gpu: Annotated[
        str, Query(max_length=256, description="GPU name or key: 'NVIDIA H200' or 'nvidia-h200'")
    ],
    path: Annotated[str | None, Query(max_length=256, description="only this path's")] = None,
    dtype: Annotated[str | None, Query(max_length=256, description="only this dtype's")] = None,
    op: Annotated[
        str | None,
        Query(max_length=256, description="only the paths of this op: trsm, solve_tri, …"),
    ] = None,
    if_none_match: Annotated[str | None, Header(max_length=8192)] = None,
) -> Response:
    """Every champion for ``gpu`` (only those of ``op``'s paths, of ``path`` or of ``dtype``
    when given), with its cubin, source, signature and certificate, ordered by (path, dtype,
    shape bucket); an empty list when the GPU has none. 304 (no body) when ``If-None-Match``
    names the current ``ETag``.

    Raises:
        HTTPException: 422 for an invalid GPU name, an unknown op, path or dtype, a path of
            another op than ``op``, or a dtype that ``path`` (else no path of ``op``) implements
            (``api.key_filters``).
    """
    gpu_key = gpu_key_of(gpu)
    try:
        allowed_paths(op, path)  # a path of another op than op is refused
        check_dtype_filter(dtype, op, path)
    except (UnknownOpError, UnknownPathError, UnknownDtypeError, FilterError) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
    headers = {"Cache-Control": CACHE_CONTROL}
    if if_none_match is not None:
        etag = manifest_etag(gpu_key, _champions(s, gpu_key, path, dtype, full=False, op=op))
        if matches(if_none_match, etag):
            return Response(
                status_code=status.HTTP_304_NOT_MODIFIED, headers={**headers, "ETag": f'"{etag}"'}
            )
    rows = _champions(s, gpu_key, path, dtype, full=True, op=op)
    etag = manifest_etag(gpu_key, rows)
    body = ManifestOut(
        format=FORMAT,
        gpu=gpu_key,
        etag=etag,
        champions=[ChampionOut(**ChampionOut.fields_of(c, p)) for c, p in rows],
    )
    return JSONResponse(body.model_dump(mode="json"), headers={**headers, "ETag": f'"{etag}"'})
