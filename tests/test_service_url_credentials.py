"""A service URL's user part (``KERNEVO_API_URL=http://user:pw@host``, ``--api-url
https://TOKEN@host``) is never sent: ``kernevo.http_get.request`` drops it before sending, so
the bearer token ``KERNEVO_API_TOKEN`` is the only ``Authorization`` a kernevo service sees,
and none is sent without one. Lines still name the URL with its credentials as ``***``.

The trial's input: ``kernevo jobs --api-url http://user:pw@127.0.0.1:PORT`` with
``KERNEVO_API_TOKEN`` set sent ``Authorization: Basic dXNlcjpwdw==`` (httpx builds it from the
URL, replacing the bearer header), and the loader's fetch did the same."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

import pytest
from http_stub import JSON, StubServer, reply

from kernevo import http_get
from kernevo.cli import main
from kernevo.client import ChampionKey, fetch_champion

TOKEN = "r" * 40
KEY = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")
# One user part of each kind: user and password, a user (often a token) alone, an empty one.
USER_PARTS = ["user:pw@", "s3cret@", "@"]


@dataclass
class Seen:
    """What the stub read of each request: its ``Authorization`` header (``None``: absent)
    and its path."""

    authorization: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


@contextmanager
def _service(status: int, body: bytes, user_part: str) -> Iterator[tuple[str, Seen]]:
    """A stub answering every GET and PATCH with ``status`` and ``body``; its URL carries
    ``user_part``."""
    seen = Seen()

    def respond(handler: BaseHTTPRequestHandler) -> None:
        seen.authorization.append(handler.headers.get("Authorization"))
        seen.paths.append(handler.path)
        reply(handler, status, body, JSON)

    with StubServer(respond, methods=("GET", "PATCH")) as server:
        yield server.url.replace("http://", f"http://{user_part}"), seen


@pytest.mark.parametrize("user_part", USER_PARTS)
@pytest.mark.parametrize("source", ["option", "environment"])
def test_jobs_sends_the_bearer_token_and_not_the_urls_user_part(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    user_part: str,
    source: str,
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", TOKEN)
    with _service(200, b"[]", user_part) as (url, seen):
        if source == "option":
            code = main(["jobs", "--api-url", url])
        else:  # kernevo best reads KERNEVO_API_URL (jobs takes only --api-url)
            monkeypatch.setenv("KERNEVO_API_URL", url)
            code = main(["best", "--dtype", "float64", "--m", "64", "--n", "64", "--gpu", "h200"])
    captured = capsys.readouterr()
    assert seen.authorization == [f"Bearer {TOKEN}"]
    if source == "option":
        assert (code, captured.out, captured.err) == (0, "no jobs\n", "")
        assert seen.paths == ["/v1/jobs?limit=20"]
    else:  # the stub's [] is no champion: a malformed answer, named without the password
        assert code == 1
        assert seen.paths[0].startswith("/v1/kernels/best?")
        assert "pw" not in captured.err and "s3cret" not in captured.err


@pytest.mark.parametrize("user_part", USER_PARTS)
def test_without_a_token_no_authorization_is_sent(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, user_part: str
) -> None:
    """No ``KERNEVO_API_TOKEN``: no header at all, not basic auth from the URL; the service's
    401 is the CLI's token line, its URL masked: a setting missing, exit 2."""
    monkeypatch.delenv("KERNEVO_API_TOKEN", raising=False)
    with _service(401, b'{"detail": "a token is required"}', user_part) as (url, seen):
        assert main(["jobs", "--api-url", url]) == 2
    assert seen.authorization == [None]
    err = capsys.readouterr().err
    shown = {"user:pw@": "user:***@", "s3cret@": "***@", "@": "***@"}[user_part]
    assert err.startswith(f"kernevo: 401 from http://{shown}127.0.0.1:")
    assert "a token is required; set KERNEVO_API_TOKEN to a read token" in err


def test_cancel_sends_the_write_token_and_not_the_urls_user_part(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", TOKEN)
    body = b'{"id": 3, "state": "cancelled", "outcome": "cancelled"}'
    with _service(200, body, "user:pw@") as (url, seen):
        assert main(["cancel", "3", "--api-url", url]) == 0
    assert seen.authorization == [f"Bearer {TOKEN}"]
    assert seen.paths == ["/v1/jobs/3"]
    assert capsys.readouterr().out.startswith("job 3 ")


@pytest.mark.parametrize("token", [TOKEN, None])
def test_the_loaders_fetch_sends_only_its_token(token: str | None) -> None:
    no_champion = b'{"detail": "no champion yet for path trsm_small"}'  # the service's 404
    with _service(404, no_champion, "user:pw@") as (url, seen):
        outcome = fetch_champion(url, op="trsm", key=KEY, timeout_s=5.0, token=token, m=64, n=64)
    assert outcome.status == "not_found"
    assert seen.authorization == [None if token is None else f"Bearer {token}"]


def test_a_request_without_headers_sends_no_authorization() -> None:
    """``kernevo.http_get.request`` itself, the one function every request goes through."""
    with _service(200, b"{}", "user:pw@") as (url, seen):
        answer = http_get.request("GET", f"{url}/x?a=1", timeout_s=5.0, max_bytes=100)
    assert (answer.status_code, answer.body) == (200, b"{}")
    assert seen.authorization == [None]
    assert seen.paths == ["/x?a=1"]
