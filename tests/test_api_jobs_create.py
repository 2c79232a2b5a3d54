"""``POST /v1/jobs``: a job queued for the workers, its body checked as ``kernevo evolve``'s job
configuration, a 422 naming the key for every bad value, a write token required."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.json_body import parse_keeping_repeats, repeated_keys
from db import queue
from db import repository as repo
from db.session import make_engine, session_scope
from evolver.job_config import JobConfig


def _post(client: TestClient, token: str | None, body: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post("/v1/jobs", json=body, headers=headers)


def test_created_job_waits_in_the_queue(
    api_client: TestClient, api_token: str, fresh_database_url: str
) -> None:
    body = {"path": "trsm_small", "dtype": "complex64", "iterations": 12, "islands": 3}
    response = _post(api_client, api_token, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert (job["state"], job["gpu"], job["backend"], job["attempts"]) == (
        "waiting",
        queue.ANY_GPU,
        queue.PENDING_BACKEND,
        0,
    )
    assert (job["shape_bucket"], job["programs"], job["claimed_by"]) == ("m64n64", 0, None)
    assert job["queued_at"] is not None
    # The stored configuration is the job configuration, defaults filled in.
    expected = JobConfig(path="trsm_small", dtype="complex64", iterations=12, islands=3)
    assert job["config"] == expected.model_dump(mode="json")
    # A worker with an H200 can claim it; the job then runs on that GPU model.
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            claimed = queue.claim_job(
                s,
                worker="w",
                accepts=("nvidia-h200", queue.ANY_GPU, queue.NO_GPU),
                gpu_key="nvidia-h200",
                gpu_index=0,
            )
            assert claimed is not None and claimed.id == job["id"]
    finally:
        engine.dispose()
    detail = api_client.get(
        f"/v1/jobs/{job['id']}", headers={"Authorization": f"Bearer {api_token}"}
    )
    assert detail.status_code == 200
    assert (detail.json()["state"], detail.json()["gpu"], detail.json()["attempts"]) == (
        "running",
        "nvidia-h200",
        1,
    )


@pytest.mark.parametrize(
    ("extra", "gpu_key"),
    [
        ({"gpu": "NVIDIA H200"}, "nvidia-h200"),
        ({"gpu": "nvidia-h100-80gb-hbm3"}, "nvidia-h100-80gb-hbm3"),
        ({"compile_only": True}, queue.NO_GPU),
        ({}, queue.ANY_GPU),
    ],
)
def test_the_gpu_a_job_asks_for(
    api_client: TestClient, api_token: str, extra: dict[str, Any], gpu_key: str
) -> None:
    response = _post(api_client, api_token, {"path": "trsm_small", "dtype": "float64", **extra})
    assert response.status_code == 201, response.text
    assert response.json()["gpu"] == gpu_key


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        (
            {"path": "trsm_smal", "dtype": "float64"},
            ["body", "path"],
            "unknown path 'trsm_smal'; known paths: ",
        ),
        (
            {"path": "trsm_small_z64", "dtype": "float64"},
            ["body", "dtype"],
            "path trsm_small_z64 has no float64 kernel; it implements complex128",
        ),
        (
            {"path": "trsm_small", "dtype": "float64", "iteratons": 3},
            ["body", "iteratons"],
            "Extra inputs are not permitted",
        ),
        (
            {"path": "trsm_small", "dtype": "float64", "iterations": 0},
            ["body", "iterations"],
            "greater than or equal to 1",
        ),
        (
            {"path": "trsm_small", "dtype": "float64", "islands": 65},
            ["body", "islands"],
            "less than or equal to 64",
        ),
        (
            {"path": "trsm_small", "dtype": "float64", "evaluator_timeout_s": 100},
            ["body", "evaluator_timeout_s"],
            "100 s does not exceed the evaluator's own hard limit",
        ),
        (
            {"path": "trsm_small", "dtype": "float64", "llm": {"base_url": "localhost:11434"}},
            ["body", "llm", "base_url"],
            "",
        ),
        (
            # A NUL would reach a PostgreSQL text column (which refuses it: a 500).
            {"path": "trsm_small", "dtype": "float64", "llm": {"model": "a\x00b"}},
            ["body", "llm"],
            "llm.model must be printable text",
        ),
        (
            {"path": "trsm_small", "dtype": "float64", "gpu": "h\x00200"},
            ["body", "gpu"],
            "must be printable text",
        ),
        ({"dtype": "float64"}, ["body", "path"], "Field required"),
        ({"path": "trsm_small", "dtype": "float64", "gpu": ""}, ["body", "gpu"], "at least 1"),
    ],
)
def test_bad_bodies_are_422_naming_the_key(
    api_client: TestClient, api_token: str, body: Any, loc: list[str], message: str
) -> None:
    response = _post(api_client, api_token, body)
    assert response.status_code == 422, response.text
    [first, *_] = response.json()["detail"]
    assert first["loc"] == loc
    assert message in first["msg"]


@pytest.mark.parametrize(
    ("extra", "detail"),
    [
        ({"gpu": "--"}, "not a GPU name: '--'"),
        ({"gpu": "None"}, "gpu 'none' is no GPU: set compile_only to true instead"),
        (
            {"gpu": "H200"},
            "gpu 'h200' is no CUDA device's key: they start with 'nvidia-' (e.g. 'NVIDIA H200' "
            "or 'nvidia-h200')",
        ),
        (
            {"gpu": "nvidia-h200", "compile_only": True},
            "a compile_only job runs on no GPU: leave gpu out",
        ),
    ],
)
def test_gpu_contradictions_are_422(
    api_client: TestClient, api_token: str, extra: dict[str, Any], detail: str
) -> None:
    response = _post(api_client, api_token, {"path": "trsm_small", "dtype": "float64", **extra})
    assert (response.status_code, response.json()) == (422, {"detail": detail})


def test_creating_needs_a_write_token(
    api_client: TestClient, read_token: str, fresh_database_url: str
) -> None:
    body = {"path": "trsm_small", "dtype": "float64"}
    assert _post(api_client, None, body).status_code == 401
    assert _post(api_client, "wrong-token", body).status_code == 401
    assert _post(api_client, read_token, body).status_code == 403
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            assert repo.list_jobs(s) == []  # nothing was queued
    finally:
        engine.dispose()


# JSON types are strict (the tester's "iterations": "5" became 5, true became 1, "yes" became
# true, and 1e30 was called an unparsable string): each is a 422 at its key, nothing queued.
@pytest.mark.parametrize(
    ("extra", "loc", "kind"),
    [
        ({"iterations": "5"}, ["body", "iterations"], "int_type"),
        ({"iterations": True}, ["body", "iterations"], "int_type"),
        ({"iterations": 1e30}, ["body", "iterations"], "int_type"),
        ({"iterations": 5.0}, ["body", "iterations"], "int_type"),
        ({"islands": "2"}, ["body", "islands"], "int_type"),
        ({"seed": False}, ["body", "seed"], "int_type"),
        ({"compile_only": "yes"}, ["body", "compile_only"], "bool_type"),
        ({"compile_only": 1}, ["body", "compile_only"], "bool_type"),
        ({"llm": {"temperature": "0.5"}}, ["body", "llm", "temperature"], "float_type"),
        ({"llm": {"retries": "2"}}, ["body", "llm", "retries"], "int_type"),
    ],
)
def test_json_types_are_strict(
    api_client: TestClient,
    api_token: str,
    fresh_database_url: str,
    extra: dict[str, Any],
    loc: list[str],
    kind: str,
) -> None:
    response = _post(api_client, api_token, {"path": "trsm_small", "dtype": "float64", **extra})
    assert response.status_code == 422, response.text
    [first] = response.json()["detail"]
    assert (first["loc"], first["type"]) == (loc, kind)
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            assert repo.list_jobs(s) == []
    finally:
        engine.dispose()


def test_a_float_setting_takes_a_json_integer(api_client: TestClient, api_token: str) -> None:
    body = {"path": "trsm_small", "dtype": "float64", "llm": {"temperature": 1}}
    response = _post(api_client, api_token, body)
    assert response.status_code == 201, response.text
    assert response.json()["config"]["llm"]["temperature"] == 1.0


def _post_raw(client: TestClient, token: str, text: str, media: str = "application/json") -> Any:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": media}
    return client.post("/v1/jobs", content=text.encode(), headers=headers)


def _no_job_queued(url: str) -> None:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            assert repo.list_jobs(s) == []
    finally:
        engine.dispose()


# A trial's finding: {"path": "trsm_small", …, "path": "trsm_blocked"} queued a trsm_blocked job
# (Python's json keeps the last value). api.json_body refuses it, before the body is validated.
@pytest.mark.parametrize(
    ("text", "errors"),
    [
        (
            '{"path":"trsm_small","dtype":"float64","path":"trsm_blocked"}',
            [(["body", "path"], "key 'path' given 2 times; give it once")],
        ),
        (
            '{"path":"trsm_small","dtype":"float64","llm":{"model":"a","model":"b","model":"a"}}',
            [(["body", "llm", "model"], "key 'model' given 3 times; give it once")],
        ),
        (
            # Every repeated key, outer objects first, a list's items by index; refused before
            # the unknown key "x" is.
            '{"iterations":3,"x":[{"a":1},{"a":1,"a":2}],"dtype":"float64","iterations":4}',
            [
                (["body", "iterations"], "key 'iterations' given 2 times; give it once"),
                (["body", "x", 1, "a"], "key 'a' given 2 times; give it once"),
            ],
        ),
    ],
)
def test_a_body_repeating_a_key_is_422_naming_it(
    api_client: TestClient,
    api_token: str,
    fresh_database_url: str,
    text: str,
    errors: list[tuple[list[Any], str]],
) -> None:
    response = _post_raw(api_client, api_token, text)
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == [
        {"loc": loc, "msg": msg, "type": "repeated_key"} for loc, msg in errors
    ]
    _no_job_queued(fresh_database_url)


@pytest.mark.parametrize(
    "media", ["application/json; charset=utf-8", "application/merge-patch+json"]
)
def test_every_json_media_type_is_checked_for_repeated_keys(
    api_client: TestClient, api_token: str, fresh_database_url: str, media: str
) -> None:
    text = '{"path":"trsm_small","dtype":"float64","dtype":"float32"}'
    response = _post_raw(api_client, api_token, text, media)
    assert response.status_code == 422, response.text
    assert [error["type"] for error in response.json()["detail"]] == ["repeated_key"]
    _no_job_queued(fresh_database_url)


def test_the_same_key_in_two_objects_is_no_repeat() -> None:
    text = b'{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}], "c": {"b": {"a": [{"c": 0}]}}}'
    assert repeated_keys(parse_keeping_repeats(text)) == []
    assert repeated_keys(parse_keeping_repeats(b'[[{"k": 1, "k": 1}]]')) == [((0, 0, "k"), 2)]


# A trial's finding: llm.model alone was queued while kernevo evolve refuses it ("does nothing
# without an LLM endpoint"). A queued job's endpoint is its worker's (evolver.worker_child: the
# job's llm section, then the worker's KERNEVO_LLM_*; docs/CONTRACTS.md), which the service cannot
# see: so it is queued, and the answer says where the keys go.
WORKER_NOTE = (
    "llm.model without llm.base_url: the worker that claims this job sends its LLM requests to "
    "its own KERNEVO_LLM_BASE_URL; a worker without one fails a job naming llm.model (the offline "
    "mutator reads no llm key)"
)


@pytest.mark.parametrize(
    ("llm", "endpoint", "note"),
    [
        ({"model": "x"}, "worker", WORKER_NOTE),
        (
            {"temperature": 0.2, "model": "x"},
            "worker",
            WORKER_NOTE.replace("llm.model", "llm.model, llm.temperature", 1),
        ),
        ({"base_url": "http://127.0.0.1:9/v1", "model": "x"}, "job", None),
        ({}, "worker", None),
        (None, "worker", None),
    ],
)
def test_the_answer_says_where_the_llm_endpoint_comes_from(
    api_client: TestClient,
    api_token: str,
    llm: dict[str, Any] | None,
    endpoint: str,
    note: str | None,
) -> None:
    body: dict[str, Any] = {"path": "trsm_small", "dtype": "float64"}
    if llm is not None:
        body["llm"] = llm
    response = _post(api_client, api_token, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["llm_endpoint"], job["note"], job["backend"]) == (
        endpoint,
        note,
        queue.PENDING_BACKEND,
    )
    assert job["model"] == (llm or {}).get("model")
