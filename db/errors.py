"""Errors the repository raises. Each carries a one-line message naming what was wrong."""

from __future__ import annotations


class RepositoryError(Exception):
    """Base of every error ``db.repository`` raises on purpose."""


class NotFoundError(RepositoryError, LookupError):
    """A job, program or evaluation id that is not in the database."""


class UnknownParentError(RepositoryError, LookupError):
    """``record_program`` got a ``parent_uid`` that no recorded program has."""


class ProgramConflictError(RepositoryError, ValueError):
    """A program uid recorded again with a different source (programs are immutable)."""


class ChampionMismatchError(RepositoryError, ValueError):
    """A promotion whose evaluation, program or cubin does not belong to the champion key."""


class InvalidTransitionError(RepositoryError, ValueError):
    """A job state change that ``db.states.JOB_TRANSITIONS`` does not allow."""


class InvalidValueError(RepositoryError, ValueError):
    """An argument outside its allowed values (unknown state, malformed launch or envelope)."""


class PromotionRefusedError(RepositoryError, ValueError):
    """``promote_champion`` refused: ``check`` names the rule the evaluation did not meet.

    Checks: ``verified`` (the evaluation is not ``verified``), ``min_score`` (its score is not
    above ``db.repository.MIN_CHAMPION_SCORE``), ``beats_champion`` (its score is not above the
    current champion's, read under the champion row's lock). A refusal is the normal outcome of a
    promotion that lost a race or was not good enough: the caller keeps the job running.
    """

    check = "promotion"

    def __init__(self, message: str, *, score: float, champion_score: float | None = None):
        super().__init__(message)
        self.score = score
        self.champion_score = champion_score


class NotVerifiedError(PromotionRefusedError):
    """``promote_champion`` got an evaluation whose state is not ``verified``."""

    check = "verified"


class BelowMinimumScoreError(PromotionRefusedError):
    """``promote_champion`` got a verified evaluation that does not beat the vendor library."""

    check = "min_score"


class NotBetterThanChampionError(PromotionRefusedError):
    """``promote_champion`` got an evaluation that does not score above the current champion."""

    check = "beats_champion"


class UnsupportedDatabaseError(ValueError):
    """A database URL that names a database kernevo does not run on: a dialect SQLAlchemy does
    not know, or one other than SQLite and PostgreSQL (``mysql://``), or a driver other than
    the one kernevo uses for them (``db.session.dialect_problem``). The message is the one-line
    reason without the URL (the caller names where the URL came from, as ``url_problem``'s
    callers do); ``url`` is the URL with any password shown as ``***``.

    Configuration, not infrastructure: the CLI refuses such a URL before anything runs (exit
    2); ``make_engine`` and ``make_read_engine`` raise this for one that reaches them.
    """

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class DatabaseUnavailableError(Exception):
    """The database cannot answer: ``kind`` is ``locked`` (another connection held a lock past
    the busy timeout), ``damaged`` (not a database, or malformed), ``unreachable`` (cannot be
    opened or connected to), ``read_only`` (a write reached a read-only session: our bug) or
    ``read_only_database`` (the database itself refuses writes: a read-only file or folder, a
    standby server; ``db.session.read_only_error``).

    Infrastructure, not bad input: the API answers 503, the CLI prints the one-line message.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# SQLite primary result codes (https://www.sqlite.org/rescode.html) and PostgreSQL SQLSTATEs
# (https://www.postgresql.org/docs/current/errcodes-appendix.html) that mean "the database cannot
# answer" rather than "this statement is wrong".
_SQLITE_KINDS = {
    5: "locked",
    6: "locked",
    11: "damaged",
    26: "damaged",
    14: "unreachable",
    8: "read_only",
}
_POSTGRES_KINDS = {
    "55P03": "locked",  # lock_not_available (lock_timeout)
    "57014": "locked",  # query_canceled (statement_timeout while waiting)
    "XX001": "damaged",  # data_corrupted
    "XX002": "damaged",  # index_corrupted
    "25006": "read_only",  # read_only_sql_transaction
    "57P01": "unreachable",  # admin_shutdown
    "57P03": "unreachable",  # cannot_connect_now
}
_MESSAGES = {
    "locked": "database is locked: another connection held its lock past the busy timeout; "
    "retry later",
    "damaged": "database is damaged: {reason}",
    "unreachable": "database is unreachable: {reason}",
    "read_only": "a write reached a read-only database session: {reason}",
}


def _driver_kind(orig: BaseException) -> str | None:
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return _SQLITE_KINDS.get(code & 0xFF)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        if sqlstate.startswith("08"):  # class 08: connection exception
            return "unreachable"
        return _POSTGRES_KINDS.get(sqlstate)
    if type(orig).__name__ == "OperationalError" and type(orig).__module__.startswith("psycopg"):
        return "unreachable"  # psycopg's connection failures carry no SQLSTATE
    return None


def database_unavailable(error: BaseException) -> DatabaseUnavailableError | None:
    """``error`` (a ``sqlalchemy.exc.DBAPIError``, or the driver's own exception) as a
    ``DatabaseUnavailableError`` when it means the database cannot answer, else ``None``.

    Classified by the driver's code, not its message: SQLite's ``sqlite_errorcode`` (BUSY and
    LOCKED → ``locked``, CORRUPT and NOTADB → ``damaged``, CANTOPEN → ``unreachable``, READONLY →
    ``read_only``) and psycopg's ``sqlstate`` (class 08 and 57P0x → ``unreachable``, 55P03 →
    ``locked``, XX00x → ``damaged``, 25006 → ``read_only``).
    """
    orig = getattr(error, "orig", None) or error
    kind = _driver_kind(orig)
    if kind is None:
        return None
    text = " ".join(str(orig).split())
    reason = text[:200] or type(orig).__name__
    return DatabaseUnavailableError(kind, _MESSAGES[kind].format(reason=reason))


class ForeignSchemaError(ValueError):
    """A database that holds another application's schema, not kernevo's: it has tables but no
    Alembic revision of kernevo's (no ``alembic_version`` table, an empty one beside other
    tables, or a revision that none of ``db/migrations`` names: another application's
    migrations, or a newer kernevo's). ``db.migrate.upgrade`` raises it before writing anything
    (``db.migrate.schema_problem``), so ``kernevo serve`` and every command that migrates
    refuses such a database instead of adding kernevo's tables beside the other ones.

    The message is the one-line reason without the URL (``it has 1 table (notes) and no
    kernevo schema revision (no alembic_version table)``); the caller names the database.
    ``tables`` are the tables found (sorted), ``revision`` the foreign revision or ``None``.
    """

    def __init__(self, message: str, *, tables: tuple[str, ...], revision: str | None) -> None:
        super().__init__(message)
        self.tables = tables
        self.revision = revision
