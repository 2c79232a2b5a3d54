"""``kernevo worker --scheduler``: queued jobs evaluate on a Dask cluster (issue 10), CPU only.

GPU workers are simulated as in ``tests/test_dask_backend.py``: Dask workers holding
``GpuEvaluationPlugin`` without a device compile every candidate (NVRTC, no GPU) under their
key. Shown, on SQLite with one ``kernevo worker --compile-only --scheduler ADDRESS`` process:

- a job queued in the database is claimed, runs to completion, every program recorded once
  with one evaluation, and every evaluation (the seed's included) ran on the cluster's worker of
  the job's key (``none``), never on the worker of another key beside it;
- the scheduler SIGKILLed mid-job: the job fails with the runner's one line naming the scheduler
  and the resume command, stays ``failed`` (the worker leaves a failed job as it is), no program
  is recorded twice; the worker stops claiming while the scheduler is down (the next queued job
  waits, unclaimed, instead of failing in turn), and SIGTERM stops it with 143;
- the slot's key: the cluster's one GPU model, a key without workers one line;
- the cluster options' usage errors, and a scheduler that does not answer at the worker's
  start: one line, exit 1.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from sqlalchemy import Engine, func, select

from db import queue
from db import repository as repo
from db.migrate import upgrade
from db.models import Evaluation, Program
from db.session import make_engine, session_scope
from evaluator.dask_plugin import GpuEvaluationPlugin
from evolver.cluster import keys_of, wait_for_workers
from evolver.dask_worker import nanny_options
from evolver.errors import ClusterError
from evolver.job_config import JobConfig
from kernevo.cli import main
from seeds.registry import get_path

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
# The worker's timings: a heartbeat and a look at the queue several times a second, a grace
# period no test reaches.
TIMINGS = ["--heartbeat-s", "0.5", "--grace-s", "30", "--poll-s", "0.2"]
DEADLINE_S = 90  # each test; about 15-25 s on two busy cores


def _enqueue(engine: Engine, iterations: int) -> int:
    spec = get_path("trsm_small")
    config = JobConfig(
        path="trsm_small",
        dtype="float32",
        compile_only=True,
        iterations=iterations,
        checkpoint_interval=2,
    ).model_dump(mode="json")
    with session_scope(engine) as s:
        return queue.enqueue_job(
            s,
            path="trsm_small",
            dtype="float32",
            gpu_key=queue.NO_GPU,
            shape_bucket=spec.shape_bucket,
            config=config,
        ).id


def _job(engine: Engine, job_id: int) -> tuple[str, int, str | None]:
    """The job's state, attempts and holder."""
    with session_scope(engine) as s:
        job = repo.get_job(s, job_id)
        return job.state, job.attempts, job.claimed_by


def _programs(engine: Engine, job_id: int) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """(uid, iteration, evaluation reports) of every program of the job."""
    with session_scope(engine) as s:
        rows = s.scalars(select(Program).where(Program.job_id == job_id)).all()
        return [
            (
                p.uid,
                p.iteration,
                list(s.scalars(select(Evaluation.report).where(Evaluation.program_id == p.id))),
            )
            for p in rows
        ]


def _count(engine: Engine, job_id: int) -> int:
    with session_scope(engine) as s:
        query = select(func.count(Program.id)).where(Program.job_id == job_id)
        return int(s.scalar(query) or 0)


def _evaluated_on(report: dict[str, Any]) -> str:
    """The Dask worker address the report's note names."""
    notes = [n for n in report["notes"] if n.startswith("evaluated on Dask worker")]
    assert len(notes) == 1, report["notes"]
    found = re.search(r"\((tcp://[^)]+)\)$", notes[0])
    assert found is not None, notes[0]
    return found.group(1)


def _wait(condition: Callable[[], bool], deadline: float, what: str, log: Path) -> None:
    while not condition():
        assert time.monotonic() < deadline, f"{what}; worker log:\n{log.read_text()}"
        time.sleep(0.1)


@contextlib.contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` in its own process group, output to ``log``; the group is SIGKILLed at the end
    when the process still runs (a failing test leaves no job process behind)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}
    handle: IO[bytes]
    with log.open("wb") as handle:
        process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def _worker(address: str, url: str, work: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "kernevo.cli", "worker", "--compile-only", "--scheduler", address,
        "--database-url", url, "--work-dir", str(work), *TIMINGS, *extra,
    ]  # fmt: skip


def _database(tmp_path: Path) -> tuple[str, Engine]:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    upgrade(url)
    return url, make_engine(url)


def test_a_queued_job_evaluates_on_the_workers_of_its_key(tmp_path: Path) -> None:
    from distributed import Client, Scheduler, SpecCluster, Worker

    url, engine = _database(tmp_path)
    # Two workers in this process: the compile-only key's, and another key's that must stay idle.
    workers = {
        key: {"cls": Worker, "options": nanny_options(GpuEvaluationPlugin(None, key), key)}
        for key in ("none", "sim-a")
    }
    scheduler = {
        "cls": Scheduler,
        "options": {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"},
    }
    log = tmp_path / "worker.log"
    with (
        SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.ERROR) as cluster,
        Client(cluster) as client,
    ):
        address = cluster.scheduler_address
        by_key = keys_of(client.scheduler_info(n_workers=-1)["workers"])
        assert {k: len(v) for k, v in by_key.items()} == {"none": 1, "sim-a": 1}
        # A GPU worker's slot without --gpu-key would claim for the cluster's one GPU model
        # (none is not one); a key without workers is one line naming the keys there are.
        assert wait_for_workers(client, None, 0) == ("sim-a", by_key["sim-a"])
        with pytest.raises(ClusterError) as no_worker:
            wait_for_workers(client, "sim-z", 0)
        assert str(no_worker.value) == (
            f"no Dask worker of GPU key sim-z joined scheduler {address} within 0 s (workers by "
            f"key: none (1), sim-a (1)); start one with 'kernevo dask-worker --scheduler {address} "
            "--gpu I'"
        )
        job_id = _enqueue(engine, iterations=3)
        argv = _worker(address, url, tmp_path / "runs", "--in-flight", "2")
        with _process(argv, log) as worker:
            deadline = time.monotonic() + DEADLINE_S
            ended = f"| job {job_id}: complete (exit 0)"  # the worker collected its process
            _wait(lambda: ended in log.read_text(), deadline, "not complete", log)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 143, log.read_text()
    engine.dispose()

    state, attempts, holder = _job(engine, job_id)
    assert (state, attempts) == ("complete", 1) and holder is not None
    programs = _programs(engine, job_id)
    uids = [uid for uid, _, _ in programs]
    assert len(uids) == len(set(uids))
    assert {iteration for _, iteration, _ in programs} == set(range(4))
    assert all(len(reports) == 1 for _, _, reports in programs)
    assert all(reports[0]["status"] == "compiled" for _, _, reports in programs)
    # Every evaluation, the seed's included, ran on the cluster's worker of the job's key.
    assert {_evaluated_on(reports[0]) for _, _, reports in programs} == set(by_key["none"])

    text = log.read_text()
    assert "Traceback" not in text, text
    lines = text.splitlines()
    worker_lines = [line for line in lines if line.startswith("worker ")]
    assert worker_lines[0].endswith(
        f"on Dask scheduler {address} (GPU key none, 2 candidates in flight per job); grace "
        f"30 s, heartbeat 0.5 s; work folder {(tmp_path / 'runs').resolve()}"
    ), worker_lines[0]
    assert re.search(
        rf"\| claimed job {job_id} \(trsm_small float32, attempt 1\) on Dask scheduler "
        rf"{re.escape(address)} \(none\); pid \d+$",
        worker_lines[1],
    ), worker_lines[1]
    evaluating = f"job {job_id} | evaluating on Dask scheduler {address}: 1 worker(s) of none"
    assert f"{evaluating}, 2 candidates in flight" in lines
    assert any(line.endswith(f"| job {job_id}: complete (exit 0)") for line in worker_lines)
    assert worker_lines[-1].endswith("| stopped by SIGTERM")


def _start_scheduler(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``dask scheduler`` on a free loopback port, in a process of its own (to SIGKILL)."""
    file = tmp_path / "scheduler.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not file.exists() or not file.read_text().strip():
        assert process.poll() is None and time.monotonic() < deadline, "no scheduler"
        time.sleep(0.1)
    time.sleep(0.1)  # written in one go, but read it whole
    return process, json.loads(file.read_text())["address"]


def test_a_lost_scheduler_fails_the_job_in_one_line_and_holds_the_queue(tmp_path: Path) -> None:
    url, engine = _database(tmp_path)
    scheduler, address = _start_scheduler(tmp_path)
    log = tmp_path / "worker.log"
    dask_worker = [
        sys.executable, "-m", "kernevo.cli", "dask-worker", "--compile-only", "--scheduler",
        address, "--name", "cpu-a",
    ]  # fmt: skip
    try:
        lost = _enqueue(engine, iterations=200)  # far more than run before the kill
        waiting = _enqueue(engine, iterations=2)
        argv = _worker(address, url, tmp_path / "runs", "--lost-after-s", "2")
        with (
            _process(dask_worker, tmp_path / "dask-worker.log"),
            _process(argv, log) as worker,
        ):
            deadline = time.monotonic() + DEADLINE_S
            _wait(lambda: _count(engine, lost) >= 2, deadline, "no programs recorded", log)
            scheduler.kill()
            ended = f"| job {lost}: failed (exit 1)"  # the worker collected its process
            _wait(lambda: ended in log.read_text(), deadline, "the job did not fail", log)
            # The worker sees the scheduler gone and leaves the next job in the queue.
            _wait(lambda: "not claiming: " in log.read_text(), deadline, "claims on", log)
            time.sleep(0.6)  # three looks at the queue
            assert _job(engine, waiting) == ("waiting", 0, None)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 143, log.read_text()
    finally:
        scheduler.kill()
        scheduler.wait(30)
    engine.dispose()

    state, attempts, holder = _job(engine, lost)
    assert (state, attempts) == ("failed", 1) and holder is not None
    programs = _programs(engine, lost)
    uids = [uid for uid, _, _ in programs]
    assert len(uids) >= 2 and len(uids) == len(set(uids))
    assert all(len(reports) == 1 for _, _, reports in programs)

    text = log.read_text()
    assert "Traceback" not in text, text
    lines = text.splitlines()
    failed = [line for line in lines if f"job {lost} failed" in line]
    assert len(failed) == 1, lines
    assert re.fullmatch(
        rf"job {lost} failed: the Dask scheduler {re.escape(address)} stopped answering "
        rf"\(unreachable for 2 s\); resume with 'kernevo evolve --resume {lost} --scheduler "
        rf"{re.escape(address)}': best score 0\.000 \(speedup n/a\), {len(uids)} programs "
        "recorded",
        failed[0],
    ), failed[0]
    worker_lines = [line for line in lines if line.startswith("worker ")]
    assert any(line.endswith(f"| job {lost}: failed (exit 1)") for line in worker_lines)
    assert any(
        line.endswith(f"| not claiming: Dask scheduler {address} unreachable; queued jobs wait")
        for line in worker_lines
    ), worker_lines
    assert not any(f"claimed job {waiting} " in line for line in worker_lines)
    assert worker_lines[-1].endswith("| stopped by SIGTERM")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu-key", "nvidia-h200"], "--gpu-key needs --scheduler (a Dask cluster)"),
        (["--in-flight", "2", "--compile-only"], "--in-flight needs --scheduler (a Dask cluster)"),
        (["--lost-after-s", "5"], "--lost-after-s needs --scheduler (a Dask cluster)"),
        (
            ["--scheduler", "tcp://127.0.0.1:9", "--gpus", "0"],
            "--gpus runs jobs on this host's devices, --scheduler on the Dask cluster's "
            "workers: give one of them",
        ),
        (
            ["--scheduler", "tcp://127.0.0.1:9", "--compile-only", "--gpu-key", "nvidia-h200"],
            "--compile-only evaluates under the key none: leave out --gpu-key",
        ),
        (
            ["--scheduler", "tcp://127.0.0.1:9", "--lost-after-s", "0.5"],
            "argument --lost-after-s: seconds must be 1..86400, not 0.5",
        ),
    ],
)
def test_worker_cluster_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["worker", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_a_worker_whose_scheduler_does_not_answer_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'queue.db'}"
    address = "tcp://127.0.0.1:9"  # the discard port: nothing listens
    argv = ["worker", "--compile-only", "--scheduler", address, "--lost-after-s", "1"]
    assert main([*argv, "--database-url", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kernevo: Dask scheduler {address} unreachable: "), err
    assert len(err.strip().splitlines()) == 1, err
