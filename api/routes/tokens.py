"""``GET /v1/token``: the token a request carries (scope, name, id), so a client can check a
token before using it. Tokens are created, listed and revoked with ``kernevo token`` on a
machine that can write the database, never over the API."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import ReadPrincipal
from api.responses import READ_ERRORS
from api.schemas import TokenOut

router = APIRouter(prefix="/v1/token", tags=["tokens"], responses=READ_ERRORS)


@router.get("", response_model=TokenOut)
def current_token(principal: ReadPrincipal) -> TokenOut:
    """The request's token: any valid token answers (401 for none, an unknown or a revoked
    one)."""
    return TokenOut(id=principal.token_id, name=principal.name, scope=principal.scope.value)
