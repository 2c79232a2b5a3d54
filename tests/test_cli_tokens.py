"""``kernevo token create|list|revoke``: the secret printed once, the API accepting it with its
scope, refusing it once revoked; and the CLI sending KERNEVO_API_TOKEN to the service."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

from api.app import create_app
from kernevo.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_create_list_revoke_and_the_api_agrees(
    fresh_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ("--database-url", fresh_database_url)
    status, out, err = _run(capsys, "token", "create", "--scope", "read", "--name", "grafana", *db)
    assert status == 0, err
    secret = out.strip()
    assert re.fullmatch(r"kvt_[A-Za-z0-9_-]{43}", secret), out
    assert err.startswith("token 1 (grafana, scope read) created: shown only now")
    status, out, _ = _run(capsys, "token", "create", "--scope", "write", *db)
    writer = out.strip()
    assert status == 0 and writer != secret

    status, out, _ = _run(capsys, "token", "list", *db)
    lines = out.splitlines()
    assert status == 0 and lines[0].split() == ["id", "scope", "created", "(UTC)", "revoked",
                                                "(UTC)", "name"]  # fmt: skip
    assert [line.split()[:2] for line in lines[1:]] == [["1", "read"], ["2", "write"]]
    assert lines[1].endswith("  -                    grafana")
    assert lines[2].endswith("write token")
    assert secret not in out and writer not in out

    with TestClient(create_app(fresh_database_url)) as client:
        assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 200
        cancel = client.patch("/v1/jobs/1", json={"state": "cancelled"}, headers=bearer(secret))
        assert cancel.status_code == 403
        status, out, _ = _run(capsys, "token", "revoke", "1", *db)
        assert status == 0 and re.fullmatch(r"token 1 \(grafana\) revoked at .* UTC\n", out)
        assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 401
        assert client.get("/v1/jobs", headers=bearer(writer)).status_code == 200

    status, out, _ = _run(capsys, "token", "list", *db)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["2"]
    status, out, _ = _run(capsys, "token", "list", "--all", *db)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["1", "2"]
    revoked_row = out.splitlines()[1].split()
    assert revoked_row[-1] == "grafana" and re.fullmatch(r"\d{4}-\d\d-\d\d", revoked_row[4])


def test_token_errors_are_one_line(
    fresh_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = ("--database-url", fresh_database_url)
    status, out, err = _run(capsys, "token", "revoke", "7", *db)
    assert (status, out) == (1, "") and err == "kernevo: token 7 not found\n"
    assert _run(capsys, "token", "list", *db)[1] == "no active tokens\n"
    assert _run(capsys, "token", "list", "--all", *db)[1] == "no tokens\n"
    status, _, err = _run(capsys, "token", "create", "--name", "x\tab", "--scope", "read", *db)
    assert status == 1 and "1..128 printable characters" in err
    with pytest.raises(SystemExit) as usage:
        main(["token", "create", "--scope", "admin", *db])
    assert usage.value.code == 2
    assert "invalid choice: 'admin'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["token", "revoke", "0", *db])
    assert usage.value.code == 2


_CREATES_IT = "'kernevo evolve' or 'kernevo serve' creates and migrates it"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["token", "list"], _CREATES_IT),
        (["token", "create", "--scope", "write"], _CREATES_IT),  # the tester's: it made one
        (["token", "revoke", "1"], _CREATES_IT),
        # A new database holds no job to cancel: the advice is the job's database.
        (["cancel", "1"], "point --database-url (or KERNEVO_DATABASE_URL) at the job's database"),
    ],
)
def test_no_token_command_creates_a_database(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    """A mistyped --database-url is refused the same way by every command that has nothing to
    do in a new database, and the file (and its folder) is not created."""
    path = tmp_path / "missing" / "k.db"
    url = f"sqlite:///{path}"
    status, out, err = _run(capsys, *argv, "--database-url", url)
    assert (status, out) == (1, "")
    assert err == f"kernevo: database {url}: no such file {path} ({hint})\n"
    assert not path.parent.exists()


def test_the_cli_sends_kernevo_api_token_to_the_service(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx

    from kernevo import http_get

    seen: list[dict[str, str]] = []
    real = http_get.request

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append({k: v for k, v in request.headers.items() if k == "authorization"})
        return httpx.Response(200, json=[])

    def fake_request(method: str, url: str, **kwargs: Any) -> http_get.Answer:
        return real(method, url, **{**kwargs, "transport": httpx.MockTransport(answer)})

    monkeypatch.setattr(http_get, "request", fake_request)
    assert main(["jobs", "--api-url", "http://127.0.0.1:9"]) == 0
    monkeypatch.setenv("KERNEVO_API_TOKEN", "kvt_client-0123456789-abcdefghijklmn")
    assert main(["jobs", "--api-url", "http://127.0.0.1:9"]) == 0
    assert seen == [{}, {"authorization": "Bearer kvt_client-0123456789-abcdefghijklmn"}]
    assert capsys.readouterr().out == "no jobs\nno jobs\n"
