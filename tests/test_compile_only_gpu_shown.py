"""A compile-only job names no GPU wherever it is shown: its GPU key ``none`` (REST ``gpu``,
``kernevo jobs``'s gpu column, the web page) and, in its served ``config``, ``gpu`` ``null``
(``evolver.job_config.shown_config``), never the device index :class:`JobConfig` stores for it.

The trial's finding: a compile-only job (``kernevo evolve --compile-only``, or ``POST /v1/jobs``
with ``compile_only``) was served with ``"config": {"gpu": 0, "compile_only": true, …}`` (and
with ``KERNEVO_GPU=3``, ``gpu 3``) beside ``"gpu": "none"``: a job on device 0 and on no GPU at
once."""

from __future__ import annotations

from typing import Any

import pytest
from cli_through_app import through_the_app
from conftest import bearer
from fastapi.testclient import TestClient

from db import queue
from db import repository as repo
from db.session import make_engine, session_scope
from evolver.job_config import JobConfig, shown_config
from kernevo.cli import main


def _evolve_row(url: str, *, compile_only: bool, gpu: int) -> int:
    """A job row as ``kernevo evolve`` writes it (``evolver.runner._start_job``): the
    validated configuration, ``gpu`` the CLI's ``KERNEVO_GPU`` default; its id."""
    config = JobConfig(path="trsm_small", dtype="float64", compile_only=compile_only, gpu=gpu)
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return repo.create_job(
                s,
                path="trsm_small",
                dtype="float64",
                gpu=queue.NO_GPU if compile_only else "nvidia-h200",
                shape_bucket="m64n64",
                config=config.model_dump(mode="json"),
                backend="offline",
                model=None,
            ).id
    finally:
        engine.dispose()


def _stored_config(url: str, job_id: int) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            return dict(repo.get_job(s, job_id).config)
    finally:
        engine.dispose()


def _served(client: TestClient, token: str, job_id: int) -> list[dict[str, Any]]:
    """The job as ``GET /v1/jobs/{id}`` and as its row of ``GET /v1/jobs`` serve it."""
    one = client.get(f"/v1/jobs/{job_id}", headers=bearer(token))
    listed = client.get("/v1/jobs", headers=bearer(token))
    assert (one.status_code, listed.status_code) == (200, 200), (one.text, listed.text)
    return [one.json(), *(row for row in listed.json() if row["id"] == job_id)]


def test_a_queued_compile_only_job_is_served_without_a_device_index(
    api_client: TestClient, api_token: str, fresh_database_url: str
) -> None:
    body = {"path": "trsm_small", "dtype": "float64", "compile_only": True}
    created = api_client.post("/v1/jobs", json=body, headers=bearer(api_token))
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    for job in [created.json(), *_served(api_client, api_token, job_id)]:
        assert (job["gpu"], job["config"]["gpu"], job["config"]["compile_only"]) == (
            queue.NO_GPU,
            None,
            True,
        )
    # The database keeps the job configuration as validated: a worker's resume reads it.
    assert _stored_config(fresh_database_url, job_id)["gpu"] == 0


@pytest.mark.parametrize("gpu", [0, 3])  # the default, and KERNEVO_GPU=3
def test_an_evolve_compile_only_job_shows_no_gpu_in_rest_and_cli(
    api_client: TestClient,
    api_token: str,
    fresh_database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    gpu: int,
) -> None:
    job_id = _evolve_row(fresh_database_url, compile_only=True, gpu=gpu)
    for job in _served(api_client, api_token, job_id):
        assert (job["gpu"], job["config"]["gpu"]) == (queue.NO_GPU, None)
    # kernevo jobs, from the database and through the service, shows the key: no GPU.
    through_the_app(monkeypatch, api_client)
    monkeypatch.setenv("KERNEVO_API_TOKEN", api_token)
    for source in (["--database-url", fresh_database_url], ["--api-url", "http://service"]):
        assert main(["jobs", *source]) == 0
        header, row = capsys.readouterr().out.splitlines()
        column = header.index(" gpu ") + 1
        assert row[column : column + 15] == f"{queue.NO_GPU:<14} ", row


def test_a_gpu_jobs_device_index_is_served_as_stored(
    api_client: TestClient, api_token: str, fresh_database_url: str
) -> None:
    job_id = _evolve_row(fresh_database_url, compile_only=False, gpu=2)
    for job in _served(api_client, api_token, job_id):
        assert (job["gpu"], job["config"]["gpu"]) == ("nvidia-h200", 2)


def test_shown_config_leaves_the_stored_mapping_alone() -> None:
    stored = {"path": "trsm_small", "gpu": 0, "compile_only": True, "llm": {"base_url": None}}
    assert shown_config(stored) == {**stored, "gpu": None}
    assert stored["gpu"] == 0
    # A row without the keys (written before them) is shown as stored.
    assert shown_config({"path": "p", "compile_only": True}) == {"path": "p", "compile_only": True}
