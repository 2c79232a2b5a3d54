"""A resume finds the job's own work folder, whatever ``--work-dir`` the job ran with.

A fresh-user trial: ``kernevo evolve … --work-dir /tmp/x-runs``, stopped by SIGTERM after a
checkpoint, printed "resume with 'kernevo evolve --resume 1'"; that command resumed from the
seed in ./runs although /tmp/x-runs/job-1-…/openevolve/checkpoints held the job's checkpoints.
The job row now records its work root (``evolver.job_config.WORK_ROOT_KEY``): a resume without
``--work-dir`` runs there, and says so in one line when the folder is gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, update
from sqlalchemy.orm import Session

from db.models import Job
from evolver.errors import ResumeError
from evolver.job_config import WORK_ROOT_KEY, JobConfig, shown_config
from evolver.runner import resume_job, start_job
from evolver.settings import EvolverSettings
from evolver.work_folder import work_folder


def _settings(root: Path) -> EvolverSettings:
    return EvolverSettings(work_dir=root, llm_base_url=None)  # the offline mutator


def _small_job() -> JobConfig:
    return JobConfig.model_validate(
        {
            "path": "trsm_small",
            "dtype": "float32",
            "compile_only": True,
            "iterations": 2,
            "checkpoint_interval": 1,
        }
    )


def _row(url: str, job_id: int = 1) -> Job:
    engine = create_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job
    finally:
        engine.dispose()


def _fail(url: str, job_id: int = 1) -> None:
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            s.execute(update(Job).where(Job.id == job_id).values(state="failed"))
            s.commit()
    finally:
        engine.dispose()


def test_a_resume_without_work_dir_runs_in_the_jobs_recorded_root(
    fresh_database_url: str, tmp_path: Path
) -> None:
    root, default = tmp_path / "x-runs", tmp_path / "runs"
    first = start_job(
        _small_job(), settings=_settings(root), database_url=fresh_database_url, write=print
    )
    assert first.state == "complete"
    row = _row(fresh_database_url)
    assert row.config[WORK_ROOT_KEY] == str(root.resolve())
    assert WORK_ROOT_KEY not in shown_config(row.config)  # a server path: not served
    _fail(fresh_database_url)

    lines: list[str] = []
    again = resume_job(
        1,
        overrides={"iterations": 4},
        settings=_settings(default),
        database_url=fresh_database_url,
        write=lines.append,
        work_dir_given=False,
    )
    assert (again.state, again.iteration) == ("complete", 4)
    assert again.work_folder == work_folder(root, 1, row.work_key)
    assert "2 iterations from checkpoint at iteration 2" in lines[0]
    assert not default.exists()


def test_a_resume_whose_recorded_folder_is_gone_says_so(
    fresh_database_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "x-runs"
    start_job(_small_job(), settings=_settings(root), database_url=fresh_database_url, write=print)
    folder = work_folder(root, 1, _row(fresh_database_url).work_key)
    shutil.rmtree(root)
    _fail(fresh_database_url)
    with pytest.raises(ResumeError) as caught:
        resume_job(
            1,
            overrides={"iterations": 4},
            settings=_settings(tmp_path / "runs"),
            database_url=fresh_database_url,
            write=print,
            work_dir_given=False,
        )
    assert str(caught.value) == (
        f"job 1 ran to iteration 2 in work folder {folder}, which is gone; resume with "
        "--work-dir to start it over from its seed in another work folder"
    )
    assert not (tmp_path / "runs").exists() and not root.exists()  # nothing started


def test_a_given_work_dir_wins_over_the_recorded_root(
    fresh_database_url: str, tmp_path: Path
) -> None:
    """A worker (and ``--work-dir``) runs the job in its own work root, as before."""
    root, given = tmp_path / "x-runs", tmp_path / "elsewhere"
    start_job(_small_job(), settings=_settings(root), database_url=fresh_database_url, write=print)
    _fail(fresh_database_url)
    again = resume_job(
        1,
        overrides={"iterations": 3},
        settings=_settings(given),
        database_url=fresh_database_url,
        write=print,
    )
    assert again.work_folder == work_folder(given, 1, _row(fresh_database_url).work_key)
    assert _row(fresh_database_url).config[WORK_ROOT_KEY] == str(given.resolve())


def test_the_cli_hint_resumes_a_work_dir_job_from_its_checkpoint(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}
    env.pop("KERNEVO_WORK_DIR", None)
    url = f"sqlite:///{tmp_path / 'x.db'}"
    root = tmp_path / "x-runs"

    def kernevo(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kernevo.cli", *args, "--database-url", url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    first = kernevo(
        "evolve", "--path", "trsm_small", "--dtype", "float32", "--compile-only",
        "--iterations", "2", "--checkpoint-interval", "1", "--work-dir", str(root),
    )  # fmt: skip
    assert first.returncode == 0, first.stdout + first.stderr
    _fail(url)
    resumed = kernevo("evolve", "--resume", "1", "--iterations", "4")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    folder = work_folder(root, 1, _row(url).work_key)
    assert f"2 iterations from checkpoint at iteration 2; work folder {folder}" in resumed.stdout
    assert not (tmp_path / "runs").exists()
