"""Every string query parameter of every route has a length bound in the OpenAPI document and
in fact: a 10,000-character value is a short 422 naming the parameter, never an answer that
echoes the value (``/v1/kernels/best?op=<60,000 x's>`` quoted all of them in its "unknown op")."""

from __future__ import annotations

from typing import Any

from conftest import bearer
from fastapi.testclient import TestClient

LONG = "x" * 10_000


def _string_entries(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of a parameter's schema that take text: a string, or a reference to a string
    enum (the reference's siblings carry the bound)."""
    entries = []
    for entry in schema.get("anyOf", [schema]):
        target = entry
        if "$ref" in entry:
            target = components[entry["$ref"].rsplit("/", 1)[-1]]
        if target.get("type") == "string":
            entries.append(entry)
    return entries


def _string_query_parameters(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    components = document["components"]["schemas"]
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "query":
                    continue
                for entry in _string_entries(parameter["schema"], components):
                    found.append((f"{method.upper()} {path}", parameter["name"], entry))
    return found


def test_every_string_query_parameter_has_a_max_length(api_client: TestClient) -> None:
    found = _string_query_parameters(api_client.get("/openapi.json").json())
    # The walk found the routes' text filters (a change of the document's form would empty it).
    bounds = {(route, name): entry.get("maxLength") for route, name, entry in found}
    assert bounds[("GET /v1/kernels/best", "op")] == 256
    assert bounds[("GET /v1/kernels/best", "dtype")] == 256
    assert bounds[("GET /v1/jobs", "state")] == 16
    unbounded = [(route, name) for route, name, entry in found if "maxLength" not in entry]
    assert unbounded == []


def test_a_long_value_of_any_string_query_parameter_is_a_short_422(
    api_client: TestClient, api_token: str
) -> None:
    document = api_client.get("/openapi.json").json()
    found = _string_query_parameters(document)
    assert len(found) >= 15
    for route, name, _ in found:
        method, path = route.split(" ", 1)
        url = path.replace("{job_id}", "1").replace("{program_id}", "1")
        response = api_client.request(method, url, params={name: LONG}, headers=bearer(api_token))
        assert response.status_code == 422, (route, name, response.text[:200])
        assert len(response.content) < 1_000, (route, name, len(response.content))
        issues = [issue for issue in response.json()["detail"] if issue["loc"] == ["query", name]]
        assert len(issues) == 1, (route, name, response.text)
        assert issues[0]["type"] in {"string_too_long", "enum", "literal_error"}, issues
        assert issues[0]["input"] == "x" * 30 + "…(10000 characters)"
