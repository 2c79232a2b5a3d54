"""``--api-url`` client commands (``jobs``, ``cancel``, ``best``) facing a server that is not a
kernevo service, or that refuses them: one line on stderr, exit 1, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from http_stub import JSON, StubServer, reply

from kernevo.cli import main

_JOB = {"id": 1, "path": "trsm_small", "dtype": "float64", "gpu": "none", "state": "running"}


class _Fixed:
    """A local HTTP server answering every GET and PATCH with ``status`` and ``body`` (JSON)."""

    def __init__(self) -> None:
        self.status, self.body = 200, b"{}"
        self.server = StubServer(self._answer, methods=("GET", "PATCH"))
        self.url = self.server.url

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        reply(handler, self.status, self.body, JSON)

    def answer(self, body: Any, status: int = 200) -> None:
        self.status, self.body = status, json.dumps(body).encode()


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Fixed]:
    for name in ("KERNEVO_API_TOKEN", "KERNEVO_API_URL", "KERNEVO_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    fixed = _Fixed()
    with fixed.server:
        yield fixed


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 1 and captured.out == "" and "Traceback" not in captured.err
    [line] = captured.err.strip().splitlines()
    return line


@pytest.mark.parametrize(
    "body",
    [
        "ok",  # the trial's case: a JSON string, which crashed the listing with AttributeError
        {"status": "ok"},
        [1, 2],
        [{"id": 1}],  # a job without path, dtype, …
        [{**_JOB, "iteration": 3, "best_score": "high"}],  # a score that is not a number
    ],
    ids=["string", "object", "numbers", "missing-fields", "wrong-type"],
)
def test_jobs_on_another_services_answer(
    service: _Fixed, capsys: pytest.CaptureFixture[str], body: Any
) -> None:
    service.answer(body)
    line = _one_line_error(capsys, ["jobs", "--api-url", service.url])
    assert line.startswith(f"kernevo: malformed answer from {service.url}/v1/jobs: ")


def test_jobs_lists_a_kernevo_answer(service: _Fixed, capsys: pytest.CaptureFixture[str]) -> None:
    service.answer([{**_JOB, "iteration": 3, "config": {"iterations": 10}}])
    assert main(["jobs", "--api-url", service.url]) == 0
    assert "3/10" in capsys.readouterr().out


@pytest.mark.parametrize("body", ["ok", [1], {"status": "ok"}], ids=["string", "list", "object"])
def test_cancel_on_another_services_answer(
    service: _Fixed,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    body: Any,
) -> None:
    """Not "job 1 is cancelled": nothing backs that claim."""
    monkeypatch.setenv("KERNEVO_API_TOKEN", "t" * 32)
    service.answer(body)
    line = _one_line_error(capsys, ["cancel", "1", "--api-url", service.url])
    assert line.startswith(f"kernevo: malformed answer from {service.url}/v1/jobs/1: ")


def test_cancel_through_a_service_older_than_the_outcome_field(
    service: _Fixed, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", "t" * 32)
    service.answer({**_JOB, "state": "cancelled"})
    assert main(["cancel", "1", "--api-url", service.url]) == 0
    assert "job 1 is cancelled (the service did not say" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command", [["jobs"], ["best", "--dtype", "float64", "--m", "32", "--n", "32", "--gpu", "h200"]]
)
def test_401_says_which_token_to_set(
    service: _Fixed,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    """A token the service refuses: exit 1 (no token at all: exit 2, test_cli_read_token)."""
    monkeypatch.setenv("KERNEVO_API_TOKEN", "t" * 32)
    service.answer({"detail": "a bearer token is required"}, status=401)
    line = _one_line_error(capsys, [*command, "--api-url", service.url])
    assert line.startswith("kernevo: 401 from ")
    assert "set KERNEVO_API_TOKEN to a read token ('kernevo token create --scope read'" in line
