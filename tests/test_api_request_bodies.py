"""A body that cannot be read gets one kind of answer: malformed JSON, bytes that are not UTF-8
and JSON nested past what Python reads are each a 422 ``json_invalid`` in ``api.validation``'s
short form with a one-line message (the last two were a 400 "There was an error parsing the
body"), and a body over 1 MiB is a JSON 413, whether its ``Content-Length`` says so or it
streams past the limit."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

from api.json_body import MAX_BODY_BYTES, TOO_LARGE

ROUTES = [("POST", "/v1/jobs"), ("PATCH", "/v1/jobs/1")]
JSON = {"Content-Type": "application/json"}


def _send(client: TestClient, token: str, route: tuple[str, str], body: object) -> object:
    method, url = route
    return client.request(method, url, content=body, headers={**JSON, **bearer(token)})


def _invalid(loc: list[object], msg: str) -> dict[str, object]:
    return {"detail": [{"loc": loc, "msg": msg, "type": "json_invalid"}]}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"path":', _invalid(["body", 8], "JSON decode error: Expecting value")),
        (
            b'{"path": "\xff"}',
            _invalid(["body", 10], "JSON decode error: not UTF-8 text (byte 0xff at position 10)"),
        ),
        (
            b"[" * 100_000 + b"]" * 100_000,
            _invalid(["body"], "JSON decode error: nested too deeply to read"),
        ),
        (
            b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
            _invalid(["body"], "JSON decode error: nested too deeply to read"),
        ),
    ],
    ids=["malformed", "not-utf8", "deep-array", "deep-object"],
)
def test_an_unreadable_body_is_a_422_json_invalid(
    api_client: TestClient,
    api_token: str,
    route: tuple[str, str],
    body: bytes,
    expected: dict[str, object],
) -> None:
    response = _send(api_client, api_token, route, body)
    assert response.status_code == 422  # type: ignore[attr-defined]
    assert response.json() == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize("route", ROUTES)
def test_a_body_over_the_limit_is_a_json_413(
    api_client: TestClient, api_token: str, route: tuple[str, str]
) -> None:
    body = b'{"path": "' + b"x" * MAX_BODY_BYTES + b'"}'
    response = _send(api_client, api_token, route, body)
    assert response.status_code == 413  # type: ignore[attr-defined]
    assert response.json() == {"detail": TOO_LARGE}  # type: ignore[attr-defined]

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"path": "'
        for _ in range(3):
            yield b"x" * (MAX_BODY_BYTES // 2)
        yield b'"}'

    response = _send(api_client, api_token, route, chunks())
    assert response.status_code == 413  # type: ignore[attr-defined]
    assert response.json() == {"detail": TOO_LARGE}  # type: ignore[attr-defined]


def test_a_body_at_the_limit_is_read(api_client: TestClient, api_token: str) -> None:
    """Exactly ``MAX_BODY_BYTES``: read and validated (its path is too long, not the body)."""
    body = b'{"path": "' + b"x" * (MAX_BODY_BYTES - 12) + b'"}'
    assert len(body) == MAX_BODY_BYTES
    response = _send(api_client, api_token, ("POST", "/v1/jobs"), body)
    assert response.status_code == 422  # type: ignore[attr-defined]
    issues = response.json()["detail"]  # type: ignore[attr-defined]
    assert issues[0]["loc"] == ["body", "path"] and issues[0]["type"] == "string_too_long"


# `curl -d '{…}'` sends application/x-www-form-urlencoded; FastAPI validated the raw bytes and
# answered a 422 "Input should be a valid dictionary" that hid the cause.
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    ("media", "sent"),
    [
        ("application/x-www-form-urlencoded", "sent as 'application/x-www-form-urlencoded'"),
        ("text/plain; charset=utf-8", "sent as 'text/plain'"),
        ("application/jsonx", "sent as 'application/jsonx'"),
        ("text/json\x7f", "sent as 'text/json\\x7f'"),
        (None, "sent without a Content-Type"),
    ],
    ids=["form", "text", "json-lookalike", "control-char", "none"],
)
def test_a_body_not_sent_as_json_is_a_415_that_says_how_to_send_it(
    api_client: TestClient,
    api_token: str,
    fresh_database_url: str,
    route: tuple[str, str],
    media: str | None,
    sent: str,
) -> None:
    method, url = route
    headers = bearer(api_token) | ({} if media is None else {"Content-Type": media})
    body = b'{"path": "trsm_small", "dtype": "float64", "state": "cancelled"}'
    response = api_client.request(method, url, content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert response.json() == {
        "detail": f"request body {sent}; send it as JSON with the header "
        "Content-Type: application/json"
    }
    assert api_client.get("/v1/jobs", headers=bearer(api_token)).json() == []  # nothing written


@pytest.mark.parametrize("route", ROUTES)
def test_an_empty_body_of_any_type_is_a_422_missing_body(
    api_client: TestClient, api_token: str, route: tuple[str, str]
) -> None:
    """No body to refuse for its type: FastAPI's 422 says the body is missing."""
    method, url = route
    headers = bearer(api_token) | {"Content-Type": "text/plain"}
    response = api_client.request(method, url, content=b"", headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["type"] == "missing"


@pytest.mark.parametrize("media", ["application/json; charset=utf-8", "application/vnd.x+json"])
def test_every_json_media_type_is_read(api_client: TestClient, api_token: str, media: str) -> None:
    headers = bearer(api_token) | {"Content-Type": media}
    body = b'{"path": "trsm_small", "dtype": "float64"}'
    response = api_client.post("/v1/jobs", content=body, headers=headers)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("coding", ["gzip", "br", "GZIP"])
def test_a_body_with_a_content_coding_is_a_415(
    api_client: TestClient, api_token: str, route: tuple[str, str], coding: str
) -> None:
    """A second trial: a gzip body was read as JSON bytes and answered "not UTF-8 text"."""
    import gzip

    method, url = route
    headers = bearer(api_token) | JSON | {"Content-Encoding": coding}
    body = gzip.compress(b'{"path": "trsm_small", "dtype": "float64"}')
    response = api_client.request(method, url, content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert response.json() == {
        "detail": f"request body has Content-Encoding '{coding.lower()}'; send it unencoded "
        "(this service decodes none)"
    }
    identity = bearer(api_token) | JSON | {"Content-Encoding": "identity"}
    created = api_client.post("/v1/jobs", content=gzip.decompress(body), headers=identity)
    assert created.status_code == 201, created.text
