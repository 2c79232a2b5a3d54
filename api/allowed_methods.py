"""A 405's ``Allow`` header names every method its path answers (RFC 9110, 15.5.6).

Starlette fills ``Allow`` from the first route whose path matches, so a path served by two
routes named half its methods: ``PUT /v1/jobs`` said ``Allow: POST`` though ``GET`` lists jobs,
and no 405 named ``HEAD``, which ``api.head_requests`` answers on every ``GET`` route.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match


def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods of every route of ``app`` whose path matches ``request``'s, ``HEAD`` with
    ``GET``, sorted. FastAPI keeps an included router as one entry of ``app.router.routes``;
    ``iter_route_contexts`` walks the routes inside, their paths prefixed."""
    methods: set[str] = set()
    for context in iter_route_contexts(app.router.routes):
        if context.methods and context.route.matches(request.scope)[0] is not Match.NONE:
            methods |= context.methods
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


async def http_error_response(request: Request, exc: StarletteHTTPException) -> Response:
    """FastAPI's answer to ``exc``, a 405's ``Allow`` naming every method of its path. The
    app's one ``HTTPException`` handler (``api.json_body``) ends here."""
    if exc.status_code == 405:
        allow = {"Allow": ", ".join(allowed_methods(request.app, request))}
        exc = StarletteHTTPException(405, exc.detail, headers={**(exc.headers or {}), **allow})
    return await http_exception_handler(request, exc)
