"""``GET /v1/jobs``'s ``path`` and ``dtype`` filters are checked against the registry, as
``GET /v1/champions``'s are: an unknown one is a 422 with the registry's one-line ``detail``,
not ``200 []`` (fresh-user trial: ``/v1/jobs?path=nope`` and ``/v1/jobs?dtype=float16`` answered
an empty list while ``/v1/champions`` refused the same filters). A query parameter the route does
not take is ignored, FastAPI's default, on both routes (docs/CONTRACTS.md says so)."""

from __future__ import annotations

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

from seeds.registry import PATHS

KNOWN_PATHS = ", ".join(sorted(PATHS))
DTYPES = "float32, float64, complex64, complex128"


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        ({"path": "nope"}, f"unknown path 'nope'; known paths: {KNOWN_PATHS}"),
        ({"dtype": "float16"}, f"unknown dtype 'float16'; expected one of {DTYPES}"),
        (
            {"path": "trsm_small", "dtype": "int8"},
            f"unknown dtype 'int8'; expected one of {DTYPES}",
        ),
    ],
)
def test_an_unknown_filter_is_a_422_on_jobs_as_on_champions(
    api_client: TestClient, read_token: str, params: dict[str, str], detail: str
) -> None:
    for route in ("/v1/jobs", "/v1/champions"):
        response = api_client.get(route, params=params, headers=bearer(read_token))
        assert (response.status_code, response.json()) == (422, {"detail": detail}), route


def test_known_filters_still_list(api_client: TestClient, read_token: str) -> None:
    """(A parameter the route does not take is a 422: tests/test_api_unknown_query.py.)"""
    for params in (
        {"path": "solve_tri", "dtype": "float32"},
        # A pair the path implements that no job has: nothing (one it lacks is a 422,
        # tests/test_api_champions.py).
        {"path": "trsm_small_z64", "dtype": "complex128"},
    ):
        for route in ("/v1/jobs", "/v1/champions"):
            response = api_client.get(route, params=params, headers=bearer(read_token))
            assert (response.status_code, response.json()) == (200, []), (route, params)
            assert response.headers["x-total-count"] == "0"
