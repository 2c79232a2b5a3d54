"""Request dependencies shared by the routers: a database session and bearer-token auth."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.settings import ApiSettings
from db.session import session_scope

_bearer = HTTPBearer(auto_error=False, description="KERNEVO_API_TOKEN of the server")


def get_session(request: Request) -> Iterator[Session]:
    """A session on the app's engine: committed when the route returns, rolled back if it
    raises. Routes build their response models inside, so nothing lazy-loads after it closes."""
    with session_scope(request.app.state.engine) as session:
        yield session


# scope="function": commit before the response is sent, so a 200 means the write is durable.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

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
