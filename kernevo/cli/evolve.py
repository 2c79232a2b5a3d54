"""``kernevo evolve``: run or resume an evolution job (``evolver.runner``)."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from kernevo.cli.cluster import _cluster_options
from kernevo.cli.errors import EXIT_ERROR, EXIT_INTERRUPTED, UsageError, _Stopped
from kernevo.cli.folders import _check_work_dir
from kernevo.cli.store import _JOB_DATABASE_HINT, _store_url
from kernevo.environment import SettingsError, read_settings


def _cmd_evolve(args: argparse.Namespace) -> int:
    """Run the job; it outlives its terminal. SIGHUP is ignored meanwhile, by this process and by
    every worker it starts (an ignored signal stays ignored across fork and exec), and progress
    lines stop when stdout goes away (``| head -1``, a closed terminal), the job running on."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return _evolve(args)
    finally:
        signal.signal(signal.SIGHUP, previous)


def _evolve(args: argparse.Namespace) -> int:
    from evolver.runner import JobStopped

    try:
        return _evolve_job(args)
    except JobStopped as stop:  # before the job's row existed, or a resume before its lock
        raise _Stopped(stop.signum) from None


def _evolve_job(args: argparse.Namespace) -> int:
    from evolver.errors import JobConfigError
    from evolver.job_config import JobOptionError, load_job_config
    from evolver.progress import ConsoleWriter
    from evolver.runner import ResumeOptionError, resume_job, start_job
    from evolver.settings import EvolverSettings
    from evolver.store import open_store

    if args.compile_only and args.gpu is not None:
        # Contradictory, as the worker's --compile-only with --gpus and POST /v1/jobs's
        # compile_only with gpu: a usage error, not a GPU index silently ignored.
        args.parser.error("--compile-only runs on no GPU: leave out --gpu")
    settings_args: dict[str, Any] = {}
    if args.work_dir is not None:
        settings_args["work_dir"] = args.work_dir
    settings = read_settings(EvolverSettings, **settings_args)
    _check_work_dir(settings.work_dir)
    database_url = _store_url(args)
    llm = {
        "base_url": args.llm_base_url,
        "model": args.llm_model,
        "api_key_env": args.llm_api_key_env,
    }
    cluster = _cluster_options(args, local=True)
    overrides: dict[str, Any] = {
        "path": args.path,
        "bucket": args.bucket,
        "dtype": args.dtype,
        "iterations": args.iterations,
        "gpu": args.gpu,
        # Without a cluster, --in-flight is the job's own (the local GPU's pool); with one,
        # the cluster's (cluster._cluster_options).
        "in_flight": args.in_flight if cluster is None else None,
        "compile_only": True if args.compile_only else None,
        "checkpoint_interval": args.checkpoint_interval,
        "islands": args.islands,
        "population": args.population,
        "seed": args.seed,
        "promote_every": args.promote_every,
    }

    write = ConsoleWriter()

    if args.resume is not None:
        if args.config is not None:
            args.parser.error("--config cannot be combined with --resume: a job keeps its config")
        if args.resume == "latest" and (args.path is None or args.dtype is None):
            args.parser.error(
                "--resume without a job id needs --path and --dtype (the newest unfinished job "
                "of that path and dtype), or give the id: --resume JOB_ID"
            )
        fixed = [option for option, given in _kept_on_resume(args) if given]
        if fixed:
            args.parser.error(
                f"{', '.join(fixed)} cannot change on --resume: a job keeps its config (only "
                "--iterations extends it, and --gpu moves it to another GPU of the same model)"
            )
        job_id = None if args.resume == "latest" else int(args.resume)
        # A job to resume lives in an existing kernevo database: a missing SQLite file, an empty
        # one or a database without kernevo tables is said as such, never created and migrated
        # only to find no job in it.
        open_store(
            database_url, create=False, hint=_RESUME_HINT, foreign_hint=_JOB_DATABASE_HINT
        ).dispose()
        try:
            outcome = resume_job(
                job_id,
                overrides=overrides,
                settings=settings,
                database_url=database_url,
                write=write,
                cluster=cluster,
                # Without --work-dir, the job's own work root (recorded with the job), not
                # KERNEVO_WORK_DIR's: the resume hint names no --work-dir.
                work_dir_given=args.work_dir is not None,
            )
        except ResumeOptionError as error:
            args.parser.error(str(error))
    else:
        if args.config is None and (args.path is None or args.dtype is None):
            args.parser.error("evolve needs --path and --dtype (or --config FILE naming them)")
        try:
            job = load_job_config(
                args.config, {**overrides, "llm": llm}, defaults={"gpu": settings.gpu}
            )
        except JobOptionError as error:
            # The command line's value is at fault, not the job file: a usage error (exit 2).
            option = "--" + "-".join(error.loc).replace("_", "-")
            args.parser.error(f"argument {option}: {error}")
        except JobConfigError as error:  # the --config file's own content: configuration too
            raise UsageError(str(error)) from None
        _llm_settings_act(args, job.llm, settings)
        outcome = start_job(
            job, settings=settings, database_url=database_url, write=write, cluster=cluster
        )
    if outcome.signal is not None:  # stopped early by Ctrl-C or SIGTERM; the job is resumable
        return EXIT_INTERRUPTED if outcome.signal == signal.SIGINT else 128 + outcome.signal
    return 0 if outcome.state in ("complete", "cancelled") else EXIT_ERROR


# The places an LLM endpoint is configured, in the order they win (evolver.llm.resolve_backend).
_ENDPOINT_SOURCES = "--llm-base-url, llm.base_url in the --config file or KERNEVO_LLM_BASE_URL"


def _llm_settings_act(args: argparse.Namespace, llm: Any, settings: Any) -> None:
    """Refuse, before a new job runs, LLM settings that do nothing or cannot work (usage and
    configuration errors, exit 2, one line), where ``evolver.llm.resolve_backend`` would
    silently run the offline mutator or fail only once the job starts:

    - no endpoint anywhere (:data:`_ENDPOINT_SOURCES`): ``--llm-model`` or ``--llm-api-key-env``
      given, or any key of the ``--config`` file's ``llm`` section set (the offline mutator
      reads none of them);
    - an endpoint without a model (``llm.model``, ``--llm-model`` or ``KERNEVO_LLM_MODEL``): the
      option, the job file or the variable that named the endpoint is at fault.

    ``llm`` is the job's ``evolver.job_config.LLMSection`` (the file's keys with the options
    merged in), ``settings`` the ``EvolverSettings``. A ``KERNEVO_LLM_MODEL`` or
    ``KERNEVO_LLM_API_KEY_ENV`` without an endpoint is left alone: the environment may be set
    for other commands (a worker's queued jobs name their own endpoints).

    Raises:
        UsageError: the job file's ``llm`` section does nothing, or names an endpoint without
            a model.
        SettingsError: ``KERNEVO_LLM_BASE_URL`` names an endpoint and no model is given.
        SystemExit: (2, through ``args.parser.error``) an option does nothing, or
            ``--llm-base-url`` is given without a model.
    """
    given = {
        "base_url": args.llm_base_url,
        "model": args.llm_model,
        "api_key_env": args.llm_api_key_env,
    }
    from_file = sorted(key for key in llm.model_fields_set if given.get(key) is None)
    if llm.base_url is None and settings.llm_base_url is None:
        for key in ("model", "api_key_env"):
            if given[key] is not None:
                args.parser.error(
                    f"argument --llm-{key.replace('_', '-')}: does nothing without an LLM "
                    f"endpoint ({_ENDPOINT_SOURCES}): the offline mutator proposes the diffs; "
                    "add --llm-base-url or leave it out"
                )
        if from_file:
            raise UsageError(
                f"{args.config}: llm.{from_file[0]} does nothing without an LLM endpoint "
                f"({_ENDPOINT_SOURCES}): the offline mutator reads no llm key; add llm.base_url "
                "or remove the llm section"
            )
        return
    if llm.model is not None or settings.llm_model is not None:
        _key_variable_acts(args, llm, settings)
        return
    needs = "needs a model (--llm-model, llm.model in the --config file or KERNEVO_LLM_MODEL)"
    if given["base_url"] is not None:
        args.parser.error(f"argument --llm-base-url: an LLM endpoint {needs}")
    if llm.base_url is not None:
        raise UsageError(f"{args.config}: llm.base_url: an LLM endpoint {needs}")
    raise SettingsError(
        f"KERNEVO_LLM_BASE_URL: an LLM endpoint {needs}",
        check="value_error",
        name="KERNEVO_LLM_BASE_URL",
    )


def _key_variable_acts(args: argparse.Namespace, llm: Any, settings: Any) -> None:
    """Refuse an LLM key variable that is not set, or is one of kernevo's own settings
    (``evolver.llm.LLMBackend.api_key``), as the configuration error it is (exit 2), naming
    where it was given; the job's start had refused it as an infrastructure error (exit 1).

    Raises:
        UsageError: the ``--config`` file's ``llm.api_key_env`` is at fault.
        SettingsError: ``KERNEVO_LLM_API_KEY_ENV`` is.
        SystemExit: (2, through ``args.parser.error``) ``--llm-api-key-env`` is.
    """
    from evolver.errors import LLMEndpointError
    from evolver.llm import resolve_backend

    try:
        resolve_backend(llm, settings).api_key()
    except LLMEndpointError as error:
        if args.llm_api_key_env is not None:
            args.parser.error(f"argument --llm-api-key-env: {error}")
        if llm.api_key_env is not None:
            raise UsageError(f"{args.config}: {error}") from None
        raise SettingsError(
            f"KERNEVO_LLM_API_KEY_ENV: {error}", check="value_error", name="KERNEVO_LLM_API_KEY_ENV"
        ) from None


# What a refused --resume suggests: the database does not exist, is empty or holds no kernevo
# tables (evolver.store.open_store's hint).
_RESUME_HINT = f"run 'kernevo evolve' without --resume to start a new job, or {_JOB_DATABASE_HINT}"


def _kept_on_resume(args: argparse.Namespace) -> list[tuple[str, bool]]:
    """Each option of ``kernevo evolve`` that a resume cannot change (the job's config and its
    checkpoint hold them), and whether it was given."""
    return [
        ("--islands", args.islands is not None),
        ("--population", args.population is not None),
        ("--seed", args.seed is not None),
        ("--llm-base-url", args.llm_base_url is not None),
        ("--llm-model", args.llm_model is not None),
        ("--llm-api-key-env", args.llm_api_key_env is not None),
    ]
