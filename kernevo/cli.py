"""The ``kernevo`` console script: the composition root.

``kernevo evolve`` runs or resumes an evolution job, ``kernevo serve`` the REST service,
``kernevo best`` asks the service for the champion serving a problem, ``kernevo jobs`` lists
jobs and their progress. Each subcommand imports what it needs inside itself, so ``import
kernevo`` (the loader) stays light and ``kernevo --help`` is instant.

Errors caused by input or infrastructure (no GPU, unreachable LLM endpoint, service or
database, a work folder that cannot be written, a port in use, a job that is not there) print one
line on stderr and exit 1; usage and configuration errors exit 2: a bad argument (a value given
on the command line that the job configuration refuses included, and an option given twice, a
list option such as ``bench-loader --shapes`` too: ``_given_once``), a ``--config`` job file whose
content does not parse or validate, a database URL that does not parse or names a database
other than SQLite and PostgreSQL (``--database-url`` or ``KERNEVO_DATABASE_URL``;
``db.session.dialect_problem``), options that contradict each other (``evolve --compile-only
--gpu 0``, ``export --path`` of a path that does not implement ``--op`` in ``--dtype``, ``best
--op solve_tri --dtype float64``) or do nothing (``evolve --llm-model`` with no LLM endpoint),
an integer not in plain decimal digits, or
a ``KERNEVO_*`` variable that is unknown, empty or does not parse (checked against
``kernevo.environment`` before anything runs), or no ``KERNEVO_API_TOKEN`` where the service
needs one. A write (``cancel --api-url``) always needs a write token: refused before any request.
A read (``jobs --api-url``, ``best``) asks without one, as a read route may be open (the
champions' are unless the service sets ``KERNEVO_API_KERNELS_REQUIRE_READ``; a proxy may
authenticate), and the service's 401 to a request that carried no token is that same missing
setting: exit 2, the service's words and which token to set. A token the service refuses (401
unknown or revoked, 403 a read token for a write) is exit 1, read or write. A job stopped by
Ctrl-C exits 130, by SIGTERM 143 (128 + the signal number), and a Ctrl-C anywhere else (while
the parser is built included) prints ``kernevo: interrupted`` alone and exits 130. Building the
parser imports no OpenEvolve or SQLAlchemy (``evolver.worker_defaults`` holds the worker's
defaults for its help). A closed stdout (``kernevo jobs | head -3``) ends a command quietly with
0. Set ``KERNEVO_DEBUG=true`` (any boolean spelling: ``kernevo.environment.parse_boolean``) to
see the traceback too.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import multiprocessing
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kernevo.environment import (
    SettingsError,
    accept,
    check_environment,
    describe,
    host_problem,
    http_url_problem,
    parse_boolean,
    read_settings,
    shorten,
    without_credentials,
)
from kernevo.stopping import note_stop, stop_handled

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
DEFAULT_WATCH_INTERVAL_S = 2.0  # kernevo jobs --watch's refresh

if multiprocessing.current_process().name != "MainProcess":
    # A process-pool worker of ``kernevo evolve``: a spawned worker imports the main module (this
    # one) after taking its own process name. Ctrl-C reaches the whole process group; the job's
    # process stops the run and terminates its workers, so a worker ignores SIGINT rather than
    # die mid-evaluation with a traceback. The job starts it with SIGINT blocked (so a Ctrl-C
    # while it imports is not its death either: evolver.openevolve_host
    # .workers_start_deaf_to_ctrl_c); ignored now, it may be unblocked.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class CliError(Exception):
    """A one-line error of a subcommand (bad input, service unreachable)."""


class UsageError(CliError):
    """A one-line configuration error that is not an argument's (a ``--config`` job file that
    does not parse or validate): the command exits 2, as for a bad argument."""


class _Stopped(BaseException):
    """SIGTERM arrived before a job existed (or outside one): the command ends with 143.

    A ``BaseException``, as ``KeyboardInterrupt``, so that no ``except Exception`` on the way
    swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame: Any) -> None:
    note_stop(signum)  # sent again until main() has caught it (kernevo.stopping says why)
    raise _Stopped(signum)


# An argument that starts with a minus and a digit (``--shapes -1x16``, ``--shape`` aside): no
# kernevo option is spelt so, so it is a value. argparse takes only ``-5`` and ``-1.5`` for
# values and would call ``-1x16`` an unknown option ("expected at least one argument"); as a
# value, the option's type refuses it in its own words (``m must be 1..2147483647, not -1``).
_NEGATIVE_VALUE = re.compile(r"-[0-9].*", re.DOTALL)


# The actions of an option that holds one value, one flag or one list: given twice, argparse
# keeps the last and drops the first silently (``--iterations 1 --iterations 2`` ran 2,
# ``--shapes 16x16 --shapes 32x32`` timed 32x32 only), where a REST query refuses a repeated
# parameter and a job file a duplicate key. ``None`` is add_argument's default.
_STORE_ACTIONS = (None, "store", "store_const", "store_true", "store_false")
# nargs of an option that takes a list (``bench-loader --dtype``, ``--shapes``): its repeat is
# refused too, as ``--gpus 0,1 --gpus 2`` is, its line saying to give all the values at once.
_LIST_NARGS = ("+", "*")


def _given_once(base: type[argparse.Action]) -> type[argparse.Action]:
    """``base`` (a storing action) refusing an option given a second time in one parse, in any
    spelling that reaches the same action (``--opt v``, ``--opt=v``, an abbreviation, ``-o``
    and ``--output``); a value from a ``KERNEVO_*`` default is no repeat (it is not parsed). An
    option taking a list (``nargs`` ``+`` or ``*``) is refused alike: its repeat replaced the
    first list, not added to it.

    The class's call raises ``argparse.ArgumentError`` (``argument --path: given twice; give it
    once``; for a list option ``argument --shapes: given twice; give it once, with all its
    values``) on the repeat: the parsing parser's usage error, exit 2, before anything runs."""

    class GivenOnce(base):  # type: ignore[misc,valid-type]
        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            given = getattr(parser, "given", None)
            if self.option_strings and given is not None:
                if self in given:
                    values_too = ", with all its values" if self.nargs in _LIST_NARGS else ""
                    # Raised, not parser.error: argparse names the option ("argument --path: …")
                    # and the subcommand's parser (the one parsing) prints the line.
                    raise argparse.ArgumentError(self, f"given twice; give it once{values_too}")
                given.add(self)
            super().__call__(parser, namespace, values, option_string)

    GivenOnce.__name__ = GivenOnce.__qualname__ = f"GivenOnce{base.__name__}"
    return GivenOnce


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (argparse prints the whole usage by default),
    arguments that start with a minus and a digit read as values (:data:`_NEGATIVE_VALUE`), and
    an option given twice refused (:func:`_given_once`), as every subcommand's parser is one
    of these."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The actions given so far in the current parse (parse_known_args resets it).
        self.given: set[argparse.Action] | None = None
        for name in _STORE_ACTIONS:
            self.register("action", name, _given_once(self._registry_get("action", name)))

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.given = set()
        try:
            parsed = super().parse_known_args(args, namespace)
            self._check_exclusive(self.given)
            return parsed
        finally:
            self.given = None

    def _check_exclusive(self, given: set[argparse.Action]) -> None:
        """Refuse two options of one mutually exclusive group given together, whatever their
        values: argparse counts an option only when its value differs from the default, so
        ``best --gpu x --device 0`` passed (``--device 1`` did not)."""
        for group in self._mutually_exclusive_groups:
            named = [action for action in group._group_actions if action in given]
            if len(named) > 1:
                first, second = (argparse._get_action_name(action) for action in named[:2])
                self.error(f"argument {second}: not allowed with argument {first}")

    def error(self, message: str) -> NoReturn:
        message = _short_tokens(" ".join(message.split()))
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _parse_optional(self, arg_string: str) -> Any:
        # argparse's own hook (Python 3.11 to 3.13): None means "a value, not an option".
        if _NEGATIVE_VALUE.fullmatch(arg_string):
            return None
        return super()._parse_optional(arg_string)


# A run of more non-blank characters than a long file path in a message is echoed input (a
# megabyte --gpu, a pasted file): cut, so that the one-line error stays readable.
_LONG_TOKEN = re.compile(r"\S{301,}")


def _short_tokens(text: str) -> str:
    return _LONG_TOKEN.sub(lambda match: shorten(match.group(0)), text)


# A one-line error longer than this is cut: it holds echoed input (a service's whole answer).
_LINE_MAX = 1000


def _one_line(error: BaseException) -> str:
    from kernevo.text import printable

    # printable: a message may quote a file name or an answer holding escapes or lone surrogates,
    # which a UTF-8 stderr cannot even encode.
    text = _short_tokens(" ".join(printable(str(error), 10 * _LINE_MAX).split()))
    if len(text) > _LINE_MAX:
        text = f"{text[:_LINE_MAX]}…"
    return text or type(error).__name__


def _user_error_types() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "fix your input or infrastructure", not "kernevo has a bug"."""
    from evolver.errors import EvolverError
    from kernevo.keys import KeyFileError
    from kernevo.lockfile import LockFileError
    from seeds.registry import UnknownOpError, UnknownPathError
    from seeds.spec import UnknownDtypeError

    found: list[type[BaseException]] = [
        CliError,
        OSError,  # infrastructure: a folder that cannot be written, a port in use
        EvolverError,
        KeyFileError,  # a configured key or lock file that cannot be used
        LockFileError,
        UnknownPathError,
        UnknownOpError,
        UnknownDtypeError,
    ]
    if "db.errors" in sys.modules:  # a locked or damaged database is one line too
        errors = sys.modules["db.errors"]
        found += [errors.RepositoryError, errors.DatabaseUnavailableError]
    return tuple(found)


# --- the store ---------------------------------------------------------------------------------


def _store_url(args: argparse.Namespace) -> str:
    """The store's URL: ``--database-url``, else ``KERNEVO_DATABASE_URL``. An in-memory SQLite
    database (``db.session.in_memory_problem``) is refused as a usage error (exit 2) by every
    command that opens the store, before anything runs: the option by its argparse type
    (:func:`_database_url`), the variable here.

    Raises:
        SettingsError: ``KERNEVO_DATABASE_URL`` names an in-memory database.
    """
    from db.session import in_memory_problem
    from db.settings import DatabaseSettings

    if args.database_url:  # checked as it was parsed (_database_url)
        return str(args.database_url)
    url = DatabaseSettings().database_url
    problem = in_memory_problem(url)
    if problem is not None:
        raise SettingsError(
            f"KERNEVO_DATABASE_URL: {problem}", check="value_error", name="KERNEVO_DATABASE_URL"
        )
    return url


# --- evolve ------------------------------------------------------------------------------------


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
        # the cluster's (_cluster_options).
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


def _check_work_dir(work_dir: Any) -> None:
    """Refuse a work folder (``--work-dir``, else ``KERNEVO_WORK_DIR``) that is a file, or below
    one, before anything runs: one line saying so, where creating it would say only "File
    exists" or "Not a directory". Exit 1, as any work folder that cannot be made (the runner
    creates it and checks it is writable: ``evolver.errors.WorkDirError``).

    Raises:
        WorkDirError: the folder, or a folder above it, is a file.
    """
    from evolver.errors import WorkDirError

    problem = _file_in_the_way("work folder", work_dir, "--work-dir, else KERNEVO_WORK_DIR")
    if problem is not None:
        raise WorkDirError(problem)


def _file_in_the_way(what: str, folder: Any, where: str) -> str | None:
    """Why the folder ``folder`` (``what``: "work folder", "key folder"; ``where``: the
    options naming it) cannot be used because it, or a folder above it, is a file: one line,
    where creating it would say only "File exists" or "Not a directory". ``None`` when no file
    is in the way (whether the folder can be written is for its writer to find)."""
    from pathlib import Path

    from kernevo.text import printable

    root = Path(folder).expanduser().resolve()
    above = next((path for path in (root, *root.parents) if path.exists()), None)
    if above is None or above.is_dir():
        return None
    shown = printable(str(root), 300)
    if above == root:
        return f"{what} {shown} is a file, not a folder ({where})"
    return f"{what} {shown} cannot be created: {printable(str(above), 300)} is a file, not a folder"


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


# What a refusal of a database without the job suggests: creating one (what evolve or serve
# would do) finds no job in it either.
_JOB_DATABASE_HINT = "point --database-url (or KERNEVO_DATABASE_URL) at the job's database"
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


def _cluster_options(args: argparse.Namespace, *, local: bool) -> Any:
    """``ClusterOptions`` of ``--scheduler`` (or, ``local``, evolve's ``--gpus``: a cluster
    started here; the worker's ``--gpus`` are its own devices), ``None`` without one: the local
    GPU, and Dask is not imported; ``--gpu-key``/``--lost-after-s`` need one, and so does the
    worker's ``--in-flight`` (evolve's sets the job's ``in_flight`` without one)."""
    gpus = args.gpus if local else None
    if not args.scheduler and not gpus:
        needs = "--scheduler or --gpus" if local else "--scheduler"
        # evolve's --in-flight without a cluster is the job's own (its local GPU's pool).
        for given, option in (
            (args.gpu_key, "--gpu-key"),
            (None if local else args.in_flight, "--in-flight"),
            (args.lost_after_s, "--lost-after-s"),
        ):
            if given is not None:
                args.parser.error(f"{option} needs {needs} (a Dask cluster)")
        if local and args.in_flight is not None:
            # Before anything runs, a new job and a resume alike (the job config would refuse
            # it later, as a resume's exit 1).
            from evolver.job_config import int_range

            most = int_range("in_flight")[1]
            if args.in_flight > most:
                args.parser.error(
                    f"argument --in-flight: at most {most} candidates on the local GPU, not "
                    f"{args.in_flight} (a cluster, --gpus or --scheduler, takes up to 4096)"
                )
        return None
    from evolver.cluster import DEFAULT_LOST_AFTER_S, ClusterOptions

    options = ClusterOptions(
        scheduler=args.scheduler,
        gpus=gpus or (),
        gpu_key=args.gpu_key,
        in_flight=args.in_flight,
        lost_after_s=args.lost_after_s or DEFAULT_LOST_AFTER_S,
    )
    if (problem := options.problem()) is not None:
        args.parser.error(problem)
    if local and args.compile_only and args.gpu_key is not None:
        args.parser.error("--compile-only evaluates under the key none: leave out --gpu-key")
    if local and args.gpu is not None:
        # evolve's --gpu is this machine's device; a cluster's job evaluates on its workers.
        given, where = (
            ("--gpus", "a cluster of the devices it lists")
            if gpus
            else ("--scheduler", "the Dask cluster's workers")
        )
        args.parser.error(
            f"--gpu and {given} exclude each other: with {given} the job evaluates on {where}"
        )
    return options


def _cmd_dask_worker(args: argparse.Namespace) -> int:
    """One GPU's Dask worker for jobs evaluating on a cluster (``evolver.dask_worker``)."""
    from evolver.cluster import check_reachable
    from evolver.dask_worker import serve
    from evolver.progress import ConsoleWriter

    if args.compile_only == (args.gpu is not None):
        args.parser.error("give --gpu I (a GPU worker) or --compile-only (a CPU worker)")
    if args.compile_only and args.gpu_key is not None:
        args.parser.error("--compile-only evaluates under the key none: leave out --gpu-key")
    check_reachable(args.scheduler)  # Dask would retry a refused connection for its timeout
    return serve(
        args.scheduler,
        None if args.compile_only else args.gpu,
        gpu_key=args.gpu_key,
        name=args.name,
        write=ConsoleWriter(),
    )


def _scheduler(text: str) -> str:
    """An argparse type for ``--scheduler``: a Dask address, ``tcp://host:port`` (or
    ``tls://``)."""
    value = _text("a scheduler address")(text)
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("tcp", "tls") or not rest or " " in value:
        raise argparse.ArgumentTypeError(
            f"expected a Dask scheduler address such as tcp://host:8786, not {shorten(value)!r}"
        )
    from evolver.cluster import scheduler_host_port

    try:
        scheduler_host_port(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _gpu_key_arg(text: str) -> str:
    """An argparse type for ``--gpu-key``: a GPU name or key, normalized (``nvidia-h200``)."""
    from seeds.hardware import normalize_gpu_name

    try:
        return normalize_gpu_name(_gpu_name("a GPU key")(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# A GPU name as the driver reports it (``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-40GB MIG
# 1g.5gb``) or its key (``nvidia-h200``, ``seeds.hardware.normalize_gpu_name``): letters and
# digits, with spaces, hyphens, underscores and dots between them. Other punctuation (``bogus
# gpu!``) is a typo, which normalizing would silently turn into another key (``bogus-gpu``).
_GPU_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]*")


def _gpu_name(what: str) -> Callable[[str], str]:
    """An argparse type for a GPU name or key (``--gpu`` of ``best`` and ``export``,
    ``--gpu-key``): one line of printable text. A control character is refused, as ``POST
    /v1/jobs`` refuses it, never rewritten (``x\x1b[2J`` would have become ``x-2j``); so is
    any character a GPU name or key does not have (:data:`_GPU_NAME`)."""
    from kernevo.text import control_character_problem

    def parse(text: str) -> str:
        value = _text(what)(text)
        problem = control_character_problem(value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        if not _GPU_NAME.fullmatch(value.strip()):
            raise argparse.ArgumentTypeError(
                f"expected {what} such as nvidia-h200 or 'NVIDIA H200' (letters and digits, "
                f"with spaces, '-', '_' or '.' between them), not {shorten(value)!r}"
            )
        return value

    return parse


# --- serve -------------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from evolver.store import open_store

    url = _store_url(args)
    # Bind first, so a port in use or a host that is not this machine's is one line (uvicorn
    # would log it and exit 3) and leaves nothing behind: no database created or migrated.
    sock = _listen(args.host, args.port)
    try:
        # Migrate to the head before serving (the service never alters the schema); another
        # application's database is refused here, nothing written (db.migrate.schema_problem).
        open_store(url).dispose()
        config = uvicorn.Config(create_app(url), host=args.host, port=args.port)
        server = uvicorn.Server(config)
        scheme_host = f"[{args.host}]" if ":" in args.host else args.host
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", scheme_host, args.port
        )
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise CliError(f"the service on {args.host}:{args.port} did not start")
    return 0


def _listen(host: str, port: int) -> Any:
    """A socket bound to ``host``:``port`` as uvicorn binds one (IPv6 when the host has a
    colon, ``SO_REUSEADDR``).

    Raises:
        CliError: one line: the port is in use, or the host is not an address of this machine.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.set_inheritable(True)
    return sock


# An integer on the command line: ASCII decimal digits, a minus sign at most (so that a negative
# value is told the range). Python's int() also takes "+64", "6_4", " 64 " and other scripts'
# digits ("٦٤"): each is refused, one rule for every integer option and --shape value.
_DECIMAL = re.compile(r"-?[0-9]+")
_DIGITS_ONLY = "decimal digits only"


def _decimal(text: str, what: str) -> int:
    """``text`` as an integer when it is plain decimal digits (:data:`_DECIMAL`).

    Raises:
        argparse.ArgumentTypeError: anything else (``+64``, ``6_4``, ``64.0``, ``1e3``).
    """
    if not _DECIMAL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected {what}, not {shorten(text)!r} ({_DIGITS_ONLY})")
    return int(text)


def _int_in(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] written in plain decimal digits
    (:func:`_decimal`), else a one-line usage error (exit 2).

    A number of more than 30 digits is out of range without being converted (Python refuses
    to convert more than 4300 digits, with a message that is not about the option).
    """

    def parse(text: str) -> int:
        digits = text.removeprefix("-")
        if _DECIMAL.fullmatch(text) and len(digits) > 30:
            raise argparse.ArgumentTypeError(
                f"{what} must be {low}..{high}, not a {len(digits)}-digit number"
            )
        value = _decimal(text, what)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be {low}..{high}, not {value}")
        return value

    return parse


def _in_flight_local(text: str) -> int:
    """``kernevo evolve --in-flight``'s argparse type: 1..4096 (a cluster's range), its error
    naming both ranges, since whether a cluster is given is known only after parsing (the
    local one, JobConfig's, is checked then: :func:`_cluster_options`)."""
    try:
        return _int_in(1, 4096, "a number of candidates")(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected {_job_range('in_flight')} candidates on the local GPU, or 1..4096 with a "
            f"cluster (--gpus, --scheduler), not {shorten(text)!r}"
        ) from None


def _job_int(name: str, what: str) -> Callable[[str], int]:
    """An argparse type for the job setting ``name``: its range is ``JobConfig``'s."""
    from evolver.job_config import int_range

    return _int_in(*int_range(name), what)


def _job_range(name: str) -> str:
    """``JobConfig``'s range of ``name`` for a help text: ``1..64``."""
    from evolver.job_config import int_range

    low, high = int_range(name)
    return f"{low}..{high}"


_port = _int_in(1, 65535, "a port number")
_count = _int_in(1, 2**31 - 1, "a positive integer")
# Database ids are 32-bit on PostgreSQL.
_job_id = _int_in(1, 2**31 - 1, "a job id")

# Lengths past which an argument is a mistake rather than a value: names (paths, dtypes, GPU
# names, models) are short identifiers; URLs and file paths get Linux's PATH_MAX.
_NAME_MAX = 256
_LONG_MAX = 4096


def _text(what: str, max_len: int = _NAME_MAX, *, file: bool = False) -> Callable[[str], str]:
    """An argparse type: one line of 1..``max_len`` characters, else a usage error; UTF-8
    unless it names a ``file`` (Linux file names are bytes)."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"expected {what}, not an empty string")
        if len(text) > max_len:
            raise argparse.ArgumentTypeError(
                f"expected {what} of at most {max_len} characters, not {len(text)}"
            )
        if any(char in text for char in "\n\r\x00"):
            raise argparse.ArgumentTypeError(f"expected {what} on one line, not {text!r}")
        if not file and not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # bytes that are not UTF-8 arrive as lone surrogates
                raise argparse.ArgumentTypeError(
                    f"expected {what} in UTF-8, not {shorten(text)!r}"
                ) from None
        return text

    return parse


def _url(text: str) -> str:
    """An argparse type: an ``http://`` or ``https://`` URL with a valid host and port."""
    problem = http_url_problem(_text("a URL", _LONG_MAX)(text))
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _host(text: str) -> str:
    """An argparse type for ``--host``: an IP address or a host name; never empty (an empty host
    binds every interface, which must be asked for as ``0.0.0.0`` or ``::``)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "expected an address or host name, not an empty string "
            "(for every interface say 0.0.0.0 or ::)"
        )
    problem = host_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"expected an IP address or host name: {problem}")
    return text


def _path_id(text: str) -> str:
    """An argparse type: a path id the registry knows (``trsm_small``)."""
    from seeds.registry import UnknownPathError, get_path

    try:
        get_path(_text("a path id")(text))
    except UnknownPathError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def _dtype(text: str) -> str:
    """An argparse type: a dtype some path knows; whether the job's path knows it is checked
    with the job (a usage error too, as the value came from here)."""
    from seeds.spec import UnknownDtypeError, check_dtype

    try:
        return check_dtype(_text("a dtype")(text))
    except UnknownDtypeError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# The ops --op takes, for the help text (spelt out: the CLI imports the registry only when an
# op is checked; tests/test_cli_help.py holds it to seeds.ops.OPS).
OP_HELP = "trsm, solve_tri, band_bidiag, trsm_batched"


def _op(text: str) -> str:
    """An argparse type: an operation some path implements (``trsm``)."""
    from seeds.registry import OPS

    if _text("an op")(text) not in OPS:
        raise argparse.ArgumentTypeError(f"unknown op {text!r}; known ops: {', '.join(OPS)}")
    return text


def _env_name(text: str) -> str:
    """An argparse type: the name of an environment variable (letters, digits, ``_``)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) or len(text) > _NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"expected an environment variable name, not {shorten(text)!r}"
        )
    return text


def _resume(text: str) -> str:
    """``--resume``: ``latest`` or a job id."""
    return text if text == "latest" else str(_job_id(text))


# --- best --------------------------------------------------------------------------------------


def _api_url(given: str | None) -> str:
    from kernevo.settings import LoaderSettings

    return (given or LoaderSettings().api_url).rstrip("/")


def _error_detail(body: bytes) -> str | None:
    """The ``detail`` of a kernevo service's error body as one line: a text, or FastAPI's list
    of ``{loc, msg}`` as ``query.m: msg; …``; ``None`` when the body is not that JSON (an empty
    body, a proxy's page, another server's answer)."""
    import json

    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("detail"), str | list):
        return None
    detail = document["detail"]
    if isinstance(detail, list):
        detail = "; ".join(
            f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg', '')}"
            if isinstance(item, dict)
            else str(item)
            for item in detail
        )
    return _one_line(Exception(detail))


def _token_hint(scope: str) -> str:
    """How to get a token of ``scope`` (``read`` or ``write``) for the service: every line
    that a missing, unknown or too weak ``KERNEVO_API_TOKEN`` ends says it alike."""
    return (
        f"set KERNEVO_API_TOKEN to a {scope} token ('kernevo token create --scope {scope}' on "
        "the service's database)"
    )


def _auth_headers() -> dict[str, str]:
    """``Authorization: Bearer $KERNEVO_API_TOKEN`` when the variable is set (every ``/v1``
    read but the champions' needs a token), else nothing."""
    from api.settings import ApiSettings

    token = ApiSettings().token()
    return {} if token is None else {"Authorization": f"Bearer {token}"}


# The CLI's deadline for one request when KERNEVO_REQUEST_TIMEOUT_S is not set: someone at a
# terminal waits longer than a loader's first call (the variable's 2 s default), and a service
# listing jobs from a busy database may take seconds. Whole request, not per read.
CLI_REQUEST_TIMEOUT_S = 10.0


def _request_timeout_s() -> float:
    """The deadline of one request of the CLI: ``KERNEVO_REQUEST_TIMEOUT_S`` when set (checked
    with the environment), else :data:`CLI_REQUEST_TIMEOUT_S`."""
    from kernevo.settings import LoaderSettings

    settings = LoaderSettings()
    if "request_timeout_s" in settings.model_fields_set:
        return float(settings.request_timeout_s)
    return CLI_REQUEST_TIMEOUT_S


def _service_request(
    method: str,
    url: str,
    *,
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    json_body: Any = None,
) -> Any:
    """Send one request to a kernevo service (``kernevo.http_get.request``: the whole request
    within :func:`_request_timeout_s`, the body at most ``kernevo.client.MAX_RESPONSE_BYTES``)
    and return the answer (``kernevo.http_get.Answer``) when its status is below 300 or an
    error whose body is the service's own JSON error (the caller words those).

    Raises:
        CliError: one line: unreachable, no complete answer in time, a body over the cap, a
            redirect (never followed), or an error status without a kernevo error body.
    """
    from kernevo import http_get
    from kernevo.client import MAX_RESPONSE_BYTES

    shown = without_credentials(url)  # a user:password@ in KERNEVO_API_URL stays out of lines
    timeout_s = _request_timeout_s()
    try:
        answer = http_get.request(
            method,
            url,
            timeout_s=timeout_s,
            max_bytes=MAX_RESPONSE_BYTES,
            params=params,
            headers=headers,
            json_body=json_body,
        )
    except http_get.UnreachableError as error:
        raise CliError(f"service at {shown} is unreachable ({error})") from None
    except http_get.TooLateError:
        raise CliError(
            f"service at {shown}: no complete answer within {timeout_s:g} s "
            "(KERNEVO_REQUEST_TIMEOUT_S)"
        ) from None
    except (http_get.TooLargeError, http_get.EncodedBodyError) as error:
        raise CliError(f"service at {shown}: {error}") from None
    if 300 <= answer.status_code < 400:
        target = without_credentials(answer.headers.get("location", "nowhere"))
        raise CliError(
            f"{answer.status_code} redirect from {shown} to {target}: not followed; point "
            "KERNEVO_API_URL (or --api-url) at the service itself"
        )
    if answer.status_code >= 400 and _error_detail(answer.body) is None:
        raise CliError(
            f"{answer.status_code} from {shown} with no kernevo error body: is "
            "KERNEVO_API_URL (or --api-url) a kernevo service?"
        )
    return answer


def _json_of(answer: Any, url: str) -> Any:
    """The JSON document of a successful answer from ``url``.

    Raises:
        CliError: the body is not JSON.
    """
    import json

    try:
        return json.loads(answer.body)
    except (ValueError, RecursionError):
        raise CliError(
            f"service at {without_credentials(url)} answered with something that is not JSON"
        ) from None


def _get_json(url: str, params: dict[str, Any] | None = None) -> Any:
    """GET ``url`` (with ``KERNEVO_API_TOKEN`` as the bearer token when set) and decode JSON
    (:func:`_service_request`); any failure becomes a one-line ``CliError``."""
    shown = without_credentials(url)
    headers = _auth_headers()
    answer = _service_request("GET", url, params=params, headers=headers)
    if answer.status_code == 401:  # no token, or one the service does not know
        line = f"401 from {shown}: {_error_detail(answer.body)}; {_token_hint('read')}"
        # No token sent: a setting missing, as cancel's (exit 2); a refused token: exit 1.
        raise (CliError if headers else UsageError)(line)
    if answer.status_code >= 400:
        raise CliError(f"{answer.status_code} from {shown}: {_error_detail(answer.body)}")
    return _json_of(answer, url)


# What a field missing from a service's answer, or of the wrong type, raises where it is read.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError)


def _malformed(url: str, error: BaseException) -> CliError:
    """The one-line error of an answer from ``url`` that is JSON but not what a kernevo service
    sends (another service on that port, a proxy's page): ``error`` says which field broke."""
    detail = f"{type(error).__name__}: {error}"[:200]  # made printable where it is shown
    return CliError(f"malformed answer from {without_credentials(url)}: {detail}")


def _cmd_best(args: argparse.Namespace) -> int:
    from seeds.hardware import normalize_gpu_name

    _op_has_dtype(args)  # usage errors, before anything runs
    shape = _best_shape(args)
    gpu = args.gpu
    if gpu is None:
        from evolver.errors import NoGpuError
        from evolver.gpu import query_gpu

        try:
            gpu = query_gpu(args.device).key
        except NoGpuError as error:
            raise CliError(f"{error}; name the GPU with --gpu (e.g. --gpu nvidia-h200)") from None
    try:
        gpu_key = normalize_gpu_name(gpu)
    except ValueError as error:
        raise CliError(str(error)) from None
    base = _api_url(args.api_url)
    params = {"op": args.op, "dtype": args.dtype, "gpu": gpu_key, **shape}
    try:
        kernel = _get_json(f"{base}/v1/kernels/best", params)
    except CliError as error:
        said = str(error)
        # The service's answers that no kernel serves this shape: no champion, no path, or
        # every champion timed slower than the library there (api.routes.kernels).
        library_answers = ("no champion yet", "no path serves", "was measured slower than")
        if not any(answer in said for answer in library_answers):
            raise  # not the service's answer that this shape has no kernel
        # Say what an application gets there.
        from seeds.ops import get_op

        fallback = get_op(args.op).fallback_library
        raise CliError(f"{error}; kernevo.load falls back to {fallback} there") from None
    try:
        lines = _best_lines(kernel, args, gpu_key)
    except _MALFORMED as error:
        # A service's answer is data from elsewhere: a field missing or of the wrong type is
        # one line, like any other error of this command.
        raise _malformed(f"{base}/v1/kernels/best", error) from None
    print("\n".join(lines))
    return 0


def _op_has_dtype(args: argparse.Namespace) -> None:
    """Refuse ``--dtype`` when ``--op`` has no kernel in it (``best``, ``export``): a usage
    error (exit 2), one line, as ``evolve --path P --dtype D`` of a dtype P lacks, before the
    GPU, the service or the database is asked (``seeds.spec.MissingDtypeError``'s words)."""
    from seeds.ops import get_op
    from seeds.spec import UnknownDtypeError, check_dtype

    try:
        check_dtype(args.dtype, get_op(args.op).dtypes, owner=f"op {args.op}")
    except UnknownDtypeError as error:
        args.parser.error(f"argument --dtype: {error}")


# A shape parameter's name in ``--shape`` (seeds.ops.spec's rule for parameter names).
_PARAM_NAME = re.compile(r"[a-z][a-z0-9]{0,15}")
# Digits past which a shape value is not converted to an int: it is out of every op's range.
_SHAPE_DIGITS_MAX = 30


def _shape_number(text: str, name: str) -> str:
    """A shape value of the parameter ``name`` as given (``--shape``'s values, ``--m``, ``--n``):
    plain decimal digits (:data:`_DECIMAL`: no space, sign or separator; a minus sign is read,
    so that a negative value is told the range). Its range is the op's, known once ``--op`` is
    (:func:`_shape_problems`), so the text is kept as it is until then.

    Raises:
        argparse.ArgumentTypeError: anything else, in one wording for every way of giving a
            shape value: ``expected an integer value of m, not ' 4096' (decimal digits only)``.
    """
    if not _DECIMAL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected an integer value of {name}, not {shorten(text)!r} ({_DIGITS_ONLY})"
        )
    return text


def _dimension(name: str) -> Callable[[str], str]:
    """``best --m`` and ``--n``'s argparse type: :func:`_shape_number` of ``name``, the value
    then checked as ``--shape``'s (the same range, the op's, and the same words)."""

    def parse(text: str) -> str:
        return _shape_number(text, name)

    return parse


def _shape_values(text: str) -> dict[str, str]:
    """An argparse type: ``--shape n=64,k=6,b2=4,b3=2``, an op's shape parameters by name, as
    written: no space anywhere (`` m=4096`` and ``m= 4096`` are refused, as ``--m ' 4096'``
    is), each value in plain decimal digits (:func:`_shape_number`). Which op's parameters,
    and each value's range, are checked with ``--op`` (:func:`_best_shape`: the op's own range,
    ``solve_tri takes 1 <= n <= 2147483647``); the text is at most 256 characters
    (``_text``)."""
    values: dict[str, str] = {}
    for item in _text("a shape")(text).split(","):
        name, equals, number = item.partition("=")
        if not equals:
            raise argparse.ArgumentTypeError(
                f"expected name=value pairs such as n=64,k=6, not {shorten(text)!r}"
            )
        if not _PARAM_NAME.fullmatch(name):
            raise argparse.ArgumentTypeError(
                f"expected a parameter name such as n or b2, not {shorten(name)!r} (lowercase "
                "letters and digits only)"
            )
        if name in values:
            raise argparse.ArgumentTypeError(f"{name} given twice in --shape")
        values[name] = _shape_number(number, name)
    return values


def _best_shape(args: argparse.Namespace) -> dict[str, int]:
    """The shape ``kernevo best`` asks for, by parameter name in the op's order: ``--shape``'s
    pairs, with ``--m`` and ``--n`` as the parameters ``m`` and ``n`` (trsm's and
    trsm_batched's), checked against the op alike (:func:`_shape_problems`: the op's ranges,
    ``seeds.ops``; then ``seeds.ops.OpSpec.shape_from`` for the relations between valid
    values). Refused as a usage error (exit 2), every problem in one line, as ``GET
    /v1/kernels/best``'s 422 names them all."""
    from seeds.ops import ShapeError, get_op

    values = dict(args.shape or {})
    for name in ("m", "n"):
        given = getattr(args, name)
        if given is not None:
            if name in values:
                args.parser.error(f"argument --{name}: {name} is also given by --shape")
            values[name] = given
    spec = get_op(args.op)
    usage = f"(--shape {','.join(f'{p}=…' for p in spec.param_names)})"
    problems = _shape_problems(spec, values)
    if problems:
        args.parser.error(f"{'; '.join(problems)} {usage}")
    try:
        shape = spec.shape_from({name: int(text) for name, text in values.items()})
    except ShapeError as error:
        args.parser.error(f"{error} {usage}")
    return dict(zip(spec.param_names, shape, strict=True))


def _shape_problems(spec: Any, values: dict[str, str]) -> list[str]:
    """Every problem of the shape ``values`` (parameter name → its decimal text) for the op
    ``spec`` (a ``seeds.ops.OpSpec``), those ``api.shape_query.op_shape`` finds: each name that
    is not one of the op's parameters (``seeds.ops.not_a_param``'s line, the service's), the
    missing parameters together (``solve_tri needs k
    (…), b2 (…) and b3 (…)``), each value outside its parameter's range (``ShapeParam``'s own
    words; a value of more than 30 digits is told by its length, not converted). Empty when
    every parameter is given and in range (a relation between them is ``shape_from``'s to
    check)."""
    from seeds.ops import not_a_param

    problems = [not_a_param(spec, name) for name in values if name not in spec.param_names]
    missing = [f"{p.name} ({p.meaning})" for p in spec.params if p.name not in values]
    if missing:
        listed = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        problems.append(f"{spec.name} needs {listed}")
    for p in spec.params:
        text = values.get(p.name)
        if text is None:
            continue
        digits = len(text.removeprefix("-"))
        if digits > _SHAPE_DIGITS_MAX:
            problems.append(
                f"{p.name} is out of range: {spec.name} takes {p.low} <= {p.name} <= {p.high} "
                f"({p.meaning}), not a {digits}-digit number"
            )
        elif problem := p.out_of_range(int(text), spec.name):
            problems.append(problem)
    return problems


def _param_ranges(spec: Any) -> str:
    """The op's shape parameters with their ranges, for a help text: ``m,n 1..64, batch
    1..2147483647`` (neighbours of one range together)."""
    groups: list[tuple[list[str], str]] = []
    for p in spec.params:
        bounds = f"{p.low}..{p.high}"
        if groups and groups[-1][1] == bounds:
            groups[-1][0].append(p.name)
        else:
            groups.append(([p.name], bounds))
    return ", ".join(f"{','.join(names)} {bounds}" for names, bounds in groups)


def _shape_help() -> str:
    """``best --shape``'s help: each op's parameters and ranges, from ``seeds.ops``."""
    from seeds.ops import OPS

    ranges = "; ".join(f"{name} {_param_ranges(spec)}" for name, spec in OPS.items())
    return (
        "the op's shape parameters by name, name=value pairs without spaces, each value in "
        f"decimal digits within its range: {ranges} (e.g. --op solve_tri --shape "
        "n=64,k=6,b2=4,b3=2; m and n also as --m, --n)"
    )


def _dimension_help(name: str) -> str:
    """``best --m``/``--n``'s help: the range of ``name`` in each op that has it."""
    from seeds.ops import OPS

    ranges = [
        f"{op} {p.low}..{p.high}" for op, spec in OPS.items() for p in spec.params if p.name == name
    ]
    return f"{name}, as --shape {name}=… (decimal digits): {', '.join(ranges)}"


def _best_lines(kernel: dict[str, Any], args: argparse.Namespace, gpu_key: str) -> list[str]:
    """``kernevo best``'s output for the service's answer ``kernel``.

    Raises:
        KeyError, TypeError, ValueError, AttributeError: a field missing or of the wrong type.
    """
    from kernevo.client import describe_envelope
    from seeds.ops import get_op

    spec = get_op(args.op)
    shape = _best_shape(args)
    where = " ".join(f"{name}={value}" for name, value in shape.items())
    metrics = kernel.get("metrics", {})
    envelope = kernel.get("envelope", {})
    bounds = describe_envelope(envelope, spec.param_names)
    lines = [
        f"{args.op} {args.dtype} {where} on {gpu_key}: path {kernel['path']}, "
        f"shape bucket {kernel['shape_bucket']}",
        f"program {kernel['program_id']} ({kernel.get('program_uid', '?')}), promoted "
        f"{kernel['promoted_at']}",
        f"score {metrics.get('score', 0.0):.3f} (geometric-mean speedup over the vendor library)",
        *_compared_lines(kernel, where),
    ]
    for timing in metrics.get("timings", []):
        cand, base_us = timing.get("candidate_us", 0.0), timing.get("baseline_us", 0.0)
        speedup = base_us / cand if cand else 0.0
        timed = timing.get("shape") or [timing[name] for name in spec.param_names]
        timed_at = spec.assignments(list(timed), " ")
        lines.append(f"  {timed_at}: {cand:.2f} us vs {base_us:.2f} us ({speedup:.2f}x)")
    lines += [
        f"cubin {kernel['arch']} sha256 {kernel['cubin_sha256']}, NVRTC "
        f"{kernel.get('nvrtc_version')}, {len(kernel.get('cubin_b64', '')) * 3 // 4} bytes",
        f"launch {kernel['launch']['kernel']} (geometry from {kernel['launch']['config_kernel']})",
        f"envelope {bounds}, {len(envelope.get('verified_shapes', []))} verified shapes",
        f"compile options: {' '.join(kernel.get('compile_options', []))}",
        *_certificate_lines(kernel.get("certificate")),
    ]
    return lines


def _compared_lines(kernel: dict[str, Any], at: str) -> list[str]:
    """The paths the service compared for the answer (``candidates``, ``compared_by``; none
    from a service older than routing over several paths), one line each; ``at`` is the shape
    asked for (``m=32 n=32``)."""
    candidates = kernel.get("candidates") or []
    if not candidates:
        return []
    lines = [f"compared {len(candidates)} serving path(s) by {kernel.get('compared_by')}:"]
    for candidate in candidates:
        where = f"  {candidate.get('path')} (shape bucket {candidate.get('shape_bucket')}): "
        if candidate.get("status") == "no_champion":
            lines.append(where + "no champion")
            continue
        score, time_us = candidate.get("combined_score"), candidate.get("time_us")
        text = f"program {candidate.get('program_id')}, score "
        text += "not recorded" if score is None else f"{score:.3f}"
        text += "" if time_us is None else f", {time_us:.2f} us at {at}"
        status = candidate.get("status")
        mark = {"chosen": " (chosen)", "slower_than_vendor": " (timed slower than the library at "
                f"{at}: not served there)"}.get(status, "")  # fmt: skip
        lines.append(where + text + mark)
    return lines


def _certificate_lines(document: object) -> list[str]:
    """The summary of a served certificate, or one line saying there is none or it is unreadable."""
    from pydantic import ValidationError

    from kernevo.certificate import Certificate

    if document is None:
        return ["certificate: none (promoted before certificates)"]
    try:
        return Certificate.model_validate(document).summary()
    except ValidationError as error:
        return [f"certificate: unreadable ({error.error_count()} problems)"]


# --- jobs --------------------------------------------------------------------------------------


def _job_rows_from_db(url: str, state: str | None, limit: int) -> list[dict[str, Any]]:
    from db import repository
    from db.heartbeat import database_now, liveness
    from db.session import read_scope
    from evolver.store import open_existing_store

    engine = open_existing_store(url)  # read-only: never creates, migrates or writes a database
    try:
        with read_scope(engine) as s:
            jobs = repository.list_jobs(s, state=state, limit=limit)
            counts = repository.count_programs(s, (j.id for j in jobs))
            now = database_now(s)  # heartbeats are on the database clock
            return [
                {
                    "id": j.id,
                    "path": j.path,
                    "shape_bucket": j.shape_bucket,
                    "dtype": j.dtype,
                    "gpu": j.gpu_key,
                    "state": j.state,
                    "iteration": j.iteration,
                    "config": j.config,
                    "best_score": j.best_score,
                    "best_speedup": j.best_speedup,
                    "last_failure_kind": j.last_failure_kind,
                    "failure_reason": j.failure_reason,
                    "programs": counts[j.id],
                    "backend": j.backend,
                    "model": j.model,
                    "heartbeat_at": j.heartbeat_at.isoformat() if j.heartbeat_at else None,
                    "heartbeat_age_s": live.heartbeat_age_s,
                    "stale": live.stale,
                    "claimed_by": j.claimed_by,
                    "attempts": j.attempts,
                    "queued_at": j.queued_at.isoformat() if j.queued_at else None,
                }
                for j in jobs
                for live in (liveness(j, now),)
            ]
    finally:
        engine.dispose()


def _age(seconds: float | None) -> str:
    """A heartbeat age in the largest whole unit: ``41s``, ``15m``, ``3h``, ``2d``."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


# The fields of a ``GET /v1/jobs`` row that ``kernevo jobs`` cannot list a job without.
_JOB_KEYS = ("id", "path", "dtype", "gpu", "state", "iteration")


# The most rows one ``GET /v1/jobs`` answers (api.pagination.MAX_LIMIT; not imported: that
# would import FastAPI into every ``kernevo jobs``).
_SERVICE_PAGE = 1000


def _job_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``kernevo jobs``'s rows: from the service (``--api-url``) or the database. The service
    answers at most :data:`_SERVICE_PAGE` rows a request, so a larger ``--limit`` is asked page
    by page (``offset``), until ``--limit`` rows or a short page: the same newest rows the
    database path lists (a job created meanwhile may shift a row onto the next page; one seen
    twice is listed once)."""
    if args.api_url:
        url = f"{args.api_url.rstrip('/')}/v1/jobs"
        rows: list[dict[str, Any]] = []
        seen: set[Any] = set()
        offset = 0
        while len(rows) < args.limit:
            asked = min(args.limit - len(rows), _SERVICE_PAGE)
            params: dict[str, Any] = {"limit": asked}
            if offset:
                params["offset"] = offset
            if args.state:
                params["state"] = args.state
            page = _service_rows(url, params)
            rows += [row for row in page if row["id"] not in seen]
            seen.update(row["id"] for row in page)
            if len(page) < asked:
                break
            offset += len(page)
        return rows[: args.limit]

    url = _store_url(args)
    return _job_rows_from_db(url, args.state, args.limit)


def _service_rows(url: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """One page of ``GET /v1/jobs``.

    Raises:
        CliError: the service's error, or an answer that is not a list of jobs.
    """
    rows = _get_json(url, params)
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise _malformed(url, TypeError(f"expected a list of jobs, not {type(rows).__name__}"))
    for row in rows:
        missing = [key for key in _JOB_KEYS if key not in row]
        if missing:
            raise _malformed(url, KeyError(f"a job without {', '.join(missing)}"))
    return rows


def _one_source(args: argparse.Namespace) -> None:
    """Refuse ``--api-url`` with ``--database-url`` (a usage error): the command asks one or
    the other, and silently ignoring one hides which was asked."""
    if args.api_url and args.database_url:
        args.parser.error(
            "--api-url and --database-url name two places to ask; give one (the service, or "
            "the database directly)"
        )


def _cmd_jobs(args: argparse.Namespace) -> int:
    _one_source(args)
    if args.interval is not None and not args.watch:
        args.parser.error("--interval is --watch's refresh; add --watch or leave it out")
    rows = _job_rows(args)
    if args.watch:
        interval = DEFAULT_WATCH_INTERVAL_S if args.interval is None else args.interval
        if _watch_jobs(args, rows, interval):
            return EXIT_INTERRUPTED  # Ctrl-C's status, as every command's; the listing stays
    else:
        print("\n".join(_jobs_lines(args, rows)))
    return 0


def _jobs_lines(args: argparse.Namespace, rows: Sequence[dict[str, Any]]) -> list[str]:
    """``kernevo jobs``'s output for ``rows``, the one renderer of the plain listing and of
    ``--watch``'s frames: the table (path/bucket, dtype, GPU, state, heartbeat age, iteration,
    best, speedup, programs, last failure, backend/model), then a ``job N failed: <reason>``
    line per failed job and the stale jobs' hints; ``no jobs`` when there is none.

    Raises:
        CliError: a service's row lacks a field or holds one of the wrong type (``--api-url``).
    """
    if not rows:
        return ["no jobs"]
    try:
        # The path column fits its longest path/bucket (trsm_small_batched/m64n64 is 25).
        width = max(14, *(len(_path_bucket(row)) for row in rows))
        header = (
            f"{'id':>4}  {'path/bucket':<{width}} {'dtype':<10} {'gpu':<14} {'state':<9} "
            f"{'beat':>5} {'iter':>9}  {'best':>6} {'speedup':>7}  {'progs':>5}  "
            f"{'last failure':<14} backend/model"
        )
        lines = [header, *(_job_line(row, width) for row in rows)]
    except _MALFORMED as error:
        if not args.api_url:
            raise
        raise _malformed(f"{args.api_url.rstrip('/')}/v1/jobs", error) from None
    return [*lines, *_failure_lines(rows), *_stale_hints(rows)]


def _watch_jobs(args: argparse.Namespace, rows: list[dict[str, Any]], interval_s: float) -> bool:
    """``kernevo jobs --watch``: :func:`_jobs_lines` of ``rows``, then of a new fetch every
    ``interval_s`` seconds, until no listed job is waiting or running (a stale one counts as
    running: a worker takes it back; ``evolver.watch.active``) or Ctrl-C. On a terminal each
    frame is redrawn in place (rich ``Live``), every line cut at the terminal's right edge so
    that a frame keeps its height, and the last listing is printed whole at the end; anywhere
    else (a pipe, a file, a CI log) only the last frame is printed, as plain ``kernevo jobs``
    prints it. Returns whether Ctrl-C ended the watch (the command then exits 130)."""
    import time

    from rich.live import Live
    from rich.text import Text

    from evolver.watch import active

    Rows = list[dict[str, Any]]

    interrupted = False

    def refreshed(rows: Rows, show: Callable[[Rows], None]) -> Rows:
        # The rows last fetched once no job is active or on Ctrl-C (the last listing is still
        # printed), each fetch shown as it comes.
        nonlocal interrupted
        try:
            while active(rows):
                time.sleep(interval_s)
                rows = _job_rows(args)
                show(rows)
        except KeyboardInterrupt:
            interrupted = True
        return rows

    console = _watch_console()
    if not console.is_terminal:
        rows = refreshed(rows, lambda rows: None)
        print("\n".join(_jobs_lines(args, rows)))
        return interrupted

    def frame(rows: Sequence[dict[str, Any]]) -> Text:
        text = "\n".join(_jobs_lines(args, rows))
        return Text(text, no_wrap=True, overflow="crop", end="")

    # Transient: the frames (cut at the terminal's edge) are erased at the end, and the last
    # listing is printed whole, as plain ``kernevo jobs`` prints it, to stay on screen.
    with Live(frame(rows), console=console, auto_refresh=False, transient=True) as live:
        rows = refreshed(rows, lambda rows: live.update(frame(rows), refresh=True))
    console.print("\n".join(_jobs_lines(args, rows)), soft_wrap=True, markup=False, highlight=False)
    return interrupted


def _watch_console() -> Any:
    """The rich console ``jobs --watch`` draws on: stdout's (a test gives a terminal's)."""
    from rich.console import Console

    return Console()


def _failure_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """``job N failed: <reason>`` for each listed failed job with a stored reason
    (``job.failure_reason``; a service older than the field sends none), one printable line
    each, at most :data:`_FAILURE_LINE_MAX` characters (the reason is whole in the API)."""
    from kernevo.text import printable

    lines = []
    for row in rows:
        if row.get("state") == "failed" and row.get("failure_reason"):
            line = printable(f"job {row['id']} failed: {row['failure_reason']}", 10_000)
            if len(line) > _FAILURE_LINE_MAX:
                line = f"{line[: _FAILURE_LINE_MAX - 1]}…"
            lines.append(line)
    return lines


# Characters a failure line of ``kernevo jobs`` may take: a reason quoting a long error must
# not bury the table under it.
_FAILURE_LINE_MAX = 300


def _path_bucket(row: dict[str, Any]) -> str:
    """A job's path and shape bucket, ``band_bidiag/n2049_16384`` (the path alone from a service
    that sends no bucket): two jobs of one path on different buckets are told apart."""
    bucket = row.get("shape_bucket")
    return f"{row['path']}/{bucket}" if bucket else str(row["path"])


def _job_line(row: dict[str, Any], width: int = 14) -> str:
    """One row of ``kernevo jobs``'s table, its path/bucket column ``width`` wide."""
    total = (row.get("config") or {}).get("iterations", "?")
    best = row.get("best_score")
    speedup = row.get("best_speedup")
    state = "stale" if row.get("stale") else row["state"]
    return (
        f"{row['id']:>4}  {_path_bucket(row):<{width}} {row['dtype']:<10} {row['gpu']:<14} "
        f"{state:<9} {_age(row.get('heartbeat_age_s')):>5} "
        f"{str(row['iteration']) + '/' + str(total):>9}  "
        f"{(f'{best:.3f}' if best is not None else '-'):>6} "
        f"{(f'{speedup:.2f}x' if speedup else '-'):>7}  "  # 0: nothing timed yet
        f"{row.get('programs', 0):>5}  {(row.get('last_failure_kind') or '-'):<14} "
        f"{row.get('backend')}/{row.get('model') or '-'}"
    )


def _stale_hints(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What to do about the stale jobs listed: resume a ``kernevo evolve`` job by hand; a job
    queued through the API (``queued_at`` set) needs nothing, a worker's reaper returns it to
    the queue and a worker resumes it."""
    from db.heartbeat import STALE_AFTER_S

    stale = [row for row in rows if row.get("stale")]
    by_hand = [str(row["id"]) for row in stale if not row.get("queued_at")]
    queued = [str(row["id"]) for row in stale if row.get("queued_at")]
    head = f"stale: running, but no heartbeat for over {STALE_AFTER_S:.0f} s: its process is gone"
    lines = []
    if by_hand:
        lines.append(
            f"{head}; 'kernevo evolve --resume ID' continues it (job {', '.join(by_hand)})"
        )
    if queued:
        lines.append(
            f"{head if not by_hand else 'stale'} (queued job {', '.join(queued)}): a worker "
            "returns it to the queue once its heartbeat is older than the worker's --grace-s, "
            "and a worker resumes it; nothing to do while a worker runs"
        )
    return lines


# --- the job queue: worker, cancel, export ---------------------------------------------------


def _cmd_worker(args: argparse.Namespace) -> int:
    """Serve the job queue until SIGTERM or Ctrl-C (``evolver.worker``)."""
    from evolver.progress import ConsoleWriter
    from evolver.settings import EvolverSettings
    from evolver.worker import Worker, WorkerOptions

    settings = read_settings(EvolverSettings)
    _check_work_dir(args.work_dir or settings.work_dir)
    cluster = _cluster_options(args, local=False)
    local = () if args.compile_only or cluster is not None else (settings.gpu,)
    options = WorkerOptions(
        database_url=_store_url(args),
        work_dir=args.work_dir or settings.work_dir,
        gpus=args.gpus or local,
        compile_only=args.compile_only,
        heartbeat_s=args.heartbeat_s,
        grace_s=args.grace_s,
        poll_s=args.poll_s,
        max_attempts=args.max_attempts,
        cluster=cluster,
    )
    problem = options.problem()
    if problem is not None:
        args.parser.error(problem)
    from evolver.store import make_sqlite_folder

    # The SQLite file's folder, as open_store would make it: before the worker's lock file there
    # (evolver.worker.check_database), whose errno would otherwise be the line.
    make_sqlite_folder(options.database_url)
    if cluster is not None:
        from evolver.cluster import check_reachable

        check_reachable(str(cluster.scheduler))  # Dask retries a refused connection for 30 s
    return Worker(options, write=ConsoleWriter()).run()


def _cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a job: through the service with ``--api-url`` (``PATCH /v1/jobs/{id}``, the
    bearer token from ``KERNEVO_API_TOKEN``), else in the database (``db.queue.cancel_job``)."""
    _one_source(args)
    if args.api_url:
        return _cancel_through_service(args.api_url.rstrip("/"), args.job)
    from db import queue
    from db.session import session_scope
    from evolver.store import open_store

    # Nothing to cancel in a database that does not exist or holds no kernevo tables: refused,
    # never created nor migrated.
    engine = open_store(
        _store_url(args), create=False, hint=_JOB_DATABASE_HINT, foreign_hint=_JOB_DATABASE_HINT
    )
    try:
        with session_scope(engine) as s:
            outcome = queue.cancel_job(s, args.job)
    finally:
        engine.dispose()
    print(_cancel_line(args.job, outcome))
    return 0


def _cancel_line(job_id: int, outcome: str) -> str:
    """What ``kernevo cancel`` prints for ``outcome`` (``db.queue.CancelOutcome``), the same
    through the service and on the database."""
    if outcome == "already_cancelled":
        return f"job {job_id} was already cancelled; nothing changed"
    return f"job {job_id} cancelled; a running job stops after its iteration in flight"


def _cancel_through_service(base: str, job_id: int) -> int:
    """``PATCH {base}/v1/jobs/{job_id}`` with the write token ``KERNEVO_API_TOKEN``.

    Raises:
        UsageError: no ``KERNEVO_API_TOKEN``: a setting missing, exit 2 before any request.
        CliError: the service refuses (the job's own line as on the database; a token it does
            not know or of scope read, with how to make a write one) or does not answer.
    """
    from api.settings import ApiSettings

    token = ApiSettings().token()
    if token is None:
        raise UsageError(f"cancel through the service needs a token: {_token_hint('write')}")
    url = f"{base}/v1/jobs/{job_id}"
    shown = without_credentials(url)
    answer = _service_request(
        "PATCH",
        url,
        json_body={"state": "cancelled"},
        headers={"Authorization": f"Bearer {token}"},
    )
    detail = _error_detail(answer.body)
    # The service's own line ("job N not found", "job N is complete; …") as the database route
    # prints it; any other 404/409 (a wrong base URL: "Not Found") names where it came from.
    if answer.status_code in (404, 409) and str(detail).startswith(f"job {job_id} "):
        raise CliError(str(detail))
    if answer.status_code in (401, 403):  # unknown or revoked token; a read token
        raise CliError(f"{answer.status_code} from {shown}: {detail}; {_token_hint('write')}")
    if answer.status_code >= 400:
        raise CliError(f"{answer.status_code} from {shown}: {detail}")
    body = _json_of(answer, url)
    if not isinstance(body, dict):
        raise _malformed(url, TypeError(f"expected the job, not {type(body).__name__}"))
    outcome = body.get("outcome")
    if outcome in ("cancelled", "already_cancelled"):
        print(_cancel_line(job_id, outcome))
    elif body.get("state") == "cancelled":  # a service older than the field
        print(f"job {job_id} is cancelled (the service did not say whether it was before)")
    else:  # not a kernevo job: "cancelled" would be a claim nothing backs
        raise _malformed(url, KeyError("neither outcome nor state 'cancelled'"))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    """Write the champions serving ``--op`` in ``--dtype`` on the GPU as files
    (``evolver.export``)."""
    from db.session import read_scope
    from evolver.export import export_champions
    from evolver.store import open_existing_store

    _export_path_serves(args)  # a usage error, before the GPU or the database is asked
    if (problem := _file_in_the_way("export folder", args.output, "-o/--output")) is not None:
        raise CliError(problem)
    gpu_key = _gpu_key(args.gpu, args.device)
    engine = open_existing_store(_store_url(args))
    try:
        with read_scope(engine) as s:
            written = export_champions(
                s,
                op=args.op,
                dtype=args.dtype,
                gpu_key=gpu_key,
                out_dir=args.output,
                path=args.path,
            )
    finally:
        engine.dispose()
    for item in written:
        print(
            f"{item.path} {args.dtype} on {gpu_key} (shape bucket {item.shape_bucket}): program "
            f"{item.program_id} -> {item.folder}"
        )
    return 0


def _export_path_serves(args: argparse.Namespace) -> None:
    """Refuse ``kernevo export --dtype D`` of a dtype ``--op`` lacks, and ``--path P`` when P
    does not implement ``--op`` in ``--dtype``: the options contradict each other (a usage
    error, exit 2, as ``evolve --path P --dtype D`` of a dtype P lacks), whatever the database
    holds."""
    from seeds.registry import not_implementing

    _op_has_dtype(args)
    if args.path is None:
        return
    # The path is known: checked as it was parsed (_path_id).
    if why := not_implementing(args.path, args.op, args.dtype):
        args.parser.error(f"argument --path: {why}")


def _gpu_key(gpu: str | None, device: int) -> str:
    """``--gpu`` as a GPU key, or this machine's device ``device``'s key.

    Raises:
        CliError: no GPU named and none answers, or a name with no letter or digit.
    """
    from seeds.hardware import normalize_gpu_name

    if gpu is None:
        from evolver.errors import NoGpuError
        from evolver.gpu import query_gpu

        try:
            gpu = query_gpu(device).key
        except NoGpuError as error:
            raise CliError(f"{error}; name the GPU with --gpu (e.g. --gpu nvidia-h200)") from None
    try:
        return normalize_gpu_name(gpu)
    except ValueError as error:
        raise CliError(str(error)) from None


def _gpu_list(text: str) -> tuple[int, ...]:
    """An argparse type for ``--gpus``: device indices separated by commas (``0,1``)."""
    parse = _job_int("gpu", "a device index")
    parts = _text("device indices")(text).split(",")
    return tuple(parse(part.strip()) for part in parts)


def _seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: seconds in [low, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, not {shorten(text)!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"seconds must be {low:g}..{high:g}, not {text}")
        return value

    return parse


# --- bench-loader ------------------------------------------------------------------------------


def _cmd_bench_loader(args: argparse.Namespace) -> int:
    """Time the loaded trsm callable, its launch and cuBLAS per call (``kernevo.bench_loader``);
    1 when a way of solving failed its check, or no GPU."""
    from kernevo.bench_loader import run, wrong
    from kernevo.device import NoGpuError

    try:
        failed = wrong(run(args))
    except NoGpuError as error:
        raise CliError(f"bench-loader needs a GPU: {error}") from None
    if failed:
        raise CliError(f"wrong results from {', '.join(failed)}")
    return 0


# --- keys --------------------------------------------------------------------------------------


def _cmd_keys(args: argparse.Namespace) -> int:
    """Create the local signing key pair if missing; print its id and public key."""
    import base64

    from evolver.settings import EvolverSettings
    from kernevo.keys import KeyFileError, generate_key_pair, load_signing_key

    settings = EvolverSettings()
    folder = None
    try:
        if args.dir is None and settings.signing_key is not None:
            key = load_signing_key(settings.signing_key)
        else:
            folder = args.dir or settings.key_dir
            where = "--dir, else KERNEVO_KEY_DIR"
            if (problem := _file_in_the_way("key folder", folder, where)) is not None:
                raise CliError(problem)
            key = generate_key_pair(folder)
    except KeyFileError as error:
        raise CliError(str(error)) from None
    except OSError as error:  # the folder cannot be created or written: one line, not errno's
        from kernevo.text import printable

        where = printable(str(error.filename or folder or settings.key_dir), 300)
        raise CliError(
            f"key folder {where} cannot be created or written: {error.strerror or error}"
        ) from None
    public = base64.b64encode(key.public_raw).decode("ascii")
    print(f"signing key {key.path} (id {key.key_id})")
    print(f"public key: {public}")
    print(f"loaders elsewhere trust it with KERNEVO_TRUSTED_KEYS={public}")
    if folder is not None:
        _warn_untrusted_local_key(folder)
    return 0


def _warn_untrusted_local_key(folder: Any) -> None:
    """Say on stderr when a loader on this machine would not trust the local public key in
    ``folder`` (``kernevo.keys.local_public_key``: the folder or the file writable by group or
    others, or another user's), so that its champions would all route to cuBLAS."""
    from kernevo.keys import local_public_key
    from kernevo.text import printable

    raw, reason = local_public_key(folder)
    if raw is None:
        print(
            f"kernevo: warning: a loader with KERNEVO_KEY_DIR={printable(str(folder), 300)} "
            f"will not trust this key ({printable(reason, 400)}): make the folder and key "
            "writable only by you (chmod 700 / 644), or give loaders KERNEVO_TRUSTED_KEYS",
            file=sys.stderr,
        )


def _cmd_lock(args: argparse.Namespace) -> int:
    """Pin every champion in the loader's disk cache that the trust policy accepts."""

    from kernevo.cache import ChampionCache
    from kernevo.lockfile import lock_key, write_lock_file
    from kernevo.settings import LoaderSettings
    from kernevo.text import printable
    from kernevo.trust import policy_from_settings

    # Pin what this machine's keys accept: an existing lock file (often the very file being
    # rewritten, perhaps missing yet) must neither decide what is new nor be read at all.
    settings = LoaderSettings().model_copy(update={"lock_file": None})
    policy = policy_from_settings(settings)
    root = (args.cache_dir or settings.cache_dir).expanduser()
    if not root.is_dir():  # say so, rather than "no trusted champion in" a folder that is not
        what = "does not exist" if not root.exists() else "is not a folder"
        raise CliError(
            f"disk cache folder {printable(str(root), 300)} {what} (--cache-dir, else "
            "KERNEVO_CACHE_DIR; a loader fills it on its first fetch)"
        )
    cache = ChampionCache(root)
    pinned = []
    for key in cache.stored_keys():
        name = f"{key.gpu}/{key.path}/{key.dtype}/{key.shape_bucket}"
        lookup = cache.load(key)
        champion = lookup.champion
        refusal = None if champion is None else policy.check(champion)
        if champion is None or refusal is not None:
            print(f"skipped {name}: {lookup.detail if refusal is None else refusal.detail}")
            continue
        pinned.append(champion)
        print(f"pinned  {lock_key(champion)}: program {champion.program_id}")
    if not pinned:
        raise CliError(f"no trusted champion in the disk cache {cache.root}; nothing pinned")
    write_lock_file(args.output, pinned)
    print(f"wrote {args.output} ({len(pinned)} champions); loaders use it with KERNEVO_LOCK_FILE")
    return 0


# --- token -------------------------------------------------------------------------------------


def _cmd_token(args: argparse.Namespace) -> int:
    """Create, list or revoke the API's bearer tokens in the database (``db.tokens``): a new
    token's secret is printed once, alone on stdout (``T=$(kernevo token create --scope read)``),
    what it is on stderr; the database keeps only its SHA-256."""

    from db import tokens
    from db.session import read_scope, session_scope
    from evolver.store import open_existing_store, open_store

    url = _store_url(args)
    if args.token_command == "list":
        engine = open_existing_store(url)  # read-only: lists nothing it would have to create
        try:
            with read_scope(engine) as s:
                rows = tokens.list_tokens(s, include_revoked=args.all)
                listed = [(t.id, t.scope, t.created_at, t.revoked_at, t.name) for t in rows]
        finally:
            engine.dispose()
        if not listed:
            print("no tokens" if args.all else "no active tokens")
            return 0
        print(f"{'id':>4}  {'scope':<5}  {'created (UTC)':<19}  {'revoked (UTC)':<19}  name")
        for token_id, scope, created, revoked, name in listed:
            when = "-" if revoked is None else f"{revoked:%Y-%m-%d %H:%M:%S}"
            print(f"{token_id:>4}  {scope:<5}  {created:%Y-%m-%d %H:%M:%S}  {when:<19}  {name}")
        return 0
    # Creating or revoking needs the table: migrate an existing kernevo database first, but
    # never create one, nor write the schema into an empty or foreign file (a token in a new
    # database no service reads is a mistake: a mistyped path).
    engine = open_store(url, create=False)
    already = False  # the token revoked was revoked before
    try:
        with session_scope(engine) as s:
            if args.token_command == "create":
                name = args.name or f"{args.scope} token"
                row, secret = tokens.create_token(s, scope=args.scope, name=name)
                token_id, scope, name = row.id, row.scope, row.name
            else:
                # A second revoke keeps the first time, and says so rather than claim one.
                row, already = tokens.revoke_token(s, args.id)
                token_id, name, revoked = row.id, row.name, row.revoked_at
    finally:
        engine.dispose()
    if args.token_command == "create":
        print(secret)
        print(
            f"token {token_id} ({name}, scope {scope}) created: shown only now, the database "
            "keeps its SHA-256; clients send it as 'Authorization: Bearer <token>'",
            file=sys.stderr,
        )
    else:
        when = f"revoked at {revoked:%Y-%m-%d %H:%M:%S} UTC"
        if not already:
            print(f"token {token_id} ({name}) {when}")
        else:
            print(f"token {token_id} ({name}) was already {when}; nothing changed")
    return 0


def _command(commands: Any, name: str, text: str) -> argparse.ArgumentParser:
    """A subcommand whose one line ``text`` is both its entry in the parent's ``--help`` and
    the description atop its own."""
    parser: argparse.ArgumentParser = commands.add_parser(name, help=text, description=text)
    # Usage errors found after parsing (a value the job configuration refuses, arguments no
    # option takes) name the subcommand they belong to: ``kernevo best: error: …``.
    parser.set_defaults(parser=parser)
    return parser


def _add_token_commands(commands: Any) -> None:
    """``kernevo token create|list|revoke``."""
    token = _command(commands, "token", "the API's bearer tokens: create, list, revoke")
    # The metavar names the subcommands in "the following arguments are required: …", which
    # would otherwise name the internal dest.
    actions = token.add_subparsers(
        dest="token_command",
        required=True,
        parser_class=_Parser,
        metavar="{create,list,revoke}",
        title="subcommands",
    )
    create = _command(actions, "create", "a new token; its secret is printed once")
    create.add_argument(
        "--scope",
        choices=["read", "write"],
        required=True,
        help="read: sources, reports, lineage, jobs; write: also create and cancel jobs",
    )
    create.add_argument("--name", type=_text("a token name", 128), help="default: '<scope> token'")
    listing = _command(actions, "list", "the tokens (never their secrets)")
    listing.add_argument("--all", action="store_true", help="revoked tokens too")
    revoke = _command(actions, "revoke", "refuse a token from now on")
    revoke.add_argument("id", type=_int_in(1, 2**31 - 1, "a token id"), help="its id (token list)")
    for action in (create, listing, revoke):
        action.add_argument(
            "--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL"
        )
        action.set_defaults(func=_cmd_token)


# --- parser ------------------------------------------------------------------------------------


def _add_gpu_arguments(command: argparse.ArgumentParser) -> None:
    """``--gpu`` (a GPU name or key) or ``--device`` (the index asked when it is unset): one of
    the two, as ``--device`` means nothing beside ``--gpu`` (a usage error, not ignored)."""
    which = command.add_mutually_exclusive_group()
    which.add_argument(
        "--gpu",
        type=_gpu_name("a GPU name"),
        help="GPU name or key, e.g. nvidia-h200 or 'NVIDIA H200' (default: the GPU of --device "
        "on this machine; on a machine without one, --gpu is needed)",
    )
    which.add_argument(
        "--device",
        type=_job_int("gpu", "a device index"),
        default=0,
        help="this machine's device whose GPU to ask for, when --gpu is not given (default 0)",
    )


def _add_cluster_arguments(command: argparse.ArgumentParser, *, local: bool) -> None:
    """The Dask cluster a job evaluates on (``_cluster_options``): ``--scheduler``, with
    ``local`` evolve's ``--gpus`` (a cluster started for the job), ``--gpu-key``,
    ``--in-flight``, ``--lost-after-s``."""
    command.add_argument(
        "--scheduler",
        type=_scheduler,
        help="evaluate on this Dask cluster (tcp://host:8786; workers: kernevo dask-worker)",
    )
    if local:
        command.add_argument(
            "--gpus",
            type=_gpu_list,
            help="evaluate on a Dask cluster of these local devices, started for the job (0,1)",
        )
    command.add_argument(
        "--gpu-key",
        type=_gpu_key_arg,
        help="with a cluster of several GPU models: the one to evaluate on (nvidia-h200)",
    )
    command.add_argument(
        "--in-flight",
        type=_in_flight_local if local else _int_in(1, 4096, "a number of candidates"),
        help="candidates evaluated at once: with a cluster 1..4096 (default 2 per worker of the "
        "GPU key)"
        + (
            f"; on the local GPU {_job_range('in_flight')} (default 1; verifications share the "
            "GPU, timings take turns)"
            if local
            else ""
        ),
    )
    command.add_argument(
        "--lost-after-s",
        type=_seconds(1, 86400),
        help="with a cluster: seconds the scheduler may stay unreachable before a job stops, "
        "failed; 1..86400 (default 30)",
    )


def _installed_version() -> str:
    """The installed distribution's version (the service's, else the light loader's), or
    "unknown" from a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("kernevo-service", "kernevo"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kernevo", description="LLM-driven evolution of CUDA kernels.")
    parser.add_argument("--version", action="version", version=f"kernevo {_installed_version()}")
    # COMMAND, not the dest, in "the following arguments are required: …"; --help lists them.
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )

    evolve = _command(commands, "evolve", "run or resume an evolution job")
    from seeds.registry import PATHS  # loaded already, with the job configuration's ranges

    evolve.add_argument(
        "--path", type=_path_id, help=f"algorithmic path, one of: {', '.join(PATHS)}"
    )
    evolve.add_argument("--dtype", type=_dtype, help="float32 | float64 | complex64 | complex128")
    evolve.add_argument(
        "--bucket",
        type=_text("a shape bucket"),
        help="the path's shape bucket, e.g. m2049_16384 of trsm_blocked (default: its first)",
    )
    evolve.add_argument("--config", type=_job_file, help="job YAML file (keys of JobConfig)")
    evolve.add_argument(
        "--iterations",
        type=_job_int("iterations", "a number of iterations"),
        help=f"total iterations, {_job_range('iterations')} (default 60)",
    )
    evolve.add_argument(
        "--gpu",
        type=_job_int("gpu", "a device index"),
        help=f"CUDA device index, {_job_range('gpu')} (default KERNEVO_GPU or 0)",
    )
    evolve.add_argument(
        "--resume",
        type=_resume,
        nargs="?",
        const="latest",
        metavar="JOB_ID",
        help="continue a job from its last checkpoint; without an id, the newest unfinished "
        "job of --path and --dtype",
    )
    evolve.add_argument(
        "--compile-only",
        action="store_true",
        help="run without a GPU: evaluations stop after compiling and score 0 (tests, CI)",
    )
    for name, what, meaning in (
        ("checkpoint_interval", "a number of iterations", "iterations between checkpoints"),
        ("islands", "a number of islands", "MAP-Elites islands"),
        ("population", "a population size", "programs kept"),
        ("seed", "a seed", "random seed"),
        ("promote_every", "a number of iterations", "iterations between promotions"),
    ):
        evolve.add_argument(
            f"--{name.replace('_', '-')}",
            type=_job_int(name, what),
            help=f"{meaning}, {_job_range(name)}",
        )
    evolve.add_argument(
        "--llm-base-url", type=_url, help="OpenAI-compatible endpoint (default: offline)"
    )
    evolve.add_argument(
        "--llm-model",
        type=_text("a model name"),
        help="the model the LLM endpoint serves (default KERNEVO_LLM_MODEL)",
    )
    evolve.add_argument(
        "--llm-api-key-env", type=_env_name, help="name of the variable holding the API key"
    )
    evolve.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    evolve.add_argument("--work-dir", type=_path_arg, help="default KERNEVO_WORK_DIR (./runs)")
    _add_cluster_arguments(evolve, local=True)
    evolve.set_defaults(func=_cmd_evolve)

    serve = _command(
        commands,
        "serve",
        "run the REST service; first migrates the database to the newest schema (creating a "
        "SQLite file that does not exist)",
    )
    serve.add_argument(
        "--host", type=_host, default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=_port, default=8000, help="1..65535 (default 8000)")
    serve.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    serve.set_defaults(func=_cmd_serve)

    best = _command(commands, "best", "ask the service for the champion kernel serving a problem")
    best.set_defaults(parser=best)  # a shape the op refuses: best's usage error
    best.add_argument("--op", type=_op, default="trsm", help=OP_HELP)
    best.add_argument(
        "--dtype", type=_dtype, required=True, help="float32 | float64 | complex64 | complex128"
    )
    best.add_argument("--shape", type=_shape_values, help=_shape_help())
    best.add_argument("--m", type=_dimension("m"), help=_dimension_help("m"))
    best.add_argument("--n", type=_dimension("n"), help=_dimension_help("n"))
    _add_gpu_arguments(best)
    best.add_argument("--api-url", type=_url, help="default KERNEVO_API_URL")
    best.set_defaults(func=_cmd_best)

    jobs = _command(commands, "jobs", "list jobs and their progress (database or service)")
    jobs.set_defaults(parser=jobs)  # contradictory options: jobs' usage errors
    jobs.add_argument(
        "--state",
        choices=["waiting", "running", "complete", "failed", "cancelled"],
        help="only jobs in this state",
    )
    jobs.add_argument(
        "--limit", type=_count, default=20, help="newest jobs shown, 1..2147483647 (default 20)"
    )
    jobs.add_argument("--api-url", type=_url, help="ask the service instead of the database")
    jobs.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    jobs.add_argument(
        "--watch",
        action="store_true",
        help="redraw the table until no job is waiting or running (Ctrl-C ends)",
    )
    jobs.add_argument(
        "--interval",
        type=_seconds(0.1, 3600),
        help=f"--watch's refresh, seconds, 0.1..3600 (default {DEFAULT_WATCH_INTERVAL_S:g}); "
        "only with --watch",
    )
    jobs.set_defaults(func=_cmd_jobs)

    _add_queue_commands(commands)

    keys = _command(
        commands, "keys", "the key signing champions: create the local pair if missing, show it"
    )
    keys.add_argument("--dir", type=_path_arg, help="default KERNEVO_KEY_DIR")
    keys.set_defaults(func=_cmd_keys)
    lock = _command(
        commands, "lock", "pin the trusted champions of the loader's disk cache in a lock file"
    )
    lock.add_argument("-o", "--output", type=_path_arg, required=True, help="lock file to write")
    lock.add_argument("--cache-dir", type=_path_arg, help="default KERNEVO_CACHE_DIR")
    lock.set_defaults(func=_cmd_lock)
    _add_token_commands(commands)
    from kernevo.bench_loader import add_arguments as bench_loader_arguments

    bench_loader = _command(
        commands,
        "bench-loader",
        "time a loaded kernel per call against its raw launch and cuBLAS (needs a GPU)",
    )
    bench_loader_arguments(bench_loader)
    bench_loader.set_defaults(func=_cmd_bench_loader)
    return parser


def _add_queue_commands(commands: Any) -> None:
    """The parsers of ``worker``, ``cancel`` and ``export``."""
    from evolver.worker_defaults import (
        DEFAULT_GRACE_S,
        DEFAULT_HEARTBEAT_S,
        DEFAULT_MAX_ATTEMPTS,
        DEFAULT_POLL_S,
        MIN_BEATS_PER_GRACE,
    )

    worker = _command(
        commands,
        "worker",
        "claim queued jobs and run them (one per GPU, or one on a Dask cluster)",
    )
    worker.set_defaults(parser=worker, func=_cmd_worker)
    worker.add_argument(
        "--gpus",
        type=_gpu_list,
        help="this host's device indices, e.g. 0,1 (default KERNEVO_GPU or 0; not with "
        "--scheduler)",
    )
    worker.add_argument(
        "--compile-only",
        action="store_true",
        help="no GPU: run compile-only jobs, evaluations stop after compiling (CI)",
    )
    worker.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    worker.add_argument("--work-dir", type=_path_arg, help="default KERNEVO_WORK_DIR (./runs)")
    _add_cluster_arguments(worker, local=False)  # one slot; its jobs evaluate on the cluster
    for name, default, high, meaning in (
        ("heartbeat-s", DEFAULT_HEARTBEAT_S, 3600, "seconds between heartbeats"),
        (
            "grace-s",
            DEFAULT_GRACE_S,
            86400,
            "seconds without a heartbeat after which a job is requeued; at least "
            f"{MIN_BEATS_PER_GRACE} x --heartbeat-s, and a job is never requeued before "
            f"{MIN_BEATS_PER_GRACE} of its own process's heartbeats went missing",
        ),
        ("poll-s", DEFAULT_POLL_S, 3600, "seconds between looks at the queue"),
    ):
        worker.add_argument(
            f"--{name}",
            type=_seconds(0.1, high),
            default=default,
            help=f"{meaning}; 0.1..{high} (default {default:g})",
        )
    worker.add_argument(
        "--max-attempts",
        type=_int_in(1, 1000, "a number of attempts"),
        default=DEFAULT_MAX_ATTEMPTS,
        help="claims of a job whose workers died before it fails, 1..1000 (default "
        f"{DEFAULT_MAX_ATTEMPTS})",
    )

    dask_worker = _command(
        commands, "dask-worker", "a Dask worker of one GPU for jobs evaluating on a cluster"
    )
    dask_worker.set_defaults(parser=dask_worker, func=_cmd_dask_worker)
    dask_worker.add_argument("--scheduler", type=_scheduler, required=True, help="tcp://host:8786")
    dask_worker.add_argument(
        "--gpu",
        type=_job_int("gpu", "a device index"),
        help="device index (among CUDA_VISIBLE_DEVICES when set)",
    )
    dask_worker.add_argument(
        "--compile-only", action="store_true", help="no GPU: compile-only evaluations (key none)"
    )
    dask_worker.add_argument(
        "--gpu-key", type=_gpu_key_arg, help="refuse to start unless the device is of this key"
    )
    dask_worker.add_argument(
        "--name", type=_text("a worker name"), help="default <host>-gpu<I> (<host>-cpu-<pid>)"
    )

    cancel = _command(commands, "cancel", "cancel a job (queued or running)")
    cancel.set_defaults(parser=cancel)
    cancel.add_argument("job", type=_job_id, metavar="JOB", help="job id")
    cancel.add_argument("--api-url", type=_url, help="cancel through the service (token needed)")
    cancel.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    cancel.set_defaults(func=_cmd_cancel)

    export = _command(
        commands, "export", "write a champion's source, cubin, signature and reports as files"
    )
    export.add_argument("--op", type=_op, default="trsm", help=OP_HELP)
    export.add_argument(
        "--dtype", type=_dtype, required=True, help="float32 | float64 | complex64 | complex128"
    )
    _add_gpu_arguments(export)
    export.add_argument("--path", type=_path_id, help="only this path's champion")
    export.add_argument("-o", "--output", type=_path_arg, required=True, help="folder to write")
    export.add_argument("--database-url", type=_database_url, help="default KERNEVO_DATABASE_URL")
    export.set_defaults(parser=export, func=_cmd_export)  # --path contradicting --op/--dtype


def _path_arg(text: str) -> Any:
    """An argparse type: a file or folder path (1..4096 characters), ``~`` expanded."""
    from pathlib import Path

    return Path(_text("a path", _LONG_MAX, file=True)(text)).expanduser()


def _job_file(text: str) -> Any:
    """An argparse type for ``--config``: a path naming a readable regular file. A name that
    is wrong (missing, a folder, unreadable) is a usage error (exit 2), as any bad argument;
    what the file says is checked when it is read, and refused as configuration (exit 2 too:
    :class:`UsageError`)."""
    path = _path_arg(text)
    shown = shorten(str(path), 300)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such job file: {shown!r}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{shown!r} is not a file (a job YAML file is)")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"job file {shown!r} cannot be read (permission denied)")
    return path


def _database_url(text: str) -> str:
    """An argparse type for ``--database-url``: one line of text naming a database SQLAlchemy
    can open (``db.session.url_problem``), not an in-memory SQLite one
    (``db.session.in_memory_problem``)."""
    from db.session import in_memory_problem, url_problem

    value = _text("a database URL", _LONG_MAX)(text)
    problem = url_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{shorten(without_credentials(value))!r}: {problem}")
    problem = in_memory_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _check_environment(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, ``KERNEVO_*`` variables that are unknown (a typo would
    silently fall back to a default for a whole job), empty, or do not parse for any layer.

    Raises:
        SettingsError: one line naming the variable, the check and what it expects.
    """
    from api.settings import ApiSettings
    from db.settings import DatabaseSettings
    from evolver.settings import EvolverSettings
    from kernevo.settings import LoaderSettings

    accept(getattr(args, "llm_api_key_env", None))  # the loader's later checks know it too
    problems = check_environment(os.environ)
    if problems:
        raise SettingsError(describe(problems), check=problems[0].check, name=problems[0].name)
    for settings_class in (DatabaseSettings, ApiSettings, EvolverSettings, LoaderSettings):
        read_settings(settings_class)


class _StdoutWhileRead:
    """What commands print to: stdout until its reader goes away (a closed pipe: ``kernevo jobs
    | head -3``), then nothing. The command finishes its work (``kernevo lock`` still writes its
    file) and keeps its exit status. On the first ``BrokenPipeError`` the descriptor is pointed
    at /dev/null (Python's recipe), so that later writes and the interpreter's last flush of what
    is still buffered succeed instead of printing "Exception ignored … BrokenPipeError"."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _to_devnull(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)


def _stdout_or_devnull() -> Any:
    """``sys.stdout``, or /dev/null when the command was started with stdout closed
    (``kernevo jobs >&-``): Python then has no ``sys.stdout`` at all."""
    if sys.stdout is not None:
        return sys.stdout
    return open(os.devnull, "w")  # noqa: SIM115 — lives as long as the process


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kernevo`` console script; returns the exit status (0 ok, also when
    stdout's reader went away; 1 error; 2 usage: arguments, the ``--config`` file or the
    ``KERNEVO_*`` environment; 130 Ctrl-C; 143 SIGTERM)."""
    # SIGTERM ends the command with a line and 143 rather than silently; ``kernevo evolve``
    # replaces the handler with the runner's while a job exists (the job is marked failed).
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    # SIGUSR2 prints every thread's Python stack to stderr and lets the command run on: what a
    # process that does not stop is waiting for (CI saw a stopped job outlive 120 s twice).
    # Written to the process's own stderr descriptor (sys.stderr may be a Python object without
    # one, as under a test's capture); without a descriptor there is nothing to print to.
    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.register(signal.SIGUSR2, file=sys.__stderr__, all_threads=True)
    stdout = _stdout_or_devnull()
    sys.stdout = _StdoutWhileRead(stdout)
    try:
        return _main(argv)
    except KeyboardInterrupt:  # anywhere: building the parser, parsing, the command itself
        print("kernevo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except _Stopped as stop:
        stop_handled()
        print(f"kernevo: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        return 128 + stop.signum
    finally:
        stop_handled()  # a job's outcome handled its stop already; nothing may fire after exit
        sys.stdout.flush()  # output to a pipe is buffered: a reader gone shows here, quietly
        sys.stdout = stdout
        signal.signal(signal.SIGTERM, previous)


def _debug() -> bool:
    """Whether ``KERNEVO_DEBUG`` asks for tracebacks: any spelling the settings' booleans take
    (``kernevo.environment.parse_boolean``: ``1``, ``true``, ``yes``, …). A value that does not
    parse was refused with the environment before the command ran; should the error being
    reported have come first, it counts as unset."""
    try:
        return parse_boolean("KERNEVO_DEBUG", os.environ.get("KERNEVO_DEBUG"), False)
    except SettingsError:
        return False


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # as parse_args would refuse them, but in the words of the subcommand given
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        _check_environment(args)
        return int(args.func(args))
    except (SettingsError, UsageError) as error:
        print(f"kernevo: {_one_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:
        if not isinstance(error, _user_error_types()):
            raise
        if _debug():
            traceback.print_exc()
        line = _naming_the_database(_with_job_hint(_one_line(error), args), error, args)
        print(f"kernevo: {line}", file=sys.stderr)
        return EXIT_ERROR


def _naming_the_database(line: str, error: BaseException, args: argparse.Namespace) -> str:
    """``line``, led by ``database URL: `` (password hidden) when ``error`` is the database's
    (``db.errors.DatabaseUnavailableError``: damaged, locked, unreachable), whose words name no
    database, as every other database line does."""
    errors = sys.modules.get("db.errors")
    if errors is None or not isinstance(error, errors.DatabaseUnavailableError):
        return line
    if line.startswith("database ") and not line.startswith("database is "):
        return line  # named already
    try:
        url = _store_url(args)
    except Exception:  # the URL itself is at fault: the line as it is
        return line
    from evolver.store import display_url

    return f"database {display_url(url)}: {line}"


# "job N not found", whoever says it: the database (cancel), the runner (evolve --resume N), the
# service's 404 (cancel --api-url).
_JOB_NOT_FOUND = re.compile(r"job \d+ not found")


def _with_job_hint(line: str, args: argparse.Namespace) -> str:
    """``line``, and where it is a ``job N not found`` alone, how to see the jobs that exist:
    ``kernevo jobs``, asking the service or database the command was pointed at
    (``--api-url``, ``--database-url``)."""
    if not _JOB_NOT_FOUND.fullmatch(line):
        return line
    where = "".join(
        f" --{option.replace('_', '-')} {without_credentials(given)}"
        for option in ("api_url", "database_url")
        if (given := getattr(args, option, None))
    )
    return f"{line}; 'kernevo jobs{where}' lists the jobs"


if __name__ == "__main__":
    sys.exit(main())
