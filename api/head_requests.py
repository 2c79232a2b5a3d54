"""``HEAD`` answered on every ``GET`` route (RFC 9110, 9.3.2): the ``GET`` answer's status and
headers, no body.

FastAPI registers a ``@router.get`` route for ``GET`` alone, so ``curl -I /healthz`` and load
balancers' ``HEAD`` health checks got a 405. Starlette adds ``HEAD`` to its own plain routes but
not to FastAPI's; declaring ``methods=["GET", "HEAD"]`` on each route would also double every
operation in the OpenAPI document.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """ASGI middleware: a ``HEAD`` request runs as ``GET`` and its answer is sent without the
    body, ``Content-Length`` kept as ``GET``'s (what RFC 9110 allows a ``HEAD`` answer to say).
    A route without ``GET`` answers 405 as it does for ``GET``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the server ends the answer at the last body message
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        # A copy: the server keeps its own scope saying HEAD (uvicorn then sends no body either).
        await self.app({**scope, "method": "GET"}, receive, headers_only)
