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
from job_store import job_row, offline_settings, set_job_state, small_job

from evolver.errors import ResumeError
from evolver.job_config import WORK_ROOT_KEY, shown_config
from evolver.runner import resume_job, start_job
from evolver.work_folder import work_folder


def test_a_resume_without_work_dir_runs_in_the_jobs_recorded_root(
    fresh_database_url: str, tmp_path: Path
) -> None:
    root, default = tmp_path / "x-runs", tmp_path / "runs"
    first = start_job(
        small_job(), settings=offline_settings(root), database_url=fresh_database_url, write=print
    )
    assert first.state == "complete"
    row = job_row(fresh_database_url)
    assert row.config[WORK_ROOT_KEY] == str(root.resolve())
    assert WORK_ROOT_KEY not in shown_config(row.config)  # a server path: not served
    set_job_state(fresh_database_url, "failed")

    lines: list[str] = []
    again = resume_job(
        1,
        overrides={"iterations": 4},
        settings=offline_settings(default),
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
    start_job(
        small_job(), settings=offline_settings(root), database_url=fresh_database_url, write=print
    )
    folder = work_folder(root, 1, job_row(fresh_database_url).work_key)
    shutil.rmtree(root)
    set_job_state(fresh_database_url, "failed")
    with pytest.raises(ResumeError) as caught:
        resume_job(
            1,
            overrides={"iterations": 4},
            settings=offline_settings(tmp_path / "runs"),
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
    start_job(
        small_job(), settings=offline_settings(root), database_url=fresh_database_url, write=print
    )
    set_job_state(fresh_database_url, "failed")
    again = resume_job(
        1,
        overrides={"iterations": 3},
        settings=offline_settings(given),
        database_url=fresh_database_url,
        write=print,
    )
    assert again.work_folder == work_folder(given, 1, job_row(fresh_database_url).work_key)
    assert job_row(fresh_database_url).config[WORK_ROOT_KEY] == str(given.resolve())


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
    set_job_state(url, "failed")
    resumed = kernevo("evolve", "--resume", "1", "--iterations", "4")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    folder = work_folder(root, 1, job_row(url).work_key)
    assert f"2 iterations from checkpoint at iteration 2; work folder {folder}" in resumed.stdout
    assert not (tmp_path / "runs").exists()
