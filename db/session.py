"""Engines and sessions for SQLite and PostgreSQL: one kind for writers, one for readers.

Writers (``make_engine`` + ``session_scope``): SQLite has no row locks (``SELECT … FOR UPDATE``
compiles to nothing), so every SQLite write transaction starts with ``BEGIN IMMEDIATE``: it takes
the database's write lock up front and writers queue on the busy timeout instead of failing when a
read-then-write transaction has to upgrade its lock. PostgreSQL uses its own row locks (the
repository selects rows ``FOR UPDATE`` before changing them).

Readers (``make_read_engine`` + ``read_scope``): a deferred ``BEGIN`` on a connection that cannot
write. Under WAL journaling any number of them read a consistent snapshot beside the one writer
and never wait for it, so API GETs and ``kernevo jobs`` never queue behind a running job (nor make
the job's writer queue behind them). A SQLite reader opens the file with ``mode=ro`` and
``PRAGMA query_only``: it never creates, migrates or changes the database file (SQLite may add the
``-wal``/``-shm`` side files WAL reading needs). A PostgreSQL reader runs ``READ ONLY``
transactions. A write through a reader fails at once (``DatabaseUnavailableError``, kind
``read_only``) instead of taking a lock.

Only SQLite (Python's sqlite3) and PostgreSQL (psycopg 3) are supported: both engine makers, and
``url_problem`` (which the CLI and the settings check every URL with), refuse any other database
kind up front (``dialect_problem``), before a driver is imported.

Both scopes turn a database that cannot answer (locked past the busy timeout, damaged,
unreachable) into ``db.errors.DatabaseUnavailableError``, chained to the driver's error.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import Session

from db.errors import DatabaseUnavailableError, UnsupportedDatabaseError, database_unavailable

# Seconds a SQLite connection waits for another connection's lock before "database is locked".
SQLITE_BUSY_TIMEOUT_S = 30.0

# Connections a read engine keeps and may add: FastAPI runs sync routes on AnyIO's thread pool
# (40 threads by default), so 10 + 40 > 40 and a GET never waits on the pool for a connection.
READ_POOL_SIZE = 10
READ_POOL_OVERFLOW = 40

# Marks an engine made by ``make_read_engine`` (an execution option SQLAlchemy carries along).
_READ_ONLY_OPTION = "kernevo_read_only"


def _sqlite_writer_on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    # Hand transaction control to SQLAlchemy (see _sqlite_writer_on_begin); the legacy sqlite3
    # mode would not BEGIN before SELECT or SAVEPOINT (SQLAlchemy docs, "Transactions with
    # SQLite").
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def _sqlite_writer_on_begin(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _sqlite_reader_on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # A second guard beside mode=ro (a ``file:`` URI may ask for rw): no statement writes.
        cursor.execute("PRAGMA query_only = ON")
    finally:
        cursor.close()


def _sqlite_reader_on_begin(connection: Connection) -> None:
    # Deferred: takes no lock until the first read, then only a WAL read snapshot, so the
    # several SELECTs of one request agree with each other without blocking the writer.
    connection.exec_driver_sql("BEGIN")


def sqlite_file(parsed: URL) -> str | None:
    """The database file's path, or ``None`` for an in-memory database or a ``file:`` URI."""
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database


# What a refusal of a URL suggests instead.
_URL_EXAMPLES = "sqlite:///./kernevo.db or postgresql+psycopg://user@host/db"

# The databases kernevo runs on (SQLAlchemy backend name -> the one driver it uses, and how a
# URL names it): the migrations, the queue's locking (db.queue) and db.errors' classification
# of a database that cannot answer are written and tested for these alone. ``postgresql://``
# loads psycopg (3) in SQLAlchemy 2.1, as ``postgresql+psycopg://`` does; ``sqlite://`` loads
# Python's sqlite3 (``pysqlite``). Another (``mysql://``, ``postgresql+psycopg2://``, an async
# driver) would otherwise fail only on connecting, as the missing driver's "No module named …".
_SUPPORTED_DRIVERS = {
    "sqlite": ("pysqlite", "sqlite:// through Python's sqlite3"),
    "postgresql": ("psycopg", "postgresql:// or postgresql+psycopg://, through psycopg 3"),
}


def dialect_problem(parsed: URL) -> str | None:
    """Why kernevo cannot run on the database kind ``parsed`` names, as one line without the URL
    (the caller names it), else ``None``: a dialect SQLAlchemy does not know (``nosuchdb://``),
    one other than SQLite and PostgreSQL (``mysql://``), or a driver of theirs other than the
    one kernevo uses (``postgresql+asyncpg://``; see ``_SUPPORTED_DRIVERS``).

    The one check of the database kind: ``url_problem`` (the CLI's ``--database-url`` and
    ``KERNEVO_DATABASE_URL``, which every command and the API read) and ``make_engine`` /
    ``make_read_engine`` (every engine) call it. Loading the dialect imports its SQLAlchemy
    module, never the driver.
    """
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        return f"unknown database kind {parsed.drivername!r} (expected e.g. {_URL_EXAMPLES})"
    supported = _SUPPORTED_DRIVERS.get(dialect.name)
    if supported is None:
        return (
            "only SQLite and PostgreSQL database URLs are supported: got "
            f"{parsed.drivername!r} (expected e.g. {_URL_EXAMPLES})"
        )
    driver, spelled = supported
    if dialect.driver != driver:
        return (
            f"only SQLite and PostgreSQL database URLs are supported, {dialect.name} as "
            f"{spelled}: got {parsed.drivername!r}"
        )
    return None


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot name a database kernevo runs on, as one line without the URL itself
    (the caller names where it came from), else ``None``: it does not parse as a SQLAlchemy URL
    (``not-a-url``, ``::bad``), or its database kind is not one kernevo runs on
    (:func:`dialect_problem`: ``nosuchdb://``, ``mysql://``).

    These are configuration errors, found before anything connects (``kernevo`` exits 2 for
    them); a database that is down or refuses the login is infrastructure, found on connecting.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        return f"not a database URL (expected e.g. {_URL_EXAMPLES})"
    return dialect_problem(parsed)


def _supported_url(url: str) -> URL:
    """``url`` parsed, once :func:`dialect_problem` has nothing against it.

    Raises:
        sqlalchemy.exc.ArgumentError: ``url`` is not a valid SQLAlchemy URL.
        db.errors.UnsupportedDatabaseError: a database kind kernevo does not run on.
    """
    parsed = make_url(url)
    problem = dialect_problem(parsed)
    if problem is not None:
        shown = url if parsed.password is None else parsed.render_as_string(hide_password=True)
        raise UnsupportedDatabaseError(problem, url=shown)
    return parsed


def in_memory_problem(url: str) -> str | None:
    """The one-line refusal of ``url`` when it names an in-memory SQLite database
    (``sqlite://``, ``sqlite:///:memory:``, a ``file:`` URI with ``mode=memory``), else ``None``
    (another database, or a URL that does not parse: the caller's error).

    Such a database lives and dies with one connection: the migrations, the job's writer, the
    service's readers and a worker's job processes each see a different empty one, so every
    command that opens the store refuses it (``kernevo`` exits 2) rather than fail later on a
    missing table.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    uri_memory = database.startswith("file:") and (
        database.startswith("file::memory:")
        or parsed.query.get("mode") == "memory"
        or "mode=memory" in database
    )
    if database and database != ":memory:" and not uri_memory:
        return None
    return (
        f"database {url}: an in-memory SQLite database lasts one connection and holds no jobs; "
        "use a file (sqlite:///./kernevo.db) or PostgreSQL "
        "(postgresql+psycopg://user@host/db)"
    )


def make_engine(url: str, *, echo: bool = False, busy_timeout_s: float | None = None) -> Engine:
    """A writer engine for ``url`` (a SQLAlchemy URL, e.g. ``sqlite:///./kernevo.db`` or
    ``postgresql+psycopg://postgres@127.0.0.1:5432/kernevo``); use it with ``session_scope``.

    SQLite: WAL, foreign keys on, a ``busy_timeout_s`` busy timeout (default
    ``SQLITE_BUSY_TIMEOUT_S``, read at the call), ``BEGIN
    IMMEDIATE`` for every transaction, connections usable from any thread, and the database
    file's folder created if missing. PostgreSQL: connections checked before use
    (``pool_pre_ping``).

    Raises:
        sqlalchemy.exc.ArgumentError: ``url`` is not a valid SQLAlchemy URL.
        db.errors.UnsupportedDatabaseError: ``url`` names a database kind kernevo does not run
            on (:func:`dialect_problem`), before any driver is imported.
    """
    parsed = _supported_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, echo=echo, pool_pre_ping=True)
    timeout = SQLITE_BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
    database = sqlite_file(parsed)
    if database is not None:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        parsed,
        echo=echo,
        connect_args={"timeout": timeout, "check_same_thread": False},
    )
    event.listen(engine, "connect", _sqlite_writer_on_connect)
    event.listen(engine, "begin", _sqlite_writer_on_begin)
    return engine


def make_read_engine(
    url: str, *, echo: bool = False, busy_timeout_s: float | None = None
) -> Engine:
    """A read-only engine for ``url``; use it with ``read_scope`` (every GET route and read-only
    CLI command does).

    SQLite: the file opened with ``mode=ro`` (a missing file is an error, never created, and
    neither is its folder), ``PRAGMA query_only``, a deferred ``BEGIN`` and the same
    ``busy_timeout_s`` (a reader waits only where WAL cannot help: recovery after a crash, or a
    connection holding an exclusive lock). PostgreSQL: ``READ ONLY`` transactions. Both: a pool of
    ``READ_POOL_SIZE`` + ``READ_POOL_OVERFLOW`` connections.

    Raises:
        sqlalchemy.exc.ArgumentError: ``url`` is not a valid SQLAlchemy URL.
        db.errors.UnsupportedDatabaseError: ``url`` names a database kind kernevo does not run
            on (:func:`dialect_problem`), before any driver is imported.
    """
    parsed = _supported_url(url)
    pool = {"pool_size": READ_POOL_SIZE, "max_overflow": READ_POOL_OVERFLOW}
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(
            parsed,
            echo=echo,
            pool_pre_ping=True,
            execution_options={"postgresql_readonly": True},
            **pool,
        )
        return engine.execution_options(**{_READ_ONLY_OPTION: True})
    timeout = SQLITE_BUSY_TIMEOUT_S if busy_timeout_s is None else busy_timeout_s
    database = sqlite_file(parsed)
    if database is None:
        # An in-memory database or a ``file:`` URI: connect as given, guarded by query_only.
        engine = create_engine(
            parsed,
            echo=echo,
            connect_args={"timeout": timeout, "check_same_thread": False},
        )
    else:
        target = f"file:{quote(str(Path(database).expanduser().resolve()))}?mode=ro"

        def connect() -> sqlite3.Connection:
            return sqlite3.connect(target, uri=True, timeout=timeout, check_same_thread=False)

        engine = create_engine(parsed, echo=echo, creator=connect, **pool)
    event.listen(engine, "connect", _sqlite_reader_on_connect)
    event.listen(engine, "begin", _sqlite_reader_on_begin)
    return engine.execution_options(**{_READ_ONLY_OPTION: True})


def is_read_engine(engine: Engine) -> bool:
    """Whether ``engine`` came from ``make_read_engine``."""
    return bool(engine.get_execution_options().get(_READ_ONLY_OPTION))


def read_only_error(engine: Engine, reason: str) -> DatabaseUnavailableError:
    """A write the database refused because it is read-only, as a one-line
    ``DatabaseUnavailableError`` (kind ``read_only_database``) naming the database (the file,
    or the URL with its password shown as ``***``) and what to do."""
    url = engine.url
    if url.get_backend_name() == "sqlite":
        name = url.database or url.render_as_string()
        remedy = "make the file, its -wal and -shm files and its folder writable by this process"
    else:
        name = url.render_as_string(hide_password=True)
        remedy = "point kernevo at a writable primary"
    return DatabaseUnavailableError(
        "read_only_database", f"database {name} is read-only ({reason}); {remedy}"
    )


def _unopenable_folder(engine: Engine) -> str | None:
    """Why SQLite could not open ``engine``'s existing database file when its folder is the
    cause, else ``None``: a database in WAL mode (kernevo's) needs its ``-shm`` file, which
    SQLite creates beside it even for a read-only connection, so a folder this process cannot
    write makes the file unopenable ("unable to open database file" and nothing more)."""
    database = sqlite_file(engine.url)
    if database is None:
        return None
    path = Path(database).expanduser()
    shm = path.with_name(path.name + "-shm")
    if not path.is_file() or shm.exists() or os.access(path.parent, os.W_OK):
        return None
    return (
        f"its folder {path.parent} is not writable, and SQLite in WAL mode creates "
        f"{shm.name} there even to read"
    )


def unavailable_error(
    error: BaseException, engine: Engine, *, writer: bool = False
) -> DatabaseUnavailableError | None:
    """``error`` (a driver error on ``engine``) as the ``DatabaseUnavailableError`` the session
    scopes raise, else ``None`` (``db.errors.database_unavailable``, made precise): on a
    ``writer`` engine a read-only refusal is the database's (its file or server is read-only),
    not a write through a read session, and ``read_only_error`` says so; a SQLite file that
    could not be opened for its folder's sake says so (``_unopenable_folder``)."""
    if not isinstance(error, DBAPIError):
        return None
    converted = database_unavailable(error)
    if converted is not None and converted.kind == "read_only" and writer:
        orig = getattr(error, "orig", None) or error
        reason = " ".join(str(orig).split())[:200] or type(orig).__name__
        return read_only_error(engine, reason)
    if converted is not None and converted.kind == "unreachable":
        folder = _unopenable_folder(engine)
        if folder is not None:
            return DatabaseUnavailableError("unreachable", f"{converted} ({folder})")
    return converted


# Kinds of write failure after which the writer engine's pooled connections are dropped, so
# the next write opens the database afresh: SQLite opens a file it may not write read-only and
# keeps that connection read-only after the file becomes writable again. The service answered
# every write 503 "read-only" until restarted (a fresh-user trial, 2026-12-02).
_REOPEN_AFTER = frozenset({"read_only", "read_only_database"})


def _raise_unavailable(error: BaseException, engine: Engine, *, writer: bool = False) -> None:
    """Raise ``error`` as ``unavailable_error`` converts it; return when it does not (the
    caller re-raises it unchanged)."""
    converted = unavailable_error(error, engine, writer=writer)
    if converted is not None:
        raise converted from error


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A write session on ``engine`` (from ``make_engine``) that commits when the block ends and
    rolls back if it raises.

    Objects stay readable after the block (``expire_on_commit=False``); lazy relationships must be
    loaded inside it.

    Raises:
        db.errors.DatabaseUnavailableError: the database is locked past the busy timeout,
            damaged, unreachable or read-only (kind ``read_only_database``: its file or
            server refuses writes), chained to the driver's error.
    """
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except BaseException as error:
        session.rollback()
        converted = unavailable_error(error, engine, writer=True)
        if converted is None:
            raise
        if converted.kind in _REOPEN_AFTER:
            session.close()
            engine.dispose()
        raise converted from error
    finally:
        session.close()


@contextmanager
def read_scope(engine: Engine) -> Iterator[Session]:
    """A read-only session on ``engine`` (from ``make_read_engine``): one snapshot, rolled back
    when the block ends, never committed.

    Objects stay readable after the block; lazy relationships must be loaded inside it.

    Raises:
        ValueError: ``engine`` is a writer engine (on SQLite its ``BEGIN IMMEDIATE`` would make
            every reader queue for the write lock).
        db.errors.DatabaseUnavailableError: the database is locked past the busy timeout,
            damaged or unreachable, or the block tried to write (kind ``read_only``).
    """
    if not is_read_engine(engine):
        raise ValueError("read_scope needs an engine from db.session.make_read_engine")
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        # Pending changes are a bug of the caller: flushing them fails loudly (read_only)
        # instead of dropping them silently at close.
        session.flush()
    except BaseException as error:
        _raise_unavailable(error, engine)
        raise
    finally:
        session.close()  # returns the connection, which rolls the snapshot back
