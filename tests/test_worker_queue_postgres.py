"""Issue 9's Show: two workers and the API on one PostgreSQL, committing for real on a fresh
database. Four jobs created over REST are each claimed exactly once; a worker SIGKILLed mid-job
takes its job process with it, the other worker's reaper returns the job to the queue after the
grace period, claims it again and finishes it from its checkpoint; no program recorded before
the kill is lost or changed, none is recorded twice, and the counts add up exactly.

The workers run in compile-only mode (no GPU: evaluations stop after compiling), so this runs
on CPU CI. The API is ``kernevo serve`` (uvicorn) on a free loopback port; the workers are
``kernevo worker --compile-only`` processes sharing one work folder, as workers sharing
``KERNEVO_WORK_DIR`` over a network file system would.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest
from conftest import unused_port
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from db.models import Evaluation, Job, Program
from evolver.checkpoints import latest_checkpoint
from evolver.work_folder import work_folder

pytestmark = pytest.mark.postgres

TOKEN = "show-token-0123456789-abcdefghijklmn"
DTYPES = ("float32", "float64", "complex64", "complex128")
ITERATIONS = 6
CHECKPOINT_INTERVAL = 2
HEARTBEAT_S, GRACE_S, POLL_S = 0.5, 3.0, 0.25
DEADLINE_S = 150  # the whole run; about 40 s on two busy cores

_CLAIMED = re.compile(
    r"^worker (\S+) \| claimed job (\d+) \(.*, attempt (\d+)\) on no GPU; pid (\d+)$"
)
_REQUEUED = re.compile(r"^worker (\S+) \| job (\d+): no heartbeat for .* returned to the queue")


@dataclass
class Worker:
    """A ``kernevo worker`` process and its output file."""

    process: subprocess.Popen[bytes]
    log: Path
    handle: IO[bytes]

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def worker_id(self) -> str | None:
        for line in self.lines():
            if " | serving " in line:
                return line.split()[1]
        return None


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_LLM_")}
    env["KERNEVO_API_TOKEN"] = TOKEN
    env.pop("KERNEVO_DATABASE_URL", None)
    return env


def _start(argv: list[str], log: Path) -> Worker:
    handle = log.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "kernevo.cli", *argv],
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: the clean-up reaches whatever it started
    )
    return Worker(process, log, handle)


def _stop(worker: Worker) -> None:
    if worker.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait(30)
    worker.handle.close()


def _gone(pid: int) -> bool:
    """The process ``pid`` has ended (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


@pytest.fixture
def postgres_url(fresh_database_url: str) -> str:
    return fresh_database_url


@pytest.fixture
def api(postgres_url: str, tmp_path: Path) -> Iterator[str]:
    port = unused_port()
    server = _start(
        ["serve", "--host", "127.0.0.1", "--port", str(port), "--database-url", postgres_url],
        tmp_path / "api.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.process.poll() is None, server.log.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.1)
        yield base
    finally:
        if server.process.poll() is None:
            server.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.process.wait(15)
        _stop(server)


def _programs(url: str, job_id: int) -> dict[str, tuple[str, int | None, int, str, bool]]:
    """uid → (source sha256, parent id, iteration, backend, rerun) of one job's programs."""
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            return {
                p.uid: (p.source_sha256, p.parent_id, p.iteration, p.backend or "", p.rerun)
                for p in s.scalars(select(Program).where(Program.job_id == job_id))
            }
    finally:
        engine.dispose()


def _jobs(url: str) -> dict[int, Job]:
    engine = create_engine(url)
    try:
        with Session(engine, expire_on_commit=False) as s:
            return {job.id: job for job in s.scalars(select(Job))}
    finally:
        engine.dispose()


@pytest.mark.parametrize("empty_database_url", ["postgresql"], indirect=True)
def test_two_workers_one_killed_every_job_exactly_once(
    postgres_url: str, api: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    work = tmp_path / "runs"
    argv = [
        "worker",
        "--compile-only",
        "--database-url",
        postgres_url,
        "--work-dir",
        str(work),
        "--heartbeat-s",
        str(HEARTBEAT_S),
        "--grace-s",
        str(GRACE_S),
        "--poll-s",
        str(POLL_S),
    ]
    workers = [_start(argv, tmp_path / f"worker-{i}.log") for i in range(2)]
    try:
        _run_show(postgres_url, api, work, workers, started)
    finally:
        for worker in workers:
            _stop(worker)


def _run_show(url: str, api: str, work: Path, workers: list[Worker], started: float) -> None:
    # --- four jobs over REST --------------------------------------------------------------
    headers = {"Authorization": f"Bearer {TOKEN}"}
    created = []
    for dtype in DTYPES:
        body = {
            "path": "trsm_small",
            "dtype": dtype,
            "compile_only": True,
            "iterations": ITERATIONS,
            "checkpoint_interval": CHECKPOINT_INTERVAL,
        }
        response = httpx.post(f"{api}/v1/jobs", json=body, headers=headers, timeout=10)
        assert response.status_code == 201, response.text
        job = response.json()
        assert (job["state"], job["gpu"], job["attempts"]) == ("waiting", "none", 0)
        assert response.headers["location"] == f"/v1/jobs/{job['id']}"
        created.append(job["id"])

    # --- kill one worker mid-job: after a checkpoint, with iterations recorded past it ------
    deadline = started + DEADLINE_S
    ids: dict[str, Worker] = {}
    victim: Worker | None = None
    victim_job = victim_child = None
    while victim is None:
        assert time.monotonic() < deadline, "no job reached a checkpoint while running"
        for worker in workers:
            assert worker.process.poll() is None, worker.log.read_text()
            if (wid := worker.worker_id()) is not None:
                ids[wid] = worker
        for job in _jobs(url).values():
            if job.state != "running" or job.claimed_by not in ids:
                continue
            folder = work_folder(work, job.id, job.work_key)
            checkpoint = latest_checkpoint(folder / "openevolve")
            rows = _programs(url, job.id)
            reached = max((row[2] for row in rows.values()), default=0)
            if (
                checkpoint is not None
                and reached > checkpoint.iteration
                and reached < ITERATIONS - 1
            ):
                candidate = ids[job.claimed_by]
                claims = [m for line in candidate.lines() if (m := _CLAIMED.match(line))]
                child = int(next(m[4] for m in claims if int(m[2]) == job.id))
                # Freeze the job process first: under load it could otherwise record its last
                # iterations and finish between this look and the kill (CI saw exactly that).
                os.kill(child, signal.SIGSTOP)
                if _jobs(url)[job.id].state == "running":
                    victim, victim_job, victim_child = candidate, job.id, child
                    break
                os.kill(child, signal.SIGCONT)
        time.sleep(0.05)
    assert victim is not None and victim_job is not None and victim_child is not None
    # The worker alone: its job process must follow (the parent-death signal is SIGKILL, which
    # ends a stopped process too).
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait(10)
    while not _gone(victim_child):
        assert time.monotonic() < deadline, "the killed worker's job process lived on"
        time.sleep(0.05)
    before = _programs(url, victim_job)
    survivor = next(w for w in workers if w is not victim)

    # --- every job finishes -------------------------------------------------------------
    while True:
        jobs = _jobs(url)
        if all(jobs[i].state == "complete" for i in created):
            break
        assert not any(jobs[i].state in ("failed", "cancelled") for i in created), {
            i: (jobs[i].state, jobs[i].last_failure_kind) for i in created
        }
        assert survivor.process.poll() is None, survivor.log.read_text()
        assert time.monotonic() < deadline, {i: (jobs[i].state, jobs[i].iteration) for i in created}
        time.sleep(0.2)

    # --- claims: each (job, attempt) exactly once; the killed job twice, by each worker -----
    claimed = [
        (m[1], int(m[2]), int(m[3]))
        for worker in workers
        for line in worker.lines()
        if (m := _CLAIMED.match(line))
    ]
    pairs = [(job_id, attempt) for _, job_id, attempt in claimed]
    assert len(pairs) == len(set(pairs)) == len(created) + 1
    assert {job_id for job_id, _ in pairs} == set(created)
    victim_id = next(wid for wid, w in ids.items() if w is victim)
    survivor_id = next(wid for wid, w in ids.items() if w is survivor)
    assert (victim_id, victim_job, 1) in claimed
    assert (survivor_id, victim_job, 2) in claimed
    requeued = [m for line in survivor.lines() if (m := _REQUEUED.match(line))]
    assert [(m[1], int(m[2])) for m in requeued] == [(survivor_id, victim_job)]
    jobs = _jobs(url)
    for job_id in created:
        job = jobs[job_id]
        assert (job.state, job.iteration) == ("complete", ITERATIONS)
        assert job.attempts == (2 if job_id == victim_job else 1)
        assert job.backend == "offline"  # settled by its first worker, kept on the second

    # --- the killed job: nothing lost or changed, nothing twice -----------------------------
    after = _programs(url, victim_job)
    assert {uid: after[uid] for uid in before} == before
    resumed_from = [
        int(m[1])
        for line in survivor.lines()
        if (m := re.match(rf"^job {victim_job}: .* from checkpoint at iteration (\d+);", line))
    ]
    assert len(resumed_from) == 1, survivor.log.read_text()
    checkpoint = resumed_from[0]
    reached = max(row[2] for row in before.values())
    reruns = {row[2] for uid, row in after.items() if row[4]}
    assert reruns == set(range(checkpoint + 1, reached + 1))
    assert not any(row[4] for row in before.values())

    # --- every job: one seed, one first-run program per iteration, whole lineages -----------
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            total_programs = int(s.scalar(select(func.count(Program.id))) or 0)
            total_evaluations = int(s.scalar(select(func.count(Evaluation.id))) or 0)
            counted = 0
            for job_id in created:
                programs = list(s.scalars(select(Program).where(Program.job_id == job_id)))
                ids_here = {p.id for p in programs}
                assert all(p.parent_id in ids_here for p in programs if p.parent_id is not None)
                first_run = sorted(
                    p.iteration for p in programs if not p.rerun and p.backend != "migration"
                )
                assert first_run == list(range(ITERATIONS + 1))  # the seed is iteration 0
                assert sum(p.parent_id is None for p in programs) == 1
                evaluated = list(
                    s.scalars(
                        select(Evaluation.program_id).where(Evaluation.program_id.in_(ids_here))
                    )
                )
                migrants = {p.id for p in programs if p.backend == "migration"}
                assert len(evaluated) == len(set(evaluated)) == len(ids_here - migrants)
                counted += len(programs)
    finally:
        engine.dispose()

    # --- the API's counts add up to the database's ------------------------------------------
    listed = httpx.get(f"{api}/v1/jobs", headers=headers, timeout=10).json()
    by_id = {job["id"]: job for job in listed}
    assert set(by_id) == set(created)
    assert sum(by_id[i]["programs"] for i in created) == counted == total_programs
    assert total_evaluations <= total_programs
    assert all(by_id[i]["state"] == "complete" and not by_id[i]["stale"] for i in created)

    # --- the survivor stops cleanly on SIGTERM ----------------------------------------------
    survivor.process.send_signal(signal.SIGTERM)
    assert survivor.process.wait(30) == 143
    assert survivor.lines()[-1].endswith("| stopped by SIGTERM")
    assert time.monotonic() - started < DEADLINE_S
