"""A local OpenAI-compatible chat-completions server for tests (127.0.0.1, a free port).

``serve_chat(model, answer)`` answers ``GET /v1/models`` with ``model`` and every
``POST /v1/chat/completions`` with ``answer(body, headers)`` as the assistant's message; any
other path is a 404.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler

from http_stub import JSON, Respond, StubServer, reply

Answer = Callable[[dict, Message], str]


def _respond(model: str, answer: Answer) -> Respond:
    def send(handler: BaseHTTPRequestHandler, payload: dict) -> None:
        reply(handler, 200, json.dumps(payload).encode(), JSON)

    def respond(handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "GET":
            if handler.path.rstrip("/") != "/v1/models":
                handler.send_error(404)
                return
            send(handler, {"object": "list", "data": [{"id": model, "object": "model"}]})
            return
        if handler.path != "/v1/chat/completions":
            handler.send_error(404)
            return
        body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
        content = answer(body, handler.headers)
        send(
            handler,
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
            },
        )

    return respond


@contextmanager
def serve_chat(model: str, answer: Answer) -> Iterator[str]:
    """Run the stub for the duration of the block; yields its base URL (``http://…/v1``)."""
    with StubServer(_respond(model, answer), methods=("GET", "POST")) as server:
        yield f"{server.url}/v1"
