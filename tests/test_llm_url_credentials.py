"""An LLM endpoint's URL credentials (``http://user:password@host/v1``, ``https://TOKEN@host``)
never reach a message, a job's served configuration or a 422's echo: each goes through
``kernevo.environment.without_credentials`` (``user:***@``, ``***@``).

The trial's input: ``kernevo evolve --path trsm_small --dtype float64 --compile-only
--llm-base-url http://u:s3cret@127.0.0.1:9/v1 --llm-model m`` printed ``kernevo: LLM endpoint
http://u:s3cret@127.0.0.1:9/v1 is unreachable (…)``, and ``GET /v1/jobs`` served the job's
``"base_url": "http://u:s3cret@127.0.0.1:18450/v1"`` to any ``read`` token."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import bearer
from fastapi.testclient import TestClient
from http_stub import JSON, StubServer, reply

from db import repository as repo
from db.session import make_engine, session_scope
from evolver.errors import LLMEndpointError
from evolver.job_config import LLMSection, shown_config
from evolver.llm import OPENAI_BACKEND, LLMBackend, check_endpoint, resolve_backend
from evolver.queued_llm import queued_llm_problem
from evolver.settings import EvolverSettings
from kernevo.cli import main

EVOLVE = ["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"]
SECRET = "s3cret"


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new, empty working folder: the default database and work folder would be made here."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:s3cret@127.0.0.1:9/v1", "http://u:***@127.0.0.1:9/v1"),  # the trial's
        ("http://s3cret@127.0.0.1:9/v1", "http://***@127.0.0.1:9/v1"),  # a token alone
        ("http://u:s3cret@127.0.0.1:9/v1/", "http://u:***@127.0.0.1:9/v1"),
    ],
)
@pytest.mark.parametrize("source", ["option", "environment"])
def test_an_unreachable_endpoint_is_named_without_its_credentials(
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    shown: str,
    source: str,
) -> None:
    """Nothing listens on 127.0.0.1:9: ``evolver.llm.check_endpoint``'s unreachable line."""
    if source == "option":
        argv = [*EVOLVE, "--llm-base-url", url, "--llm-model", "m"]
    else:
        monkeypatch.setenv("KERNEVO_LLM_BASE_URL", url)
        argv = [*EVOLVE, "--llm-model", "m"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"kernevo: LLM endpoint {shown} is unreachable (Connect")
    assert SECRET not in captured.out + captured.err


@contextmanager
def _endpoint(status: int, body: bytes) -> Iterator[str]:
    """An endpoint answering every request with ``status`` and ``body``, its URL with
    credentials."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        reply(handler, status, body, JSON)

    with StubServer(respond, methods=("GET", "POST")) as server:
        yield server.url.replace("http://", f"http://u:{SECRET}@") + "/v1"


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (
            401,
            b"{}",
            "needs an API key (HTTP 401) and none is configured: name the variable "
            "holding it with KERNEVO_LLM_API_KEY_ENV (or --llm-api-key-env, llm.api_key_env)",
        ),
        (200, b'{"data": [{"id": "other"}]}', "does not serve model 'm'; it serves: other"),
        (500, b"boom", "answered HTTP 500 to a test request for model 'm': boom"),
    ],
)
def test_every_endpoint_answer_names_the_endpoint_without_its_password(
    status: int, body: bytes, says: str
) -> None:
    with _endpoint(status, body) as base:
        backend = LLMBackend(kind=OPENAI_BACKEND, model="m", base_url=base)
        with pytest.raises(LLMEndpointError) as caught:
            check_endpoint(backend, timeout_s=10)
    message = str(caught.value)
    assert message == f"LLM endpoint {base.replace(SECRET, '***')} {says}"


def _settings(**values: str) -> EvolverSettings:
    unset = dict.fromkeys(("llm_base_url", "llm_model", "llm_allowed_base_urls"))
    return EvolverSettings(**(unset | values))


def test_an_endpoint_without_a_model_is_named_without_its_credentials() -> None:
    with pytest.raises(LLMEndpointError) as caught:
        resolve_backend(LLMSection(base_url="https://s3cret@llm.example/v1"), _settings())
    assert str(caught.value).startswith(
        "LLM endpoint https://***@llm.example/v1 is configured without a model"
    )


def test_an_endpoint_a_worker_does_not_allow_is_named_without_its_credentials() -> None:
    section = LLMSection(base_url="http://u:s3cret@evil.example/v1")
    problem = queued_llm_problem(section, _settings(llm_base_url="http://127.0.0.1:9/v1"))
    assert problem is not None
    assert problem.startswith("llm.base_url http://u:***@evil.example/v1 is not an endpoint")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:s3cret@127.0.0.1:18450/v1", "http://u:***@127.0.0.1:18450/v1"),  # the trial's
        ("https://s3cret@llm.example/v1", "https://***@llm.example/v1"),
        ("http://127.0.0.1:18450/v1", "http://127.0.0.1:18450/v1"),  # nothing to hide
    ],
)
def test_a_served_job_hides_its_endpoint_credentials(
    api_client: TestClient,
    api_token: str,
    read_token: str,
    fresh_database_url: str,
    url: str,
    shown: str,
) -> None:
    """``POST``, ``GET /v1/jobs``, ``GET`` and ``PATCH /v1/jobs/{id}`` serve ``shown_config``;
    the database keeps the URL the job's requests go to."""
    body = {"path": "trsm_small", "dtype": "float64", "llm": {"base_url": url, "model": "m"}}
    created = api_client.post("/v1/jobs", json=body, headers=bearer(api_token))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    answers = [
        api_client.get("/v1/jobs", headers=bearer(read_token)),
        api_client.get(f"/v1/jobs/{job_id}", headers=bearer(read_token)),
        api_client.patch(
            f"/v1/jobs/{job_id}", json={"state": "cancelled"}, headers=bearer(api_token)
        ),
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    for answer in [created, *answers]:
        assert SECRET not in answer.text
        job = answer.json()[0] if isinstance(answer.json(), list) else answer.json()
        assert job["config"]["llm"]["base_url"] == shown
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            assert repo.get_job(s, job_id).config["llm"]["base_url"] == url
    finally:
        engine.dispose()


def test_a_refused_endpoint_url_is_not_echoed_with_its_password(
    api_client: TestClient, api_token: str
) -> None:
    """A port out of range: the 422's message and its echoed ``input`` both hide the password
    (``api.validation.brief``)."""
    bad = "http://u:s3cret@127.0.0.1:99999/v1"
    body = {"path": "trsm_small", "dtype": "float64", "llm": {"base_url": bad, "model": "m"}}
    answer = api_client.post("/v1/jobs", json=body, headers=bearer(api_token))
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == ["body", "llm", "base_url"]
    assert error["input"] == "http://u:***@127.0.0.1:99999/v1"
    assert SECRET not in answer.text


def test_shown_config_leaves_other_configurations_alone() -> None:
    """Offline jobs (no ``base_url``) and rows without an ``llm`` section are served as stored;
    the stored mapping itself is never changed."""
    stored = {"path": "trsm_small", "llm": {"base_url": "http://u:s3cret@h/v1", "model": "m"}}
    assert shown_config(stored)["llm"] == {"base_url": "http://u:***@h/v1", "model": "m"}
    assert stored["llm"]["base_url"] == "http://u:s3cret@h/v1"
    for config in ({"path": "p"}, {"llm": {"base_url": None}}, {"llm": None}):
        assert shown_config(config) == config
