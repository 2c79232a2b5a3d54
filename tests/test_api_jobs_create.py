"""``POST /v1/jobs``: a job queued for the workers, its body checked as ``kernevo evolve``'s job
configuration, a 422 naming the key for every bad value, a write token required."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

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
