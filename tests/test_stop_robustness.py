"""Stopping a job never hangs and never counts as a death.

- A job process stopped by SIGTERM exits 143 within seconds even when a pipe of its OpenEvolve
  pool is jammed: the feeder thread blocked on a pipe nobody reads (a fresh-user trial saw a
  stopped job, and the worker waiting for it, hang for ever in the interpreter's exit join), or
  the manager thread reading half a result.
- A worker whose job process ignores SIGTERM kills it after its grace period.
- A job given back because its worker was asked to stop keeps its attempt uncounted; a worker
  that died still counts towards ``worker_lost``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import repo_pythonpath
from sqlalchemy import Engine

from db import queue
from db import repository as repo
from db.migrate import upgrade
from db.session import make_engine, session_scope
from evolver.worker import Slot, Worker, WorkerOptions

CHILD = Path(__file__).with_name("stop_pool_child.py")
# _terminate_process_pool waits up to 2 s for its workers; the rest is the interpreter's exit.
EXIT_BOUND_S = 10.0


def _stop_pool_child(*args: str) -> tuple[int | None, float]:
    """Run ``stop_pool_child.py`` with ``args``, SIGTERM it once its pool is jammed; its exit
    status (``None``: still alive after :data:`EXIT_BOUND_S`, then killed) and seconds to exit."""
    env = dict(os.environ, PYTHONPATH=repo_pythonpath())
    child = subprocess.Popen(
        [sys.executable, str(CHILD), *args], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    holder = int(child.stdout.readline())
    try:
        start = time.monotonic()
        child.send_signal(signal.SIGTERM)
        try:
            return child.wait(EXIT_BOUND_S), time.monotonic() - start
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return None, time.monotonic() - start
    finally:
        if holder:
            os.kill(holder, signal.SIGKILL)


@pytest.mark.parametrize("fault", ["feeder", "half-result"])
def test_a_stopped_job_exits_143_although_a_pipe_of_its_pool_is_jammed(fault: str) -> None:
    """``feeder``: the call queue's feeder blocked on a full pipe. ``half-result``: a worker
    killed between a large result's length header and its body (CI, 2026-12-02: a job stopped
    by SIGTERM printed its line, then hung 120 s in the interpreter's exit)."""
    code, seconds = _stop_pool_child(fault)
    assert code == 143, f"exit {code} after {seconds:.1f} s"
    assert seconds < EXIT_BOUND_S


def _enqueue(engine: Engine) -> int:
    with session_scope(engine) as s:
        return queue.enqueue_job(
            s,
            path="trsm_small",
            dtype="float32",
            gpu_key=queue.NO_GPU,
            shape_bucket="m64n64",
            config={"path": "trsm_small", "dtype": "float32", "compile_only": True},
        ).id


def _claim(engine: Engine, worker: str) -> int | None:
    with session_scope(engine) as s:
        job = queue.claim_job(
            s, worker=worker, accepts=(queue.NO_GPU,), gpu_key=queue.NO_GPU, gpu_index=None
        )
        return None if job is None else job.id


def _stop_as_runner_does(engine: Engine, job_id: int) -> None:
    with session_scope(engine) as s:  # the job process's line: failed, interrupted
        repo.update_job_progress(s, job_id, state="failed", last_failure_kind="interrupted")


def test_graceful_stops_never_use_up_attempts(engine: Engine) -> None:
    job_id = _enqueue(engine)
    for stop in range(3):  # more stops than max_attempts allows deaths
        assert _claim(engine, f"w{stop}") == job_id
        _stop_as_runner_does(engine, job_id)
        with session_scope(engine) as s:
            action = queue.return_job(s, job_id, f"w{stop}", max_attempts=2, stopped=True)
        assert action == "requeued"
        with session_scope(engine) as s:
            job = repo.get_job(s, job_id)
            assert (job.state, job.attempts, job.claimed_by) == ("waiting", 0, None)
    assert _claim(engine, "w-last") == job_id


def test_deaths_still_count_after_graceful_stops(engine: Engine) -> None:
    job_id = _enqueue(engine)
    assert _claim(engine, "w0") == job_id
    with session_scope(engine) as s:
        assert queue.return_job(s, job_id, "w0", max_attempts=2, stopped=True) == "requeued"
    for death, expected in ((1, "requeued"), (2, "failed")):
        assert _claim(engine, f"w{death}") == job_id
        with session_scope(engine) as s:  # its process was killed by a signal nobody sent
            assert queue.return_job(s, job_id, f"w{death}", max_attempts=2) == expected
    with session_scope(engine) as s:
        job = repo.get_job(s, job_id)
        assert (job.state, job.last_failure_kind, job.attempts) == (
            "failed",
            queue.WORKER_LOST,
            2,
        )


IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
)


def test_a_worker_stopping_kills_a_job_process_that_ignores_sigterm(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kernevo.db'}"
    upgrade(url)
    engine = make_engine(url)
    worker = Worker(
        WorkerOptions(database_url=url, work_dir=tmp_path, compile_only=True, max_attempts=1),
        write=lambda line: None,
        stop_grace_s=0.5,
    )
    worker._engine = engine
    try:
        job_id = _enqueue(engine)
        assert _claim(engine, worker.id) == job_id
        slot = Slot(None, queue.NO_GPU, (queue.NO_GPU,), job_id=job_id)
        slot.process = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM])
        worker.slots = [slot]
        time.sleep(0.5)  # its handler is set
        start = time.monotonic()
        worker._shut_down()
        assert time.monotonic() - start < 5
        assert slot.process is None and slot.job_id is None
        with session_scope(engine) as s:  # max_attempts 1, yet waiting: the worker's own stop
            job = repo.get_job(s, job_id)
            assert (job.state, job.attempts) == ("waiting", 0)
    finally:
        engine.dispose()
