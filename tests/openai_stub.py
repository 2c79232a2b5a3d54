"""An OpenAI-compatible endpoint for tests, on ``http_stub.StubServer``: ``GET …/models`` lists
:data:`MODEL` (what a job's start-up check asks), and every ``POST`` is answered by the test's
function after its body is read."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from http_stub import JSON, Respond, reply

MODEL = "stub"


def chat_completion(choices: list[dict]) -> bytes:
    """A chat completion's JSON body with ``choices`` (``[]``: none, an answer jobs fail on)."""
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices}
    ).encode()


def endpoint(answer: Respond) -> Respond:
    """The endpoint: the model listing for ``GET``; ``answer`` for each ``POST``, its body read."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        if handler.command == "GET":
            listing = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            reply(handler, 200, json.dumps(listing).encode(), JSON)
            return
        handler.rfile.read(int(handler.headers["Content-Length"]))
        answer(handler)

    return respond


def no_choices(handler: BaseHTTPRequestHandler) -> None:
    """A chat completion with no choices."""
    reply(handler, 200, chat_completion([]), JSON)
