"""The error answers routes document in the OpenAPI document, so a client (and the
property-based test, ``tests/test_api_openapi.py``) knows every status a route may give.

Every error body is ``{"detail": ...}``: a one-line text, or for a request that does not
validate the list of ``api.validation`` (``loc``, ``msg``, ``type``, ``input``). A repository
check of a valid request (an unknown dtype, ``min_score`` above ``max_score``) is a 422 with a
text ``detail``, hence the union.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorOut(BaseModel):
    """An error with a one-line ``detail``."""

    detail: str


class ValidationIssue(BaseModel):
    """One reason a request did not validate (``api.validation.brief``)."""

    loc: list[str | int]
    msg: str
    type: str
    input: str | None = None


class UnprocessableOut(BaseModel):
    """422: the request does not validate (a list of issues), or names something that cannot
    be served (a text)."""

    detail: str | list[ValidationIssue]


def _error(description: str, model: type[BaseModel] = ErrorOut) -> dict[str, Any]:
    return {"model": model, "description": description}


UNAUTHORIZED = {401: _error("no bearer token, or an unknown or revoked one")}
FORBIDDEN = {403: _error("the token's scope is read; this needs write")}
NOT_FOUND = {404: _error("no such row")}
CONFLICT = {409: _error("the change is not allowed in the row's state")}
UNPROCESSABLE = {422: _error("the request does not validate", UnprocessableOut)}
UNAVAILABLE = {503: _error("the database is locked, damaged, unreachable or read-only")}
# Routes that read a body: one over api.json_body.MAX_BODY_BYTES (any route answers the same).
TOO_LARGE = {413: _error("the request body is larger than 1 MiB")}
UNSUPPORTED_MEDIA = {415: _error("the request body was not sent as application/json")}
# Every error a route that reads a body may give for the body alone.
BODY_ERRORS: dict[int | str, dict[str, Any]] = {**TOO_LARGE, **UNSUPPORTED_MEDIA}

# What any route reading the database may answer besides its own statuses.
OPEN_ERRORS: dict[int | str, dict[str, Any]] = {**UNPROCESSABLE, **UNAVAILABLE}
READ_ERRORS: dict[int | str, dict[str, Any]] = {**UNAUTHORIZED, **OPEN_ERRORS}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {**UNAUTHORIZED, **FORBIDDEN, **OPEN_ERRORS}
# The champion routes: open, or read-scoped with KERNEVO_API_KERNELS_REQUIRE_READ.
KERNELS_ERRORS = READ_ERRORS
