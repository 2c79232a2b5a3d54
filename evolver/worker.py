"""``kernevo worker``: claim queued jobs from the database and run each in a process of its own.

One worker per GPU host. Each device of ``--gpus`` is a slot that runs one job at a time; a
``--compile-only`` worker has one slot and no GPU (evaluations stop after compiling: CPU CI).
A ``--scheduler`` worker has one slot and no device of its own: its jobs evaluate on the Dask
workers of their GPU key (``evolver.queue_cluster``), and it claims only while the scheduler
answers and has a worker of that key.
Every ``poll_s`` seconds the worker

1. collects the job processes that ended: a job that ran to its end (complete, cancelled,
   failed on an error) stays as its process left it; a job whose process was stopped by a
   signal or died without marking the row goes back to the queue (``db.queue.return_job``);
2. beats, every ``heartbeat_s``, for each job it holds (``db.queue.beat``, database clock); a
   job that is no longer its own (another worker's reaper returned it) is killed at once;
3. reaps, every ``heartbeat_s``: jobs of any worker whose heartbeat is older than ``grace_s``
   go back to the queue (``db.queue.reap_stale``), to be resumed from their checkpoint;
4. claims a job for each free slot (``db.queue.claim_job``: ``FOR UPDATE SKIP LOCKED`` on
   PostgreSQL) and starts ``python -m evolver.worker_child`` for it.

A cancel (``PATCH /v1/jobs/{id}``, ``kernevo cancel``) reaches the job process through its row:
it finishes the iteration in flight and ends ``cancelled``. SIGTERM or Ctrl-C stops the worker:
it stops claiming, passes SIGTERM to its job processes (each marks its job ``failed``,
interrupted, at once or after the iteration in flight) and returns their jobs to the queue; a
second signal kills them at once (the jobs still go back to the queue). ``kill -9`` of the
worker takes its job processes with it (``evolver.worker_child``); their jobs go back to the
queue when another worker's reaper finds their heartbeat older than the grace period.

SQLite has no row locks: one worker process per SQLite file (locks on the real file and its
inode, held while the worker runs: ``evolver.sqlite_lock``), running one job at a time;
several workers, or several slots, need PostgreSQL (:func:`check_database`).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolver.cluster import IN_FLIGHT_PER_WORKER
from evolver.errors import WorkerError
from evolver.progress import HEARTBEAT_INTERVAL_S
from evolver.sqlite_lock import hold_sqlite_file
from evolver.worker_child import EXIT_BUSY, STOPPED
from evolver.worker_defaults import (
    DEFAULT_GRACE_S,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_POLL_S,
    MIN_BEATS_PER_GRACE,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from evolver.cluster import ClusterOptions
    from evolver.queue_cluster import SchedulerGate

Write = Callable[[str], None]

# Seconds a job process has, after the worker's SIGTERM, to commit its state and exit before
# the worker kills it: a stopped job exits within seconds (OpenEvolve's shutdown cancels the
# iterations in flight); one that has not after this long is hung, and must not hold the
# worker (a stopped job once never exited, its worker waiting for it for ever).
STOP_GRACE_S = 30.0

POSTGRES_HINT = "set KERNEVO_DATABASE_URL=postgresql+psycopg://user@host/db"


@dataclass(frozen=True)
class WorkerOptions:
    """What ``kernevo worker`` was asked: database, work folder, devices (``gpus`` empty for
    ``compile_only`` and with a ``cluster``), the Dask cluster its jobs evaluate on
    (``cluster``: ``--scheduler``, ``--gpu-key``, ``--in-flight``, ``--lost-after-s``; ``None``:
    this host's devices), and the queue's timings in seconds (``grace_s`` ≥
    :data:`MIN_BEATS_PER_GRACE` × ``heartbeat_s``) and attempt limit."""

    database_url: str
    work_dir: Path
    gpus: tuple[int, ...] = ()
    compile_only: bool = False
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    grace_s: float = DEFAULT_GRACE_S
    poll_s: float = DEFAULT_POLL_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    cluster: ClusterOptions | None = None

    def problem(self) -> str | None:
        """Why these options cannot run (one line), or ``None``."""
        if self.compile_only and self.gpus:
            return "--compile-only runs on no GPU: leave out --gpus"
        if self.cluster is not None:
            if self.gpus:
                return (
                    "--gpus runs jobs on this host's devices, --scheduler on the Dask cluster's "
                    "workers: give one of them"
                )
            if self.compile_only and self.cluster.gpu_key is not None:
                return "--compile-only evaluates under the key none: leave out --gpu-key"
            if (problem := self.cluster.problem()) is not None:
                return problem
        elif not self.compile_only and not self.gpus:
            return "a worker needs --gpus, --scheduler or --compile-only"
        if len(set(self.gpus)) != len(self.gpus):
            return f"--gpus names a device twice: {','.join(map(str, self.gpus))}"
        if not (self.heartbeat_s > 0 and self.poll_s > 0):
            return "heartbeat and poll intervals must be > 0 s"
        if self.grace_s < MIN_BEATS_PER_GRACE * self.heartbeat_s:
            return (
                f"the grace period ({self.grace_s:g} s) must hold {MIN_BEATS_PER_GRACE} "
                f"heartbeats ({self.heartbeat_s:g} s each)"
            )
        if self.max_attempts < 1:
            return "--max-attempts must be at least 1"
        if len(self.gpus) > 1 and _is_sqlite(self.database_url):
            # The same refusal as check_database's, but before anything runs: the options and
            # KERNEVO_DATABASE_URL contradict each other, a usage error (kernevo exits 2).
            return (
                f"SQLite has no row locks: {len(self.gpus)} jobs at once (--gpus) need "
                f"PostgreSQL ({POSTGRES_HINT}); on SQLite a worker runs one GPU"
            )
        return None


def _is_sqlite(url: str) -> bool:
    """Whether ``url`` (a SQLAlchemy URL that parses) names a SQLite database."""
    from sqlalchemy.engine import make_url

    return make_url(url).get_backend_name() == "sqlite"


@dataclass
class Slot:
    """One device the worker runs jobs on (``index`` ``None``: compile-only, no GPU), the GPU
    keys it accepts from the queue and the job it runs now."""

    index: int | None
    gpu_key: str
    accepts: tuple[str, ...]
    job_id: int | None = None
    attempt: int = 0
    process: subprocess.Popen[bytes] | None = None
    lost: bool = False  # the claim was taken away: killed, the row is not ours to touch
    stopping: bool = False  # the worker is stopping: it signalled the job process itself


@dataclass
class _Stop:
    """Signals received: the first stops claiming, the second kills the job processes."""

    signals: list[int] = field(default_factory=list)
    event: threading.Event = field(default_factory=threading.Event)


def worker_id() -> str:
    """``host:pid:random``: unique among live and past workers, at most 128 characters."""
    return f"{socket.gethostname()[:100]}:{os.getpid()}:{secrets.token_hex(4)}"


@contextmanager
def check_database(url: str, slots: int) -> Iterator[None]:
    """Refuse what SQLite cannot do, for as long as the worker runs.

    PostgreSQL: anything goes. SQLite: one worker process per database file, whatever name
    reaches it (a symbolic or hard link included: ``evolver.sqlite_lock`` locks the real file
    and its inode; the kernel drops the locks when the worker dies), running one job at a time;
    an in-memory database cannot be shared with the job processes at all.

    Raises:
        WorkerError: one line: a second worker on the file, several slots, an in-memory
            database, or a SQLite path that is a directory.
        StoreError: the SQLite file holds another application's tables: refused before the
            lock file is written beside it (the line ``open_store`` would say).
        OSError: the database's folder or file cannot be created or opened for writing.
    """
    from sqlalchemy.engine import make_url

    from db.session import sqlite_file
    from evolver.store import display_url, foreign_refusal, sqlite_file_problem

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        yield
        return
    shown = display_url(url)
    database = sqlite_file(parsed)
    if (problem := sqlite_file_problem(url)) is not None:  # a directory: say so, not Errno 21
        raise WorkerError(problem)
    if database is None:
        raise WorkerError(
            f"database {shown}: a worker's job processes cannot share an in-memory or URI "
            f"SQLite database; use a file, or PostgreSQL ({POSTGRES_HINT})"
        )
    if slots > 1:
        raise WorkerError(
            f"database {shown} is SQLite, which has no row locks: {slots} jobs at once "
            f"(--gpus) need PostgreSQL ({POSTGRES_HINT}); on SQLite a worker runs one GPU"
        )
    if (foreign := foreign_refusal(url)) is not None:  # nothing written beside another's file
        raise foreign
    with hold_sqlite_file(database, shown, POSTGRES_HINT):
        yield


def make_slots(options: WorkerOptions, gate: SchedulerGate | None = None) -> list[Slot]:
    """The worker's slots: one per ``--gpus`` device with its GPU key (asked of the driver in a
    child process, so the worker never touches CUDA), or one compile-only slot, or with a
    ``gate`` (``--scheduler``) one slot of the key the gate found (``gate.open()`` first).

    A GPU slot accepts jobs queued for its GPU key, for any GPU, and compile-only jobs; a
    compile-only slot only compile-only jobs. A ``--scheduler`` slot accepts jobs of its key
    and for any GPU (a compile-only one: compile-only jobs): a compile-only job there would
    need compile-only Dask workers, which a GPU cluster does not have.

    Raises:
        NoGpuError: a device of ``--gpus`` does not answer (one line).
    """
    from db.queue import ANY_GPU, NO_GPU
    from evolver.gpu import query_gpu

    if gate is not None:
        assert gate.gpu_key is not None, "gate.open() first"
        key = gate.gpu_key
        return [Slot(None, key, (NO_GPU,) if key == NO_GPU else (key, ANY_GPU))]
    if options.compile_only:
        return [Slot(None, NO_GPU, (NO_GPU,))]
    slots = []
    for index in options.gpus:
        key = query_gpu(index).key
        slots.append(Slot(index, key, (key, ANY_GPU, NO_GPU)))
    return slots


class Worker:
    """The worker loop (see the module notes); :meth:`run` returns the exit status."""

    def __init__(
        self, options: WorkerOptions, *, write: Write = print, stop_grace_s: float = STOP_GRACE_S
    ) -> None:
        self.options = options
        self.stop_grace_s = stop_grace_s  # SIGTERM to a job process, then this, then SIGKILL
        self.id = worker_id()
        self._write = write
        self._stop = _Stop()
        self._engine: Engine | None = None
        self.slots: list[Slot] = []
        self._gate: SchedulerGate | None = None
        self._unready: str | None = None  # why the gate last refused claims, said once

    # --- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        """Serve the queue until SIGTERM or Ctrl-C; 143 or 130 then (128 + the signal).

        Raises:
            WorkerError, NoGpuError, ClusterError, StoreError, WorkDirError: one line, before
                any job is claimed.
        """
        from evolver.runner import _prepare_work_root
        from evolver.store import display_url, open_store

        problem = self.options.problem()
        if problem is not None:
            raise WorkerError(problem)
        if self.options.cluster is None:
            # The GPUs before the database's lock: a worker refused for want of a GPU had left
            # an empty database file and its lock file behind (a fresh-user trial, 2026-12-02).
            self.slots = make_slots(self.options, None)
        with check_database(self.options.database_url, len(self.options.gpus) or 1):
            try:
                self._open_gate()
                if self._gate is not None:
                    self.slots = make_slots(self.options, self._gate)
                work_root = _prepare_work_root(self.options.work_dir)
                self._engine = open_store(self.options.database_url)
                self._say(
                    f"serving {display_url(self.options.database_url)} on {self._devices()}; "
                    f"grace {self.options.grace_s:g} s, heartbeat {self.options.heartbeat_s:g} "
                    f"s; work folder {work_root}"
                )
                with self._signals():
                    try:
                        self._serve()
                    finally:
                        self._shut_down()
                        self._engine.dispose()
            finally:
                if self._gate is not None:
                    self._gate.close()
        signum = self._stop.signals[0] if self._stop.signals else signal.SIGTERM
        self._say(f"stopped by {signal.Signals(signum).name}")
        return 128 + signum

    def _open_gate(self) -> None:
        """With ``--scheduler``: connect and learn the slot's GPU key (``evolver.queue_cluster``).

        Raises:
            ClusterError: one line (the scheduler does not answer, no GPU worker, several GPU
                models and no ``--gpu-key``).
        """
        if self.options.cluster is None:
            return
        from evolver.queue_cluster import SchedulerGate

        self._gate = SchedulerGate(self.options.cluster, compile_only=self.options.compile_only)
        self._gate.open()

    def _devices(self) -> str:
        """Where the worker's jobs evaluate, for its first line."""
        if self._gate is not None:
            cluster = self.options.cluster
            assert cluster is not None
            in_flight = (
                f"{cluster.in_flight} candidates in flight per job"
                if cluster.in_flight
                else f"{IN_FLIGHT_PER_WORKER} candidates in flight per Dask worker of the key"
            )
            gate = self._gate
            return f"Dask scheduler {gate.address} (GPU key {gate.gpu_key}, {in_flight})"
        if self.options.compile_only:
            return "no GPU (compile-only)"
        return ", ".join(f"GPU {s.index} ({s.gpu_key})" for s in self.slots)

    def _serve(self) -> None:
        next_beat = 0.0
        while not self._stop.signals:
            self._pass(housekeeping=time.monotonic() >= next_beat)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.options.heartbeat_s
            self._stop.event.wait(self.options.poll_s)

    def _pass(self, *, housekeeping: bool) -> None:
        """One round: collect, beat and reap (when due), claim. A database that cannot answer
        is reported and retried next round: the jobs run on meanwhile."""
        from sqlalchemy.exc import SQLAlchemyError

        from db.errors import DatabaseUnavailableError, RepositoryError

        try:
            self._collect()
            if housekeeping:
                self._beat()
                self._reap()
            if not self._stop.signals:
                self._claim()
        except (DatabaseUnavailableError, SQLAlchemyError, RepositoryError) as error:
            line = " ".join(str(error).split())[:300]
            self._say(f"database error, retrying: {type(error).__name__}: {line}")

    # --- the steps ----------------------------------------------------------------------------

    def _session(self) -> Any:
        from db.session import session_scope

        assert self._engine is not None
        return session_scope(self._engine)

    def _collect(self) -> None:
        """Settle every slot whose job process ended."""
        for slot in self.slots:
            if slot.process is None or slot.process.poll() is None:
                continue
            self._settle(slot, slot.process.returncode)

    def _settle(self, slot: Slot, code: int) -> None:
        """The job process of ``slot`` ended with ``code``: leave the job as it left it, or give
        it back to the queue when it was stopped by a signal or died without marking it."""
        from db import queue, repository

        job_id = slot.job_id
        assert job_id is not None
        lost, stopping = slot.lost, slot.stopping
        slot.job_id, slot.process, slot.lost, slot.stopping = None, None, False, False
        if lost:
            return  # another worker holds it now
        with self._session() as s:
            job = repository.get_job(s, job_id)
            state, holder = job.state, job.claimed_by
            if holder != self.id:
                return
            if code == EXIT_BUSY:  # another process runs it and beats for it: leave it be
                queue.release_claim(s, job_id, self.id, holder_interval_s=HEARTBEAT_INTERVAL_S)
                self._say(
                    f"job {job_id}: another process runs it (it holds the job's lock); "
                    "claim given up, the job left to that process"
                )
                return
            if code < 0 or code in STOPPED:  # stopped by a signal: resumable elsewhere
                # Stopped because this worker was asked to stop: no worker died, so the attempt
                # is not counted (only deaths count towards worker_lost).
                action = queue.return_job(
                    s, job_id, self.id, max_attempts=self.options.max_attempts, stopped=stopping
                )
                self._say(f"job {job_id}: job process ended ({_exit(code)}); {_returned(action)}")
                return
            if state == "running":  # it died before it could mark the job (a crash, a bug)
                repository.update_job_progress(
                    s,
                    job_id,
                    state="failed",
                    last_failure_kind="worker_error",
                    failure_reason=f"its job process ended ({_exit(code)}) without marking the "
                    f"job; see worker {self.id}'s output",
                )
                state = "failed"
        self._say(f"job {job_id}: {state} ({_exit(code)})")

    def _beat(self) -> None:
        """Heartbeat every held job; kill the process of one whose claim was taken away."""
        from db import queue

        for slot in self.slots:
            if slot.job_id is None or slot.lost:
                continue
            with self._session() as s:
                owned = queue.beat(s, slot.job_id, self.id)
            if not owned:
                slot.lost = True
                self._say(
                    f"job {slot.job_id}: claim lost (its heartbeat was older than the grace "
                    "period; another worker took it back): killing its process"
                )
                self._kill(slot)

    def _reap(self) -> None:
        """Return every job whose heartbeat is older than the grace period to the queue."""
        from db import queue

        with self._session() as s:
            reaped = queue.reap_stale(
                s, grace_s=self.options.grace_s, max_attempts=self.options.max_attempts
            )
        for job in reaped:
            self._say(
                f"job {job.job_id}: no heartbeat for {job.heartbeat_age_s:.0f} s from "
                f"{job.claimed_by}; {_returned(job.action)} (attempt {job.attempts})"
            )

    def _claim(self) -> None:
        """Claim a job for each free slot and start its process."""
        from db import queue

        for slot in self.slots:
            if slot.job_id is not None or self._stop.signals or not self._gate_open():
                continue
            with self._session() as s:
                job = queue.claim_job(
                    s,
                    worker=self.id,
                    accepts=slot.accepts,
                    gpu_key=slot.gpu_key,
                    gpu_index=slot.index,
                    heartbeat_s=self.options.heartbeat_s,
                )
                if job is None:
                    continue  # nothing this slot can run: try again next round
                slot.job_id, slot.attempt = job.id, job.attempts
                what = f"{job.path} {job.dtype}"
            try:
                slot.process = self._start(slot)
            except OSError as error:
                self._say(f"job {slot.job_id}: cannot start its process: {error}")
                with self._session() as s:
                    queue.return_job(
                        s, slot.job_id, self.id, max_attempts=self.options.max_attempts
                    )
                slot.job_id = None
                continue
            where = "no GPU" if slot.index is None else f"GPU {slot.index}"
            if self._gate is not None:
                where = f"Dask scheduler {self._gate.address} ({slot.gpu_key})"
            self._say(
                f"claimed job {slot.job_id} ({what}, attempt {slot.attempt}) on {where}; "
                f"pid {slot.process.pid}"
            )

    def _gate_open(self) -> bool:
        """Whether a ``--scheduler`` worker may claim now (always without one); says once when
        it stops claiming and why, and once when it claims again."""
        if self._gate is None:
            return True
        reason = self._gate.unready()
        if reason != self._unready:
            if reason is not None:
                self._say(f"not claiming: {reason}; queued jobs wait")
            else:
                address, key = self._gate.address, self._gate.gpu_key
                self._say(f"claiming again: scheduler {address} has a Dask worker of {key}")
            self._unready = reason
        return reason is None

    def _start(self, slot: Slot) -> subprocess.Popen[bytes]:
        """Start the job process of ``slot`` (``python -m evolver.worker_child``), from the main
        thread (its parent-death signal follows the thread that created it)."""
        command = [
            sys.executable,
            "-m",
            "evolver.worker_child",
            "--job",
            str(slot.job_id),
            "--parent",
            str(os.getpid()),
            "--database-url",
            self.options.database_url,
            "--work-dir",
            str(self.options.work_dir),
        ]
        if slot.index is not None:
            command += ["--gpu", str(slot.index)]
        cluster = self.options.cluster
        if cluster is not None:  # the row's GPU key picks the workers (open_cluster's resume)
            command += ["--scheduler", str(cluster.scheduler)]
            command += ["--lost-after-s", f"{cluster.lost_after_s!r}"]
            if cluster.in_flight is not None:
                command += ["--in-flight", str(cluster.in_flight)]
        return subprocess.Popen(command, stdin=subprocess.DEVNULL)

    # --- stopping -----------------------------------------------------------------------------

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT stop the worker (the first gracefully, see the module notes);
        SIGHUP is ignored (the worker outlives its terminal)."""

        def stop(signum: int, frame: Any) -> None:
            self._stop.signals.append(signum)
            self._stop.event.set()
            if len(self._stop.signals) > 1:
                for slot in self.slots:
                    slot.stopping = slot.stopping or slot.process is not None
                    self._kill(slot)

        previous = {
            sig: signal.signal(sig, stop if sig != signal.SIGHUP else signal.SIG_IGN)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        }
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _kill(self, slot: Slot) -> None:
        process = slot.process
        if process is not None and process.poll() is None:
            process.kill()

    def _shut_down(self) -> None:
        """Stop every job process (SIGTERM; the second signal, or :data:`STOP_GRACE_S` without
        an exit, kills it) and give their jobs back, their attempts uncounted."""
        running = [slot for slot in self.slots if slot.process is not None]
        for slot in running:
            assert slot.process is not None
            if slot.process.poll() is None:
                slot.stopping = True
                self._say(f"job {slot.job_id}: stopping its process (pid {slot.process.pid})")
                slot.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        for slot in running:
            assert slot.process is not None
            while slot.process.poll() is None:
                if time.monotonic() >= deadline:
                    self._say(
                        f"job {slot.job_id}: its process did not exit within "
                        f"{self.stop_grace_s:g} s of SIGTERM; killing it"
                    )
                    self._kill(slot)
                    slot.process.wait()
                    break
                time.sleep(0.1)
            try:
                self._settle(slot, slot.process.returncode)
            except Exception as error:  # the database may be what is failing: say so, go on
                line = " ".join(str(error).split())[:300]
                self._say(f"job {slot.job_id}: could not give it back: {line}")

    def _say(self, line: str) -> None:
        self._write(f"worker {self.id} | {line}")


def _exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def _returned(action: str) -> str:
    return {
        "requeued": "returned to the queue",
        "failed": "failed: its workers died too often (worker_lost)",
        "untouched": "left as it is",
    }[action]
