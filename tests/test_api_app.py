"""The app factory: health, and writes refused when the server has no token."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from db.migrate import head_revision

if TYPE_CHECKING:
    from conftest import Seeded


def test_healthz_reports_the_schema_revision(api_client: TestClient) -> None:
    response = api_client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "schema_revision": head_revision(),
        "schema_head": head_revision(),
    }


def test_without_a_server_token_every_write_is_401(
    fresh_database_url: str, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNEVO_API_TOKEN", raising=False)
    with TestClient(create_app(fresh_database_url)) as client:
        for authorization in ("Bearer anything", "Bearer "):
            response = client.patch(
                f"/v1/jobs/{seeded.job_id}",
                json={"state": "cancelled"},
                headers={"Authorization": authorization},
            )
            assert response.status_code == 401
            assert "writes are disabled" in response.json()["detail"]
        assert client.get(f"/v1/jobs/{seeded.job_id}").json()["state"] == "waiting"


def test_database_url_defaults_to_the_environment(
    fresh_database_url: str, seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_DATABASE_URL", fresh_database_url)
    with TestClient(create_app()) as client:
        assert client.get(f"/v1/programs/{seeded.seed_id}").json()["uid"] == "seed"
