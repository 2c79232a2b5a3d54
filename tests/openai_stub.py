"""A local OpenAI-compatible chat-completions server for tests (127.0.0.1, a free port).

``serve_chat(model, answer)`` answers ``GET /v1/models`` with ``model`` and every
``POST /v1/chat/completions`` with ``answer(body, headers)`` as the assistant's message; any
other path is a 404. ``endpoint(raw)``, for answers that are not a completion's message (none in
time, no choices, broken JSON), lists :data:`MODEL` for every ``GET`` and leaves each ``POST``,
its body read, to ``raw``, which writes the whole answer (``chat_completion`` builds a body).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import Message
from http.server import BaseHTTPRequestHandler

from http_stub import JSON, Respond, StubServer, reply

Answer = Callable[[dict, Message], str]
MODEL = "stub"


def _list_models(handler: BaseHTTPRequestHandler, model: str) -> None:
    """The model listing a job's start-up check asks for: ``model`` alone."""
    listing = {"object": "list", "data": [{"id": model, "object": "model"}]}
    reply(handler, 200, json.dumps(listing).encode(), JSON)


def _respond(model: str, answer: Answer) -> Respond:
    def send(handler: BaseHTTPRequestHandler, payload: dict) -> None:
        reply(handler, 200, json.dumps(payload).encode(), JSON)

    def respond(handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "GET":
            if handler.path.rstrip("/") != "/v1/models":
                handler.send_error(404)
                return
            _list_models(handler, model)
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


def chat_completion(choices: list[dict]) -> bytes:
    """A chat completion's JSON body with ``choices`` (``[]``: none, an answer jobs fail on)."""
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices}
    ).encode()


def endpoint(raw: Respond) -> Respond:
    """The model listing of :data:`MODEL` for ``GET``; ``raw`` for each ``POST``, its body read."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "GET":
            _list_models(handler, MODEL)
            return
        handler.rfile.read(int(handler.headers["Content-Length"]))
        raw(handler)

    return respond


def no_choices(handler: BaseHTTPRequestHandler) -> None:
    """A chat completion with no choices."""
    reply(handler, 200, chat_completion([]), JSON)
