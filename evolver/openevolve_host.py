"""Hosting OpenEvolve inside the job's process without letting it change that process for good.

OpenEvolve reads its workers' environment from ``os.environ`` when its pool starts, adds handlers
to the root logger, and installs SIGINT/SIGTERM handlers that it never removes. These context
managers scope each of those to one run, so a second job in the same process (the tests) starts
clean and a Ctrl-C after the run does not call into a stopped controller; ``noting_signals``
tells the runner when a run ended early because of a signal. ``workers_die_with_job`` makes
OpenEvolve's pool workers end with the job's process (a ``kill -9`` of ``kernevo evolve`` leaves
no worker behind) and sets each iteration's parent for its evaluation (which times the child
against it: ``evaluator.parent_context``); ``pool_ends_without_waiting`` keeps the pool's end
from waiting on a feeder thread that can never finish (a stopped job once hung there for ever);
``keeping_last_checkpoints`` deletes old checkpoints as new ones complete.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from evaluator.parent_context import Parent, evaluating_children_of
from evolver.checkpoints import prune_checkpoints

# Set in the environment the pool workers start with: the pid of the job's process, their parent.
JOB_PID_VARIABLE = "KERNEVO_JOB_PID"
# Set there too once OpenEvolve has opened its log file (``quiet_console``): the file the pool
# workers append their log records to. Why: a spawned worker's root logger has no handler, and
# Python's last-resort handler would print its warnings and errors ("LLM generation failed: …")
# bare on the job's stderr, besides the job's own lines.
WORKER_LOG_VARIABLE = "KERNEVO_OPENEVOLVE_LOG"
# OpenEvolve's file log format (``openevolve.controller``), for the workers' records in that file.
_LOG_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"
# OpenEvolve's own pool initializer while ``workers_die_with_job`` has replaced it.
_openevolve_worker_init: Callable[..., None] | None = None
# OpenEvolve's pool termination while ``pool_ends_without_waiting`` has replaced it.
_openevolve_terminate_pool: Callable[[Any], None] | None = None
# OpenEvolve's iteration function in a pool worker, once run_iteration_knowing_parent wraps it.
_openevolve_run_iteration: Callable[..., Any] | None = None


def evaluation_file() -> str:
    """Path of OpenEvolve's evaluation file, ``evaluator/openevolve_entry.py``, located without
    importing it (the job's process stays free of the evaluator's GPU machinery).

    Raises:
        RuntimeError: the evaluator package is not installed.
    """
    spec = importlib.util.find_spec("evaluator.openevolve_entry")
    if spec is None or spec.origin is None:
        raise RuntimeError("evaluator.openevolve_entry is not installed")
    return spec.origin


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the block (OpenEvolve copies ``os.environ`` into its
    workers when its pool starts, and loads the evaluation file in this process), then restore
    the previous values."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextmanager
def scoped_logging() -> Iterator[None]:
    """Remove the handlers OpenEvolve adds to the root logger (a file and a console handler)
    when the block ends, and restore the root level it changes and ``WORKER_LOG_VARIABLE``
    (set by :func:`quiet_console`)."""
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    logged = os.environ.get(WORKER_LOG_VARIABLE)
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in before]:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(level)
        if logged is None:
            os.environ.pop(WORKER_LOG_VARIABLE, None)
        else:
            os.environ[WORKER_LOG_VARIABLE] = logged


@contextmanager
def quiet_console() -> Iterator[None]:
    """Build OpenEvolve inside this block: its start-up INFO lines are held back (its loggers sit
    at WARNING meanwhile) and the console handler it adds to the root logger is removed when
    the block ends. Why: the job's own lines (progress, the ``job N failed: <reason>`` summary,
    the CLI's error) already say what happened; OpenEvolve's console copy of an error
    (``<time> - ERROR - ❌ None of the 1 iterations produced …``) was a second, differently
    formatted message on the user's stderr. Its file log in the work folder (``logs/``) keeps
    every record, errors included; its path goes to ``WORKER_LOG_VARIABLE`` so the pool workers
    write theirs there too. Enter it inside :func:`scoped_logging`, which undoes both."""
    root = logging.getLogger()
    before = list(root.handlers)
    package = logging.getLogger("openevolve")
    level = package.level
    package.setLevel(logging.WARNING)
    try:
        yield
    finally:
        package.setLevel(level)
        for handler in [h for h in root.handlers if h not in before]:
            if isinstance(handler, logging.FileHandler):
                os.environ[WORKER_LOG_VARIABLE] = handler.baseFilename
            else:
                root.removeHandler(handler)
                handler.close()


def _log_to_job_file(config_dict: dict[str, Any], parent_env: dict[str, str] | None) -> None:
    """Give a pool worker's root logger a handler: the job's OpenEvolve log file
    (``WORKER_LOG_VARIABLE``) at the config's ``log_level``, or a handler that drops records
    when there is none or it cannot be opened. Either way nothing reaches the job's stderr
    through Python's last-resort handler. A worker that already has a handler (forked, with
    the job's) is left as it is."""
    root = logging.getLogger()
    if root.handlers:
        return
    path = (parent_env or {}).get(WORKER_LOG_VARIABLE)
    handler: logging.Handler = logging.NullHandler()
    if path:  # a work folder that went away: the worker's records are not worth a crash
        with suppress(OSError):
            handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    root.addHandler(handler)
    root.setLevel(str(config_dict.get("log_level") or "INFO"))


@contextmanager
def signal_handlers_restored() -> Iterator[None]:
    """Put back the SIGINT/SIGTERM handlers OpenEvolve's ``run`` replaces (its graceful
    shutdown) once the run is over."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class _NotingSignalModule:
    """Stands in for the ``signal`` module inside ``openevolve.controller``: every handler
    OpenEvolve installs is wrapped so the signal number is noted before it runs."""

    def __init__(self, real: Any, received: list[int]) -> None:
        self._real = real
        self._received = received

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def signal(self, signalnum: int, handler: Any) -> Any:
        if not callable(handler):
            return self._real.signal(signalnum, handler)
        received = self._received

        def noting(signum: int, frame: Any) -> None:
            received.append(signum)
            # OpenEvolve's handler logs to the job's log file, which the interrupted code may
            # be writing that moment: the file's second write fails ("reentrant call") and
            # logging printed a "--- Logging error ---" traceback to the terminal (a worker's
            # stop, fresh-user trial 2026-12-02). Only that line is lost; the stop goes on.
            raising, logging.raiseExceptions = logging.raiseExceptions, False
            try:
                handler(signum, frame)
            except SystemExit:
                # OpenEvolve's second Ctrl-C calls sys.exit(0); a user's interrupt is not a
                # success, so it surfaces as KeyboardInterrupt (the job is marked failed).
                raise KeyboardInterrupt from None
            finally:
                logging.raiseExceptions = raising

        return self._real.signal(signalnum, noting)


@contextmanager
def noting_signals() -> Iterator[list[int]]:
    """Yield a list that collects the signals (SIGINT, SIGTERM) OpenEvolve's ``run`` receives.

    OpenEvolve turns the first Ctrl-C or SIGTERM into a graceful shutdown and returns from
    ``run`` as if the run had ended; the list tells the runner it was interrupted, and by which
    signal. OpenEvolve's second Ctrl-C (``sys.exit(0)``) raises ``KeyboardInterrupt`` instead.
    """
    import openevolve.controller as controller

    received: list[int] = []
    real = controller.signal
    controller.signal = _NotingSignalModule(real, received)  # type: ignore[assignment]
    try:
        yield received
    finally:
        controller.signal = real


def _worker_init_dying_with_job(
    config_dict: dict[str, Any], evaluation_file: str, parent_env: dict[str, str] | None = None
) -> None:
    """OpenEvolve's pool initializer, after arranging for this worker to die with the job.

    The job's process starts the pool from its main thread and replaces recycled workers from
    the executor's manager thread; both live as long as the pool, so the kernel's parent-death
    signal is safe here (``evaluator.parent_watch``). Module-level, so the spawned worker can
    unpickle it by name.
    """
    import openevolve.process_parallel as parallel

    from evaluator.parent_watch import die_with_parent

    job_pid = (parent_env or {}).get(JOB_PID_VARIABLE)
    die_with_parent(int(job_pid) if job_pid else os.getppid(), pdeathsig=True)
    _log_to_job_file(config_dict, parent_env)
    init = _openevolve_worker_init or parallel._worker_init
    init(config_dict, evaluation_file, parent_env)
    global _openevolve_run_iteration
    if _openevolve_run_iteration is None:
        _openevolve_run_iteration = parallel._run_iteration
        parallel._run_iteration = run_iteration_knowing_parent  # type: ignore[assignment]


def parent_of(db_snapshot: dict[str, Any], parent_id: str) -> Parent | None:
    """The parent program of an iteration from OpenEvolve's database snapshot (``programs``:
    id → ``Program.to_dict()``); None when the snapshot lacks it or its code."""
    program = db_snapshot.get("programs", {}).get(parent_id)
    if not isinstance(program, dict) or not isinstance(program.get("code"), str):
        return None
    score = (program.get("metrics") or {}).get("combined_score", 0.0)
    return Parent(program["code"], float(score) if isinstance(score, int | float) else 0.0)


def run_iteration_knowing_parent(
    iteration: int, db_snapshot: dict[str, Any], parent_id: str, *args: Any, **kwargs: Any
) -> Any:
    """OpenEvolve's ``_run_iteration`` with the iteration's parent set for the evaluation
    (``evaluator.parent_context``), which times the child against it in the same rounds.
    Installed in each pool worker by :func:`_worker_init_dying_with_job`."""
    assert _openevolve_run_iteration is not None
    with evaluating_children_of(parent_of(db_snapshot, parent_id)):
        return _openevolve_run_iteration(iteration, db_snapshot, parent_id, *args, **kwargs)


@contextmanager
def workers_die_with_job() -> Iterator[None]:
    """Inside the block, OpenEvolve's process pool starts workers that end when the job's
    process ends, however it ends (SIGKILL included). Enter it inside :func:`environment`
    with ``JOB_PID_VARIABLE`` set, before OpenEvolve starts its pool."""
    global _openevolve_worker_init
    import openevolve.process_parallel as parallel

    _openevolve_worker_init = parallel._worker_init
    parallel._worker_init = _worker_init_dying_with_job  # type: ignore[assignment]
    try:
        yield
    finally:
        parallel._worker_init = _openevolve_worker_init  # type: ignore[assignment]
        _openevolve_worker_init = None


@contextmanager
def workers_start_deaf_to_ctrl_c() -> Iterator[None]:
    """Inside the block, a process pool's workers start with SIGINT blocked, until the worker
    ignores it (``kernevo.cli``, as it imports: the pool workers' main module) and unblocks it.

    Why: Ctrl-C reaches the whole process group, and a worker still starting (importing, before
    ``kernevo.cli`` sets SIGINT aside) died of it with a traceback: a fresh user's Ctrl-C two
    seconds into a job of 16 in flight printed some fifty lines. A blocked signal mask is
    inherited through fork and exec (a handler is not), so the worker is deaf to it from its
    first instruction. Only the thread that starts a worker blocks it, only meanwhile: the job's
    own process still takes Ctrl-C as before."""
    from concurrent.futures import process

    real = process.ProcessPoolExecutor._spawn_process

    def spawn_deaf(executor: Any) -> None:
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            real(executor)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    process.ProcessPoolExecutor._spawn_process = spawn_deaf  # type: ignore[method-assign]
    try:
        yield
    finally:
        process.ProcessPoolExecutor._spawn_process = real  # type: ignore[method-assign]


def _terminate_pool_without_waiting(executor: Any) -> None:
    """OpenEvolve's ``_terminate_process_pool``, made unable to leave the executor's manager
    thread blocked on a pipe, which the interpreter's exit joins
    (``concurrent.futures.process._python_exit``): a job stopped by SIGTERM printed its resume
    line and never exited. Both pipes between the job and its workers could do that.

    - Call queue: its feeder thread writes each submitted iteration (a snapshot of the whole
      program database, far above a pipe's 64 KiB once a job has a hundred programs) into a
      pipe that only the workers read. Killed mid-read, they leave the feeder blocked on the
      full pipe, and the manager thread joins it (``join_executor_internals``). What the feeder
      still holds is work for workers being killed, so nothing is lost by not waiting for it
      (``multiprocessing.Queue.cancel_join_thread``).
    - Result queue: a worker sends a result above 16 KiB as a length header, then the body
      (``multiprocessing.connection``). Killed between the two, it leaves the manager thread
      reading a body that never comes, and no end of file either, because the job's process
      holds the pipe's write end too (a CI run on 2026-12-02 hung so, 120 s). Once the workers
      are gone that write end is closed: the read then ends, the pool counts as broken and the
      manager thread exits. Results already in the pipe are still read before the end.
    """
    call_queue = getattr(executor, "_call_queue", None)
    if call_queue is not None:
        call_queue.cancel_join_thread()
    # Taken now: the executor's shutdown forgets its result queue.
    result_queue = getattr(executor, "_result_queue", None)
    assert _openevolve_terminate_pool is not None
    _openevolve_terminate_pool(executor)
    if result_queue is not None:
        result_queue._writer.close()


@contextmanager
def pool_ends_without_waiting() -> Iterator[None]:
    """Inside the block, OpenEvolve's ``stop`` of its process pool never waits for the pool's
    feeder thread (:func:`_terminate_pool_without_waiting` says why), so a stopped job's
    process exits. Enter it before OpenEvolve's ``run``."""
    global _openevolve_terminate_pool
    import openevolve.process_parallel as parallel

    _openevolve_terminate_pool = parallel._terminate_process_pool
    parallel._terminate_process_pool = _terminate_pool_without_waiting  # type: ignore[assignment]
    try:
        yield
    finally:
        parallel._terminate_process_pool = _openevolve_terminate_pool  # type: ignore[assignment]
        _openevolve_terminate_pool = None


@contextmanager
def keeping_last_checkpoints(openevolve: Any, output_dir: Path, keep: int) -> Iterator[list[str]]:
    """Inside the block, each checkpoint OpenEvolve completes is followed by deleting all but
    the newest ``keep`` complete ones (``evolver.checkpoints.prune_checkpoints``); yields the
    names deleted so far. OpenEvolve saves checkpoints through the controller's
    ``_save_checkpoint``, in the job's process, one at a time."""
    removed: list[str] = []
    save = openevolve._save_checkpoint

    def save_then_prune(iteration: int) -> None:
        save(iteration)
        removed.extend(path.name for path in prune_checkpoints(output_dir, keep))

    openevolve._save_checkpoint = save_then_prune
    try:
        yield removed
    finally:
        openevolve._save_checkpoint = save
