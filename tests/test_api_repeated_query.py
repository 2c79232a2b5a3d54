"""A query parameter given twice is a 422 naming it, on every route (``api.query_params``),
not silently the first or last value."""

from __future__ import annotations

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

_BEST = "/v1/kernels/best?op=trsm&dtype=float32&dtype=float64&gpu=nvidia-h200&m=64&n=64"


def test_a_repeated_dtype_of_best_is_a_422_naming_it(api_client: TestClient) -> None:
    answer = api_client.get(_BEST)
    assert answer.status_code == 422
    assert answer.json() == {
        "detail": [
            {
                "loc": ["query", "dtype"],
                "msg": "given 2 times; give it once",
                "type": "repeated_parameter",
            }
        ]
    }


@pytest.mark.parametrize(
    "url",
    [
        "/v1/manifest?gpu=nvidia-h200&gpu=nvidia-h100",
        "/v1/champions?op=trsm&op=trsm",  # the same value twice too: give it once
        "/v1/jobs?limit=1&limit=2",
        "/v1/programs?job_id=1&job_id=2&state=scored",
        "/v1/version?x=1&x=2",  # a parameter the route does not take
    ],
)
def test_every_route_refuses_a_repeated_parameter(
    api_client: TestClient, read_token: str, url: str
) -> None:
    answer = api_client.get(url, headers=bearer(read_token))
    assert answer.status_code == 422, answer.text
    name = url.split("?")[1].split("&")[0].split("=")[0]
    [error] = answer.json()["detail"]
    assert error["loc"] == ["query", name] and error["type"] == "repeated_parameter"


def test_each_repeated_parameter_is_named(api_client: TestClient, read_token: str) -> None:
    answer = api_client.get("/v1/jobs?state=failed&limit=1&state=x&limit=2&limit=3")
    assert answer.status_code == 422
    assert [(e["loc"], e["msg"]) for e in answer.json()["detail"]] == [
        (["query", "state"], "given 2 times; give it once"),
        (["query", "limit"], "given 3 times; give it once"),
    ]


def test_parameters_given_once_still_answer(api_client: TestClient, read_token: str) -> None:
    assert (
        api_client.get("/v1/jobs?limit=1&offset=0", headers=bearer(read_token)).status_code == 200
    )
