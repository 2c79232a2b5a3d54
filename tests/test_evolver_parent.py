"""The evolver tells each evaluation its candidate's parent (evolver.openevolve_host wraps
OpenEvolve's iteration in the pool worker), so the child is timed against it in the same rounds
(evaluator.openevolve_entry; tests/test_evaluator_pipeline.py)."""

from __future__ import annotations

from typing import Any

import openevolve.process_parallel as parallel
import pytest

import evolver.openevolve_host as host
from evaluator.parent_context import Parent, current_parent


def _snapshot(**programs: dict[str, Any]) -> dict[str, Any]:
    return {"programs": programs, "islands": [[*programs]], "current_island": 0}


@pytest.mark.parametrize(
    ("program", "parent"),
    [
        ({"code": "kernel A", "metrics": {"combined_score": 2.5}}, Parent("kernel A", 2.5)),
        ({"code": "kernel A", "metrics": {}}, Parent("kernel A", 0.0)),  # never scored
        ({"code": "kernel A", "metrics": {"combined_score": "n/a"}}, Parent("kernel A", 0.0)),
        ({"metrics": {"combined_score": 2.5}}, None),  # no code: nothing to time
    ],
)
def test_the_parent_is_read_from_openevolves_snapshot(program, parent):
    assert host.parent_of(_snapshot(p1=program), "p1") == parent
    assert host.parent_of(_snapshot(p1=program), "other") is None


def test_the_parent_is_set_for_exactly_the_iteration(monkeypatch):
    seen: list[Parent | None] = []

    def iteration(iteration, db_snapshot, parent_id, inspiration_ids, evolution_mode):
        seen.append(current_parent())
        return "result"

    monkeypatch.setattr(host, "_openevolve_run_iteration", iteration)
    snapshot = _snapshot(p1={"code": "kernel A", "metrics": {"combined_score": 1.5}})
    assert host.run_iteration_knowing_parent(3, snapshot, "p1", [], "diff") == "result"
    assert seen == [Parent("kernel A", 1.5)] and current_parent() is None


def test_the_parent_is_cleared_when_the_iteration_raises(monkeypatch):
    def iteration(*_: Any) -> None:
        raise RuntimeError("LLM unreachable")

    monkeypatch.setattr(host, "_openevolve_run_iteration", iteration)
    snapshot = _snapshot(p1={"code": "kernel A", "metrics": {"combined_score": 1.5}})
    with pytest.raises(RuntimeError):
        host.run_iteration_knowing_parent(3, snapshot, "p1", [], "diff")
    assert current_parent() is None


def test_the_pool_worker_initializer_installs_the_wrapper_once(monkeypatch):
    original = parallel._run_iteration
    monkeypatch.setattr(host, "_openevolve_run_iteration", None)
    monkeypatch.setattr(host, "_openevolve_worker_init", lambda *_: None)
    monkeypatch.setattr("evaluator.parent_watch.die_with_parent", lambda *_, **__: None)
    monkeypatch.setattr(parallel, "_run_iteration", original)
    for _ in range(2):
        host._worker_init_dying_with_job({}, "evaluation.py", {})
    assert parallel._run_iteration is host.run_iteration_knowing_parent
    assert host._openevolve_run_iteration is original
