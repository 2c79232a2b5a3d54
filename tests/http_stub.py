"""A local HTTP server for tests: 127.0.0.1, a free port, a thread of this process, and every
request answered by a function the test gives.

``StubServer(respond)`` starts serving at once; ``respond(handler)`` writes the whole answer
through the ``BaseHTTPRequestHandler`` it is given (``reply`` for a plain one; a test that
trickles, never ends or lies about its length writes to ``handler.wfile`` itself) and may
record what it read from it (``handler.path``, ``handler.headers``). ``url`` is the server's
root, without a trailing slash. ``close()``, or leaving a ``with StubServer(...)`` block,
stops it: the serving thread is joined, but not the threads of answers still running, so a
server still trickling to a client that left does not hold the test up. The server speaks
HTTP/1.0 (one request per connection) and logs nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

Respond = Callable[[BaseHTTPRequestHandler], None]

JSON = {"Content-Type": "application/json"}


def reply(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer ``status`` with ``headers`` (in their order), a Content-Length and ``body``."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class StubServer:
    """A local server answering every request of ``methods`` with ``respond`` (any other method
    gets http.server's 501). With ``hang_up_ok``, a client closing the connection mid-answer
    ends that answer quietly instead of printing a traceback to stderr."""

    def __init__(
        self, respond: Respond, *, methods: tuple[str, ...] = ("GET",), hang_up_ok: bool = False
    ) -> None:
        def answer(handler: BaseHTTPRequestHandler) -> None:
            if not hang_up_ok:
                respond(handler)
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                respond(handler)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass  # a test's stderr is for what it checks

        for method in methods:
            setattr(Handler, f"do_{method}", answer)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and free the port; answers still being written are not waited for."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
