"""A job queued through the API cannot read the worker's environment through its LLM settings:
the key variable is the worker's own, never a ``KERNEVO_*`` one, and the key goes only to
endpoints the worker's operator allows (``evolver.queued_llm``).

The tester's input: ``POST /v1/jobs`` with ``llm: {base_url: <their server>, api_key_env:
KERNEVO_DATABASE_URL}``; their server received ``Authorization: Bearer sqlite:////…/k.db``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from http_stub import StubServer

from db import queue
from db import repository as repo
from db.migrate import upgrade
from db.session import make_engine, session_scope
from evolver.job_config import JobConfig, LLMSection
from evolver.queued_llm import queued_llm_problem
from evolver.settings import EvolverSettings

ALLOWED = "http://127.0.0.1:9/v1"


def _settings(**values: Any) -> EvolverSettings:
    unset = dict.fromkeys(("llm_base_url", "llm_api_key_env", "llm_allowed_base_urls"))
    return EvolverSettings(**(unset | values))


@pytest.mark.parametrize(
    ("section", "settings", "says"),
    [
        # The tester's job: a key variable of kernevo's own, to their endpoint.
        (
            {"base_url": "http://evil.example/v1", "api_key_env": "KERNEVO_DATABASE_URL"},
            {"llm_api_key_env": "OPENAI_API_KEY"},
            "cannot choose the variable holding the LLM key",
        ),
        # Any other variable the job names, even one that exists on every host.
        ({"api_key_env": "HOME"}, {}, "the worker's KERNEVO_LLM_API_KEY_ENV (unset) decides"),
        ({"api_key_env": "AWS_SECRET_ACCESS_KEY"}, {"llm_api_key_env": "OPENAI_API_KEY"}, "cannot"),
        # The worker's own setting naming a KERNEVO_ variable is refused for queued jobs too.
        ({}, {"llm_api_key_env": "KERNEVO_DATABASE_URL"}, "one of kernevo's own settings"),
        ({}, {"llm_api_key_env": "kernevo_api_token"}, "one of kernevo's own settings"),
        # An endpoint the worker's operator did not allow gets no key.
        (
            {"base_url": "http://evil.example/v1"},
            {"llm_base_url": ALLOWED, "llm_api_key_env": "OPENAI_API_KEY"},
            "llm.base_url http://evil.example/v1 is not an endpoint this worker sends",
        ),
        ({"base_url": "http://127.0.0.1:9/v2"}, {"llm_base_url": ALLOWED}, "is not an endpoint"),
        ({"base_url": ALLOWED}, {}, "KERNEVO_LLM_ALLOWED_BASE_URLS on the worker"),
        # A model with no endpoint anywhere: the offline mutator would drop it unsaid (a trial's
        # finding; kernevo evolve refuses --llm-model alone).
        ({"model": "x"}, {}, "llm.model 'x' does nothing without an LLM endpoint"),
        ({"model": "x", "temperature": 0.2}, {}, "set KERNEVO_LLM_BASE_URL on the worker"),
    ],
)
def test_what_a_queued_job_may_not_choose(
    section: dict[str, str], settings: dict[str, str], says: str
) -> None:
    problem = queued_llm_problem(LLMSection(**section), _settings(**settings))
    assert problem is not None and says in problem and "\n" not in problem


@pytest.mark.parametrize(
    ("section", "settings"),
    [
        ({}, {}),  # offline mutator
        ({"temperature": 0.2}, {}),  # offline: a temperature changes nothing, harmlessly
        ({"model": "m"}, {"llm_base_url": ALLOWED}),  # a model at the worker's endpoint
        ({}, {"llm_base_url": ALLOWED, "llm_api_key_env": "OPENAI_API_KEY"}),
        ({"base_url": ALLOWED + "/"}, {"llm_base_url": ALLOWED}),
        ({"base_url": "http://other:8000/v1"}, {"llm_allowed_base_urls": "http://other:8000/v1/"}),
        (
            {"base_url": "http://b/v1", "model": "m"},
            {"llm_base_url": ALLOWED, "llm_allowed_base_urls": "http://a/v1, http://b/v1"},
        ),
        # A row settled before the rule recorded the worker's own variable: still its own.
        ({"api_key_env": "OPENAI_API_KEY"}, {"llm_api_key_env": "OPENAI_API_KEY"}),
    ],
)
def test_what_a_queued_job_may_run_with(section: dict[str, str], settings: dict[str, str]) -> None:
    assert queued_llm_problem(LLMSection(**section), _settings(**settings)) is None


def test_the_allow_list_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="not an http:// or https:// URL"):
        _settings(llm_allowed_base_urls="http://a/v1,localhost:11434")


@pytest.mark.parametrize("name", ["KERNEVO_DATABASE_URL", "OPENAI_API_KEY", "HOME"])
def test_the_api_refuses_a_key_variable_in_the_body(
    api_client: TestClient, api_token: str, fresh_database_url: str, name: str
) -> None:
    body = {"path": "trsm_small", "dtype": "float64", "llm": {"api_key_env": name}}
    response = api_client.post(
        "/v1/jobs", json=body, headers={"Authorization": f"Bearer {api_token}"}
    )
    assert response.status_code == 422, response.text
    [first] = response.json()["detail"]
    assert first["loc"] == ["body", "llm", "api_key_env"]
    assert "the worker's KERNEVO_LLM_API_KEY_ENV decides" in first["msg"]
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            assert repo.list_jobs(s) == []
    finally:
        engine.dispose()


@contextmanager
def _recording_server(seen: list[str]) -> Iterator[str]:
    """An endpoint that records the ``Authorization`` header of every request (and answers 404)."""

    def record(handler: BaseHTTPRequestHandler) -> None:
        seen.append(handler.headers.get("Authorization", ""))
        handler.send_error(404)

    with StubServer(record, methods=("GET", "POST")) as server:
        yield f"{server.url}/v1"


def test_a_stored_key_variable_reaches_no_endpoint(tmp_path: Path) -> None:
    """A row naming ``KERNEVO_DATABASE_URL`` (queued before the API refused it, or written to the
    database directly): the worker's job process refuses it before any request, and the job
    fails with that line instead of sending the database URL as a bearer key."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    seen: list[str] = []
    with _recording_server(seen) as base:
        config = JobConfig(
            path="trsm_small",
            dtype="float32",
            compile_only=True,
            iterations=1,
            llm=LLMSection(base_url=base, model="m", api_key_env="KERNEVO_DATABASE_URL"),
        ).model_dump(mode="json")
        engine = make_engine(url)
        try:
            with session_scope(engine) as s:
                job = queue.enqueue_job(
                    s,
                    path="trsm_small",
                    dtype="float32",
                    gpu_key=queue.NO_GPU,
                    shape_bucket="m64n64",
                    config=config,
                )
                job_id = job.id
            with session_scope(engine) as s:
                assert queue.claim_job(
                    s, worker="w", accepts=(queue.NO_GPU,), gpu_key=queue.NO_GPU, gpu_index=None
                )
            env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
            env |= {"KERNEVO_DATABASE_URL": url, "KERNEVO_LLM_BASE_URL": base}
            done = subprocess.run(
                [sys.executable, "-m", "evolver.worker_child", "--job", str(job_id)]
                + ["--parent", str(os.getpid()), "--database-url", url]
                + ["--work-dir", str(tmp_path / "runs")],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            with session_scope(engine) as s:
                row = repo.get_job(s, job_id)
                backend = row.backend
        finally:
            engine.dispose()
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"kernevo worker: job {job_id}: llm.api_key_env 'KERNEVO_DATABASE_URL'")
    assert seen == []  # no request at all, so no key anywhere
    assert backend == queue.PENDING_BACKEND  # nothing settled from the refused section


def _queued(url: str, llm: LLMSection) -> int:
    config = JobConfig(
        path="trsm_small", dtype="float32", compile_only=True, iterations=1, llm=llm
    ).model_dump(mode="json")
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return queue.enqueue_job(
                s,
                path="trsm_small",
                dtype="float32",
                gpu_key=queue.NO_GPU,
                shape_bucket="m64n64",
                config=config,
            ).id
    finally:
        engine.dispose()


def test_settling_records_the_endpoint_but_not_the_key_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evolver.llm import resolve_backend
    from evolver.worker_child import _settle_backend

    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    job_id = _queued(url, LLMSection(base_url=ALLOWED, model="m"))
    monkeypatch.setenv("KERNEVO_LLM_BASE_URL", ALLOWED)
    monkeypatch.setenv("KERNEVO_LLM_API_KEY_ENV", "OPENAI_API_KEY")
    _settle_backend(job_id, url, tmp_path / "runs")
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            row = repo.get_job(s, job_id)
            llm, backend = dict(row.config["llm"]), row.backend
    finally:
        engine.dispose()
    assert (llm["base_url"], llm["api_key_env"], llm["model"]) == (ALLOWED, None, "m")
    assert backend == "openai-compatible"
    # Each attempt takes the key variable from its own worker's setting.
    settings = _settings(llm_base_url=ALLOWED, llm_api_key_env="OPENAI_API_KEY")
    assert resolve_backend(LLMSection(**llm), settings).api_key_env == "OPENAI_API_KEY"


def test_resuming_a_queued_job_by_hand_applies_the_same_rule(tmp_path: Path) -> None:
    """``kernevo evolve --resume N`` of a queued job: the resuming user's key stays home too."""
    from evolver.errors import LLMEndpointError
    from evolver.runner import resume_job

    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    job_id = _queued(url, LLMSection(base_url="http://evil.example/v1", model="m"))
    settings = _settings(llm_api_key_env="OPENAI_API_KEY", work_dir=tmp_path / "runs")
    with pytest.raises(LLMEndpointError) as caught:
        resume_job(job_id, overrides={}, settings=settings, database_url=url)
    assert str(caught.value).startswith(f"job {job_id}: llm.base_url http://evil.example/v1 is")
