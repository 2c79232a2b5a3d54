"""A missing ``KERNEVO_API_TOKEN`` is a configuration error (exit 2) for reads as for writes.

A fresh-user trial: ``kernevo jobs --api-url URL`` without the variable printed the service's
401 and exited 1, ``kernevo cancel 2 --api-url URL`` exited 2. A write always needs a token and
is refused before any request; a read asks (its route may be open) and the service's 401 to a
request without a token is the same missing setting: exit 2. A token the service refuses stays
exit 1.
"""

from __future__ import annotations

import pytest
from cli_through_app import through_the_app
from fastapi.testclient import TestClient

from kernevo.cli import main

READ_HINT = (
    "set KERNEVO_API_TOKEN to a read token ('kernevo token create --scope read' on the "
    "service's database)"
)
WRITE_HINT = READ_HINT.replace("read", "write")
URL = "http://kernevo.test"


def test_reads_and_writes_without_a_token_are_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, api_client: TestClient
) -> None:
    through_the_app(monkeypatch, api_client)
    monkeypatch.delenv("KERNEVO_API_TOKEN", raising=False)
    assert main(["jobs", "--api-url", URL]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"kernevo: 401 from {URL}/v1/jobs: missing bearer token")
    assert captured.err.endswith(f"; {READ_HINT}\n") and captured.err.count("\n") == 1

    assert main(["cancel", "4", "--api-url", URL]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (
        "",
        f"kernevo: cancel through the service needs a token: {WRITE_HINT}\n",
    )


def test_a_token_the_service_refuses_is_exit_1_for_reads_and_writes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, api_client: TestClient
) -> None:
    through_the_app(monkeypatch, api_client)
    monkeypatch.setenv("KERNEVO_API_TOKEN", "x" * 40)
    assert main(["jobs", "--api-url", URL]) == 1
    assert capsys.readouterr().err == (
        f"kernevo: 401 from {URL}/v1/jobs: invalid bearer token; {READ_HINT}\n"
    )
    assert main(["cancel", "4", "--api-url", URL]) == 1
    assert capsys.readouterr().err == (
        f"kernevo: 401 from {URL}/v1/jobs/4: invalid bearer token; {WRITE_HINT}\n"
    )
