"""One bounded HTTP request: an overall deadline and a cap on the body, for the loader's fetch
(``kernevo.client.fetch_champion``) and every request of the ``kernevo`` CLI (``best``,
``jobs --api-url``, ``cancel --api-url``).

httpx's timeouts bound each read, not the request: a server sending a byte every half second
never trips them, and ``response.json()`` reads a body to its end, however long. Here the request
runs in a daemon thread the caller waits for at most ``timeout_s``; the thread streams the body
and stops at its first chunk past the deadline or past ``max_bytes``. A step it cannot interrupt
(name resolution, headers trickling in a byte at a time) keeps only that daemon thread, never the
caller, until the server stops sending or one read waits as long as was left of ``timeout_s``.
A URL's user part is never sent (``request``'s doc says why).

httpx is imported by the first request, not with this module (``kernevo.client``'s module doc
says why the loader cares).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

    import httpx


class RequestError(Exception):
    """A request that gave no usable answer; ``str()`` is a one-line reason without the URL."""


class UnreachableError(RequestError):
    """The transport failed (refused, reset, name not resolved, a URL httpx cannot send to):
    ``str()`` is ``<httpx error type>: <its message>``."""


class TooLateError(RequestError):
    """No complete answer (headers and whole body) within ``timeout_s`` seconds."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"no complete answer within {timeout_s:g} s")
        self.timeout_s = timeout_s


class TooLargeError(RequestError):
    """A body over ``max_bytes``: its ``Content-Length`` said so, or that much arrived
    (``how``)."""

    def __init__(self, max_bytes: int, how: str) -> None:
        super().__init__(f"body over the {max_bytes}-byte cap ({how})")
        self.max_bytes = max_bytes
        self.how = how


class EncodedBodyError(RequestError):
    """A body sent with a ``Content-Encoding`` other than identity although identity was asked
    for: refused unread, since httpx decodes a chunk whole before the cap sees it (a 5 KB body
    compressed twice decoded past 1 GB, a fresh user's trial, RESULTS 19)."""

    def __init__(self, encoding: str) -> None:
        super().__init__(
            f"a body sent with Content-Encoding {encoding!r} refused unread (identity was asked "
            "for)"
        )
        self.encoding = encoding


@dataclass(frozen=True)
class Answer:
    """A complete answer: its status, headers (names lower-cased) and whole body (at most the
    cap). A redirect is an answer too (never followed): its target is ``headers["location"]``."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes


def request(
    method: str,
    url: str,
    *,
    timeout_s: float,
    max_bytes: int,
    params: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    json_body: Any = None,
    transport: httpx.BaseTransport | None = None,
    verify: ssl.SSLContext | bool = True,
) -> Answer:
    """Send ``method url`` and return the complete answer within ``timeout_s`` seconds for the
    whole request (connecting, sending, the headers and the body), its body at most
    ``max_bytes``. Redirects are not followed. ``json_body``: sent as JSON when not ``None``.
    ``transport`` replaces the network (tests pass an ``httpx.MockTransport``); ``verify`` is
    httpx's (a TLS context, or ``True`` for its default CA bundle). ``Accept-Encoding:
    identity`` is asked for: a compressed body would grow many times over in one decoded chunk
    before the cap is checked. A user part in ``url`` (``http://user:password@host``,
    ``https://TOKEN@host``) is dropped before sending, never sent as HTTP basic auth: httpx
    would turn it into an ``Authorization: Basic`` header that replaces the bearer token in
    ``headers``, the one credential a kernevo service reads (``KERNEVO_API_TOKEN``).

    Raises:
        UnreachableError: a transport error.
        TooLateError: no complete answer within ``timeout_s``.
        TooLargeError: a body over ``max_bytes``.
        EncodedBodyError: a body sent compressed (``Content-Encoding`` other than identity).
        Exception: anything else the request raised (a bug, or a value httpx refuses), handed
            over from the thread as it was raised.
    """
    _http()  # imported before the deadline starts: the import is not the server's delay
    deadline = time.monotonic() + timeout_s
    outcome: list[Answer | BaseException] = []

    def run() -> None:
        try:
            outcome.append(
                _request_until(
                    method,
                    url,
                    deadline=deadline,
                    timeout_s=timeout_s,
                    max_bytes=max_bytes,
                    params=params,
                    headers=headers,
                    json_body=json_body,
                    transport=transport,
                    verify=verify,
                )
            )
        except Exception as error:
            # An exception in a thread would only be printed, and the caller would report a
            # timeout instead: hand it over.
            outcome.append(error)

    worker = threading.Thread(target=run, name="kernevo-http", daemon=True)
    worker.start()
    worker.join(max(deadline - time.monotonic(), 0.0))
    if not outcome:
        raise TooLateError(timeout_s)
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _http() -> Any:
    """httpx, imported on first use, with httpcore: httpx imports it only when its first client
    is built (~120 ms on the CI machine), which would otherwise be inside the deadline."""
    import httpcore  # noqa: F401 - imported for its import time, see above
    import httpx

    return httpx


def _request_until(
    method: str,
    url: str,
    *,
    deadline: float,
    timeout_s: float,
    max_bytes: int,
    params: Mapping[str, Any] | None,
    headers: Mapping[str, str] | None,
    json_body: Any,
    transport: httpx.BaseTransport | None,
    verify: ssl.SSLContext | bool,
) -> Answer:
    """One request that stops at ``deadline`` (``time.monotonic()``) or past ``max_bytes``."""
    httpx = _http()
    # A timeout of 0 would make the socket non-blocking (an instant failure), not "time's up".
    timeout = httpx.Timeout(max(deadline - time.monotonic(), 1e-3))
    sent = {"Accept-Encoding": "identity", **(headers or {})}
    try:
        # Without its user part (``request``'s doc): httpx sends one as basic auth, over the
        # bearer token. Inside the ``try``: a URL httpx cannot parse raises ``InvalidURL`` here.
        target = httpx.URL(url).copy_with(userinfo=b"")
        with (
            httpx.Client(timeout=timeout, transport=transport, verify=verify) as client,
            client.stream(method, target, params=params, headers=sent, json=json_body) as response,
        ):
            encoding = response.headers.get("content-encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                raise EncodedBodyError(encoding)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise TooLargeError(max_bytes, f"Content-Length {declared}")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise TooLargeError(max_bytes, "stopped reading")
                if time.monotonic() > deadline:
                    raise TooLateError(timeout_s)
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        if time.monotonic() > deadline:  # a read that timed out at the deadline: too late
            raise TooLateError(timeout_s) from None
        raise UnreachableError(f"{type(error).__name__}: {error}") from None
    return Answer(
        response.status_code,
        {name.lower(): value for name, value in response.headers.items()},
        bytes(body),
    )
