"""Request dependencies shared by the routers: database sessions and bearer tokens with scopes.

Two kinds of session, so a GET can never take the write lock: ``SessionDep`` is read-only (a
deferred snapshot on the app's read engine; on SQLite it reads beside a running job's writer and
never waits for it), ``WriteSessionDep`` is the writer's (``BEGIN IMMEDIATE`` on SQLite). A
route that writes through ``SessionDep`` fails loudly (503, ``read_only``) instead of locking.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session

from api.query_params import DecimalOnly
from api.settings import ApiSettings
from db.session import read_scope, session_scope
from db.tokens import Scope, find_token

_bearer = HTTPBearer(
    auto_error=False,
    description="a token from `kernevo token create --scope read|write`, or the server's "
    "KERNEVO_API_TOKEN (write)",
)


def get_read_session(request: Request) -> Iterator[Session]:
    """A read-only session on the app's read engine (``db.session.read_scope``), closed when
    the route returns. Routes build their response models inside, so nothing lazy-loads after
    it closes."""
    with read_scope(request.app.state.read_engine) as session:
        yield session


def get_write_session(request: Request) -> Iterator[Session]:
    """A session on the app's writer engine: committed when the route returns, rolled back if
    it raises."""
    with session_scope(request.app.state.engine) as session:
        yield session


# scope="function": close the snapshot (or commit, so a 200 means the write is durable) before
# the response is sent.
SessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
WriteSessionDep = Annotated[Session, Depends(get_write_session, scope="function")]

# Row ids are 32-bit signed integers (PostgreSQL ``integer``): a larger id cannot exist, and
# binding one would fail in the driver, so it is a 422 with the bound, not a 500.
MAX_ID = 2**31 - 1
ProgramId = Annotated[int, DecimalOnly, Path(ge=1, le=MAX_ID, description="program id")]
JobId = Annotated[int, DecimalOnly, Path(ge=1, le=MAX_ID, description="job id")]


# Names a request authenticated with the configured KERNEVO_API_TOKEN.
CONFIGURED_TOKEN_NAME = "KERNEVO_API_TOKEN"


@dataclass(frozen=True)
class Principal:
    """Who a request authenticated as: its token's ``scope``, ``token_id`` (``None`` for the
    configured ``KERNEVO_API_TOKEN``) and ``name``."""

    scope: Scope
    token_id: int | None
    name: str


def _unauthorized(detail: str, *, invalid: bool) -> HTTPException:
    """401 with RFC 6750's challenge: ``error="invalid_token"`` when a token was presented."""
    challenge = 'Bearer error="invalid_token"' if invalid else "Bearer"
    return HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED,
        detail=detail,
        headers={"WWW-Authenticate": challenge},
    )


def _configured(settings: ApiSettings, presented: str) -> bool:
    """Whether ``presented`` is the configured ``KERNEVO_API_TOKEN`` (constant-time compare)."""
    expected = settings.token()
    if expected is None:
        return False
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The principal of the request's ``Authorization: Bearer <token>``: the configured
    ``KERNEVO_API_TOKEN`` (scope ``write``), else a token of the database (``db.tokens``,
    looked up by its SHA-256 on the read engine).

    Raises:
        HTTPException: 401 when the request carries no bearer token (another scheme counts as
            none), or a token that is unknown or revoked (RFC 6750 ``invalid_token``).
        db.errors.DatabaseUnavailableError: the database cannot answer the lookup (503).
    """
    if credentials is None:
        raise _unauthorized(
            "missing bearer token: send 'Authorization: Bearer <token>'", invalid=False
        )
    presented = credentials.credentials
    settings: ApiSettings = request.app.state.settings
    if _configured(settings, presented):
        return Principal(scope=Scope.WRITE, token_id=None, name=CONFIGURED_TOKEN_NAME)
    with read_scope(request.app.state.read_engine) as s:
        row = find_token(s, presented)
        if row is None:
            raise _unauthorized("invalid bearer token", invalid=True)
        if row.revoked_at is not None:
            raise _unauthorized(f"token {row.id} ({row.name}) was revoked", invalid=True)
        return Principal(scope=Scope(row.scope), token_id=row.id, name=row.name)


def _require(principal: Principal, needed: Scope) -> Principal:
    if not principal.scope.allows(needed):
        raise HTTPException(
            status_code=status.HTTP_403_FORBIDDEN,
            detail=f"token {principal.name!r} has scope {principal.scope.value}; "
            f"this needs {needed.value}",
            headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{needed}"'},
        )
    return principal


def require_read(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    """A request with a ``read`` or ``write`` token (401 otherwise, see ``authenticate``)."""
    return principal


def require_write(principal: Annotated[Principal, Depends(authenticate)]) -> Principal:
    """A request with a ``write`` token.

    Raises:
        HTTPException: 401 as ``authenticate``; 403 for a ``read`` token (RFC 6750
            ``insufficient_scope``).
    """
    return _require(principal, Scope.WRITE)


def _bearer_credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    """The request's bearer credentials read as ``HTTPBearer(auto_error=False)`` reads them
    (another scheme, or none, is ``None``), without declaring the scheme in the OpenAPI
    document."""
    scheme, credentials = get_authorization_scheme_param(request.headers.get("Authorization"))
    if scheme.lower() != "bearer" or not credentials:
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=credentials)


def kernels_access(request: Request) -> Principal | None:
    """The champion routes' access (best kernel, manifest): open by default, the request's
    credentials not even read (``None``); with ``KERNEVO_API_KERNELS_REQUIRE_READ=true`` a
    ``read`` token, as ``require_read``. The OpenAPI document shows these routes open (no
    security requirement), as they are by default.

    Raises:
        HTTPException: 401 when a token is required and missing, unknown or revoked.
    """
    settings: ApiSettings = request.app.state.settings
    if not settings.api_kernels_require_read:
        return None
    return authenticate(request, _bearer_credentials(request))


# Route dependencies, one per access level; every route takes exactly one (tests/test_api_scopes
# checks each route of the app against its expected level).
ReadScope = Depends(require_read)
WriteScope = Depends(require_write)
KernelsScope = Depends(kernels_access)
# The name routes used before scopes (a write); kept so that code written against it still works.
TokenDep = WriteScope
ReadPrincipal = Annotated[Principal, ReadScope]
