"""One claimed job, run in a process of its own by ``kernevo worker`` (``evolver.worker``).

``python -m evolver.worker_child --job N --parent PID …``: the worker has already claimed the
job (``db.queue.claim_job``); this process records the LLM backend on the job's first attempt
(``db.queue.settle_backend``: later attempts run with the same endpoint whatever their worker's
environment), then runs it through the runner's resume path (``evolver.runner.resume_job``): a
job that never ran starts from the seed, a job returned to the queue after its worker died
continues from its newest sound checkpoint in ``$KERNEVO_WORK_DIR/job-N-<key>`` (the job's work
folder, ``evolver.work_folder``; the same folder on every worker host, or it restarts from the
seed, keeping the programs recorded before).
With ``--scheduler`` (a ``kernevo worker --scheduler`` slot) the job evaluates on that Dask
cluster's workers of the row's GPU key, as ``kernevo evolve --resume N --scheduler`` would: a
scheduler lost mid-job fails it with the runner's one line (``failed``, resumable with the
command that line names; the worker leaves a failed job as it is).

It dies with the worker: ``evaluator.parent_watch.die_with_parent`` arms the kernel's
parent-death signal (the worker's main thread starts it) and a watchdog; OpenEvolve's pool
workers and the GPU workers below it die with it in turn. So a ``kill -9`` of the worker leaves
no job process behind, and the job's heartbeat stops, which is what the reaper of the other
workers waits for.

Exit status as ``kernevo evolve``: 0 complete or cancelled, 1 failed or an error (one line on
stderr), 130 Ctrl-C, 143 SIGTERM (the job is left ``failed``, resumable, and the worker returns
it to the queue); and :data:`EXIT_BUSY` (75) when another process already runs the job (it
holds the job's lock: ``kernevo evolve --resume``): the job is untouched and the worker gives
its claim up (``db.queue.release_claim``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from evolver.cluster import ClusterOptions

EXIT_ERROR = 1
# Another process runs the job (it holds the job's lock): the worker gives its claim up and
# leaves the job to that process (EX_TEMPFAIL of sysexits.h).
EXIT_BUSY = 75
# Exit statuses of a job stopped by a signal (Ctrl-C, SIGTERM): the worker returns it to the queue.
STOPPED = (130, 143)


def _settle_backend(job_id: int, database_url: str, work_dir: Path) -> None:
    """On the job's first attempt, resolve its LLM backend (its ``llm`` section, then this
    process's ``KERNEVO_LLM_*``) and record it with the job, as ``kernevo evolve`` records it at
    the start: the endpoint and model, never the key variable (each attempt uses its own
    worker's ``KERNEVO_LLM_API_KEY_ENV``). A section this worker may not run
    (``evolver.queued_llm``) is refused before anything is recorded or requested.

    Raises:
        JobConfigError: the stored configuration no longer validates.
        LLMEndpointError: a base URL without a model, or a section the worker refuses.
        StoreError, NotFoundError: the database cannot be read or the job is gone.
    """
    from db import queue, repository
    from db.session import session_scope
    from evolver.errors import LLMEndpointError
    from evolver.job_config import WORK_ROOT_KEY, validate_job_config
    from evolver.llm import resolve_backend
    from evolver.queued_llm import queued_llm_problem
    from evolver.settings import EvolverSettings
    from evolver.store import open_store
    from kernevo.environment import read_settings

    settings = read_settings(EvolverSettings, work_dir=work_dir)
    engine = open_store(database_url)
    try:
        with session_scope(engine) as s:
            row = repository.get_job(s, job_id)
            if row.backend != queue.PENDING_BACKEND:
                return
            stored = {k: v for k, v in row.config.items() if k != WORK_ROOT_KEY}
            job = validate_job_config(stored, f"job {job_id} config")
            problem = queued_llm_problem(job.llm, settings)
            if problem is not None:
                raise LLMEndpointError(problem)
            backend = resolve_backend(job.llm, settings)
            resolved = {
                "base_url": backend.base_url,
                "api_key_env": None,
                "model": None if backend.offline else backend.model,
            }
            job = job.model_copy(update={"llm": job.llm.model_copy(update=resolved)})
            queue.settle_backend(
                s,
                job_id,
                config=job.model_dump(mode="json"),
                backend=backend.kind,
                model=backend.model,
            )
    finally:
        engine.dispose()


def run_claimed_job(
    job_id: int,
    *,
    gpu: int | None,
    database_url: str,
    work_dir: Path,
    cluster: ClusterOptions | None = None,
) -> int:
    """Run the claimed job ``job_id`` on device ``gpu`` (``None``: its configured device, a
    compile-only job none), or on the Dask cluster of ``cluster`` (the workers of the row's GPU
    key), and return the exit status (see the module notes).

    Raises:
        EvolverError, RepositoryError, DatabaseUnavailableError: one-line errors before the
            job ran (the caller prints them).
        JobStopped: SIGTERM before the job's lock was taken.
    """
    from evolver.progress import ConsoleWriter
    from evolver.runner import RETURNED_TO_QUEUE, resume_job
    from evolver.settings import EvolverSettings
    from kernevo.environment import read_settings

    _settle_backend(job_id, database_url, work_dir)
    settings = read_settings(EvolverSettings, work_dir=work_dir)
    overrides = {} if gpu is None else {"gpu": gpu}
    outcome = resume_job(
        job_id,
        overrides=overrides,
        settings=settings,
        database_url=database_url,
        write=ConsoleWriter(),
        cluster=cluster,
        resume_hint=RETURNED_TO_QUEUE,
    )
    if outcome.signal is not None:
        return 130 if outcome.signal == signal.SIGINT else 128 + outcome.signal
    return 0 if outcome.state in ("complete", "cancelled") else EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evolver.worker_child")
    parser.add_argument("--job", type=int, required=True, help="the claimed job's id")
    parser.add_argument("--parent", type=int, required=True, help="the worker's pid")
    parser.add_argument("--gpu", type=int, help="device index (omitted: no GPU)")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--scheduler", help="evaluate on this Dask scheduler's workers")
    parser.add_argument("--in-flight", type=int, help="with --scheduler: candidates at once")
    parser.add_argument(
        "--lost-after-s", type=float, help="with --scheduler: seconds it may stay unreachable"
    )
    return parser


def _cluster(args: argparse.Namespace) -> ClusterOptions | None:
    """The cluster of ``--scheduler`` (``None`` without: the local device, Dask not imported)."""
    if args.scheduler is None:
        return None
    from evolver.cluster import DEFAULT_LOST_AFTER_S, ClusterOptions

    lost = DEFAULT_LOST_AFTER_S if args.lost_after_s is None else args.lost_after_s
    return ClusterOptions(scheduler=args.scheduler, in_flight=args.in_flight, lost_after_s=lost)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: die with the worker, then run the job; returns the exit status."""
    args = _parser().parse_args(argv)
    from evaluator.parent_watch import die_with_parent

    die_with_parent(args.parent, pdeathsig=True)  # started by the worker's main thread
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the job outlives the worker's terminal

    from db.errors import DatabaseUnavailableError, RepositoryError
    from evolver.errors import EvolverError, JobBusyError
    from evolver.runner import JobStopped, stored_reason
    from kernevo.environment import SettingsError
    from kernevo.stopping import stop_handled

    try:
        return run_claimed_job(
            args.job,
            gpu=args.gpu,
            database_url=args.database_url,
            work_dir=args.work_dir,
            cluster=_cluster(args),
        )
    except JobStopped as stop:
        stop_handled()
        # Its text is "stopped by SIGTERM" already.
        print(f"kernevo worker: job {args.job} {stop}", file=sys.stderr)
        return 128 + stop.signum
    except KeyboardInterrupt:
        print(f"kernevo worker: job {args.job} interrupted", file=sys.stderr)
        return 130
    except JobBusyError as error:
        # Its line names the job already ("job N is running in another process …").
        print(f"kernevo worker: {error}; left to it", file=sys.stderr)
        return EXIT_BUSY
    except (EvolverError, RepositoryError, DatabaseUnavailableError, SettingsError) as error:
        # Without the error's own "job N: ", which the line and the stored reason put before it.
        line = stored_reason(args.job, " ".join(str(error).split())) or type(error).__name__
        print(f"kernevo worker: job {args.job}: {line}", file=sys.stderr)
        _record_failure(args.job, args.database_url, line)
        return EXIT_ERROR


def _record_failure(job_id: int, database_url: str, line: str) -> None:
    """Store ``line`` as the job's failure reason, with the job ``failed`` (``worker_error``)
    if it was still ``running`` (the error came before the runner took it), so that ``kernevo
    jobs`` and ``GET /v1/jobs/{id}`` say why, not only this process's stderr. A job the runner
    already marked keeps its own reason and kind; a cancelled or requeued one is left as it is.
    Best effort: the database may be what failed, and the line was printed already."""
    from db import repository
    from db.session import session_scope
    from evolver.store import open_store

    try:
        engine = open_store(database_url, create=False)
        try:
            with session_scope(engine) as s:
                job = repository.get_job(s, job_id)
                if job.state == "running":
                    repository.update_job_progress(
                        s, job_id, state="failed", last_failure_kind="worker_error"
                    )
                if job.state == "failed" and job.failure_reason is None:
                    job.failure_reason = repository.failure_text(line)
        finally:
            engine.dispose()
    except Exception:  # noqa: BLE001 — nothing left to tell but the line already printed
        pass


def exit_stopped(code: int) -> NoReturn:
    """End a job process that a signal stopped (``code`` 130 or 143), its job's state already
    committed and its line printed: flush stdio and leave by ``os._exit``, skipping the
    interpreter's exit handlers. Why: those join threads of OpenEvolve's process pool
    (``concurrent.futures.process._python_exit``), and a join that never returns once held a
    stopped job, and its worker waiting for it, for ever; nothing after the commit is worth that
    risk. The database connections close with the process (their transactions are done)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    status = main()
    if status in STOPPED:
        exit_stopped(status)
    sys.exit(status)
