"""Every failure of a mid-job LLM request is one line naming the endpoint (its URL without
credentials) and what happened: ``evolver.llm.EndpointLLM`` raises ``LLMEndpointError``, and
OpenEvolve records it as the iteration's ``LLM generation failed: …``, which is the job's
``failure_reason`` and the program's report.

The trial's inputs (an OpenAI-compatible stub on 127.0.0.1): a stub slower than
``llm.timeout_s`` gave ``LLM generation failed: `` (an empty ``TimeoutError``), ``choices: []``
gave ``… list index out of range`` and a truncated body ``… Expecting value: line 1 column 14
(char 13)``, none of them naming the endpoint or saying what was wrong with the answer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import cast

import pytest
from conftest import unused_port
from http_stub import JSON, Respond, StubServer, reply
from openai_stub import MODEL, chat_completion, endpoint, no_choices
from openevolve.config import LLMModelConfig
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import Evaluation, Job, Program
from evolver.errors import LLMEndpointError
from evolver.job_config import JobConfig, LLMSection
from evolver.llm import (
    OPENAI_BACKEND,
    CanonicalTextLLM,
    LLMBackend,
    check_endpoint,
    make_canonical_openai_client,
    model_configs,
)
from evolver.runner import start_job
from evolver.settings import EvolverSettings


def _slow(released: threading.Event) -> Respond:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        released.wait(30)  # past any timeout here; released when the test ends
        reply(handler, 200, chat_completion([]), JSON)

    return answer


def _truncated(handler: BaseHTTPRequestHandler) -> None:
    reply(handler, 200, b'{"id": "c", "choices"', JSON)


def _error_500(handler: BaseHTTPRequestHandler) -> None:
    reply(handler, 500, b'{"error": {"message": "the model crashed"}}', JSON)


def _error_502_text(handler: BaseHTTPRequestHandler) -> None:
    reply(handler, 502, b"Bad Gateway: upstream\nis down", {"Content-Type": "text/plain"})


def _html(handler: BaseHTTPRequestHandler) -> None:
    reply(handler, 200, b"<html><body>Welcome</body></html>", {"Content-Type": "text/html"})


def _events(handler: BaseHTTPRequestHandler) -> None:  # streams though asked not to
    reply(handler, 200, b'data: {"choices": []}\n\n', {"Content-Type": "text/event-stream"})


def _no_content(handler: BaseHTTPRequestHandler) -> None:
    choice = {"index": 0, "message": {"role": "assistant", "content": None}}
    reply(handler, 200, chat_completion([{**choice, "finish_reason": "length"}]), JSON)


def _hang_up(handler: BaseHTTPRequestHandler) -> None:
    handler.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\n{")


@pytest.fixture
def released() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _client(url: str, *, timeout: int = 1, retries: int = 0) -> CanonicalTextLLM:
    """The job's client as OpenEvolve builds it (``model_configs``' ``init_client``), with a
    timeout under the job file's minimum of 5 s so that the tests stay fast."""
    backend = LLMBackend(kind=OPENAI_BACKEND, model=MODEL, base_url=url)
    [made] = model_configs(backend, LLMSection(base_url=url, model=MODEL, retries=retries))
    config = replace(cast(LLMModelConfig, made), timeout=timeout, retry_delay=0)
    assert config.init_client is make_canonical_openai_client
    return make_canonical_openai_client(config)


def _failure(url: str, *, timeout: int = 1, retries: int = 0, plain: bool = False) -> str:
    """The one line the client raises for one request to ``url``."""
    client = _client(url, timeout=timeout, retries=retries)
    if plain:
        request = client.generate("Improve the kernel.")
    else:
        request = client.generate_with_context("system", [{"role": "user", "content": "go"}])
    with pytest.raises(LLMEndpointError) as caught:
        asyncio.run(request)
    line = str(caught.value)
    assert line and "\n" not in line
    return line


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        (no_choices, "answered a chat completion with no choices"),
        (
            _truncated,
            "answered a body that is not valid JSON (broken at character 21 of 21): "
            '\'{"id": "c", "choices"\'',
        ),
        (_error_500, "answered HTTP 500: the model crashed"),
        (_error_502_text, "answered HTTP 502: Bad Gateway: upstream is down"),
        (
            _html,
            "answered text, not a chat completion: '<html><body>Welcome</body></html>'",
        ),
        (
            _events,
            "answered text, not a chat completion (streaming answers are not supported): "
            "'data: {\"choices\": []}'",
        ),
        (
            _no_content,
            "answered a chat completion whose message has no content (finish_reason 'length')",
        ),
        (
            _hang_up,
            "broke off its answer (RemoteProtocolError: peer closed connection without sending "
            "complete message body (received 1 bytes, expected 100))",
        ),
    ],
    ids=["no-choices", "truncated", "500", "502-text", "html", "events", "no-content", "hang-up"],
)
def test_an_answer_that_is_not_a_completion_says_what_is_wrong(answer: Respond, what: str) -> None:
    with StubServer(endpoint(answer), methods=("GET", "POST")) as server:
        url = f"{server.url}/v1"
        assert _failure(url) == f"LLM endpoint {url} {what}"


def test_no_answer_within_the_timeout_says_so(released: threading.Event) -> None:
    with StubServer(endpoint(_slow(released)), methods=("GET", "POST"), hang_up_ok=True) as server:
        url = f"{server.url}/v1"
        assert _failure(url) == f"LLM endpoint {url} gave no answer within 1 s (llm.timeout_s)"
        assert _failure(url, retries=1, plain=True) == (
            f"LLM endpoint {url} gave no answer within 1 s (llm.timeout_s), the last of 2 "
            "attempts (llm.retries 1)"
        )


def test_a_closed_port_is_unreachable() -> None:
    url = f"http://127.0.0.1:{unused_port()}/v1"
    assert _failure(url) == (
        f"LLM endpoint {url} is unreachable (ConnectError: All connection attempts failed)"
    )


def test_the_endpoint_is_named_without_its_credentials() -> None:
    with StubServer(endpoint(_error_500), methods=("GET", "POST")) as server:
        port = server.url.rsplit(":", 1)[1]
        line = _failure(f"http://u:s3cret@127.0.0.1:{port}/v1")
    assert (
        line
        == f"LLM endpoint http://u:***@127.0.0.1:{port}/v1 answered HTTP 500: the model crashed"
    )


# --- a real compile-only job: the line is its failure reason and its program's report ---------


def _closing_after_preflight(server_box: list[StubServer]) -> Respond:
    """The preflight's ``GET /v1/models`` is answered, then the server stops: every completion
    of the job finds the port closed."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        raise AssertionError("no request reaches a closed server")

    def respond(handler: BaseHTTPRequestHandler) -> None:
        endpoint(answer)(handler)
        threading.Thread(target=server_box[0].close, daemon=True).start()

    return respond


@pytest.mark.parametrize("case", ["timeout", "no-choices", "closed-port"])
def test_a_jobs_failure_reason_and_report_carry_the_line(
    tmp_path: Path, released: threading.Event, case: str
) -> None:
    box: list[StubServer] = []
    if case == "timeout":
        respond = endpoint(_slow(released))
    elif case == "no-choices":
        respond = endpoint(no_choices)
    else:
        respond = _closing_after_preflight(box)
    with StubServer(respond, methods=("GET", "POST"), hang_up_ok=True) as server:
        box.append(server)
        url = f"{server.url}/v1"
        database_url = f"sqlite:///{tmp_path / 'lineage.db'}"
        job = JobConfig(
            path="trsm_small",
            dtype="float32",
            compile_only=True,
            iterations=1,
            # llm.timeout_s's least: the timeout case waits this long once.
            llm=LLMSection(base_url=url, model=MODEL, timeout_s=5, retries=0),
        )
        outcome = start_job(
            job,
            settings=EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None),
            database_url=database_url,
            write=lambda line: None,
        )
    what = {
        "timeout": "gave no answer within 5 s (llm.timeout_s)",
        "no-choices": "answered a chat completion with no choices",
        "closed-port": "is unreachable (ConnectError: All connection attempts failed)",
    }[case]
    detail = f"LLM generation failed: LLM endpoint {url} {what}"
    reason = f"Evolution failed: 0/1 iterations produced a candidate program. Last error: {detail}"
    assert outcome.state == "failed"
    assert outcome.message == f"job {outcome.job_id} failed: {reason}"
    with Session(create_engine(database_url)) as s:
        row = s.get(Job, outcome.job_id)
        assert row is not None and row.failure_reason == reason
        child = s.scalars(select(Program).where(Program.parent_id.is_not(None))).one()
        evaluation = s.scalars(select(Evaluation).where(Evaluation.program_id == child.id)).one()
        assert evaluation.error_kind == "llm_error"
        assert evaluation.report["failure"]["detail"] == detail


# A second trial: the start-up check called an endpoint that was slow, or hung up mid-answer,
# "unreachable"; the job's own requests already said what happened.
@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("slow", "gave no answer to the start-up check within 1 s (ReadTimeout: timed out)"),
        ("hang-up", "broke off its answer to the start-up check (RemoteProtocolError: "),
    ],
)
def test_the_start_up_check_says_slow_or_broken_off_not_unreachable(
    released: threading.Event, case: str, said: str
) -> None:
    def slow(handler: BaseHTTPRequestHandler) -> None:
        released.wait(30)

    respond = slow if case == "slow" else _hang_up
    with StubServer(respond, methods=("GET", "POST"), hang_up_ok=True) as server:
        url = f"{server.url}/v1"
        backend = LLMBackend(kind=OPENAI_BACKEND, model=MODEL, base_url=url)
        with pytest.raises(LLMEndpointError) as caught:
            check_endpoint(backend, timeout_s=1)
    assert str(caught.value).startswith(f"LLM endpoint {url} {said}"), str(caught.value)
