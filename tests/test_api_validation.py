"""A 422 says where and what is wrong without echoing the request: FastAPI's default handler sent a
20 MB body back in full. (A body over ``api.json_body.MAX_BODY_BYTES`` is now a 413 unread, so
these send the largest body the service reads.)"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.json_body import MAX_BODY_BYTES
from api.validation import ECHO_LIMIT, MAX_ERRORS, brief

# A field that fills the largest body read: {"state": "…"} is 13 bytes around it.
FIELD = MAX_BODY_BYTES - 13


def test_a_1_mib_field_is_not_echoed(api_client: TestClient, api_token: str) -> None:
    auth = {"Authorization": f"Bearer {api_token}"}
    response = api_client.patch("/v1/jobs/1", json={"state": "x" * FIELD}, headers=auth)
    assert response.status_code == 422
    assert len(response.content) < 1000
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "state"]
    assert error["type"] == "literal_error"
    assert error["input"].endswith(f"…({FIELD} characters)")
    assert len(error["input"]) < ECHO_LIMIT + 30


def test_a_1_mib_body_that_is_not_json_is_not_echoed(
    api_client: TestClient, api_token: str
) -> None:
    headers = {"Authorization": f"Bearer {api_token}", "Content-Type": "application/json"}
    body = b'{"state": "' + b"x" * FIELD  # unterminated
    response = api_client.patch("/v1/jobs/1", content=body, headers=headers)
    assert response.status_code == 422
    assert len(response.content) < 1000
    assert response.json()["detail"][0]["type"] == "json_invalid"


def test_a_long_key_and_many_errors_are_cut(api_client: TestClient, api_token: str) -> None:
    auth = {"Authorization": f"Bearer {api_token}"}
    body = {"k" * 100_000: 1, "state": "cancelled"}
    response = api_client.patch("/v1/jobs/1", json=body, headers=auth)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["type"] == "extra_forbidden"
    assert error["loc"][1].endswith("…(100000 characters)")

    many = {f"extra_{i}": [1] * 1000 for i in range(50)} | {"state": "cancelled"}
    response = api_client.patch("/v1/jobs/1", json=many, headers=auth)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert len(detail) == MAX_ERRORS + 1
    assert detail[-1] == {"loc": [], "msg": "and 40 more errors", "type": "more"}
    assert all("input" not in error for error in detail)  # lists are never echoed
    assert len(json.dumps(detail)) < 3000


def test_query_errors_keep_their_location_and_message(api_client: TestClient) -> None:
    params = {"op": "trsm", "dtype": "float64", "gpu": "nvidia-h200", "m": "9" * 5000, "n": "8"}
    response = api_client.get("/v1/kernels/best", params=params)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["query", "m"]
    assert error["type"] == "int_parsing_size"
    assert error["input"].endswith("…(5000 characters)")


@pytest.mark.parametrize(
    ("body", "loc", "echoed"),
    [
        (b'{"state": "\\ud800"}', ["body", "state"], "\\ud800"),
        (b'{"state": "x\\udfff\\ud800"}', ["body", "state"], "x\\udfff\\ud800"),
        (b'{"\\ud800": 1, "state": "cancelled"}', ["body"], "\\ud800"),
    ],
)
def test_a_lone_surrogate_in_the_body_is_a_422_not_a_500(
    api_client: TestClient, api_token: str, body: bytes, loc: list, echoed: str
) -> None:
    """JSON's \\ud800 escape decodes to a lone surrogate, which UTF-8 cannot encode: the answer
    echoing it failed to encode (500 with a traceback)."""
    headers = {"Authorization": f"Bearer {api_token}", "Content-Type": "application/json"}
    response = api_client.patch("/v1/jobs/1", content=body, headers=headers)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == loc and error["type"] == "string_unicode"
    assert error["input"] == echoed  # the escape, as text
    assert "\n" not in error["msg"]


def test_a_surrogate_in_a_location_or_message_is_escaped() -> None:
    error = {"loc": ("body", "k\ud800"), "msg": "bad \udcff", "type": "t", "input": "\ud800" * 100}
    out = brief(error)
    assert out["loc"] == ["body", "k\\ud800"] and out["msg"] == "bad \\udcff"
    assert out["input"].startswith("\\ud800" * 30) and out["input"].endswith("(100 characters)")
    json.dumps(out, ensure_ascii=False).encode("utf-8")  # encodable


def test_repository_and_database_errors_quoting_client_text_still_encode() -> None:
    """Their messages may quote the client's text (an unknown dtype); the 404/422/503 answer
    must encode whatever it quotes."""
    import asyncio

    from api.errors import _database_unavailable, _repository_error
    from db.errors import DatabaseUnavailableError, InvalidValueError, NotFoundError

    for handler, exc, status in (
        (_repository_error, InvalidValueError("unknown dtype '\ud800'"), 422),
        (_repository_error, NotFoundError("no job '\udcff'"), 404),
        (
            _database_unavailable,
            DatabaseUnavailableError("locked", "database \ud800 is locked"),
            503,
        ),
    ):
        response = asyncio.run(handler(None, exc))  # type: ignore[arg-type]
        assert response.status_code == status
        detail = json.loads(response.body)["detail"]
        assert "\\u" in detail and "\n" not in detail


DIGITS_ONLY = "Input should be an integer in decimal digits only"


@pytest.mark.parametrize(
    ("url", "loc", "given"),
    [
        ("/v1/programs?limit=%2B5", ["query", "limit"], "+5"),
        ("/v1/programs?offset=1.0", ["query", "offset"], "1.0"),
        ("/v1/programs?job_id=1_0", ["query", "job_id"], "1_0"),
        ("/v1/programs?island=%200", ["query", "island"], " 0"),
        ("/v1/jobs?limit=1e2", ["query", "limit"], "1e2"),
        ("/v1/jobs?offset=0x0", ["query", "offset"], "0x0"),
        ("/v1/jobs/1.0", ["path", "job_id"], "1.0"),
        ("/v1/jobs/+1/lineage", ["path", "job_id"], "+1"),
        ("/v1/jobs/1/lineage?limit=5%20", ["query", "limit"], "5 "),
        ("/v1/programs/1_0", ["path", "program_id"], "1_0"),
        ("/v1/programs/1/diff?", None, None),  # decimal digits: read (404: no such program)
    ],
)
def test_every_integer_parameter_takes_decimal_digits_only(
    api_client: TestClient, api_token: str, url: str, loc: list[str] | None, given: str | None
) -> None:
    """FastAPI's lax integers took ``+5``, ``1_0``, ``1.0`` and `` 0``, which the CLI refuses
    (``decimal digits only``): every integer of a request is read as the CLI reads one."""
    response = api_client.get(url, headers={"Authorization": f"Bearer {api_token}"})
    if loc is None:
        assert response.status_code == 404, response.text
        return
    assert response.status_code == 422, response.text
    issue = {"loc": loc, "msg": DIGITS_ONLY, "type": "int_parsing", "input": given}
    assert response.json() == {"detail": [issue]}


# A trial's finding: /v1/kernels/best and /v1/manifest said "not a GPU name: '\x01' must be
# printable text …", /v1/champions and /v1/jobs "gpu: must be printable text …, not '\x00'". One
# validator now (api.gpu_names.gpu_key_of), one wording, the CLI's (kernevo.text).
PRINTABLE = "gpu: must be printable text (no control characters)"
GPU_ROUTES = [
    ("/v1/kernels/best", {"op": "trsm", "dtype": "float64", "m": "64", "n": "64"}),
    ("/v1/manifest", {}),
    ("/v1/champions", {}),
    ("/v1/jobs", {}),
]


@pytest.mark.parametrize(("route", "params"), GPU_ROUTES)
@pytest.mark.parametrize(
    ("gpu", "detail"),
    [
        ("\x01", f"{PRINTABLE}, not '\\x01'"),
        ("nvidia\th200", f"{PRINTABLE}, not 'nvidia\\th200'"),
        ("h200\u2028", f"{PRINTABLE}, not 'h200\\u2028'"),
        ("  --  ", "not a GPU name: '  --  '"),
    ],
)
def test_every_gpu_parameter_is_refused_in_the_same_words(
    api_client: TestClient,
    api_token: str,
    route: str,
    params: dict[str, str],
    gpu: str,
    detail: str,
) -> None:
    auth = {"Authorization": f"Bearer {api_token}"}
    response = api_client.get(route, params={**params, "gpu": gpu}, headers=auth)
    assert (response.status_code, response.json()) == (422, {"detail": detail})
