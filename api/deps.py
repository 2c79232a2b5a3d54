"""Request dependencies shared by the routers: database sessions and bearer-token auth.

Two kinds of session, so a GET can never take the write lock: ``SessionDep`` is read-only (a
deferred snapshot on the app's read engine; on SQLite it reads beside a running job's writer and
never waits for it), ``WriteSessionDep`` is the writer's (``BEGIN IMMEDIATE`` on SQLite). A
route that writes through ``SessionDep`` fails loudly (503, ``read_only``) instead of locking.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.settings import ApiSettings
from db.session import read_scope, session_scope

_bearer = HTTPBearer(auto_error=False, description="KERNEVO_API_TOKEN of the server")


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
ProgramId = Annotated[int, Path(ge=1, le=MAX_ID, description="program id")]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="job id")]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status_code=status.HTTP_401_UNAUTHORIZED,
        detail=detail,
        headers={"WWW-Authenticate": "Bearer"},
    )


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Let a write through only with ``Authorization: Bearer <KERNEVO_API_TOKEN>``.

    Raises:
        HTTPException: 401 when the server has no token configured (writes disabled), when the
            request carries no bearer token, or when the token is wrong (RFC 6750
            ``invalid_token``); compared in constant time.
    """
    settings: ApiSettings = request.app.state.settings
    expected = settings.token()
    if expected is None:
        raise _unauthorized("writes are disabled: the server has no KERNEVO_API_TOKEN set")
    if credentials is None:
        raise _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    if not hmac.compare_digest(credentials.credentials.encode(), expected.encode()):
        raise _unauthorized("invalid bearer token")


TokenDep = Depends(require_token)
