"""Lines a fresh-user trial found short of what the CLI says elsewhere, each kept with its input:

- ``kernevo cancel 4 --api-url http://127.0.0.1:18431`` without ``KERNEVO_API_TOKEN`` exited 1
  with "needs KERNEVO_API_TOKEN (the bearer token)": a setting missing is a configuration error
  (exit 2) and the line says how to make a write token, as ``kernevo jobs`` does on a 401;
- ``kernevo evolve --resume 999`` and ``kernevo cancel 999`` said "job 999 not found" alone: now
  with where the jobs are listed;
- ``kernevo keys --dir FILE`` said "cannot be created or written: File exists", where
  ``--work-dir FILE`` says "is a file, not a folder";
- ``kernevo token revoke 3`` twice printed "revoked at …" twice, exit 0, where ``cancel`` of a
  cancelled job says "was already cancelled; nothing changed";
- an LLM endpoint answering 401 with no key configured "refused the API key", none sent;
- ``kernevo best --shape m=64,n=64,k=3`` left out the service's "; k is a parameter of
  solve_tri" (README: the CLI says a shape problem in the service's words).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from cli_through_app import through_the_app
from fastapi.testclient import TestClient
from http_stub import JSON, StubServer, reply

from evolver.errors import LLMEndpointError
from evolver.llm import OPENAI_BACKEND, LLMBackend, check_endpoint
from evolver.store import open_store
from kernevo.cli import main

WRITE_HINT = "set KERNEVO_API_TOKEN to a write token ('kernevo token create --scope write' on "
WRITE_HINT += "the service's database)"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernevo SQLite database with no job, as ``KERNEVO_DATABASE_URL``."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    open_store(url).dispose()
    monkeypatch.setenv("KERNEVO_DATABASE_URL", url)
    monkeypatch.setenv("KERNEVO_WORK_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    return url


# --- 1. cancel through the service without a (write) token ------------------------------------


def test_cancel_through_the_service_without_a_token_is_a_configuration_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial's input: refused by ``_cancel_through_service`` before any request (nothing
    listens on the port), exit 2."""
    monkeypatch.delenv("KERNEVO_API_TOKEN", raising=False)
    code, out, err = _run(capsys, "cancel", "4", "--api-url", "http://127.0.0.1:18431")
    assert (code, out) == (2, "")
    assert err == f"kernevo: cancel through the service needs a token: {WRITE_HINT}\n"


@pytest.mark.parametrize("token", ["read", "unknown"])
def test_a_token_the_service_refuses_for_cancel_says_how_to_make_a_write_one(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    api_client: TestClient,
    read_token: str,
    token: str,
) -> None:
    """A read token (403) or one the service does not know (401): the service's words, then
    how to make a write token; exit 1 (the service answered)."""
    through_the_app(monkeypatch, api_client)
    monkeypatch.setenv("KERNEVO_API_TOKEN", read_token if token == "read" else "x" * 40)
    code, out, err = _run(capsys, "cancel", "4", "--api-url", "http://kernevo.test")
    said = {
        "read": "403 from http://kernevo.test/v1/jobs/4: token 'reader' has scope read; this "
        "needs write",
        "unknown": "401 from http://kernevo.test/v1/jobs/4: invalid bearer token",
    }[token]
    assert (code, out, err) == (1, "", f"kernevo: {said}; {WRITE_HINT}\n")


# --- 2. job N not found -----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["evolve", "--resume", "999"], ["cancel", "999"]])
def test_a_job_not_found_says_where_the_jobs_are_listed(
    capsys: pytest.CaptureFixture[str], database: str, argv: list[str]
) -> None:
    """The trial's inputs: ``kernevo.cli.errors._with_job_hint`` on the runner's and the database's
    line."""
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (1, "")
    assert err == "kernevo: job 999 not found; 'kernevo jobs' lists the jobs\n"
    code, _, err = _run(capsys, *argv, "--database-url", database)
    assert code == 1
    assert err == f"kernevo: job 999 not found; 'kernevo jobs --database-url {database}' lists "\
        "the jobs\n"  # fmt: skip


def test_a_job_the_service_does_not_have_names_the_service_listing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, api_client: TestClient
) -> None:
    """The service's 404 line gets the hint too, naming the service."""
    through_the_app(monkeypatch, api_client)
    code, _, err = _run(capsys, "cancel", "999", "--api-url", "http://kernevo.test")
    assert code == 1
    assert err == (
        "kernevo: job 999 not found; 'kernevo jobs --api-url http://kernevo.test' lists the jobs\n"
    )


def test_only_a_job_not_found_line_gets_the_hint(
    capsys: pytest.CaptureFixture[str], database: str
) -> None:
    """A line that merely starts alike is left as it is."""
    code, _, err = _run(capsys, "evolve", "--resume", "--path", "trsm_small", "--dtype", "float64")
    assert code == 1
    assert err == "kernevo: no unfinished trsm_small float64 job to resume\n"


# --- 3. a folder that is a file ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["keys", "--dir", "{f}"], "key folder {f} is a file, not a folder (--dir, else "
         "KERNEVO_KEY_DIR)"),
        (["keys", "--dir", "{f}/sub"], "key folder {f}/sub cannot be created: {f} is a file, not "
         "a folder"),
        (["export", "--op", "trsm", "--dtype", "float32", "--gpu", "nvidia-h200", "-o", "{f}"],
         "export folder {f} is a file, not a folder (-o/--output)"),
    ],
)  # fmt: skip
def test_a_folder_that_is_a_file_is_said_as_for_the_work_folder(
    capsys: pytest.CaptureFixture[str],
    database: str,
    tmp_path: Path,
    argv: list[str],
    says: str,
) -> None:
    """The trial's ``keys --dir FILE`` and kin: ``kernevo.cli.folders._file_in_the_way``, exit 1, no
    errno text."""
    file = tmp_path / "file"
    file.write_text("not a folder\n")
    code, out, err = _run(capsys, *(arg.format(f=file) for arg in argv))
    assert (code, out) == (1, "")
    assert err == f"kernevo: {says.format(f=file)}\n"
    assert file.read_text() == "not a folder\n"


# --- 4. revoking a revoked token --------------------------------------------------------------


def test_revoking_twice_says_nothing_changed(
    capsys: pytest.CaptureFixture[str], database: str
) -> None:
    for _ in range(3):
        assert _run(capsys, "token", "create", "--scope", "read")[0] == 0
    code, first, _ = _run(capsys, "token", "revoke", "3")
    assert code == 0 and first.startswith("token 3 (read token) revoked at ")
    when = first.removeprefix("token 3 (read token) ").rstrip("\n")
    code, second, err = _run(capsys, "token", "revoke", "3")
    assert (code, second, err) == (
        0,
        f"token 3 (read token) was already {when}; nothing changed\n",
        "",
    )
    code, other, _ = _run(capsys, "token", "revoke", "2")  # another token: revoked now
    assert code == 0 and other.startswith("token 2 (read token) revoked at ")


# --- 5. an LLM endpoint's 401 with no key configured ------------------------------------------


@contextmanager
def _endpoint(listing: int, chat: int) -> Iterator[str]:
    """An endpoint answering ``GET /models`` with ``listing`` and the chat probe with ``chat``."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        reply(handler, listing if handler.command == "GET" else chat, b"{}", JSON)

    with StubServer(respond, methods=("GET", "POST")) as server:
        yield server.url + "/v1"


NEEDS_KEY = (
    "needs an API key (HTTP {}) and none is configured: name the variable holding it with "
    "KERNEVO_LLM_API_KEY_ENV (or --llm-api-key-env, llm.api_key_env)"
)


@pytest.mark.parametrize(
    ("listing", "chat", "key", "says"),
    [
        (401, 200, None, NEEDS_KEY.format(401)),  # the trial's: no key, refused
        (403, 200, None, NEEDS_KEY.format(403)),
        (404, 401, None, NEEDS_KEY.format(401)),  # no listing: the probe's answer
        (401, 200, "sk-test", "refused the API key (HTTP 401)"),  # a key was sent
        (404, 403, "sk-test", "refused the API key (HTTP 403)"),
    ],
)
def test_an_endpoint_refusing_says_whether_a_key_was_sent(
    monkeypatch: pytest.MonkeyPatch, listing: int, chat: int, key: str | None, says: str
) -> None:
    """``evolver.llm._key_refused``: with no key variable the client sends a placeholder."""
    monkeypatch.setenv("TEST_LLM_KEY", key or "")
    with _endpoint(listing, chat) as base:
        backend = LLMBackend(
            kind=OPENAI_BACKEND,
            model="m",
            base_url=base,
            api_key_env="TEST_LLM_KEY" if key else None,
        )
        with pytest.raises(LLMEndpointError) as caught:
            check_endpoint(backend, timeout_s=10)
    assert str(caught.value) == f"LLM endpoint {base} {says}"


# --- 6. a shape parameter of another op, in the service's words --------------------------------


@pytest.mark.parametrize(
    ("op", "shape", "name"),
    [
        ("trsm", "m=64,n=64,k=3", "k"),  # the trial's
        ("solve_tri", "m=64,n=64,k=3,b2=1,b3=1", "m"),
        ("band_bidiag", "n=4096,bandwidth=32,batch=2", "batch"),
    ],
)
def test_best_names_the_ops_of_a_foreign_parameter_as_the_service(
    capsys: pytest.CaptureFixture[str],
    api_client: TestClient,
    op: str,
    shape: str,
    name: str,
) -> None:
    """``seeds.ops.not_a_param`` writes both: the CLI's usage line holds the 422's ``msg``."""
    dtype = "float32"
    query = dict(pair.split("=") for pair in shape.split(","))
    answer = api_client.get(
        "/v1/kernels/best", params={"op": op, "dtype": dtype, "gpu": "nvidia-h200", **query}
    )
    assert answer.status_code == 422
    [service] = [e["msg"] for e in answer.json()["detail"] if e["loc"] == ["query", name]]
    assert "is a parameter of" in service
    with pytest.raises(SystemExit) as exited:
        main(["best", "--op", op, "--dtype", dtype, "--gpu", "nvidia-h200", "--shape", shape])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kernevo best: error: {service} (--shape ")


def test_a_name_no_op_has_is_said_without_owners(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["best", "--dtype", "float32", "--gpu", "nvidia-h200", "--shape", "m=8,n=8,z=3"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "kernevo best: error: z is not a shape parameter of trsm (its parameters: m, n) "
        "(--shape m=…,n=…) (see kernevo best --help)\n"
    )
