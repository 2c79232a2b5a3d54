"""Every float query parameter takes decimal notation only (``api.query_params.DecimalFloatOnly``):
pydantic's lax parsing read ``/v1/programs?min_score=1_0`` as 10 and answered 200."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Seeded, bearer
from fastapi.testclient import TestClient

from api.query_params import DECIMAL_NOTATION_MESSAGE

REFUSED = ["1_0", " 1", "1 ", "inf", "-Infinity", "nan", ".5", "1.", "0x1", "1e", "١", "1,5"]
TAKEN = ["10", "-1.5", "+2", "3e-4", "1.5E+2", "0"]


def _float_query_parameters(document: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                schema = parameter["schema"]
                types = {entry.get("type") for entry in schema.get("anyOf", [schema])}
                if parameter["in"] == "query" and "number" in types:
                    assert method == "get", (method, path)
                    found.append((path, parameter["name"]))
    return found


def test_every_float_query_parameter_takes_decimal_notation_only(
    api_client: TestClient, api_token: str
) -> None:
    found = _float_query_parameters(api_client.get("/openapi.json").json())
    assert found == [("/v1/programs", "min_score"), ("/v1/programs", "max_score")]
    for path, name in found:
        for value in REFUSED:
            response = api_client.get(path, params={name: value}, headers=bearer(api_token))
            assert response.status_code == 422, (name, value)
            assert response.json() == {
                "detail": [
                    {
                        "loc": ["query", name],
                        "msg": DECIMAL_NOTATION_MESSAGE,
                        "type": "float_parsing",
                        "input": value,
                    }
                ]
            }
        for value in TAKEN:
            response = api_client.get(path, params={name: value}, headers=bearer(api_token))
            assert response.status_code == 200, (name, value, response.text)


@pytest.mark.parametrize("value", ["1e400", "-1e400"])
def test_a_number_past_the_float_range_is_still_refused(
    api_client: TestClient, api_token: str, value: str
) -> None:
    response = api_client.get(
        "/v1/programs", params={"min_score": value}, headers=bearer(api_token)
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "finite_number"


def test_the_decimal_notation_reads_the_value_it_shows(
    api_client: TestClient, api_token: str, seeded: Seeded
) -> None:
    """The seeded lineage's evaluated programs are above -1e9 and none is above 1e9."""

    def total(value: str) -> int:
        response = api_client.get(
            "/v1/programs", params={"min_score": value}, headers=bearer(api_token)
        )
        assert response.status_code == 200, response.text
        return int(response.headers["x-total-count"])

    assert total("-1e9") > 0
    assert total("1e9") == 0
