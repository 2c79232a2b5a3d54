"""GET /v1/programs (filters, pagination), /v1/programs/{id} and /v1/programs/{id}/lineage, with
a read token (tests/test_api_scopes.py covers every route without one)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

if TYPE_CHECKING:
    from conftest import Seeded


def test_program_detail_includes_source_and_evaluations(
    api_client: TestClient, seeded: Seeded, read_token: str
) -> None:
    response = api_client.get(f"/v1/programs/{seeded.grandchild_id}", headers=bearer(read_token))
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


def test_seed_has_no_parent_and_no_evaluations(
    api_client: TestClient, seeded: Seeded, read_token: str
) -> None:
    body = api_client.get(f"/v1/programs/{seeded.seed_id}", headers=bearer(read_token)).json()
    assert body["parent_id"] is None
    assert body["diff"] is None
    assert body["evaluations"] == []


def test_lineage_runs_back_to_the_seed(
    api_client: TestClient, seeded: Seeded, read_token: str
) -> None:
    response = api_client.get(
        f"/v1/programs/{seeded.grandchild_id}/lineage", headers=bearer(read_token)
    )
    assert response.status_code == 200, response.text
    steps = response.json()
    assert [p["id"] for p in steps] == [seeded.grandchild_id, seeded.child_id, seeded.seed_id]
    assert [p["uid"] for p in steps] == ["grandchild", "child", "seed"]
    assert [p["generation"] for p in steps] == [2, 1, 0]
    assert steps[0]["parent_id"] == steps[1]["id"]
    assert steps[-1]["parent_id"] is None
    assert "source" not in steps[0]


def test_unknown_program_is_404(api_client: TestClient, read_token: str) -> None:
    for url in ("/v1/programs/424242", "/v1/programs/424242/lineage"):
        response = api_client.get(url, headers=bearer(read_token))
        assert response.status_code == 404
        assert response.json()["detail"] == "program 424242 not found"


@pytest.mark.parametrize("program_id", ["2147483648", "99999999999999999999", "0", "-1"])
def test_out_of_range_program_ids_are_422(
    api_client: TestClient, program_id: str, read_token: str
) -> None:
    """Ids are 32-bit: a larger one (or one below 1) is refused with the bound, never passed to
    the database (PostgreSQL would fail with NumericValueOutOfRange, SQLite with OverflowError)."""
    for url in (f"/v1/programs/{program_id}", f"/v1/programs/{program_id}/lineage"):
        response = api_client.get(url, headers=bearer(read_token))
        assert response.status_code == 422, response.text
        (error,) = response.json()["detail"]
        assert error["loc"] == ["path", "program_id"]
    for url in (f"/v1/programs/{2**31 - 1}", f"/v1/programs/{2**31 - 1}/lineage"):
        assert api_client.get(url, headers=bearer(read_token)).status_code == 404


def test_program_detail_serves_the_compile_log_to_a_reader(
    api_client: TestClient, seeded: Seeded, read_token: str
) -> None:
    """Sources, reports and compile logs need a read token (no token: 401, see
    tests/test_api_scopes.py), and a reader gets them whole: nothing is withheld any more."""
    url = f"/v1/programs/{seeded.grandchild_id}"
    assert api_client.get(url).status_code == 401
    body = api_client.get(url, headers=bearer(read_token)).json()
    evaluation = body["evaluations"][0]
    assert evaluation["report"]["compile"]["log"] == "ptxas info: 40 registers"
    assert "compile_log_withheld" not in evaluation


# --- GET /v1/programs -----------------------------------------------------------------------


def _second_job(url: str, report_json: Callable[..., str]) -> dict[str, int]:
    """A second job: six programs on islands 0 and 1 — scored 1.5, 0.7 and 3.0, failed, and two
    never evaluated (one a re-run); returns their ids by uid."""
    from db import repository as repo
    from db.session import make_engine, session_scope

    engine = make_engine(url)
    ids: dict[str, int] = {}
    try:
        with session_scope(engine) as s:
            job = repo.create_job(s, path="trsm_small", dtype="float32", gpu="nvidia-h200",
                                  shape_bucket="m64n64", config={}, backend="offline",
                                  model=None)  # fmt: skip
            plan = [
                ("a", 0, 1.5, "scored"), ("b", 1, 0.7, "scored"), ("c", 1, 3.0, "scored"),
                ("d", 0, 0.0, "failed"), ("e", 1, None, None), ("f", 0, None, None),
            ]  # fmt: skip
            for i, (uid, island, score, state) in enumerate(plan):
                program, _ = repo.record_program(
                    s, job_id=job.id, uid=f"job2-{uid}", source=f"// {uid}\n", parent_uid=None,
                    island=island, generation=0, iteration=i, diff=None, backend="offline",
                    model=None, rerun=uid == "f",
                )  # fmt: skip
                ids[uid] = program.id
                if state is not None:
                    repo.record_evaluation(
                        s, program_id=program.id, report_json=report_json(score),
                        gpu_key="nvidia-h200", gpu_name="NVIDIA H200", arch="sm_90",
                        driver_version=None, nvrtc_version="13.0", score=score, state=state,
                        error_kind="wrong" if state == "failed" else None,
                    )  # fmt: skip
            ids["job"] = job.id
    finally:
        engine.dispose()
    return ids


def _listing(client: TestClient, token: str, **params: object) -> tuple[list[dict], int]:
    response = client.get("/v1/programs", params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json(), int(response.headers["x-total-count"])


def test_programs_filtered_by_job_island_state_and_score(
    api_client: TestClient,
    seeded: Seeded,
    read_token: str,
    fresh_database_url: str,
    report_json: Callable[..., str],
) -> None:
    ids = _second_job(fresh_database_url, report_json)
    everything, total = _listing(api_client, read_token)
    assert total == 9 and len(everything) == 9
    assert [p["id"] for p in everything] == sorted(p["id"] for p in everything)
    assert "source" not in everything[0]
    grandchild = next(p for p in everything if p["id"] == seeded.grandchild_id)
    assert (grandchild["state"], grandchild["score"], grandchild["gpu_key"]) == (
        "verified",
        2.01,
        "nvidia-h200",
    )
    job2 = {"job_id": ids["job"]}
    cases: list[tuple[dict[str, object], set[str]]] = [
        ({}, {"a", "b", "c", "d", "e", "f"}),
        ({"island": 1}, {"b", "c", "e"}),
        ({"state": "scored"}, {"a", "b", "c"}),
        ({"state": "failed"}, {"d"}),
        ({"state": "unevaluated"}, {"e", "f"}),
        ({"min_score": 1.0}, {"a", "c"}),
        ({"max_score": 1.0}, {"b", "d"}),
        ({"min_score": 0.7, "max_score": 1.5}, {"a", "b"}),
        ({"min_score": 1.5, "max_score": 1.5}, {"a"}),
        ({"island": 0, "state": "scored", "min_score": 1.0}, {"a"}),
        ({"state": "verified"}, set()),
    ]
    by_id = {v: k for k, v in ids.items()}
    for params, expected in cases:
        rows, total = _listing(api_client, read_token, **job2, **params)
        assert {by_id[p["id"]] for p in rows} == expected, params
        assert total == len(expected), params
    failed = _listing(api_client, read_token, **job2, state="failed")[0][0]
    assert (failed["score"], failed["error_kind"]) == (0.0, "wrong")
    rerun = _listing(api_client, read_token, **job2, state="unevaluated")[0]
    assert [(p["rerun"], p["score"], p["evaluation_id"]) for p in rerun] == [
        (False, None, None),
        (True, None, None),
    ]
    seeded_job = _listing(api_client, read_token, job_id=seeded.job_id)[0]
    assert [p["uid"] for p in seeded_job] == ["seed", "child", "grandchild"]


def test_programs_are_paginated_with_the_total(
    api_client: TestClient,
    seeded: Seeded,
    read_token: str,
    fresh_database_url: str,
    report_json: Callable[..., str],
) -> None:
    _second_job(fresh_database_url, report_json)
    everything, total = _listing(api_client, read_token)
    pages = []
    for offset in range(0, total + 4, 4):
        page, page_total = _listing(api_client, read_token, limit=4, offset=offset)
        assert page_total == total
        pages.append([p["id"] for p in page])
    assert pages == [[p["id"] for p in everything][i : i + 4] for i in range(0, total + 4, 4)]
    assert pages[-1] == []  # past the end: an empty page, still with the total


@pytest.mark.parametrize(
    "params",
    [
        {"min_score": 2, "max_score": 1},
        {"state": "running"},
        {"limit": 0},
        {"limit": 1001},
        {"offset": -1},
        {"island": -1},
        {"job_id": 0},
        {"job_id": 2**31},
        {"min_score": "nan"},
        {"max_score": "inf"},
    ],
)
def test_bad_program_filters_are_422(
    api_client: TestClient, read_token: str, params: dict[str, object]
) -> None:
    response = api_client.get("/v1/programs", params=params, headers=bearer(read_token))
    assert response.status_code == 422, response.text
