"""The app factory: health (503 with the reason when the database is down), version, and the
configured token beside the database's."""

from __future__ import annotations

import socket
from importlib.metadata import version
from typing import TYPE_CHECKING

import pytest
from conftest import API_TOKEN, bearer, create_api_token
from fastapi.testclient import TestClient

from api.app import create_app
from db.migrate import head_revision

if TYPE_CHECKING:
    from conftest import Seeded


def test_healthz_reports_the_schema_revision(api_client: TestClient) -> None:
    response = api_client.get("/healthz")
    assert response.status_code == 200
    sqlite = str(api_client.app.state.engine.url).startswith("sqlite")  # type: ignore[attr-defined]
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "schema_revision": head_revision(),
        "schema_head": head_revision(),
        "integrity": "ok" if sqlite else "unchecked",
        "read_only": False,
    }


def test_without_a_server_token_only_database_tokens_are_accepted(
    fresh_database_url: str, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNEVO_API_TOKEN", raising=False)
    writer = create_api_token(fresh_database_url, "write", "ci")
    with TestClient(create_app(fresh_database_url)) as client:
        url = f"/v1/jobs/{seeded.job_id}"
        for authorization in ("Bearer anything", "Bearer ", f"Bearer {API_TOKEN}"):
            response = client.patch(
                url, json={"state": "cancelled"}, headers={"Authorization": authorization}
            )
            assert response.status_code == 401
        assert client.get(url, headers=bearer(writer)).json()["state"] == "waiting"
        response = client.patch(url, json={"state": "cancelled"}, headers=bearer(writer))
        assert response.status_code == 200, response.text
        assert client.get(url, headers=bearer(writer)).json()["state"] == "cancelled"


def test_version_names_the_service_and_the_schema_head(api_client: TestClient) -> None:
    response = api_client.get("/v1/version")
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "service": "kernevo-service",
        "version": version("kernevo-service"),
        "api": "v1",
        "schema_head": head_revision(),
    }
    assert api_client.get("/openapi.json").json()["info"]["version"] == body["version"]


def test_health_fails_with_the_reason_when_postgresql_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PostgreSQL that does not answer (nothing listens on the port): 503 with one line
    naming it, not a hang and not a 500; the version still answers (it reads no database)."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/test?connect_timeout=2"
    with TestClient(create_app(url)) as client:
        response = client.get("/healthz")
        assert response.status_code == 503, response.text
        detail = response.json()["detail"]
        assert detail.startswith("database is unreachable") and "\n" not in detail, detail
        assert client.get("/v1/version").status_code == 200


def test_database_url_defaults_to_the_environment(
    fresh_database_url: str, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_DATABASE_URL", fresh_database_url)
    monkeypatch.setenv("KERNEVO_API_TOKEN", API_TOKEN)
    with TestClient(create_app()) as client:
        response = client.get(f"/v1/programs/{seeded.seed_id}", headers=bearer(API_TOKEN))
        assert response.json()["uid"] == "seed"
