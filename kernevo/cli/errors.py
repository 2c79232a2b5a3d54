"""The CLI's errors, their one-line wording and exit statuses.

Which error exits with which status is the package's contract (``kernevo.cli``'s docstring);
``kernevo.cli.main`` catches them and prints one line on stderr, worded here.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
from typing import Any

from kernevo.cli.store import _store_url
from kernevo.environment import shorten, without_credentials
from kernevo.stopping import note_stop

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C


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
