"""One value per key in a JSON body: ``{"path": "trsm_small", …, "path": "trsm_blocked"}`` is a
422, not the last one.

Python's ``json`` (what FastAPI reads a body with) keeps the last of a repeated key silently, so a
client that built ``path`` twice got a job of the second while it may have logged the first. A
repeated query parameter (``api.query_params``) and a job file's repeated key
(``evolver.job_config``) are refused; so is a JSON body's, at any depth, for every route that
reads one (``POST /v1/jobs``, ``PATCH /v1/jobs/{id}``), in this one dependency installed on the
application (``api.app``). It runs before the route's body is validated, so nothing is written.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError


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


def _read_as_json(request: Request) -> bool:
    """Whether FastAPI reads this request's body as JSON: ``Content-Type`` ``application/json``
    or ``application/…+json`` (FastAPI's strict content type: any other body is refused as not
    being the model, never parsed)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    maintype, _, subtype = media.partition("/")
    return maintype == "application" and (subtype == "json" or subtype.endswith("+json"))


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
        # FastAPI parsed the same bytes before any dependency and answered a failure itself
        # (422 json_invalid, 400): unreachable unless its reading changes.
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
