"""The job runner: one OpenEvolve run of a path in one dtype on one GPU, recorded in the store.

A job is (path, dtype, GPU). Fresh: the job row is created, the seed kernel is written to the
job's work folder as OpenEvolve's initial program, the evaluator's environment is set (before
OpenEvolve loads the evaluation file and starts its worker pool, which copies the environment),
and OpenEvolve runs for the configured iterations, checkpointing every few and keeping the newest
``keep_checkpoints``. Resumed: the same folder; every program of the newest complete checkpoint is
checked against the lineage store first (an older checkpoint is taken when it is broken), then
OpenEvolve restarts from it and runs the iterations left. Iterations after that checkpoint which
the killed run had recorded run again; their programs are recorded as re-runs.

Stopping: SIGTERM while OpenEvolve runs is its graceful shutdown; anywhere else in
``start_job``/``resume_job`` (setup, the last promotion) it raises :class:`JobStopped`. Either
way a job whose row exists ends ``failed`` (resumable) with the line "job N stopped by SIGTERM
…", and the outcome carries the signal (the CLI's exit 143).

Process lifetime: OpenEvolve's pool workers, and the GPU workers they start, end when this
process ends, however it ends (``evaluator.parent_watch``); ``kill -9`` of the job leaves no
worker behind.

Work folder ``$KERNEVO_WORK_DIR/job-<id>-<first 12 hex digits of the job's work key>/``, one per
job of one database (``evolver.work_folder``: job ids restart at 1 in every database):
``job.json`` (the marker: job id, work key, database), ``initial_program.cu``, ``prompts/``
(templates), ``reports/`` (one evaluator report per source sha256), ``openevolve/``
(checkpoints, logs, artifacts, evolution trace), ``job.lock``. A folder of another job is
refused, never used or deleted. The seed is screened before OpenEvolve starts: a seed that
fails the evaluator's screen fails the job (``SeedScreenError``) instead of every iteration.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, func, select

from evolver import openevolve_host as host
from evolver.champion import MIN_CHAMPION_SCORE, configured_signing_key, promote_best
from evolver.checkpoints import Checkpoint, ResumePoint, choose_resume_point
from evolver.cluster import ClusterOptions, EvaluationCluster
from evolver.errors import (
    EvolverError,
    JobFailedError,
    LLMEndpointError,
    ResumeError,
    SeedScreenError,
    SigningKeyError,
    WorkDirError,
)
from evolver.gpu import GpuFacts, query_gpu
from evolver.job_config import WORK_ROOT_KEY, JobConfig, validate_job_config
from evolver.lineage import LineageRecorder, RecordContext
from evolver.llm import LLMBackend, check_endpoint, model_configs, resolve_backend
from evolver.openevolve_config import build_config
from evolver.progress import (
    HEARTBEAT_INTERVAL_S,
    Best,
    Heartbeat,
    ProgressReporter,
    largest_timed_shape,
    speedup_text,
)
from evolver.prompts import system_message, write_templates
from evolver.queued_llm import queued_llm_problem
from evolver.settings import EvolverSettings
from evolver.store import open_store
from evolver.work_folder import (
    FolderOwner,
    WorkFolderError,
    database_label,
    holding_work_folder,
    work_folder,
)
from kernevo.stopping import note_stop, stop_handled
from seeds.registry import get_path

if TYPE_CHECKING:
    from seeds.spec import PathSpec

NO_GPU_KEY = "none"
NO_GPU_ARCH = "sm_90"  # what compile-only evaluations target (evaluator default)
# On a Dask cluster an evaluation waits this much less than OpenEvolve's own timeout, which
# would drop the child (evaluator.dask_client: an infra_error report instead).
CLUSTER_WAIT_MARGIN_S = 20
_UNFINISHED = ("waiting", "running", "failed")

Write = Callable[[str], None]


@dataclass(frozen=True)
class JobOutcome:
    """How a run of a job ended. ``state`` is the job row's state afterwards; ``signal`` is the
    signal (SIGINT, SIGTERM) that stopped the run before its last iteration, if one did."""

    job_id: int
    state: str
    iteration: int
    best_score: float
    best_speedup: float
    programs_recorded: int
    message: str
    signal: int | None = None
    # The job's work folder (evolver.work_folder); None when the run stopped before taking it.
    work_folder: Path | None = None


class JobStopped(BaseException):
    """SIGTERM outside OpenEvolve's run, raised where the main thread is (see
    :func:`_stopping_on_signals`). A ``BaseException``, as ``KeyboardInterrupt``, so that no
    ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _noted(signum: int, frame: Any) -> None:
    """A handler that does nothing: a Python function, not ``SIG_IGN``, which processes
    started meanwhile (OpenEvolve's pool workers) would inherit across exec."""


def _stop_caught() -> None:
    """A :class:`JobStopped` was caught: no redelivery, and a second SIGTERM while the job is
    being marked failed is ignored."""
    stop_handled()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _noted)


@contextmanager
def _stopping_on_signals() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGINT (Ctrl-C) raise :class:`JobStopped` (once: a second
    one while the job is being marked failed is ignored); OpenEvolve's run puts its own handlers
    in place meanwhile, and ``openevolve_host.signal_handlers_restored`` these back. Without it
    SIGTERM's default action would end the process mid-setup, the job row left ``running``, and
    a Ctrl-C in the setup would end as a bare ``KeyboardInterrupt`` instead of the job's line
    (a fresh user's finding)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (OpenEvolve's run needs it too)
        return

    def stop(signum: int, frame: Any) -> None:
        note_stop(signum)  # sent again until caught (kernevo.stopping says why)
        raise JobStopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _prepare_work_root(work_dir: Path) -> Path:
    """Create the work folder (``KERNEVO_WORK_DIR``) and check it is writable, before any job row
    exists, so a bad folder leaves nothing behind in the store.

    Raises:
        WorkDirError: one line: the folder cannot be created or is not writable.
    """
    root = work_dir.expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WorkDirError(
            f"work folder {root} cannot be created: {error.strerror or error}"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise WorkDirError(f"work folder {root} is not writable")
    return root


def _missing_folders(work_dir: Path) -> list[Path]:
    """The folders :func:`_prepare_work_root` would create for ``work_dir``, deepest first."""
    missing: list[Path] = []
    folder = work_dir.expanduser().resolve()
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_if_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first), each only while empty; stop at the first that is not."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


@contextmanager
def _evaluating_on(
    cluster: ClusterOptions | None, *, compile_only: bool, gpu_key: str | None = None
) -> Iterator[EvaluationCluster | None]:
    """The job's Dask cluster (``evolver.cluster.open_cluster``), or ``None`` without one: the
    local GPU worker, and Dask is never imported."""
    if cluster is None:
        yield None
        return
    from evolver.cluster import open_cluster

    with open_cluster(cluster, compile_only=compile_only, gpu_key=gpu_key) as evaluation:
        yield evaluation


def _preflight(
    job: JobConfig, settings: EvolverSettings, evaluation: EvaluationCluster | None = None
) -> tuple[GpuFacts | None, LLMBackend]:
    """Check the GPU (the local one, or the device of the cluster's workers), the signing key
    and the LLM endpoint before anything is written.

    Raises:
        NoGpuError, SigningKeyError, LLMEndpointError: one line.
    """
    if job.compile_only:
        gpu = None
    else:
        gpu = evaluation.facts if evaluation is not None else query_gpu(job.gpu)
    if gpu is not None and settings.signing_key is not None:
        # A key that cannot sign would otherwise surface only at the first promotion, hours in.
        from kernevo.keys import KeyFileError, load_signing_key

        try:
            load_signing_key(settings.signing_key)
        except KeyFileError as error:
            raise SigningKeyError(str(error)) from None
    backend = resolve_backend(job.llm, settings)
    backend.api_key()  # a named but unset key variable is an error before the job starts
    check_endpoint(backend)
    return gpu, backend


def start_job(
    job: JobConfig,
    *,
    settings: EvolverSettings,
    database_url: str,
    write: Write = print,
    cluster: ClusterOptions | None = None,
) -> JobOutcome:
    """Create and run a new job, on the Dask cluster of ``cluster`` when given
    (``evolver.cluster``), else on the local GPU.

    Raises:
        NoGpuError, LLMEndpointError, WorkDirError, StoreError: before the job row exists.
        ClusterError: the cluster cannot serve the job (before the job row exists).
        JobStopped: SIGTERM before the job row exists (after, the outcome says so).
        WorkDirError: the job's own folder cannot be created or locked; the row is then
            marked ``failed``.
        JobFailedError: an unexpected error after; the job row is then marked ``failed``
            (resumable).
    """
    with (
        _stopping_on_signals(),
        _evaluating_on(cluster, compile_only=job.compile_only) as evaluation,
    ):
        return _start_job(
            job, settings=settings, database_url=database_url, write=write, evaluation=evaluation
        )


def _start_job(
    job: JobConfig,
    *,
    settings: EvolverSettings,
    database_url: str,
    write: Write,
    evaluation: EvaluationCluster | None,
) -> JobOutcome:
    from db import repository
    from db.session import session_scope

    gpu, backend = _preflight(job, settings, evaluation)
    created = _missing_folders(settings.work_dir)
    _prepare_work_root(settings.work_dir)
    try:
        engine = open_store(database_url)
    except BaseException:
        # A database that cannot be opened leaves no work folder behind either: the folder
        # comes first so that a bad one leaves nothing in the store, and is undone here.
        _remove_if_empty(created)
        raise
    spec = get_path(job.path, job.bucket)
    # Record the endpoint actually used, so a resume does not depend on the environment then.
    resolved = {"base_url": backend.base_url, "api_key_env": backend.api_key_env}
    resolved["model"] = None if backend.offline else backend.model
    job = job.model_copy(update={"llm": job.llm.model_copy(update=resolved)})
    job_id: int | None = None
    try:
        with session_scope(engine) as s:
            row = repository.create_job(
                s,
                path=job.path,
                dtype=job.dtype,
                gpu=gpu.key if gpu else NO_GPU_KEY,
                shape_bucket=spec.shape_bucket,
                config={
                    **job.model_dump(mode="json"),
                    WORK_ROOT_KEY: str(settings.work_dir.expanduser().resolve()),
                },
                backend=backend.kind,
                model=backend.model,
            )
            job_id = row.id  # known before the commit: a stop during it still marks the row
            work_key = row.work_key
        return _run(
            job,
            job_id,
            work_key,
            engine,
            gpu,
            backend,
            settings=settings,
            resuming=False,
            write=write,
            evaluation=evaluation,
        )
    except JobStopped as stop:  # between the row's creation and _run's own guard
        _stop_caught()
        if job_id is None:
            raise
        return _stopped(engine, job_id, job, stop.signum, write)


class ResumeOptionError(ResumeError):
    """An option that a resume of this job refuses (``iterations`` not past the job's current
    iteration): the caller's usage error."""


def resume_job(
    job_id: int | None,
    *,
    overrides: dict[str, Any],
    settings: EvolverSettings,
    database_url: str,
    write: Write = print,
    cluster: ClusterOptions | None = None,
    resume_hint: str | None = None,
    work_dir_given: bool = True,
) -> JobOutcome:
    """Continue an unfinished job from its newest checkpoint, on the Dask cluster of
    ``cluster`` when given (the job's GPU key's workers), else on the local GPU.

    ``resume_hint`` ends the line of a job stopped by a signal: by default ``resume with
    'kernevo evolve --resume N'``; a worker's job process passes :data:`RETURNED_TO_QUEUE`,
    since its worker gives the job back to the queue (the user has nothing to do).

    ``job_id`` ``None`` picks the newest unfinished job of ``overrides["path"]`` and
    ``overrides["dtype"]`` (and ``overrides["bucket"]``, the shape bucket, when given).
    ``overrides`` (``None`` values ignored) may extend ``iterations`` or move the job to another
    ``gpu`` index of the same GPU model; a ``path``, ``dtype`` or ``bucket`` that differs from
    the job's is refused.

    ``work_dir_given`` false (``kernevo evolve --resume`` without ``--work-dir``): the job runs
    in the work root it ran in last (:data:`WORK_ROOT_KEY`), not ``settings.work_dir``, so a job
    started with ``--work-dir`` resumes from its own checkpoints; a job recorded without one
    (made before the key) uses ``settings.work_dir``. True (a worker, or ``--work-dir``):
    ``settings.work_dir``.

    Raises:
        ResumeError: no such job, a finished one, a running one, or another GPU model; or the
            job's recorded work folder is gone while the job had run iterations there (without
            ``work_dir_given``).
        ResumeOptionError: ``iterations`` at or below the job's current iteration.
        NoGpuError, LLMEndpointError, WorkDirError, StoreError, JobConfigError,
            ClusterError: one line.
        JobStopped: SIGTERM before the job's lock was taken (the row is left as it was: it may
            be another process's running job).
    """
    with _stopping_on_signals():
        return _resume_job(
            job_id,
            overrides=overrides,
            settings=settings,
            database_url=database_url,
            write=write,
            cluster=cluster,
            resume_hint=resume_hint,
            work_dir_given=work_dir_given,
        )


def _failed_after_all(row: Any) -> bool:
    """Whether the job row ended ``failed`` on its own error (``last_failure_kind`` ``error``, not
    ``interrupted`` or a lost worker) after running all its iterations. A resume of it ran them
    all again, every LLM call repeated, to the same failure (a trial: a job whose 3 iterations
    failed at the LLM ran 3 more per resume, from the seed, since it had no checkpoint). A job
    stopped between its last iteration and its end still resumes: it only finishes."""
    return (
        row.state == "failed"
        and row.last_failure_kind == "error"
        and row.iteration >= _total_iterations(row)
    )


def _total_iterations(row: Any) -> int:
    """The iterations a job row was asked for (its stored configuration; the job
    configuration's default where the row does not say)."""
    stored = row.config.get("iterations") if isinstance(row.config, dict) else None
    if isinstance(stored, int) and not isinstance(stored, bool):
        return stored
    default = JobConfig.model_fields["iterations"].default
    assert isinstance(default, int)
    return default


def _resume_job(
    job_id: int | None,
    *,
    overrides: dict[str, Any],
    settings: EvolverSettings,
    database_url: str,
    write: Write,
    cluster: ClusterOptions | None,
    resume_hint: str | None = None,
    work_dir_given: bool = True,
) -> JobOutcome:
    from db import repository
    from db.session import session_scope

    engine = open_store(database_url)
    given = {k: v for k, v in overrides.items() if v is not None}
    with session_scope(engine) as s:
        if job_id is None:
            if "path" not in given or "dtype" not in given:
                raise ResumeError("--resume without a job id needs --path and --dtype")
            unfinished = [
                j
                for j in repository.list_jobs(s)
                if (j.path, j.dtype) == (given["path"], given["dtype"])
                and j.state in _UNFINISHED
                and given.get("bucket", j.shape_bucket) == j.shape_bucket
            ]
            rows = [j for j in unfinished if not _failed_after_all(j)]
            if not rows:
                ran_all = (
                    f" (job {unfinished[0].id} failed after running all its iterations)"
                    if unfinished
                    else ""
                )
                raise ResumeError(
                    f"no unfinished {given['path']} {given['dtype']} job to resume{ran_all}"
                )
            row = rows[0]
            total = _total_iterations(row)
            write(f"resuming job {row.id}, the newest unfinished {row.path} {row.dtype} job "
                  f"({row.state}, at iteration {row.iteration}/{total})")  # fmt: skip
        else:
            try:
                row = repository.get_job(s, job_id)
            except repository.NotFoundError:
                raise ResumeError(f"job {job_id} not found") from None
        if row.state not in _UNFINISHED:
            raise ResumeError(f"job {row.id} is {row.state}; nothing to resume")
        if _failed_after_all(row) and "iterations" not in given:
            total = _total_iterations(row)
            raise ResumeError(
                f"job {row.id} failed after running all its {total} iterations; a resume would "
                f"run them again (start a new job, or --iterations N, more than {total}, extends "
                "it)"
            )
        for key in ("path", "dtype"):
            if key in given and given[key] != getattr(row, key):
                raise ResumeError(f"job {row.id} is {row.path} {row.dtype}, not {given[key]}")
        if "bucket" in given and given["bucket"] != row.shape_bucket:
            raise ResumeError(
                f"job {row.id} is on shape bucket {row.shape_bucket}, not {given['bucket']}"
            )
        # How far the job got: its row's iteration, or a recorded program's when an interrupted
        # re-run from an earlier checkpoint left the row lower (a trial shrank a job that had
        # recorded iteration 2 to --iterations 1 that way).
        from db.models import Program

        newest = s.scalar(select(func.max(Program.iteration)).where(Program.job_id == row.id))
        reached = max(row.iteration, newest or 0)
        if "iterations" in given and given["iterations"] <= reached:
            # Running "0 iterations" would mark the job complete for good, short of its total.
            raise ResumeOptionError(
                f"job {row.id} is at iteration {reached}: --iterations "
                f"{given['iterations']} must exceed it (it extends the job)"
            )
        stored = dict(row.config)
        work_root = stored.pop(WORK_ROOT_KEY, None)
        kept = ("path", "dtype", "bucket", "llm")
        stored.update({k: v for k, v in given.items() if k not in kept})
        job = validate_job_config(stored, f"job {row.id} config")
        if row.queued_at is not None:  # queued through the API: the LLM key is ours to guard
            problem = queued_llm_problem(job.llm, settings)
            if problem is not None:
                raise LLMEndpointError(f"job {row.id}: {problem}")
        job_id, gpu_key, work_key = row.id, row.gpu_key, row.work_key
        best_score, best_speedup = row.best_score, row.best_speedup
        iteration = row.iteration
    if not work_dir_given and isinstance(work_root, str):
        settings = _recorded_work_root(settings, job_id, work_key, Path(work_root), iteration)
    on_key = None if gpu_key == NO_GPU_KEY else gpu_key
    with _evaluating_on(cluster, compile_only=job.compile_only, gpu_key=on_key) as evaluation:
        gpu, backend = _preflight(job, settings, evaluation)
        _prepare_work_root(settings.work_dir)
        here = gpu.key if gpu else NO_GPU_KEY
        if here != gpu_key:
            raise ResumeError(f"job {job_id} ran on {gpu_key}; this job now would run on {here}")
        return _run(
            job,
            job_id,
            work_key,
            engine,
            gpu,
            backend,
            settings=settings,
            resuming=True,
            write=write,
            best_score=best_score,
            best_speedup=best_speedup,
            evaluation=evaluation,
            resume_hint=resume_hint,
        )


def _recorded_work_root(
    settings: EvolverSettings, job_id: int, work_key: str, root: Path, iteration: int
) -> EvolverSettings:
    """``settings`` with ``work_dir`` the work root ``root`` job ``job_id`` last ran in.

    Raises:
        ResumeError: the job's folder there is gone although the job ran ``iteration`` > 0
            iterations in it: a resume would start over from the seed, so it is said, not done.
    """
    folder = work_folder(root, job_id, work_key)
    if iteration > 0 and not folder.is_dir():
        raise ResumeError(
            f"job {job_id} ran to iteration {iteration} in work folder {folder}, which is gone; "
            f"resume with --work-dir to start it over from its seed in another work folder"
        )
    return settings.model_copy(update={"work_dir": root})


def _count_programs(engine: Engine, job_id: int) -> int:
    from db.models import Program
    from db.session import session_scope

    with session_scope(engine) as s:
        return int(s.scalar(select(func.count(Program.id)).where(Program.job_id == job_id)) or 0)


def _recorded(engine: Engine, job_id: int) -> tuple[dict[str, str], int | None]:
    """The job's recorded programs (uid → source sha256) and the newest iteration among them
    (``None`` when there is none)."""
    from db.models import Program
    from db.session import session_scope

    with session_scope(engine) as s:
        rows = s.execute(
            select(Program.uid, Program.source_sha256, Program.iteration).where(
                Program.job_id == job_id
            )
        ).all()
    newest = max((row.iteration for row in rows), default=None)
    return {row.uid: row.source_sha256 for row in rows}, newest


def _run(
    job: JobConfig,
    job_id: int,
    work_key: str,
    engine: Engine,
    gpu: GpuFacts | None,
    backend: LLMBackend,
    *,
    settings: EvolverSettings,
    resuming: bool,
    write: Write,
    best_score: float | None = None,
    best_speedup: float | None = None,
    evaluation: EvaluationCluster | None = None,
    resume_hint: str | None = None,
) -> JobOutcome:
    spec = get_path(job.path, job.bucket)
    work = work_folder(settings.work_dir, job_id, work_key)
    owner = FolderOwner(
        job_id=job_id,
        work_key=work_key,
        path=spec.path_id,
        dtype=job.dtype,
        shape_bucket=spec.shape_bucket,
        database=database_label(engine.url),
    )

    def recorded() -> tuple[set[str], set[str]]:
        uids = _recorded(engine, job_id)[0]
        return set(uids), set(uids.values())

    with ExitStack() as held:
        try:
            work = held.enter_context(
                holding_work_folder(
                    settings.work_dir,
                    owner,
                    recorded=recorded if resuming else None,
                    write=write,
                )
            )
        except WorkFolderError as error:  # another job's folder: left as it is
            _mark_failed(engine, job_id, "error", str(error))
            raise
        except OSError as error:  # not "held by another process": that is a ResumeError
            failure = WorkDirError(
                f"job {job_id}: work folder {work} cannot be created or locked: "
                f"{error.strerror or error}"
            )
            _mark_failed(engine, job_id, "error", str(failure))
            raise failure from None
        try:
            return _run_locked(
                job,
                job_id,
                engine,
                gpu,
                backend,
                work,
                resuming=resuming,
                write=write,
                best_score=best_score,
                best_speedup=best_speedup,
                evaluation=evaluation,
                settings=settings,
                resume_hint=resume_hint,
            )
        except BaseException as error:
            if isinstance(error, JobStopped):  # SIGTERM in setup: an outcome, as in the run
                _stop_caught()
                return _stopped(engine, job_id, job, error.signum, write, resume_hint)
            # Mark the job failed (resumable) unless it was cancelled meanwhile.
            interrupted = not isinstance(error, Exception)  # Ctrl-C twice, SystemExit
            reason = str(error).splitlines()[0] if str(error) else ""
            if interrupted or isinstance(error, EvolverError):
                # An error of ours says what happened in its own line; Ctrl-C has no line.
                said = reason or type(error).__name__
                _mark_failed(engine, job_id, "interrupted" if interrupted else "error", said)
                raise
            bare = (
                f"{type(error).__name__}: {reason}; resume with 'kernevo evolve --resume {job_id}'"
            )
            _mark_failed(engine, job_id, "error", bare)
            raise JobFailedError(
                f"job {job_id} ({spec.path_id} {job.dtype}) failed: {bare}"
            ) from error


# The end of a worker's job line when a signal stopped the job: its worker gives it back to the
# queue (evolver.worker), so "resume with kernevo evolve --resume" would be a wrong errand.
RETURNED_TO_QUEUE = "its worker returns it to the queue, where a worker resumes it"


def _stopped_reason(
    job_id: int, signum: int | None, iteration: int, total: int, hint: str | None = None
) -> str:
    """A stopped job's stored failure reason, ``stopped by SIGTERM at iteration 2 of 5; …``;
    its summary line is ``job N `` and this."""
    by = f" by {signal.Signals(signum).name}" if signum is not None else ""
    then = hint or f"resume with 'kernevo evolve --resume {job_id}'"
    return f"stopped{by} at iteration {iteration} of {total}; {then}"


def stored_reason(job_id: int, line: str) -> str:
    """``line`` as job ``job_id``'s stored failure reason: without a leading ``job N: `` or
    ``job N failed: `` (the errors of ``evolver.errors`` name their job so). Why: every view
    of the reason (``kernevo jobs``, a worker's stderr) puts ``job N failed: `` or ``job N: ``
    before it, and the stored one would say the job twice."""
    for prefix in (f"job {job_id}: ", f"job {job_id} failed: "):
        if line.startswith(prefix):
            return line[len(prefix) :]
    return line


def _stopped(
    engine: Engine,
    job_id: int,
    job: JobConfig,
    signum: int,
    write: Write,
    resume_hint: str | None = None,
) -> JobOutcome:
    """A job stopped by ``signum`` outside OpenEvolve's run: marked ``failed`` (resumable, unless
    cancelled meanwhile), with the summary line ``_finish`` writes for a stopped run."""
    from db import repository
    from db.session import session_scope

    then = resume_hint or f"resume with 'kernevo evolve --resume {job_id}'"
    by = signal.Signals(signum).name
    _mark_failed(engine, job_id, "interrupted", f"stopped by {by} in its setup; {then}")
    state, iteration, best_score, best_speedup = "failed", 0, 0.0, 0.0
    programs = 0
    try:
        with session_scope(engine) as s:
            row = repository.get_job(s, job_id)
            state, iteration = row.state, row.iteration
            best_score, best_speedup = row.best_score or 0.0, row.best_speedup or 0.0
        programs = _count_programs(engine, job_id)
    except Exception:  # the store may be what is failing: the line matters more than its numbers
        pass
    reason = _stopped_reason(job_id, signum, iteration, job.iterations, resume_hint)
    message = f"job {job_id} {reason}"
    at = largest_timed_shape(get_path(job.path, job.bucket))
    write(
        f"{message}: best score {best_score:.3f} ({speedup_text(best_speedup, at)}), "
        f"{programs_recorded(programs)}"
    )
    return JobOutcome(job_id, state, iteration, best_score, best_speedup, programs, message, signum)


def programs_recorded(count: int) -> str:
    """The end of a job's summary line: ``1 program recorded``, ``N programs recorded``."""
    return f"{count} program{'' if count == 1 else 's'} recorded"


def _mark_failed(engine: Engine, job_id: int, kind: str, reason: str) -> None:
    """Mark the job ``failed`` (resumable) with ``last_failure_kind`` ``kind`` and
    ``failure_reason`` ``reason`` (one line, :func:`stored_reason`: no ``job N: `` before it),
    unless it was cancelled meanwhile; a store error here is swallowed (the store may be what
    failed, and the original error matters more)."""
    from db import repository
    from db.session import session_scope

    try:
        with session_scope(engine) as s:
            if repository.get_job(s, job_id).state != "cancelled":
                repository.update_job_progress(
                    s,
                    job_id,
                    state="failed",
                    last_failure_kind=kind,
                    failure_reason=stored_reason(job_id, reason),
                )
    except Exception:
        pass


def _run_locked(
    job: JobConfig,
    job_id: int,
    engine: Engine,
    gpu: GpuFacts | None,
    backend: LLMBackend,
    work: Path,
    *,
    resuming: bool,
    write: Write,
    best_score: float | None,
    best_speedup: float | None,
    evaluation: EvaluationCluster | None,
    settings: EvolverSettings,
    resume_hint: str | None = None,
) -> JobOutcome:
    from openevolve.controller import EvolutionFailedError, OpenEvolve

    from db import repository
    from db.heartbeat import note_heartbeat_interval
    from db.session import session_scope

    spec = get_path(job.path, job.bucket)
    initial = work / "initial_program.cu"
    if not initial.exists():
        initial.write_text(spec.seed_source())
    _check_seed(job_id, spec, initial)
    report_dir = work / "reports"
    report_dir.mkdir(parents=True, exist_ok=True)
    output_dir = work / "openevolve"
    templates = write_templates(work / "prompts")
    rerun_through: int | None = None
    point = ResumePoint(None, (), ())
    if resuming:
        recorded, rerun_through = _recorded(engine, job_id)
        point = choose_resume_point(output_dir, recorded)
    checkpoint = point.checkpoint
    done = checkpoint.iteration if checkpoint else 0
    remaining = job.iterations - done
    oe: Any = None

    def stop() -> None:
        controller = getattr(oe, "parallel_controller", None)
        if controller is not None:
            controller.request_shutdown()

    def promote(best: Best) -> None:
        if gpu is None or best.score <= MIN_CHAMPION_SCORE:
            return
        verify = None
        if evaluation is not None:  # on a worker of the job's GPU key
            verify = evaluation.champion_verifier(spec.path_id, spec.shape_bucket, job.dtype)
        try:
            outcome = promote_best(
                engine,
                spec=spec,
                dtype=job.dtype,
                gpu_index=job.gpu,
                gpu_key=gpu.key,
                uid=best.uid,
                source=best.source,
                # The job's own settings (KERNEVO_SIGNING_KEY or KERNEVO_KEY_DIR), not the
                # process environment's: a caller may pass settings the environment lacks.
                signing_key=configured_signing_key(settings),
                verify=verify,
                # A signal OpenEvolve received (SIGTERM, Ctrl-C) also reached the GPU worker.
                stopping=lambda: bool(received),
            )
            write(f"job {job_id} | {outcome.reason}")
        except Exception as error:  # verification is a side activity: report, keep evolving
            write(f"job {job_id} | champion promotion failed: {type(error).__name__}: {error}")

    reporter = ProgressReporter(
        engine,
        job_id,
        job.iterations,
        write=write,
        stop=stop,
        promote=promote,
        promote_every=job.promote_every,
        best_score=best_score,
        best_speedup=best_speedup,
        speedup_at=largest_timed_shape(spec),
    )
    reporter.iteration = done
    recorder = LineageRecorder(
        RecordContext(
            engine=engine,
            job_id=job_id,
            path_id=spec.path_id,
            dtype=job.dtype,
            report_dir=report_dir,
            backend=backend.kind,
            model=backend.model,
            gpu_key=gpu.key if gpu else NO_GPU_KEY,
            gpu_name=gpu.name if gpu else "no GPU (compile-only)",
            arch=gpu.arch if gpu else NO_GPU_ARCH,
            rerun_through=rerun_through,
        ),
        reporter,
        stop,
    )
    with session_scope(engine) as s:
        # The configuration this run follows: a resume's new --iterations, --gpu or --in-flight
        # are stored, so a later resume without them keeps them.
        repository.update_job_progress(
            s,
            job_id,
            state="running",
            iteration=done,
            config={**job.model_dump(mode="json"), WORK_ROOT_KEY: str(work.parent)},
        )
        # This process beats for the job (unless a worker holds it and beats itself): record
        # how often, so that no worker's reaper takes its 30 s beats for a death.
        note_heartbeat_interval(s, job_id, HEARTBEAT_INTERVAL_S)
    for name, failure in point.rejected:
        write(f"job {job_id} | {name} is broken, not resumed from: {failure.describe()}")
    local_flight = job.in_flight if evaluation is None else 1
    write(_header(job_id, job, gpu, backend, remaining, checkpoint, resuming, work, local_flight))
    if evaluation is not None:
        write(f"job {job_id} | evaluating on {evaluation.describe()}")
    if rerun_through is not None and rerun_through > done:
        # With several in flight, iterations finish out of order: the stopped run recorded some
        # up to rerun_through, not necessarily all of them.
        after = "that checkpoint" if checkpoint is not None else "the seed (no checkpoint)"
        write(
            f"job {job_id} | iterations {done + 1}..{min(rerun_through, job.iterations)} run "
            f"again from {after}: the stopped run had recorded up to iteration {rerun_through}; "
            "the new programs are recorded as re-runs"
        )

    env = {
        "KERNEVO_EVAL_PATH": spec.path_id,
        "KERNEVO_EVAL_BUCKET": spec.shape_bucket,
        "KERNEVO_EVAL_DTYPE": job.dtype,
        "KERNEVO_EVAL_GPU": str(job.gpu) if gpu else "none",
        "KERNEVO_REPORT_DIR": str(report_dir),
        "KERNEVO_EVAL_ARCH": gpu.arch if gpu else NO_GPU_ARCH,
        host.JOB_PID_VARIABLE: str(os.getpid()),
    }
    if evaluation is not None:
        env |= evaluation.environment(wait_s=job.evaluator_timeout_s - CLUSTER_WAIT_MARGIN_S)
    failure: str | None = None
    final: tuple[str, str, dict[str, float]] | None = None
    received: list[int] = []
    with (
        host.environment(env),
        host.scoped_logging(),
        host.workers_die_with_job(),
        host.workers_start_deaf_to_ctrl_c(),
        host.pool_ends_without_waiting(),
    ):
        config = build_config(
            job,
            models=model_configs(backend, job.llm),
            system_message=system_message(spec, job.dtype, gpu),
            template_dir=templates,
            output_dir=output_dir,
            parallel_evaluations=evaluation.in_flight if evaluation is not None else local_flight,
        )
        with host.quiet_console():
            oe = OpenEvolve(
                str(initial),
                host.evaluation_file(),
                config,
                output_dir=str(output_dir),
                population_strategy=recorder.population_strategy(),
            )
        recorder.bind(oe)
        if remaining > 0:
            with (
                Heartbeat(reporter),
                host.signal_handlers_restored(),
                host.noting_signals() as received,
                host.keeping_last_checkpoints(oe, output_dir, job.keep_checkpoints),
                evaluation.watching(stop) if evaluation is not None else nullcontext(),
            ):
                try:
                    best = asyncio.run(
                        oe.run(
                            iterations=remaining,
                            checkpoint_path=str(checkpoint.path) if checkpoint else None,
                        )
                    )
                    final = (best.id, best.code, best.metrics) if best is not None else None
                except EvolutionFailedError as error:
                    failure = str(error).splitlines()[0]
        elif checkpoint is not None:
            final = checkpoint.best_program()  # killed after its last iteration
    if recorder.fatal is not None:
        raise recorder.fatal
    if evaluation is not None and evaluation.lost is not None:
        failure = evaluation.lost_line(job_id)  # the run was stopped: nothing to promote

    if final is not None and not reporter.cancelled and failure is None:
        uid, source, metrics = final
        reporter.consider(
            uid,
            source,
            float(metrics.get("combined_score") or 0.0),
            float(metrics.get("speedup_64") or 0.0),
        )
        with Heartbeat(reporter):  # verifying a champion takes minutes: the job is not stale
            reporter.promote_now()
    signum = received[0] if received else None
    outcome = _finish(engine, job_id, job, reporter, failure, write, signum, resume_hint)
    return replace(outcome, work_folder=work)


def _check_seed(job_id: int, spec: PathSpec, initial: Path) -> None:
    """Screen the job's seed ``initial`` against the path's seed, as the evaluator screens every
    candidate (``evaluator.screen.screen``), before OpenEvolve starts: a seed that fails it would
    make every iteration fail the same check while the job ran to ``complete``.

    Raises:
        SeedScreenError: one line naming the check and what to do.
    """
    from evaluator.screen import screen

    path_seed = spec.seed_source()
    try:
        source = initial.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise SeedScreenError(f"job {job_id}: its seed {initial} cannot be read: {error}") from None
    failure = screen(source, path_seed)
    if failure is None:
        return
    check = failure.describe()
    if source == path_seed:
        then = f"the path's seed {spec.seed_file} breaks the screen itself: fix it"
    else:
        then = (
            f"it differs from the path's seed {spec.seed_file} outside the code that may "
            f"change (the path's seed changed since job {job_id} began, or the file is another "
            "job's): start a new job"
        )
    raise SeedScreenError(f"job {job_id}: its seed {initial} fails the screen ({check}); {then}")


def _header(
    job_id: int,
    job: JobConfig,
    gpu: GpuFacts | None,
    backend: LLMBackend,
    remaining: int,
    checkpoint: Checkpoint | None,
    resuming: bool,
    work: Path,
    in_flight: int = 1,
) -> str:
    """The job's first terminal line: what runs where, with which backend, from where, and how
    many candidates are evaluated at once on the local GPU (``in_flight``, said when over 1)."""
    where = gpu.describe() if gpu else "no GPU (compile-only: evaluations stop after compiling)"
    if checkpoint is not None:
        start = f"from checkpoint at iteration {checkpoint.iteration}"
    else:
        start = "from the seed (no complete checkpoint yet)" if resuming else "from the seed"
    spec = get_path(job.path, job.bucket)
    what = f"{job.path} {job.dtype}"
    if len(spec.bucket_names) > 1:  # a path of several buckets names the job's
        what = f"{job.path} (shape bucket {spec.shape_bucket}) {job.dtype}"
    count = max(remaining, 0)
    # Several in flight on the local GPU are said here (a cluster's count is said by the
    # "evaluating on" line that follows).
    flight = f", {in_flight} in flight" if in_flight > 1 else ""
    return (
        f"job {job_id}: {what} on {where}; {backend.kind} ({backend.model}); "
        f"{count} iteration{'' if count == 1 else 's'}{flight} {start}; work folder {work}"
    )


def _finish(
    engine: Engine,
    job_id: int,
    job: JobConfig,
    reporter: ProgressReporter,
    failure: str | None,
    write: Write,
    signum: int | None = None,
    resume_hint: str | None = None,
) -> JobOutcome:
    """Write the job's final state and progress, print the summary line (a stopped job's ends
    with ``resume_hint``, see :func:`resume_job`).

    ``complete`` when every iteration ran; ``cancelled`` when the API cancelled it (the row
    already says so and is final); ``failed`` when no iteration produced a program or the run
    was interrupted (Ctrl-C, SIGTERM; ``signum`` is the signal OpenEvolve received, if any):
    failed jobs can be resumed.
    """
    from db import repository
    from db.session import session_scope

    interrupted = False
    reason: str | None = None  # stored bare: every view of it says "job N failed: " before it
    if reporter.cancelled:
        state, message = "cancelled", f"job {job_id} cancelled at iteration {reporter.iteration}"
    elif failure is not None:
        state, reason = "failed", failure
        message = f"job {job_id} failed: {reason}"
    elif reporter.iteration >= job.iterations:
        state, message = "complete", f"job {job_id} complete"
    else:
        interrupted = True
        state = "failed"
        reason = _stopped_reason(job_id, signum, reporter.iteration, job.iterations, resume_hint)
        message = f"job {job_id} {reason}"
    with session_scope(engine) as s:
        if repository.get_job(s, job_id).state == "cancelled":
            state = "cancelled"
        repository.update_job_progress(
            s,
            job_id,
            state=None if state == "cancelled" else state,
            iteration=reporter.iteration,
            best_score=reporter.best_score,
            best_speedup=reporter.best_speedup,
            # The job's own failure kind (db.states.JOB_FAILURE_KINDS), as _mark_failed writes
            # it: a run that ended failed on its own is "error", not its last iteration's kind.
            last_failure_kind="interrupted" if interrupted else "error" if reason else None,
            failure_reason=reason if state == "failed" else None,
        )
    programs = _count_programs(engine, job_id)
    write(
        f"{message}: best score {reporter.best_score:.3f} "
        f"({speedup_text(reporter.best_speedup, reporter.speedup_at)}), "
        f"{programs_recorded(programs)}"
    )
    return JobOutcome(
        job_id,
        state,
        reporter.iteration,
        reporter.best_score,
        reporter.best_speedup,
        programs,
        message,
        signum if interrupted else None,
    )
