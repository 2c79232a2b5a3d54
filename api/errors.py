"""Map the repository's errors to HTTP responses with a precise ``detail``."""

from __future__ import annotations

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from api.validation import install_validation_handler
from db.errors import (
    ChampionMismatchError,
    InvalidTransitionError,
    InvalidValueError,
    NotFoundError,
    RepositoryError,
)

_STATUS: tuple[tuple[type[RepositoryError], int], ...] = (
    (NotFoundError, status.HTTP_404_NOT_FOUND),
    (InvalidTransitionError, status.HTTP_409_CONFLICT),
    (ChampionMismatchError, status.HTTP_409_CONFLICT),
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
    return JSONResponse(status_code=status_for(exc), content={"detail": str(exc)})


def install_error_handlers(app: FastAPI) -> None:
    """Answer every ``db.errors.RepositoryError`` with its status and message as ``detail``;
    request validation errors get a 422 that never echoes the request (``api.validation``)."""
    install_validation_handler(app)
    app.add_exception_handler(RepositoryError, _repository_error)
