"""``kernevo evolve --in-flight N`` without a cluster: N candidates evaluated at once on the
local GPU (OpenEvolve's parallel evaluations; ``evolver.job_config.JobConfig.in_flight``), each
program recorded once; the range and the options that still need a cluster said in one line.
Compile-only jobs here (no GPU): the pool is the same one a GPU job runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, update
from sqlalchemy.orm import Session

from db.models import Job, Program
from evolver.job_config import MAX_LOCAL_IN_FLIGHT, JobConfig


def _evolve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KERNEVO_", "XDG_"))}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "xdg")
    (tmp_path / "xdg").mkdir(mode=0o700, exist_ok=True)
    argv = [
        sys.executable, "-m", "kernevo.cli", "evolve", "--path", "trsm_small",
        "--dtype", "float32", "--database-url", f"sqlite:///{tmp_path / 'lineage.db'}",
        "--work-dir", str(tmp_path / "runs"), *args,
    ]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def test_a_job_with_three_in_flight_records_every_iteration_once(tmp_path: Path) -> None:
    done = _evolve(tmp_path, "--compile-only", "--iterations", "6", "--in-flight", "3")
    assert done.returncode == 0, done.stderr
    assert "7 programs recorded" in done.stdout
    engine = create_engine(f"sqlite:///{tmp_path / 'lineage.db'}")
    with Session(engine) as s:
        [job] = s.scalars(select(Job)).all()
        iterations = sorted(p.iteration for p in s.scalars(select(Program)).all())
    assert job.state == "complete" and job.config["in_flight"] == 3
    assert iterations == list(range(7))  # the seed and one child per iteration, none twice
    assert ", 3 in flight from the seed" in done.stdout.splitlines()[0]


def test_a_resume_stores_its_new_in_flight_and_iterations(tmp_path: Path) -> None:
    """A fresh user's finding: the resumed run used them, the row kept the old ones, so a later
    resume went back to them."""
    assert _evolve(tmp_path, "--compile-only", "--iterations", "2").returncode == 0
    engine = create_engine(f"sqlite:///{tmp_path / 'lineage.db'}")
    with engine.begin() as conn:  # as a stop leaves it: failed, resumable
        conn.execute(update(Job).values(state="failed"))
    done = _evolve(tmp_path, "--resume", "1", "--iterations", "4", "--in-flight", "2")
    assert done.returncode == 0, done.stderr
    assert ", 2 in flight from the seed" in done.stdout.splitlines()[0]
    with Session(engine) as s:
        [job] = s.scalars(select(Job)).all()
    assert (job.state, job.iteration) == ("complete", 4)
    assert (job.config["in_flight"], job.config["iterations"]) == (2, 4)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--in-flight", str(MAX_LOCAL_IN_FLIGHT + 1)],
            f"argument --in-flight: at most {MAX_LOCAL_IN_FLIGHT} candidates on the local GPU, "
            f"not {MAX_LOCAL_IN_FLIGHT + 1} (a cluster, --gpus or --scheduler, takes up to 4096)",
        ),
        (
            ["--resume", "1", "--in-flight", "4096"],
            f"argument --in-flight: at most {MAX_LOCAL_IN_FLIGHT} candidates on the local GPU",
        ),
        (
            ["--in-flight", "0"],
            f"argument --in-flight: expected 1..{MAX_LOCAL_IN_FLIGHT} candidates on the local "
            "GPU, or 1..4096 with a cluster (--gpus, --scheduler), not '0'",
        ),
        (["--lost-after-s", "5"], "--lost-after-s needs --scheduler or --gpus (a Dask cluster)"),
    ],
    ids=["over-local-range", "resume-over-local-range", "zero", "lost-after-needs-a-cluster"],
)
def test_out_of_range_or_cluster_only_options_are_one_line_exit_2(
    tmp_path: Path, args: list[str], line: str
) -> None:
    done = _evolve(tmp_path, "--compile-only", *args)
    assert done.returncode == 2
    [message] = done.stderr.strip().splitlines()[-1:]
    assert line in message
    assert not (tmp_path / "lineage.db").exists()  # nothing written


def test_the_default_is_one_in_flight() -> None:
    job = JobConfig(path="trsm_small", dtype="float32")
    assert job.in_flight == 1
