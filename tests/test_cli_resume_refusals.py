"""``kernevo evolve --resume`` refuses, in one line (exit 2), what a resume cannot do: options
the job's config and checkpoint fix, and ``--iterations`` that would not extend the job (a
trial's ``--iterations`` below the current iteration ran "0 iterations" and closed the job)."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import repository
from db.migrate import upgrade
from db.session import make_engine, session_scope
from kernevo.cli import main


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--islands", "4"], "--islands"),
        (["--islands", "4", "--seed", "9", "--population", "5"], "--islands, --population, --seed"),
        (["--llm-model", "m"], "--llm-model"),
    ],
)
def test_options_a_resume_cannot_change(
    capsys: pytest.CaptureFixture[str], options: list[str], named: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["evolve", "--resume", "27", *options])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"error: {named} cannot change on --resume: a job keeps its config" in line


@pytest.fixture
def job_at_115(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A failed (resumable) compile-only job stopped at iteration 115 of 5000."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as s:
        job = repository.create_job(
            s, path="trsm_small", dtype="float64", gpu="none", shape_bucket="m64n64",
            config={"path": "trsm_small", "dtype": "float64", "iterations": 5000,
                    "compile_only": True},
            backend="offline", model="offline-mutator",
        )  # fmt: skip
        repository.update_job_progress(s, job.id, state="failed", iteration=115)
        job_id = job.id
    engine.dispose()
    assert job_id == 1
    return url


@pytest.mark.parametrize("iterations", ["115", "100", "1"])
def test_iterations_must_exceed_the_current_one(
    capsys: pytest.CaptureFixture[str], job_at_115: str, tmp_path: Path, iterations: str
) -> None:
    argv = ["evolve", "--resume", "1", "--iterations", iterations, "--compile-only"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--database-url", job_at_115, "--work-dir", str(tmp_path / "runs")])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"job 1 is at iteration 115: --iterations {iterations} must exceed it" in line
    engine = make_engine(job_at_115)
    with session_scope(engine) as s:  # left as it was: still resumable
        row = repository.get_job(s, 1)
        assert (row.state, row.iteration) == ("failed", 115)
    engine.dispose()
