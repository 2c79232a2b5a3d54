"""The lineage recorder's hook logic on its own: seeds and migrants from ``admit``, children
from the trace with their iteration, children whose storing raised, iterations without a
program, and evaluations read from (or, without one, made instead of) the evaluator's report."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest
from openevolve.population import ProgramState
from sqlalchemy import select

from db import repository
from db.migrate import upgrade
from db.models import Evaluation, Program
from db.session import make_engine, session_scope
from evolver.lineage import LineageRecorder, RecordContext, Recorded, source_sha256

SEED = "// seed\n// EVOLVE-BLOCK-START\n#define T 1  // tune: 1 2\n// EVOLVE-BLOCK-END\n"
CHILD = SEED.replace("#define T 1", "#define T 2")


def _state(uid: str, code: str, parent: str | None, generation: int, **meta: Any) -> ProgramState:
    metrics = {"combined_score": 0.0, "speedup_64": 0.0, "registers": 30.0}
    return ProgramState(
        uid, code, MappingProxyType(metrics), generation, parent, MappingProxyType(meta)
    )


Harness = tuple[LineageRecorder, list[Recorded], Any]


@pytest.fixture
def recorder(tmp_path: Path) -> Harness:
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as s:
        job_id = repository.create_job(
            s,
            path="trsm_small",
            dtype="float64",
            gpu="nvidia-h200",
            shape_bucket="m64n64",
            config={},
            backend="openai-compatible",
            model="m",
        ).id
    heard: list[Recorded] = []
    ctx = RecordContext(
        engine=engine,
        job_id=job_id,
        path_id="trsm_small",
        dtype="float64",
        report_dir=tmp_path / "reports",
        backend="openai-compatible",
        model="m",
        gpu_key="nvidia-h200",
        gpu_name="NVIDIA H200",
        arch="sm_90",
    )
    (tmp_path / "reports").mkdir()
    return LineageRecorder(ctx, heard.append, lambda: None), heard, engine


def _programs(engine: Any) -> dict[str, tuple[Program, list[Evaluation]]]:
    with session_scope(engine) as s:
        rows = {}
        for p in s.scalars(select(Program)):
            rows[p.uid] = (
                p,
                list(s.scalars(select(Evaluation).where(Evaluation.program_id == p.id))),
            )
        return rows


def test_admit_trace_failure_and_flush(recorder: Harness, tmp_path: Path) -> None:
    rec, heard, engine = recorder
    report = {
        "status": "ok",
        "combined_score": 1.5,
        "gpu": {
            "key": "nvidia-h200",
            "name": "NVIDIA H200",
            "arch": "sm_90",
            "driver_version": "13.0",
        },
        "compile": {"nvrtc_version": "13.0", "arch": "sm_90"},
    }
    (tmp_path / "reports" / f"{source_sha256(SEED)}.json").write_text(json.dumps(report))

    snapshot = SimpleNamespace(last_iteration=0)
    assert rec._admit(snapshot, _state("seed", SEED, None, 0), 0) is True
    # A child is held at admit and recorded by the trace, which knows its iteration.
    assert rec._admit(snapshot, _state("c1", CHILD, "seed", 1, llm_model="m"), 1) is True
    assert [h.kind for h in heard] == ["seed"]
    child = SimpleNamespace(
        id="c1",
        code=CHILD,
        parent_id="seed",
        generation=1,
        metadata={"island": 1, "llm_model": "m"},
        metrics={"timeout": True},
    )
    rec.on_trace(3, child, {"failure_stage": "evaluation"})
    # A migrant copy: recorded at admit, not evaluated again.
    rec._admit(
        SimpleNamespace(last_iteration=3), _state("c1-copy", CHILD, "c1", 1, migrant=True), 0
    )
    # Storing a child raised after admit: the failure log that follows records it.
    rec._admit(SimpleNamespace(last_iteration=3), _state("c2", CHILD + "//", "c1", 2), 1)
    rec.on_failure(4, "Feature dimension 'x' not found", None, None, None)
    # An iteration whose response had no diff, and one that lost its parent.
    rec.on_failure(5, "No valid diffs found in response", "c1-copy", 0, "no diff here")
    rec.on_failure(6, "LLM generation failed: timeout", "seed", 0, None)
    rec.on_failure(7, "Iteration timed out after 930s", None, None, None)

    rows = _programs(engine)
    assert set(rows) - {u for u in rows if u.startswith("failed-")} == {
        "seed",
        "c1",
        "c1-copy",
        "c2",
    }
    seed, (seed_eval,) = rows["seed"]
    assert (seed.backend, seed.parent_id, seed_eval.state, seed_eval.score) == (
        "seed",
        None,
        "scored",
        1.5,
    )
    c1, (c1_eval,) = rows["c1"]
    assert (c1.iteration, c1.island, c1.generation, c1.model) == (3, 1, 1, "m")
    assert c1.diff is not None and "+#define T 2" in c1.diff
    # No report for c1's source: OpenEvolve's own timeout fired, so the row says "timeout".
    assert (c1_eval.state, c1_eval.error_kind, c1_eval.gpu_key) == (
        "failed",
        "timeout",
        "nvidia-h200",
    )
    copy, copy_evals = rows["c1-copy"]
    assert (copy.backend, copy.parent_id, copy_evals) == ("migration", c1.id, [])
    c2, (c2_eval,) = rows["c2"]
    assert (c2.iteration, c2_eval.error_kind) == (4, "infra_error")
    failed = sorted(
        (p.iteration, e[0].error_kind, p.parent_id, p.diff)
        for u, (p, e) in rows.items()
        if u.startswith("failed-")
    )
    assert failed == [
        (5, "diff_error", copy.id, "no diff here"),
        (6, "llm_error", seed.id, None),
    ]
    assert heard[-1] == Recorded("lost", 7, error_kind="infra_error")


def test_a_compile_only_success_is_scored_not_failed(recorder: Harness, tmp_path: Path) -> None:
    from evolver.progress import ProgressReporter

    rec, heard, engine = recorder
    compiled = {
        "status": "compiled",
        "stage": "compile",
        "combined_score": 0.0,
        "failure": None,
        "compile": {"nvrtc_version": "13.0", "arch": "sm_90", "registers": 30},
    }
    broken = {
        "status": "compile_error",
        "stage": "compile",
        "combined_score": 0.0,
        "failure": {"check": "compile", "detail": "error: expected a ';'"},
    }
    reports = tmp_path / "reports"
    (reports / f"{source_sha256(SEED)}.json").write_text(json.dumps(compiled))
    (reports / f"{source_sha256(CHILD)}.json").write_text(json.dumps(broken))
    lines: list[str] = []
    progress = ProgressReporter(engine, rec.ctx.job_id, 2, write=lines.append, stop=lambda: None)
    rec = LineageRecorder(rec.ctx, progress, lambda: None)

    rec._admit(SimpleNamespace(last_iteration=0), _state("seed", SEED, None, 0), 0)
    child = SimpleNamespace(
        id="c1", code=CHILD, parent_id="seed", generation=1, metadata={}, metrics={}
    )
    rec.on_trace(1, child, None)

    rows = _programs(engine)
    _, (seed_eval,) = rows["seed"]
    assert (seed_eval.state, seed_eval.error_kind, seed_eval.score) == ("scored", None, 0.0)
    assert seed_eval.report["status"] == "compiled"
    _, (child_eval,) = rows["c1"]
    assert (child_eval.state, child_eval.error_kind) == ("failed", "compile_error")
    job = f"job {rec.ctx.job_id}"
    assert lines == [
        f"{job} | iter 0/2 | seed: compiled | best 0.000 (speedup n/a) | last failure: -",
        f"{job} | iter 1/2 | child: compile_error (compile) | best 0.000 (speedup n/a) "
        "| last failure: compile_error (iteration 1, this iteration)",
    ]
