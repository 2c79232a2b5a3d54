"""``kernevo jobs --api-url URL --limit N`` past the service's page size gives the database
path's answer: a fresh-user trial saw ``422 … query.limit: Input should be less than or equal to
1000`` and exit 1 for ``--limit 5000``, which the help (1..2147483647) and the database path
accept. The CLI now asks page by page (``limit``, ``offset``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from job_store import enqueue_jobs
from sqlalchemy import Engine

from db.session import session_scope
from kernevo import cli, http_get

JOBS = 1205  # more than one service page (api.pagination.MAX_LIMIT, 1000)


def _through_the_app_with_queries(monkeypatch: pytest.MonkeyPatch, client: TestClient) -> list[str]:
    """Route the CLI's requests to ``client``'s app, query strings included; returns the list
    the requested paths (with their queries) are appended to."""
    asked: list[str] = []
    real = http_get.request

    def app_answer(request: httpx.Request) -> httpx.Response:
        target = request.url.raw_path.decode()
        asked.append(target)
        answered = client.request(
            request.method, target, content=request.content, headers=request.headers
        )
        return httpx.Response(answered.status_code, content=answered.content)

    def through(method: str, url: str, **kwargs: Any) -> http_get.Answer:
        return real(method, url, **{**kwargs, "transport": httpx.MockTransport(app_answer)})

    monkeypatch.setattr(http_get, "request", through)
    return asked


@pytest.mark.parametrize(("limit", "shown"), [(5000, JOBS), (1100, 1100), (1000, 1000)])
def test_a_limit_past_one_page_lists_what_the_database_lists(
    limit: int,
    shown: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    api_client: TestClient,
    engine: Engine,
    fresh_database_url: str,
) -> None:
    with session_scope(engine) as s:
        enqueue_jobs(s, JOBS)
    assert cli.main(["jobs", "--limit", str(limit), "--database-url", fresh_database_url]) == 0
    from_database = capsys.readouterr()
    asked = _through_the_app_with_queries(monkeypatch, api_client)
    assert cli.main(["jobs", "--limit", str(limit), "--api-url", "http://kernevo.test"]) == 0
    from_service = capsys.readouterr()
    assert from_service.err == from_database.err == ""
    assert from_service.out == from_database.out
    assert len(from_service.out.splitlines()) == shown + 1  # the header
    pages = {5000: 2, 1100: 2, 1000: 1}[limit]
    assert len(asked) == pages
    assert asked[0] == f"/v1/jobs?limit={min(limit, 1000)}"
    if pages == 2:
        assert asked[1] == f"/v1/jobs?limit={min(limit - 1000, 1000)}&offset=1000"
