"""GET /v1/jobs/{id}/lineage (a job's programs as a tree, its best score over iterations) and
GET /v1/programs/{id}/diff (one edge: source diff and score change), on the demo job of
tests/web_demo.py (twelve programs on two islands, failures, an unevaluated one, two
promotions), with a read token; tests/test_api_scopes.py covers them without one."""

from __future__ import annotations

import difflib
import math
from pathlib import Path

import pytest
from conftest import bearer
from fastapi.testclient import TestClient
from web_demo import PLAN, DemoJob, build_demo_job

from api.routes.lineage import MAX_NODES
from api.schemas_lineage import LineageNode, best_so_far
from api.source_diff import MAX_DIFF_LINES, source_diff
from db import repository as repo
from db.session import make_engine, session_scope


@pytest.fixture
def demo(fresh_database_url: str, tmp_path: Path) -> DemoJob:
    return build_demo_job(fresh_database_url, tmp_path / "keys")


@pytest.fixture
def reader(read_token: str) -> dict[str, str]:
    return bearer(read_token)


def _lineage(client: TestClient, job_id: int, headers: dict[str, str], **params: object) -> dict:
    response = client.get(f"/v1/jobs/{job_id}/lineage", headers=headers, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_lineage_is_the_job_tree_with_states_scores_and_edges(
    api_client: TestClient, demo: DemoJob, reader: dict[str, str]
) -> None:
    body = _lineage(api_client, demo.job_id, reader)
    ids = demo.program_ids
    uid_of = {pid: uid for uid, pid in ids.items()}
    nodes = {uid_of[node["id"]]: node for node in body["nodes"]}
    assert [node["id"] for node in body["nodes"]] == sorted(ids.values())
    assert (body["job_id"], body["programs"], body["truncated"]) == (demo.job_id, 12, False)
    assert body["roots"] == [ids["seed"]]
    for uid, parent, iteration, island, _ in PLAN:
        node = nodes[uid]
        assert node["parent_id"] == (ids[parent] if parent else None)
        assert (node["iteration"], node["island"], node["uid"]) == (iteration, island, uid)
        children = sorted(ids[child] for child, p, *_ in PLAN if p == uid)
        assert node["children"] == children
    assert nodes["seed"]["generation"] == 0 and nodes["i9"]["generation"] == 4
    # The latest evaluation decides: the promoted programs' verified evaluations came last.
    states = {uid: node["state"] for uid, node in nodes.items()}
    assert states["i7"] == states["i9"] == "verified"
    assert (states["i3"], nodes["i3"]["error_kind"], nodes["i3"]["score"]) == (
        "failed",
        "compile_error",
        0.0,
    )
    assert (states["i6"], nodes["i6"]["error_kind"]) == ("failed", "wrong")
    assert (states["i11"], nodes["i11"]["score"], nodes["i11"]["score_delta"]) == (
        "unevaluated",
        None,
        None,
    )
    assert states["i2"] == "scored"
    # The score change along each edge: child minus parent.
    assert nodes["seed"]["score_delta"] is None
    assert math.isclose(nodes["i9"]["score_delta"], 2.31 - 2.05)
    assert math.isclose(nodes["i1"]["score_delta"], 0.81 - 0.94)
    assert math.isclose(nodes["i6"]["score_delta"], 0.0 - 1.62)
    assert body["best_program_id"] == ids["i9"]


def test_the_best_score_over_iterations_is_the_running_maximum(
    api_client: TestClient, demo: DemoJob, reader: dict[str, str]
) -> None:
    body = _lineage(api_client, demo.job_id, reader)
    ids = demo.program_ids
    curve = [(p["iteration"], p["best_score"], p["program_id"]) for p in body["best_by_iteration"]]
    # Iteration 11's program is not evaluated yet: the curve ends at 10.
    assert curve == [
        (0, 0.94, ids["seed"]), (1, 0.94, ids["seed"]), (2, 1.31, ids["i2"]),
        (3, 1.31, ids["i2"]), (4, 1.62, ids["i4"]), (5, 1.62, ids["i4"]),
        (6, 1.62, ids["i4"]), (7, 2.05, ids["i7"]), (8, 2.05, ids["i7"]),
        (9, 2.31, ids["i9"]), (10, 2.31, ids["i9"]),
    ]  # fmt: skip


def test_a_limited_lineage_is_still_a_closed_tree(
    api_client: TestClient, demo: DemoJob, reader: dict[str, str]
) -> None:
    body = _lineage(api_client, demo.job_id, reader, limit=5)
    kept = [node["id"] for node in body["nodes"]]
    assert kept == sorted(demo.program_ids.values())[:5]
    assert (body["programs"], body["truncated"]) == (12, True)
    for node in body["nodes"]:
        assert node["parent_id"] is None or node["parent_id"] in kept
        assert set(node["children"]) <= set(kept)
    for limit in (0, MAX_NODES + 1):
        response = api_client.get(
            f"/v1/jobs/{demo.job_id}/lineage", headers=reader, params={"limit": limit}
        )
        assert response.status_code == 422


def test_an_unknown_job_is_404_and_a_job_without_programs_is_an_empty_tree(
    api_client: TestClient, fresh_database_url: str, reader: dict[str, str]
) -> None:
    response = api_client.get("/v1/jobs/4242/lineage", headers=reader)
    assert (response.status_code, response.json()["detail"]) == (404, "job 4242 not found")
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            job_id = repo.create_job(
                s, path="trsm_small", dtype="float32", gpu="none", shape_bucket="m64n64",
                config={}, backend="offline", model=None,
            ).id  # fmt: skip
    finally:
        engine.dispose()
    body = _lineage(api_client, job_id, reader)
    assert body == {
        "job_id": job_id,
        "programs": 0,
        "truncated": False,
        "nodes": [],
        "roots": [],
        "best_program_id": None,
        "best_by_iteration": [],
    }


def _node(node_id: int, iteration: int, score: float | None) -> LineageNode:
    return LineageNode(
        id=node_id, uid=str(node_id), parent_id=None, iteration=iteration, generation=0,
        island=0, state="scored" if score is not None else "unevaluated", score=score,
        score_delta=None, error_kind=None, backend=None, rerun=False, children=[],
    )  # fmt: skip


def test_best_so_far_keeps_the_oldest_of_equal_scores_and_merges_reruns() -> None:
    """A re-run after a resume repeats an iteration number: one point per iteration; of equal
    best scores the oldest program holds the point."""
    nodes = [_node(1, 0, 1.0), _node(2, 1, 1.5), _node(3, 1, 1.5), _node(5, 2, None),
             _node(4, 1, 1.2), _node(6, 3, 1.5)]  # fmt: skip
    points = [(p.iteration, p.best_score, p.program_id) for p in best_so_far(nodes)]
    assert points == [(0, 1.0, 1), (1, 1.5, 2), (3, 1.5, 2)]


# --- GET /v1/programs/{id}/diff ---------------------------------------------------------------


def test_an_edge_diff_is_the_unified_diff_of_the_mutators_edit(
    api_client: TestClient, demo: DemoJob, reader: dict[str, str]
) -> None:
    ids = demo.program_ids
    response = api_client.get(f"/v1/programs/{ids['i9']}/diff", headers=reader)
    assert response.status_code == 200, response.text
    edge = response.json()
    assert (edge["program_id"], edge["parent_id"], edge["job_id"], edge["iteration"]) == (
        ids["i9"],
        ids["i7"],
        demo.job_id,
        9,
    )
    assert (edge["state"], edge["parent_state"]) == ("verified", "verified")
    assert (edge["score"], edge["parent_score"]) == (2.31, 2.05)
    assert math.isclose(edge["score_delta"], 2.31 - 2.05)
    lines = edge["diff"].splitlines()
    assert lines[:2] == [f"--- program-{ids['i7']}.cu", f"+++ program-{ids['i9']}.cu"]
    # The offline mutator's SEARCH/REPLACE blocks each move one tunable's line: the diff
    # removes exactly the SEARCH lines and adds exactly the REPLACE lines.
    blocks = edge["mutation_diff"].split("<<<<<<< SEARCH\n")[1:]
    searched = [block.split("\n=======\n")[0] for block in blocks]
    replaced = [block.split("\n=======\n")[1].split("\n>>>>>>> REPLACE")[0] for block in blocks]
    assert [line[1:] for line in lines[2:] if line.startswith("-")] == searched
    assert [line[1:] for line in lines[2:] if line.startswith("+")] == replaced
    assert (edge["lines_added"], edge["lines_removed"]) == (len(blocks), len(blocks))
    assert edge["diff_note"] is None
    for line in searched:
        assert line in demo.sources["i7"] and line not in demo.sources["i9"]


def test_a_failed_childs_edge_shows_the_drop_to_zero(
    api_client: TestClient, demo: DemoJob, reader: dict[str, str]
) -> None:
    edge = api_client.get(f"/v1/programs/{demo.program_ids['i6']}/diff", headers=reader).json()
    assert (edge["state"], edge["score"], edge["parent_score"]) == ("failed", 0.0, 1.62)
    assert math.isclose(edge["score_delta"], -1.62)
    unevaluated = api_client.get(
        f"/v1/programs/{demo.program_ids['i11']}/diff", headers=reader
    ).json()
    assert (unevaluated["state"], unevaluated["score"], unevaluated["score_delta"]) == (
        "unevaluated",
        None,
        None,
    )
    assert unevaluated["parent_state"] == "scored"


def test_a_seed_has_no_edge(api_client: TestClient, demo: DemoJob, reader: dict[str, str]) -> None:
    edge = api_client.get(f"/v1/programs/{demo.program_ids['seed']}/diff", headers=reader).json()
    assert edge["parent_id"] is None
    assert (edge["diff"], edge["mutation_diff"], edge["parent_state"]) == (None, None, None)
    assert edge["diff_note"] == "a seed: no parent to diff against"
    assert (edge["lines_added"], edge["lines_removed"], edge["score"]) == (0, 0, 0.94)


def test_a_copy_of_its_parent_has_an_empty_diff(
    api_client: TestClient, demo: DemoJob, fresh_database_url: str, reader: dict[str, str]
) -> None:
    """A migrant copy (same source on another island) is an edge with no change."""
    engine = make_engine(fresh_database_url)
    try:
        with session_scope(engine) as s:
            copy, _ = repo.record_program(
                s, job_id=demo.job_id, uid="i9-migrant", source=demo.sources["i9"],
                parent_uid="i9", island=0, generation=5, iteration=10, diff=None,
                backend="migration", model=None,
            )  # fmt: skip
            copy_id = copy.id
    finally:
        engine.dispose()
    edge = api_client.get(f"/v1/programs/{copy_id}/diff", headers=reader).json()
    assert (edge["diff"], edge["lines_added"], edge["lines_removed"]) == ("", 0, 0)
    assert (edge["state"], edge["parent_score"], edge["score_delta"]) == ("unevaluated", 2.31, None)


def test_an_unknown_program_has_no_diff(api_client: TestClient, reader: dict[str, str]) -> None:
    response = api_client.get("/v1/programs/4242/diff", headers=reader)
    assert (response.status_code, response.json()["detail"]) == (404, "program 4242 not found")
    assert api_client.get("/v1/programs/0/diff", headers=reader).status_code == 422


def test_source_diff_counts_lines_that_look_like_headers_and_ends_every_line() -> None:
    """A removed line ``--i;`` is ``---i;`` in the diff: counted, not taken for a header; a
    source without a final newline still gives one line per diff line."""
    diff = source_diff("a\n--i;\nb", "a\nb2", before_name="x", after_name="y")
    assert (diff.added, diff.removed) == (1, 2)
    assert diff.text is not None and diff.text.endswith("\n")
    assert "---i;\n" in diff.text
    expected = list(difflib.unified_diff(["a\n", "--i;\n", "b"], ["a\n", "b2"], "x", "y"))
    assert len(diff.text.splitlines()) == len(expected)
    assert source_diff("same\n", "same\n", before_name="x", after_name="y").text == ""


def test_a_source_too_long_to_diff_is_said_so() -> None:
    long = "x;\n" * (MAX_DIFF_LINES + 1)
    diff = source_diff("x;\n", long, before_name="x", after_name="y")
    assert diff.text is None
    assert diff.note == f"not diffed: {MAX_DIFF_LINES + 1} lines, more than {MAX_DIFF_LINES}"
