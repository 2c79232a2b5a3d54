"""Map the repository's and the database's errors to HTTP responses with a precise ``detail``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from api.json_body import install_body_error_handler
from api.validation import encodable, install_validation_handler
from db.errors import (
    ChampionMismatchError,
    DatabaseUnavailableError,
    InvalidTransitionError,
    InvalidValueError,
    NotFoundError,
    PromotionRefusedError,
    RepositoryError,
    database_unavailable,
)

_log = logging.getLogger(__name__)

_STATUS: tuple[tuple[type[RepositoryError], int], ...] = (
    (NotFoundError, status.HTTP_404_NOT_FOUND),
    (InvalidTransitionError, status.HTTP_409_CONFLICT),
    (ChampionMismatchError, status.HTTP_409_CONFLICT),
    (PromotionRefusedError, status.HTTP_409_CONFLICT),
    (InvalidValueError, status.HTTP_422_UNPROCESSABLE_CONTENT),
)


def status_for(exc: RepositoryError) -> int:
    """The HTTP status for a repository error (400 for any not listed in ``_STATUS``)."""
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            return code
    return status.HTTP_400_BAD_REQUEST


async def _repository_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RepositoryError)
    # The message may quote the client's text (an unknown dtype): a lone surrogate in it would
    # make the answer itself fail to encode.
    return JSONResponse(status_code=status_for(exc), content={"detail": encodable(str(exc))})


def _unavailable_response(exc: DatabaseUnavailableError) -> JSONResponse:
    # Retry-After: a lock is held for a transaction's length (seconds), not minutes.
    return JSONResponse(
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        content={"detail": encodable(str(exc))},
        headers={"Retry-After": "1"},
    )


async def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DatabaseUnavailableError)
    return _unavailable_response(exc)


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """A driver error the session scopes did not convert (raised outside them): 503 when it
    means the database cannot answer, else 500 with the error's class name (our bug; logged)."""
    assert isinstance(exc, DBAPIError)
    unavailable = database_unavailable(exc)
    if unavailable is not None:
        return _unavailable_response(unavailable)
    _log.error("database error on %s %s", request.method, request.url.path, exc_info=exc)
    detail = f"database error: {type(exc.orig).__name__}"
    return JSONResponse(
        status_code=status.HTTP_500_INTERNAL_SERVER_ERROR, content={"detail": detail}
    )


def install_error_handlers(app: FastAPI) -> None:
    """Answer every ``db.errors.RepositoryError`` with its status and message as ``detail``, a
    ``db.errors.DatabaseUnavailableError`` (locked, damaged, unreachable) with 503 and its
    one-line message, and any other driver error with a JSON 500; request validation errors
    get a 422 that never echoes the request (``api.validation``), and so does a JSON body
    that is not UTF-8 or nests too deeply (``api.json_body``), and a 405 names every method of
    its path (``api.allowed_methods``)."""
    install_validation_handler(app)
    install_body_error_handler(app)
    app.add_exception_handler(RepositoryError, _repository_error)
    app.add_exception_handler(DatabaseUnavailableError, _database_unavailable)
    app.add_exception_handler(DBAPIError, _database_error)
