"""A job SIGKILLed mid-run resumes from its last checkpoint: nothing recorded before the kill is
lost, nothing is recorded twice, and every program's parent is in the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import Evaluation, Job, Program
from evolver.checkpoints import latest_checkpoint
from evolver.work_folder import work_folder

ITERATIONS = 120
KILL_AFTER_PROGRAMS = 12


def _cli(*args: str, tmp_path: Path, url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kernevo.cli",
        "evolve",
        *args,
        "--compile-only",
        "--database-url",
        url,
        "--work-dir",
        str(tmp_path / "runs"),
    ]


def _env() -> dict[str, str]:
    # The offline mutator: no LLM endpoint from the caller's environment.
    return {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}


def _rows(url: str) -> dict[str, tuple[str, int | None, int, str, bool]]:
    """uid → (source sha256, parent row id, iteration, backend, rerun)."""
    with Session(create_engine(url)) as s:
        return {
            p.uid: (p.source_sha256, p.parent_id, p.iteration, p.backend or "", p.rerun)
            for p in s.scalars(select(Program))
        }


def _work_folder(url: str, tmp_path: Path) -> Path:
    """Job 1's work folder (``evolver.work_folder``: named by its id and work key)."""
    with Session(create_engine(url)) as s:
        job = s.get(Job, 1)
        assert job is not None
        return work_folder(tmp_path / "runs", 1, job.work_key)


def test_sigkilled_job_resumes_without_loss_or_duplicates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    first = subprocess.Popen(
        _cli(
            "--path",
            "trsm_small",
            "--dtype",
            "float64",
            "--iterations",
            str(ITERATIONS),
            "--checkpoint-interval",
            "3",
            tmp_path=tmp_path,
            url=url,
        ),
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill takes the pool workers too
    )
    output = tmp_path / "runs" / "not-yet"  # job 1's folder, once its row names its work key
    refused = None
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert first.poll() is None, "the job ended before it could be killed"
            if (tmp_path / "lineage.db").exists():
                try:
                    rows = _rows(url)
                except Exception:  # schema not migrated yet
                    rows = {}
                count = len(rows)
                if count and refused is None:
                    # A second process may not run the job while the first holds it.
                    refused = subprocess.run(
                        _cli("--resume", "1", tmp_path=tmp_path, url=url),
                        env=_env(),
                        capture_output=True,
                        text=True,
                        timeout=120,
                    )
                # Killed between checkpoints, so some recorded iterations have to run again.
                if count:
                    output = _work_folder(url, tmp_path) / "openevolve"
                last = latest_checkpoint(output)
                reached = max((row[2] for row in rows.values()), default=0)
                if count >= KILL_AFTER_PROGRAMS and last is not None and reached > last.iteration:
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the job recorded too few programs in time")
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        assert first.stdout is not None
        first.stdout.close()

    assert refused is not None and refused.returncode != 0
    # The CLI shortens long tokens (the pytest folder) in its one-line errors.
    assert refused.stderr.startswith("kernevo: job 1 is running in another process (lock ")
    assert refused.stderr.strip().endswith(")") and len(refused.stderr.splitlines()) == 1
    before = _rows(url)
    checkpoint = latest_checkpoint(output)
    assert checkpoint is not None and len(before) >= KILL_AFTER_PROGRAMS
    with Session(create_engine(url)) as s:
        job = s.get(Job, 1)
        assert job is not None and job.state == "running"  # killed: nobody updated it

    resumed = subprocess.run(
        _cli("--resume", "--path", "trsm_small", "--dtype", "float64", tmp_path=tmp_path, url=url),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"from checkpoint at iteration {checkpoint.iteration}" in resumed.stdout

    after = _rows(url)
    # Nothing lost: every row recorded before the kill is still there, unchanged.
    assert {uid: after[uid] for uid in before} == before
    # Nothing recorded twice: the resume added no row for the checkpointed iterations, and the
    # seed was not recorded again.
    old = {uid for uid, row in after.items() if row[2] <= checkpoint.iteration}
    assert old <= before.keys()
    assert sum(row[1] is None for row in after.values()) == 1
    new = {uid: row for uid, row in after.items() if uid not in before}
    assert {row[2] for row in new.values() if row[3] != "migration"} == set(
        range(checkpoint.iteration + 1, ITERATIONS + 1)
    )
    # Iterations the killed run had recorded after its checkpoint ran again: their new programs
    # are marked re-runs, later ones are not, and no row of the first run changed its mark.
    reached = max(row[2] for row in before.values())
    assert reached > checkpoint.iteration, "the kill came right at a checkpoint: nothing reran"
    assert {uid for uid, row in new.items() if row[4]} == {
        uid for uid, row in new.items() if row[2] <= reached
    }
    assert any(row[4] for row in new.values())
    assert not any(row[4] for row in before.values())
    assert f"iterations {checkpoint.iteration + 1}..{reached} run again from that checkpoint" in (
        resumed.stdout
    )
    assert "(re-run)" in resumed.stdout
    with Session(create_engine(url)) as s:
        ids = set(s.scalars(select(Program.id)))
        parents = {p.parent_id for p in s.scalars(select(Program)) if p.parent_id is not None}
        assert parents <= ids
        evaluated = list(s.scalars(select(Evaluation.program_id)))
        migrants = set(s.scalars(select(Program.id).where(Program.backend == "migration")))
        assert len(evaluated) == len(set(evaluated)) == len(ids - migrants)
        job = s.get(Job, 1)
        assert job is not None
        assert (job.state, job.iteration) == ("complete", ITERATIONS)

    again = subprocess.run(
        _cli("--resume", "1", tmp_path=tmp_path, url=url),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1
    assert again.stderr == "kernevo: job 1 is complete; nothing to resume\n"


def test_resume_after_the_last_checkpointed_iteration_only_finishes(tmp_path: Path) -> None:
    """A job killed between its last iteration and marking itself complete."""
    from sqlalchemy import update

    from evolver.job_config import JobConfig
    from evolver.runner import resume_job, start_job
    from evolver.settings import EvolverSettings

    url = f"sqlite:///{tmp_path / 'lineage.db'}"
    settings = EvolverSettings(work_dir=tmp_path / "runs", llm_base_url=None)
    job = JobConfig(
        path="trsm_small", dtype="float64", compile_only=True, iterations=4, checkpoint_interval=2
    )
    first = start_job(job, settings=settings, database_url=url, write=lambda line: None)
    with Session(create_engine(url)) as s:  # as if killed before it marked itself complete
        s.execute(update(Job).where(Job.id == first.job_id).values(state="running"))
        s.commit()
    lines: list[str] = []
    again = resume_job(
        first.job_id, overrides={}, settings=settings, database_url=url, write=lines.append
    )
    assert "0 iterations from checkpoint at iteration 4" in lines[0]
    assert (again.state, again.iteration) == ("complete", 4)
    assert again.programs_recorded == first.programs_recorded == 5
