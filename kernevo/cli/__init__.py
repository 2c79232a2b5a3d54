"""The ``kernevo`` console script: the composition root.

``kernevo evolve`` runs or resumes an evolution job, ``kernevo serve`` the REST service,
``kernevo best`` asks the service for the champion serving a problem, ``kernevo jobs`` lists
jobs and their progress. Each subcommand imports what it needs inside itself, so ``import
kernevo`` (the loader) stays light and ``kernevo --help`` is instant.

One module per command family holds its commands (``evolve``, ``serve``, ``best``, ``jobs``,
``queue``: worker and cancel, ``export``, ``cluster``: dask-worker, ``keys``, ``lock``,
``token``, ``bench_loader``), ``parser`` the command line and ``errors`` the errors; this module
holds :func:`main`, which runs one command and turns what it raises into the exit status.

Errors caused by input or infrastructure (no GPU, unreachable LLM endpoint, service or
database, a work folder that cannot be written, a port in use, a job that is not there) print one
line on stderr and exit 1; usage and configuration errors exit 2: a bad argument (a value given
on the command line that the job configuration refuses included, and an option given twice, a
list option such as ``bench-loader --shapes`` too: ``strict_parser._given_once``), a ``--config``
job file whose content does not parse or validate, a database URL that does not parse or names a
database other than SQLite and PostgreSQL (``--database-url`` or ``KERNEVO_DATABASE_URL``;
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
Ctrl-C exits 130, by SIGTERM 143 (128 + the signal number), and a Ctrl-C anywhere else once
:func:`main` runs (while the parser is built included) prints ``kernevo: interrupted`` alone and
exits 130; one in the first tens of milliseconds, while Python imports this package, still ends
in Python's own traceback. A closed
stdout (``kernevo jobs | head -3``) ends a command quietly with 0. Set ``KERNEVO_DEBUG=true``
(any boolean spelling: ``kernevo.environment.parse_boolean``) to see the traceback too.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Sequence

from kernevo.cli.errors import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    _naming_the_database,
    _one_line,
    _raise_stopped,
    _Stopped,
    _user_error_types,
    _with_job_hint,
)
from kernevo.cli.parser import _parser
from kernevo.cli.stdout import _stdout_or_devnull, _StdoutWhileRead
from kernevo.environment import (
    SettingsError,
    accept,
    check_environment,
    describe,
    parse_boolean,
    read_settings,
)
from kernevo.stopping import stop_handled

__all__ = ["main"]


if multiprocessing.current_process().name != "MainProcess":
    # A process-pool worker of ``kernevo evolve``: a spawned worker imports the main module (the
    # console script, or ``python -m kernevo.cli``'s: both import this package) after taking its
    # own process name. Ctrl-C reaches the whole process group; the job's process stops the run
    # and terminates its workers, so a worker ignores SIGINT rather than die mid-evaluation with
    # a traceback. The job starts it with SIGINT blocked (so a Ctrl-C while it imports is not its
    # death either: evolver.openevolve_host.workers_start_deaf_to_ctrl_c); ignored now, it may
    # be unblocked.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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
