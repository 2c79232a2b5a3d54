"""The CLI's HTTP requests answered in-process by the service app behind a FastAPI
``TestClient`` (``kernevo.http_get.request`` given an ``httpx.MockTransport``), so a test of
``kernevo … --api-url`` runs the real routes on the test's database without a server."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient


def through_the_app(monkeypatch: pytest.MonkeyPatch, client: TestClient) -> None:
    """Route every ``kernevo.http_get.request`` to the app behind ``client`` (method, path,
    body and headers as sent; status and body as answered) until ``monkeypatch`` undoes it."""
    import httpx

    from kernevo import http_get

    real = http_get.request

    def app_answer(request: httpx.Request) -> httpx.Response:
        answered = client.request(
            request.method, request.url.path, content=request.content, headers=request.headers
        )
        return httpx.Response(answered.status_code, content=answered.content)

    def through(method: str, url: str, **kwargs: Any) -> http_get.Answer:
        return real(method, url, **{**kwargs, "transport": httpx.MockTransport(app_answer)})

    monkeypatch.setattr(http_get, "request", through)
