"""The real OpenEvolve loop against an OpenAI-compatible stub server over HTTP, compile-only,
recorded in a temporary SQLite store: every iteration's program is there, failures included."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from openai_stub import serve_chat
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import Evaluation, Job, Program
from evolver.job_config import JobConfig, LLMSection
from evolver.offline_mutator import extract_current_program, propose_diff
from evolver.runner import start_job
from evolver.settings import EvolverSettings
from seeds.registry import get_path
from seeds.tunables import parse_tunables

STUB_MODEL = "stub-coder-1"
ITERATIONS = 6
BROKEN = "this line is not CUDA;"
GARBAGE = "I have reviewed the kernel and it already looks optimal to me."


@dataclass
class StubLLM:
    """Answers chat completions in turn with: a tunable move, a diff that breaks compilation,
    and prose with no diff."""

    url: str = ""
    requests: list[dict] = field(default_factory=list)
    only_garbage: bool = False

    def answer(self, body: dict) -> str:
        self.requests.append(body)
        user = body["messages"][-1]["content"]
        program = extract_current_program(user)
        assert program is not None, "the prompt must carry the current program"
        turn = 2 if self.only_garbage else (len(self.requests) - 1) % 3
        if turn == 0:
            import random

            return "Try another geometry.\n\n" + propose_diff(program, random.Random(len(user)))
        if turn == 1:
            line = parse_tunables(program)[0].line
            return f"<<<<<<< SEARCH\n{line}\n=======\n{line}\n{BROKEN}\n>>>>>>> REPLACE\n"
        return GARBAGE


@pytest.fixture
def stub_llm() -> Iterator[StubLLM]:
    stub = StubLLM()
    with serve_chat(STUB_MODEL, lambda body, headers: stub.answer(body)) as url:
        stub.url = url
        yield stub


def test_every_iteration_is_recorded_with_lineage_backend_and_failure_kind(
    tmp_path: Path, stub_llm: StubLLM
) -> None:
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    job = JobConfig(
        path="trsm_small",
        dtype="float64",
        compile_only=True,
        iterations=ITERATIONS,
        checkpoint_interval=2,
        llm=LLMSection(base_url=stub_llm.url, model=STUB_MODEL, timeout_s=30, retries=0),
    )
    lines: list[str] = []
    outcome = start_job(
        job,
        settings=EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None),
        database_url=url,
        write=lines.append,
    )

    assert outcome.state == "complete"
    assert len(stub_llm.requests) == ITERATIONS
    engine = create_engine(url)
    with Session(engine) as s:
        programs = {p.id: p for p in s.scalars(select(Program))}
        evaluations = list(s.scalars(select(Evaluation)))
        job_row = s.get(Job, outcome.job_id)
        assert job_row is not None

        # One row for the seed and one per iteration, failed iterations included.
        assert len(programs) == 1 + ITERATIONS == outcome.programs_recorded
        seeds = [p for p in programs.values() if p.parent_id is None]
        assert len(seeds) == 1 and seeds[0].source == get_path("trsm_small").seed_source()
        assert seeds[0].backend == "seed"
        children = [p for p in programs.values() if p.parent_id is not None]
        assert all(p.parent_id in programs for p in children)
        assert {p.iteration for p in children} == set(range(1, ITERATIONS + 1))
        assert all((p.backend, p.model) == ("openai-compatible", STUB_MODEL) for p in children)
        assert all(p.generation == programs[p.parent_id].generation + 1 for p in children)

        # Exactly one evaluation per program; its kind says what went wrong.
        assert sorted(e.program_id for e in evaluations) == sorted(programs)
        kinds = {e.program_id: e.error_kind for e in evaluations}
        breaking = [p for p in children if f"+{BROKEN}" in (p.diff or "")]
        assert len(breaking) == 2
        assert all(kinds[p.id] == "compile_error" for p in breaking)
        # A child of a broken parent stays broken; every compile error carries the bad line.
        assert all(BROKEN in p.source for p in children if kinds[p.id] == "compile_error")
        no_diff = [p for p in children if kinds[p.id] == "diff_error"]
        assert len(no_diff) == 2
        assert all(p.diff == GARBAGE and p.source == "" for p in no_diff)
        moved = [p for p in children if p not in breaking and p not in no_diff]
        assert len(moved) == 2
        for program in moved:
            assert program.diff and program.diff.startswith("--- ")
            assert "-#define TRSM_" in program.diff and "+#define TRSM_" in program.diff
            # Compile-only: a kernel that compiles stops there, "compiled": scored 0, no failure.
            expected = "compile_error" if BROKEN in program.source else None
            assert kinds[program.id] == expected
        compiled = [e for e in evaluations if e.report["status"] == "compiled"]
        assert compiled and all(
            (e.state, e.error_kind, e.score) == ("scored", None, 0.0) for e in compiled
        )
        assert all(e.report["stage"] == "compile" for e in compiled)
        assert all(e.state == "failed" for e in evaluations if e.error_kind is not None)

        # Progress and heartbeat reached the job row.
        assert job_row.state == "complete"
        assert job_row.iteration == ITERATIONS
        assert job_row.heartbeat_at is not None
        assert job_row.heartbeat_interval_s == 30.0  # its own process beat for it (no worker)
        assert job_row.last_failure_kind in ("compile_error", "diff_error")
        assert (job_row.backend, job_row.model) == ("openai-compatible", STUB_MODEL)
        assert job_row.config["llm"]["base_url"] == stub_llm.url

    # The LLM saw the path's semantics and the evaluator's feedback.
    first = stub_llm.requests[0]["messages"]
    assert get_path("trsm_small").semantics in first[0]["content"]
    assert "## Last Execution Output" in first[1]["content"]
    assert any("### compile_log" in r["messages"][1]["content"] for r in stub_llm.requests)
    iteration_lines = [line for line in lines if line.startswith(f"job {outcome.job_id} | iter ")]
    assert len(iteration_lines) == 1 + ITERATIONS
    # A kernel that compiled is shown as such, not as a failure.
    assert iteration_lines[0].startswith(
        f"job {outcome.job_id} | iter 0/{ITERATIONS} | seed: compiled |"
    )
    assert iteration_lines[0].endswith("| last failure: -")


def test_a_run_where_no_iteration_yields_a_program_fails_in_one_line(
    tmp_path: Path, stub_llm: StubLLM
) -> None:
    stub_llm.only_garbage = True
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    job = JobConfig(
        path="trsm_small",
        dtype="float32",
        compile_only=True,
        iterations=3,
        llm=LLMSection(base_url=stub_llm.url, model=STUB_MODEL, timeout_s=30, retries=0),
    )
    outcome = start_job(
        job,
        settings=EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None),
        database_url=url,
        write=lambda line: None,
    )
    assert outcome.state == "failed"
    assert "0/3 iterations produced a candidate program" in outcome.message
    assert "\n" not in outcome.message
    with Session(create_engine(url)) as s:
        kinds = [e.error_kind for e in s.scalars(select(Evaluation).order_by(Evaluation.id))]
        # The seed compiled (no failure); every iteration after it produced no program.
        assert kinds == [None, "diff_error", "diff_error", "diff_error"]
        job_row = s.get(Job, outcome.job_id)
        assert job_row is not None and job_row.state == "failed"
