"""A 405 names every method its path answers (``api.allowed_methods``): ``PUT /v1/jobs`` said
``Allow: POST`` though ``GET /v1/jobs`` lists jobs, and no ``Allow`` named ``HEAD``."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allow(header: str) -> set[str]:
    return {m.strip() for m in header.split(",") if m.strip()}


def test_every_405_lists_every_method_of_its_path(api_client: TestClient) -> None:
    document = api_client.get("/openapi.json").json()
    checked = 0
    for path, operations in document["paths"].items():
        answered = {m.upper() for m in operations} | ({"HEAD"} if "get" in operations else set())
        url = re.sub(r"\{[^}]+\}", "1", path)
        for method in sorted(set(METHODS) - answered):
            response = api_client.request(method, url)
            assert response.status_code == 405, (method, path)
            assert _allow(response.headers["allow"]) == answered, (method, path)
            assert response.json() == {"detail": "Method Not Allowed"}
            checked += 1
    assert checked >= 45, checked  # 14 paths in the document today


def test_a_path_of_two_routes_names_both_and_other_errors_are_unchanged(
    api_client: TestClient,
) -> None:
    put = api_client.put("/v1/jobs")
    assert (put.status_code, _allow(put.headers["allow"])) == (405, {"GET", "HEAD", "POST"})
    post = api_client.post("/v1/jobs/1")
    assert (post.status_code, _allow(post.headers["allow"])) == (405, {"GET", "HEAD", "PATCH"})
    missing = api_client.get("/v1/no-such-route")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    assert "allow" not in missing.headers
