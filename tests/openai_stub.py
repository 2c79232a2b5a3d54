"""A local OpenAI-compatible chat-completions server for tests (127.0.0.1, a free port).

``serve_chat(model, answer)`` answers ``GET /v1/models`` with ``model`` and every
``POST /v1/chat/completions`` with ``answer(body, headers)`` as the assistant's message; any
other path is a 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = Callable[[dict, Message], str]


def _handler(model: str, answer: Answer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") != "/v1/models":
                self.send_error(404)
                return
            self._send({"object": "list", "data": [{"id": model, "object": "model"}]})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            content = answer(body, self.headers)
            self._send(
                {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                }
            )

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serve_chat(model: str, answer: Answer) -> Iterator[str]:
    """Run the stub for the duration of the block; yields its base URL (``http://…/v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(model, answer))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
