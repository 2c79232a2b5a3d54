"""GET /v1/programs/{id} and /v1/programs/{id}/lineage."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient

if TYPE_CHECKING:
    from conftest import Seeded


def test_program_detail_includes_source_and_evaluations(
    api_client: TestClient, seeded: Seeded
) -> None:
    response = api_client.get(f"/v1/programs/{seeded.grandchild_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["uid"] == "grandchild"
    assert body["parent_id"] == seeded.child_id
    assert body["job_id"] == seeded.job_id
    assert body["source"] == seeded.grandchild_source
    assert body["source_sha256"] == hashlib.sha256(seeded.grandchild_source.encode()).hexdigest()
    assert (body["generation"], body["iteration"], body["island"]) == (2, 2, 0)
    assert body["diff"] == "-NB 16\n+NB 64"
    assert [e["state"] for e in body["evaluations"]] == ["scored", "verified"]
    verified = body["evaluations"][1]
    assert verified["id"] == seeded.verified_evaluation_id
    assert (verified["gpu_key"], verified["gpu_name"], verified["arch"]) == (
        "nvidia-h200",
        "NVIDIA H200",
        "sm_90",
    )
    assert verified["score"] == 2.01
    assert verified["report"]["compile"]["registers"] == 40


def test_seed_has_no_parent_and_no_evaluations(api_client: TestClient, seeded: Seeded) -> None:
    body = api_client.get(f"/v1/programs/{seeded.seed_id}").json()
    assert body["parent_id"] is None
    assert body["diff"] is None
    assert body["evaluations"] == []


def test_lineage_runs_back_to_the_seed(api_client: TestClient, seeded: Seeded) -> None:
    response = api_client.get(f"/v1/programs/{seeded.grandchild_id}/lineage")
    assert response.status_code == 200, response.text
    steps = response.json()
    assert [p["id"] for p in steps] == [seeded.grandchild_id, seeded.child_id, seeded.seed_id]
    assert [p["uid"] for p in steps] == ["grandchild", "child", "seed"]
    assert [p["generation"] for p in steps] == [2, 1, 0]
    assert steps[0]["parent_id"] == steps[1]["id"]
    assert steps[-1]["parent_id"] is None
    assert "source" not in steps[0]


def test_unknown_program_is_404(api_client: TestClient) -> None:
    for url in ("/v1/programs/424242", "/v1/programs/424242/lineage"):
        response = api_client.get(url)
        assert response.status_code == 404
        assert response.json()["detail"] == "program 424242 not found"


@pytest.mark.parametrize("program_id", ["2147483648", "99999999999999999999", "0", "-1"])
def test_out_of_range_program_ids_are_422(api_client: TestClient, program_id: str) -> None:
    """Ids are 32-bit: a larger one (or one below 1) is refused with the bound, never passed to
    the database (PostgreSQL would fail with NumericValueOutOfRange, SQLite with OverflowError)."""
    for url in (f"/v1/programs/{program_id}", f"/v1/programs/{program_id}/lineage"):
        response = api_client.get(url)
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["path", "program_id"]
    for url in (f"/v1/programs/{2**31 - 1}", f"/v1/programs/{2**31 - 1}/lineage"):
        assert api_client.get(url).status_code == 404
