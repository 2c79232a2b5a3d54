"""Engines and sessions for SQLite and PostgreSQL.

SQLite has no row locks (``SELECT … FOR UPDATE`` compiles to nothing), so every SQLite
transaction here starts with ``BEGIN IMMEDIATE``: it takes the database's write lock up front and
writers queue on the busy timeout instead of failing when a read-then-write transaction has to
upgrade its lock. WAL journaling lets readers proceed while one writer holds the lock; foreign
keys are switched on per connection (SQLite's default is off). PostgreSQL uses its own row locks
(the repository selects rows ``FOR UPDATE`` before changing them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.orm import Session

# Seconds a SQLite connection waits for another writer's lock before "database is locked".
SQLITE_BUSY_TIMEOUT_S = 30.0


def _sqlite_on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    # Hand transaction control to SQLAlchemy (see _sqlite_on_begin); the legacy sqlite3 mode would
    # not BEGIN before SELECT or SAVEPOINT (SQLAlchemy docs, "Transactions with SQLite").
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for ``url`` (a SQLAlchemy URL, e.g. ``sqlite:///./kernevo.db`` or
    ``postgresql+psycopg://postgres@127.0.0.1:5432/kernevo``).

    SQLite: WAL, foreign keys on, a 30 s busy timeout, ``BEGIN IMMEDIATE`` for every transaction,
    connections usable from any thread, and the database file's folder created if missing.
    PostgreSQL: connections checked before use (``pool_pre_ping``).

    Raises:
        sqlalchemy.exc.ArgumentError: ``url`` is not a valid SQLAlchemy URL.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(parsed, echo=echo, pool_pre_ping=True)
    database = parsed.database
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        parsed,
        echo=echo,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
    )
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits when the block ends and rolls back if it raises.

    Objects stay readable after the block (``expire_on_commit=False``); lazy relationships must be
    loaded inside it.
    """
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
