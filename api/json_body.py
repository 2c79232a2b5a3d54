"""One value per key in a JSON body: ``{"path": "trsm_small", …, "path": "trsm_blocked"}`` is a
422, not the last one.

Python's ``json`` (what FastAPI reads a body with) keeps the last of a repeated key silently, so a
client that built ``path`` twice got a job of the second while it may have logged the first. A
repeated query parameter (``api.query_params``) and a job file's repeated key
(``evolver.job_config``) are refused; so is a JSON body's, at any depth, for every route that
reads one (``POST /v1/jobs``, ``PATCH /v1/jobs/{id}``), in this one dependency installed on the
application (``api.app``). It runs before the route's body is validated, so nothing is written.
So does the refusal of a body sent as anything but JSON (415, ``refuse_non_json_body``); a body
that cannot be read as JSON is a 422 ``json_invalid`` and one over 1 MiB a 413 (``BodyLimit``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.allowed_methods import http_error_response
from api.validation import validation_response
from kernevo.text import printable

# The largest request body the service reads (413 past it, BodyLimit). A job's body is a few
# KB; 1 MiB leaves room for a long config while bounding what one request makes the service
# hold and parse.
MAX_BODY_BYTES = 1024 * 1024
TOO_LARGE = (
    f"request body is larger than {MAX_BODY_BYTES} bytes (1 MiB), the most this service reads"
)


class _Object(dict[str, Any]):
    """A JSON object as ``json`` builds it (the last value of a repeated key kept), with the
    keys given more than once and how many times."""

    repeated: dict[str, int]


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    """``json``'s ``object_pairs_hook``: the object, its repeated keys recorded."""
    obj = _Object(pairs)
    counts = Counter(key for key, _ in pairs)
    obj.repeated = {key: count for key, count in counts.items() if count > 1}
    return obj


def repeated_keys(document: Any) -> list[tuple[tuple[str | int, ...], int]]:
    """Each key given more than once in one object of ``document`` (parsed with
    :func:`parse_keeping_repeats`), as its location (the keys and list indices leading to it,
    then the key) and its count, in document order (outer objects first).

    An explicit stack, not recursion: a body nested as deeply as ``json`` can read must not
    overflow here.
    """
    found: list[tuple[tuple[str | int, ...], int]] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), document)]
    while stack:
        where, value = stack.pop()
        children: list[tuple[tuple[str | int, ...], Any]] = []
        if isinstance(value, _Object):
            found.extend(((*where, key), count) for key, count in value.repeated.items())
            children = [((*where, key), item) for key, item in value.items()]
        elif isinstance(value, list):
            children = [((*where, index), item) for index, item in enumerate(value)]
        stack.extend(reversed(children))
    return found


def parse_keeping_repeats(body: bytes) -> Any:
    """``body`` parsed as ``json.loads`` parses it, each object recording its repeated keys.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``) or not decodable text.
        RecursionError: nested past Python's recursion limit.
    """
    return json.loads(body, object_pairs_hook=_pairs)


def _media_type(request: Request) -> str:
    """The request's ``Content-Type`` without its parameters, lower case; ``""`` when absent."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _read_as_json(request: Request) -> bool:
    """Whether FastAPI reads this request's body as JSON: ``Content-Type`` ``application/json``
    or ``application/…+json`` (FastAPI's strict content type: any other body is refused as not
    being the model, never parsed)."""
    maintype, _, subtype = _media_type(request).partition("/")
    return maintype == "application" and (subtype == "json" or subtype.endswith("+json"))


async def refuse_non_json_body(request: Request) -> None:
    """Refuse a body sent as anything but JSON to a route that reads one, 415 with the fix.

    FastAPI reads a body as JSON only under a JSON ``Content-Type`` (strict content type) and
    otherwise validates the raw bytes against the model, answering a 422 "Input should be a
    valid dictionary" that hides the cause. The common case is ``curl -d '{…}'``, which sends
    ``application/x-www-form-urlencoded``. An empty body keeps FastAPI's 422 (the body is
    missing whatever its type says).

    Raises:
        HTTPException: 415, ``detail`` e.g. ``request body sent as 'text/plain'; send it as
            JSON with the header Content-Type: application/json`` (RFC 9110, 15.5.16).
    """
    route = request.scope.get("route")
    if getattr(route, "body_field", None) is None or _read_as_json(request):
        return
    if not await request.body():  # Starlette keeps it: FastAPI read it already
        return
    media = _media_type(request)
    sent = f"sent as '{printable(media, 60)}'" if media else "sent without a Content-Type"
    raise HTTPException(
        status_code=415,
        detail=f"request body {sent}; send it as JSON with the header "
        "Content-Type: application/json",
    )


async def refuse_repeated_body_keys(request: Request) -> None:
    """Refuse a JSON body that gives a key twice in one object, at any depth, for a route that
    reads a body (FastAPI's ``body_field``; any other route never reads it).

    Raises:
        RequestValidationError: 422 (``api.validation``'s short answer), one error per repeated
            key: ``loc`` ``["body", …, key]`` (list items by index), ``type``
            ``repeated_key``, ``msg`` ``key 'path' given 2 times; give it once``.
    """
    route = request.scope.get("route")
    if getattr(route, "body_field", None) is None or not _read_as_json(request):
        return
    body = await request.body()  # Starlette keeps it: the route's own read gets the same bytes
    if not body:
        return
    try:
        document = parse_keeping_repeats(body)
    except (ValueError, RecursionError):
        # FastAPI parsed the same bytes before any dependency and a failure never gets here
        # (422 json_invalid, its own or _http_exception's): unreachable unless its reading
        # changes.
        return
    found = repeated_keys(document)
    if found:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", *where),
                    "msg": f"key {where[-1]!r} given {count} times; give it once",
                    "type": "repeated_key",
                }
                for where, count in found
            ]
        )


def _parse_failure(cause: BaseException | None) -> dict[str, Any] | None:
    """The validation error for a body FastAPI could not read as JSON for ``cause`` (the error
    behind its 400 "There was an error parsing the body"), else ``None``."""
    if isinstance(cause, UnicodeDecodeError):
        byte = cause.object[cause.start : cause.start + 1].hex()
        message = f"JSON decode error: not UTF-8 text (byte 0x{byte} at position {cause.start})"
        return {"loc": ("body", cause.start), "msg": message, "type": "json_invalid"}
    if isinstance(cause, RecursionError):
        message = "JSON decode error: nested too deeply to read"
        return {"loc": ("body",), "msg": message, "type": "json_invalid"}
    return None


async def _http_exception(request: Request, exc: Exception) -> Response:
    """FastAPI's answer to an ``HTTPException``, except for a body it could not parse as JSON
    (not UTF-8, nested past Python's recursion limit): that is 422 ``json_invalid`` in
    ``api.validation``'s short form, as malformed JSON already is, not a 400 with a generic
    text."""
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc.__cause__, _BodyTooLarge):  # FastAPI's 400 for a failed body read
        return _too_large()
    failure = _parse_failure(exc.__cause__) if exc.status_code == 400 else None
    if failure is not None:
        return validation_response([failure])
    return await http_error_response(request, exc)


def install_body_error_handler(app: FastAPI) -> None:
    """Answer a JSON body that is not UTF-8 or nests too deeply as 422 ``json_invalid`` (see
    :func:`_http_exception`); every other ``HTTPException`` as FastAPI does, a 405 with its
    path's whole ``Allow`` list (``api.allowed_methods``)."""
    app.add_exception_handler(StarletteHTTPException, _http_exception)


class _BodyTooLarge(Exception):
    """The body streamed past ``MAX_BODY_BYTES`` (no ``Content-Length``, or a false one)."""


def _too_large() -> JSONResponse:
    return JSONResponse(status_code=413, content={"detail": TOO_LARGE})


def _encoded(coding: str) -> JSONResponse:
    detail = (
        f"request body has Content-Encoding '{printable(coding, 60)}'; send it unencoded "
        "(this service decodes none)"
    )
    return JSONResponse(status_code=415, content={"detail": detail})


class BodyLimit:
    """ASGI middleware: a request whose body is larger than ``MAX_BODY_BYTES`` gets 413
    ``{"detail": TOO_LARGE}``: at once when its ``Content-Length`` says so (the body unread),
    else when the streamed body passes the limit (the route's read fails; ``_http_exception``
    answers). FastAPI's own ``max_body_size`` answers a plain-text "Content Too Large". A body
    with a ``Content-Encoding`` other than ``identity`` gets 415 ``request body has
    Content-Encoding 'gzip'; send it unencoded (this service decodes none)``, unread."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await _too_large()(scope, receive, send)
            return
        coding = headers.get("content-encoding", "identity").strip().lower()
        has_body = declared not in ("", "0") or "transfer-encoding" in headers
        if coding not in ("", "identity") and has_body:
            # The service decodes no content coding (RFC 9110, 8.4.1: 415), and FastAPI reads the
            # body before any dependency: a gzip body was answered "not UTF-8 text".
            await _encoded(coding)(scope, receive, send)
            return
        total = 0

        async def limited() -> Message:
            nonlocal total
            message = await receive()
            if message["type"] == "http.request":
                total += len(message.get("body", b""))
                if total > MAX_BODY_BYTES:
                    raise _BodyTooLarge
            return message

        await self.app(scope, limited, send)
