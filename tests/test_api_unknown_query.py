"""A query parameter the route does not take is a 422 naming it and the route's parameters
(``api.query_params.refuse_unknown_query``), on every route of the OpenAPI document: FastAPI
ignores one, so ``/v1/champions?dtyp=float32`` answered with every dtype's champions. The web
page and the docs pages, outside the document, keep their query strings."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient


def _unknown(response, name: str) -> str:
    """The one error of a 422 for the unknown query parameter ``name``; its message."""
    assert response.status_code == 422, (response.request.url, response.text)
    [error] = response.json()["detail"]
    assert (error["loc"], error["type"]) == (["query", name], "extra_forbidden"), error
    return error["msg"]


def test_a_misspelt_filter_is_refused_not_ignored(api_client: TestClient) -> None:
    message = _unknown(api_client.get("/v1/champions?dtyp=float32"), "dtyp")
    assert message == (
        "unknown query parameter; this route takes dtype, gpu, op, path, shape_bucket"
    )
    assert api_client.get("/v1/champions?dtype=float32").status_code == 200


def test_every_route_of_the_document_refuses_a_parameter_it_does_not_take(
    api_client: TestClient, api_token: str
) -> None:
    document = api_client.get("/openapi.json").json()
    headers = {"Authorization": f"Bearer {api_token}"}
    checked = 0
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
            assert "zz_unknown" not in declared
            url = re.sub(r"\{[^}]+\}", "1", path) + "?zz_unknown=1"
            response = api_client.request(method.upper(), url, headers=headers, json={})
            message = _unknown(response, "zz_unknown")
            listed = ", ".join(sorted(declared)) if declared else "none"
            assert message == f"unknown query parameter; this route takes {listed}", (path, method)
            checked += 1
    assert checked >= 15


def test_the_shape_parameters_of_every_op_are_taken_and_others_refused(
    api_client: TestClient,
) -> None:
    """/v1/kernels/best reads each op's shape parameters through a dependency (``api.shape_query``):
    they are the route's; a misspelt one is not."""
    base = "/v1/kernels/best?op=solve_tri&dtype=float32&gpu=nvidia-h200&n=64&k=6&b2=4&b3=2"
    assert api_client.get(base).status_code != 422
    message = _unknown(api_client.get(base.replace("&b3=2", "&b_3=2")), "b_3")
    assert "bandwidth" in message and " m, " in message and "b3" in message


def test_the_web_page_and_the_docs_keep_their_query_strings(api_client: TestClient) -> None:
    for url in ("/ui/?job=3&tab=lineage", "/docs?x=1", "/redoc?x=1"):
        response = api_client.get(url)
        assert response.status_code == 200, (url, response.status_code)
