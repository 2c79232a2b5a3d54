"""Every HTTP request of the CLI (``best``, ``jobs --api-url``, ``cancel --api-url``) and the
loader's fetch goes through ``kernevo.http_get.request``: an overall deadline
(``KERNEVO_REQUEST_TIMEOUT_S``), a body cap, redirects not followed. A server that trickles,
never ends its body, redirects or answers a bare 404 is one line on stderr and exit 1, in
seconds; a 404 counts as "no champion" for the loader only with the service's own error body.
Servers are local threads on 127.0.0.1."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from http_stub import JSON, Respond, StubServer, reply

from kernevo import http_get
from kernevo.cli import main
from kernevo.client import MAX_RESPONSE_BYTES, ChampionKey, fetch_champion

# The longest any server here keeps a connection busy: a client that failed to stop is not
# kept alive by the server past this (the test then fails on its own time bound instead).
_SERVER_GIVES_UP_S = 20.0


def _drip(handler: BaseHTTPRequestHandler) -> None:
    """A 200 whose JSON body comes one byte every 0.5 s (the fresh user's server)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    started = time.monotonic()
    while time.monotonic() - started < _SERVER_GIVES_UP_S:
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(0.5)


def _endless(handler: BaseHTTPRequestHandler) -> None:
    """A 200 with no Content-Length whose body never ends (until the client hangs up)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    chunk = b"[" + b"0," * 32767
    started = time.monotonic()
    while time.monotonic() - started < _SERVER_GIVES_UP_S:
        handler.wfile.write(chunk)


def _declared_huge(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", str(10 * MAX_RESPONSE_BYTES))
    handler.end_headers()


def _bare_404(handler: BaseHTTPRequestHandler) -> None:
    reply(handler, 404)


def _redirect(handler: BaseHTTPRequestHandler) -> None:
    reply(handler, 302, headers={"Location": "https://login.example/sso"})


def _starlette_404(handler: BaseHTTPRequestHandler) -> None:
    """What a kernevo service under another base URL (or any FastAPI app) answers."""
    reply(handler, 404, b'{"detail": "Not Found"}', JSON)


def _double_gzip(handler: BaseHTTPRequestHandler) -> None:
    """A 200 compressed twice although identity was asked for: 2 MiB of zeros compressed to a
    few KB (the fresh user's bomb expanded 5 KB to 3 GiB)."""
    body = gzip.compress(gzip.compress(b"0" * (2 << 20)))
    reply(handler, 200, body, {**JSON, "Content-Encoding": "gzip, gzip"})


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Respond], StubServer]]:
    """Starts local servers whose every GET and PATCH runs the given behaviour; the client
    hanging up mid-answer is what it should do, so that is no error of the server's."""
    for name in ("KERNEVO_API_URL", "KERNEVO_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNEVO_API_TOKEN", "t" * 32)  # cancel needs one; harmless elsewhere
    with ExitStack() as started:

        def start(behaviour: Respond) -> StubServer:
            server = StubServer(behaviour, methods=("GET", "PATCH"), hang_up_ok=True)
            return started.enter_context(server)

        yield start


_COMMANDS = {
    "best": ["best", "--dtype", "float64", "--m", "32", "--n", "32", "--gpu", "h200"],
    "jobs": ["jobs"],
    "cancel": ["cancel", "7"],
}


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 1 and captured.out == "" and "Traceback" not in captured.err
    [line] = captured.err.strip().splitlines()
    return line


@pytest.mark.parametrize("command", ["best", "jobs", "cancel"])
def test_a_trickling_server_is_cut_off_at_the_request_timeout(
    serve: Callable[[Respond], StubServer],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
) -> None:
    """The fresh user's server (a byte every 0.5 s) ran ``kernevo best`` past 100 s: httpx's
    per-read timeout never tripped. Caught by http_get.request's overall deadline."""
    monkeypatch.setenv("KERNEVO_REQUEST_TIMEOUT_S", "1")
    server = serve(_drip)
    started = time.monotonic()
    line = _one_line_error(capsys, [*_COMMANDS[command], "--api-url", server.url])
    assert time.monotonic() - started < 5
    assert line.startswith(f"kernevo: service at {server.url}/v1/")
    assert line.endswith("no complete answer within 1 s (KERNEVO_REQUEST_TIMEOUT_S)")


@pytest.mark.parametrize("command", ["best", "jobs", "cancel"])
@pytest.mark.parametrize(
    ("behaviour", "how"),
    [(_endless, "stopped reading"), (_declared_huge, f"Content-Length {10 * MAX_RESPONSE_BYTES}")],
    ids=["endless", "declared"],
)
def test_a_body_over_the_cap_is_refused(
    serve: Callable[[Respond], StubServer],
    capsys: pytest.CaptureFixture[str],
    command: str,
    behaviour: Respond,
    how: str,
) -> None:
    """An endless body grew ``kernevo best`` to 23 GB (``response.json()`` read it all).
    Caught by http_get.request's cap on the streamed body."""
    server = serve(behaviour)
    line = _one_line_error(capsys, [*_COMMANDS[command], "--api-url", server.url])
    assert line.startswith(f"kernevo: service at {server.url}/v1/")
    assert line.endswith(f"body over the {MAX_RESPONSE_BYTES}-byte cap ({how})")


@pytest.mark.parametrize("command", ["best", "jobs", "cancel"])
def test_a_404_without_a_kernevo_body_asks_whether_it_is_a_service(
    serve: Callable[[Respond], StubServer], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """It printed ``404 from URL: Exception``. Caught by _service_request (no kernevo error
    body)."""
    server = serve(_bare_404)
    line = _one_line_error(capsys, [*_COMMANDS[command], "--api-url", server.url])
    assert line.startswith(f"kernevo: 404 from {server.url}/v1/")
    assert line.endswith(
        "with no kernevo error body: is KERNEVO_API_URL (or --api-url) a kernevo service?"
    )


@pytest.mark.parametrize("command", ["best", "jobs", "cancel"])
def test_a_redirect_is_not_followed_and_says_where_it_went(
    serve: Callable[[Respond], StubServer], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """It printed "answered with something that is not JSON". Caught by _service_request."""
    server = serve(_redirect)
    line = _one_line_error(capsys, [*_COMMANDS[command], "--api-url", server.url])
    assert line.startswith(f"kernevo: 302 redirect from {server.url}/v1/")
    assert line.endswith(
        "to https://login.example/sso: not followed; point KERNEVO_API_URL (or --api-url) at "
        "the service itself"
    )


@pytest.mark.parametrize("command", ["best", "jobs", "cancel"])
def test_a_compressed_body_is_refused_unread(
    serve: Callable[[Respond], StubServer], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A body compressed twice grew the CLI and the loader past 1 GB: httpx decodes a chunk
    whole before the cap sees it. Caught by http_get.request's Content-Encoding check."""
    server = serve(_double_gzip)
    line = _one_line_error(capsys, [*_COMMANDS[command], "--api-url", server.url])
    assert line.startswith(f"kernevo: service at {server.url}/v1/")
    assert line.endswith(
        "a body sent with Content-Encoding 'gzip, gzip' refused unread (identity was asked for)"
    )


def test_cancel_names_the_url_of_a_404_that_is_not_the_services_job_line(
    serve: Callable[[Respond], StubServer], capsys: pytest.CaptureFixture[str]
) -> None:
    """``cancel 7`` printed only "kernevo: Not Found", which reads as "job 7 not found".
    Caught by _cancel_through_service: only the service's "job 7 …" line is printed bare."""
    server = serve(_starlette_404)
    line = _one_line_error(capsys, [*_COMMANDS["cancel"], "--api-url", server.url])
    assert line == f"kernevo: 404 from {server.url}/v1/jobs/7: Not Found"


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate", "GZIP "])
def test_the_loaders_fetch_refuses_any_encoding_but_identity(encoding: str) -> None:
    """Caught by http_get.request's Content-Encoding check: an unusable answer, not a champion
    and not a remembered "no champion"."""
    transport = httpx.MockTransport(
        # A stream, as the network gives: a Response built from content= is decoded at once.
        lambda request: httpx.Response(
            200,
            headers={"Content-Encoding": encoding},
            stream=httpx.ByteStream(b"\x1f\x8b compressed"),
        )
    )
    outcome = fetch_champion(
        "http://127.0.0.1:9", op="trsm", key=_KEY, timeout_s=5, transport=transport, m=32, n=32
    )
    assert outcome.status == "invalid"
    assert "refused unread (identity was asked for)" in outcome.detail
    identity = httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"Content-Encoding": "identity"}, content=b"x")
    )
    answer = http_get.request(
        "GET", "http://127.0.0.1:9/x", timeout_s=5, max_bytes=3, transport=identity
    )
    assert answer.body == b"x"


def test_the_request_helper_hands_back_a_complete_answer() -> None:
    """The helper itself: a plain answer comes back whole, with lower-cased headers."""
    transport = httpx.MockTransport(
        lambda request: httpx.Response(201, headers={"X-Thing": "1"}, content=b"abc")
    )
    answer = http_get.request(
        "GET", "http://127.0.0.1:9/x", timeout_s=5, max_bytes=3, transport=transport
    )
    assert (answer.status_code, answer.headers["x-thing"], answer.body) == (201, "1", b"abc")
    with pytest.raises(http_get.TooLargeError, match="body over the 2-byte cap"):
        http_get.request(
            "GET", "http://127.0.0.1:9/x", timeout_s=5, max_bytes=2, transport=transport
        )


# --- the loader's fetch: which 404 means "no champion" -------------------------------------

_KEY = ChampionKey("nvidia-h200", "trsm_small", "float64", "m1_64")


def _fetch_answering(status: int, body: bytes) -> str:
    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    outcome = fetch_champion(
        "http://127.0.0.1:9", op="trsm", key=_KEY, timeout_s=5, transport=transport, m=32, n=32
    )
    return outcome.status


def test_the_services_own_404_is_no_champion() -> None:
    body = b'{"detail": "no champion yet for path trsm_small float64 on nvidia-h200"}'
    assert _fetch_answering(404, body) == "not_found"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"<html>Not Found</html>",
        b'{"detail": "Not Found"}',
        b'{"error": "none"}',
        b'{"detail": "Item not found"}',
    ],
    ids=["empty", "html", "no-route", "other-json", "other-apps-detail"],
)
def test_another_404_is_unusable_not_a_remembered_no_champion(body: bytes) -> None:
    """The loader remembers "no champion" for an hour: a proxy's 404, or a kernevo service
    under another base URL (Starlette's "Not Found"), must not be remembered as one. Caught by
    kernevo.client.service_error."""
    assert _fetch_answering(404, body) == "invalid"


def test_an_empty_404_is_said_to_be_empty_not_left_dangling() -> None:
    """The reason read "(is KERNEVO_API_URL a kernevo service?): ; disk cache: no entry" (re-trial
    finding). Caught by kernevo.client._outcome: it says what came instead."""
    transport = httpx.MockTransport(lambda request: httpx.Response(404, content=b""))
    outcome = fetch_champion(
        "http://127.0.0.1:9", op="trsm", key=_KEY, timeout_s=5, transport=transport, m=32, n=32
    )
    assert outcome.status == "invalid"
    assert outcome.detail.endswith("a kernevo service?); its body was empty")


def _no_champion_404(handler: BaseHTTPRequestHandler) -> None:
    detail = "no champion yet for path trsm_small float64 on h200 (shape bucket m64n64)"
    reply(handler, 404, json.dumps({"detail": detail}).encode(), JSON)


def test_best_without_a_champion_says_what_the_loader_answers_with_instead(
    serve: Callable[[Respond], StubServer], capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh user's finding: the 404 said no champion, not what an application then gets."""
    server = serve(_no_champion_404)
    line = _one_line_error(capsys, [*_COMMANDS["best"], "--api-url", server.url])
    assert line.startswith(f"kernevo: 404 from {server.url}/v1/kernels/best")
    assert "no champion yet for path trsm_small float64" in line
    assert line.endswith("; kernevo.load falls back to cuBLAS ?trsm (through CuPy) there")
