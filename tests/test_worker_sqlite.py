"""One ``kernevo worker --compile-only`` on SQLite (the one worker a SQLite file allows): a job
cancelled while it runs ends ``cancelled`` after its iteration in flight, and SIGTERM to the
worker stops its job and returns it to the queue, resumable by the next worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import Engine

from db import queue
from db import repository as repo
from db.session import make_engine, session_scope
from evolver.job_config import JobConfig
from kernevo.cli import main

ITERATIONS = 400  # far more than the test lets run


def _enqueue(engine: Engine) -> int:
    config = JobConfig(
        path="trsm_small", dtype="float32", compile_only=True, iterations=ITERATIONS
    ).model_dump(mode="json")
    with session_scope(engine) as s:
        return queue.enqueue_job(
            s,
            path="trsm_small",
            dtype="float32",
            gpu_key=queue.NO_GPU,
            shape_bucket="m64n64",
            config=config,
        ).id


def _wait_for(engine: Engine, job_id: int, iteration: int, deadline: float) -> None:
    while True:
        with session_scope(engine) as s:
            job = repo.get_job(s, job_id)
        if job.state == "running" and job.iteration >= iteration:
            return
        assert time.monotonic() < deadline, (job.state, job.iteration)
        time.sleep(0.1)


def _state(engine: Engine, job_id: int) -> tuple[str, int, str | None, int]:
    with session_scope(engine) as s:
        job = repo.get_job(s, job_id)
        return job.state, job.attempts, job.claimed_by, job.iteration


def test_cancel_and_sigterm_through_a_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    from db.migrate import upgrade

    upgrade(url)
    engine = make_engine(url)
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}
    with log.open("wb") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "kernevo.cli", "worker", "--compile-only"]
            + ["--database-url", url, "--work-dir", str(tmp_path / "runs")]
            + ["--heartbeat-s", "0.5", "--grace-s", "30", "--poll-s", "0.2"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 180
        cancelled, stopped = _enqueue(engine), _enqueue(engine)

        # A cancel reaches the running job through its row: it ends cancelled, not failed.
        _wait_for(engine, cancelled, 2, deadline)
        assert main(["cancel", str(cancelled), "--database-url", url]) == 0
        _wait_for(engine, stopped, 1, deadline)  # the worker moved on to the next job
        state, attempts, holder, iteration = _state(engine, cancelled)
        assert (state, attempts) == ("cancelled", 1)
        assert holder is not None and 2 <= iteration < ITERATIONS

        # SIGTERM: the job process stops (failed, interrupted) and the job goes back to the queue.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 143
        state, attempts, holder, iteration = _state(engine, stopped)
        # The worker was asked to stop, no worker died: the attempt is not counted.
        assert (state, attempts, holder) == ("waiting", 0, None)
        assert 1 <= iteration < ITERATIONS
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(30)
        engine.dispose()
    lines = log.read_text().splitlines()
    worker_lines = [line for line in lines if line.startswith("worker ")]
    assert any(line.endswith(f"| job {cancelled}: cancelled (exit 0)") for line in worker_lines)
    assert any(
        line.endswith(f"| job {stopped}: job process ended (exit 143); returned to the queue")
        for line in worker_lines
    )
    assert worker_lines[-1].endswith("| stopped by SIGTERM")
    # The job's own line says where it went, not to resume it by hand (the worker did).
    [stop_line] = [line for line in lines if f"job {stopped} stopped by SIGTERM" in line]
    assert "its worker returns it to the queue, where a worker resumes it" in stop_line
    assert "kernevo evolve --resume" not in stop_line
    assert any(f"job {cancelled} | cancelled: finishing the iteration in flight" in line
               for line in lines)  # fmt: skip


def test_a_job_another_process_runs_is_left_to_it(tmp_path: Path) -> None:
    """The tester's ``kernevo evolve --resume N`` held job N's lock while a worker claimed N:
    the worker marked it failed (worker_error). Now its job process says the job is busy and
    the worker gives its claim up, leaving the row to the process that runs it."""
    from evolver.checkpoints import JobLock
    from evolver.work_folder import work_folder

    url = f"sqlite:///{tmp_path / 'queue.db'}"
    from db.migrate import upgrade

    upgrade(url)
    engine = make_engine(url)
    runs = tmp_path / "runs"
    job_id = _enqueue(engine)
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}
    with session_scope(engine) as s:
        work = work_folder(runs, job_id, repo.get_job(s, job_id).work_key)
    with JobLock(work, job_id), log.open("wb") as handle:
        worker = subprocess.Popen(
            [sys.executable, "-m", "kernevo.cli", "worker", "--compile-only"]
            + ["--database-url", url, "--work-dir", str(runs)]
            + ["--heartbeat-s", "0.5", "--grace-s", "30", "--poll-s", "0.2"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while "claim given up" not in log.read_text():
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 143
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(30)
    try:
        with session_scope(engine) as s:
            job = repo.get_job(s, job_id)
            row = (job.state, job.claimed_by, job.attempts, job.last_failure_kind)
            interval = job.heartbeat_interval_s
    finally:
        engine.dispose()
    assert row == ("running", None, 0, None)  # not failed, not claimed, no attempt counted
    assert interval == 30.0  # the holder's beats: no reaper takes them for a death
    text = log.read_text()
    # The job named once (the busy error's own line names it).
    assert f"kernevo worker: job {job_id} is running in another process (lock " in text
    assert f"job {job_id}: job {job_id}" not in text
    assert any(
        line.endswith(
            f"| job {job_id}: another process runs it (it holds the job's lock); claim given "
            "up, the job left to that process"
        )
        for line in text.splitlines()
    )
    assert "worker_error" not in text
