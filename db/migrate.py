"""Apply the Alembic migrations in ``db/migrations`` programmatically, from any working directory.

Alembic owns the schema: nothing calls ``metadata.create_all``. The command line works too:
``alembic -c db/alembic.ini upgrade head`` (URL from ``KERNEVO_DATABASE_URL``).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import make_url

from db.session import make_engine, sqlite_file

PACKAGE_DIR = Path(__file__).resolve().parent
ALEMBIC_INI = PACKAGE_DIR / "alembic.ini"
MIGRATIONS_DIR = PACKAGE_DIR / "migrations"


def alembic_config() -> Config:
    """Alembic's configuration for this package, located through the package path."""
    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


# Key of the PostgreSQL advisory lock that serializes migrations: "kernevo" in ASCII. Advisory
# locks are per database, so it serializes every migrator of one database and nothing else.
MIGRATION_LOCK_KEY = 0x6B65726E65766F


def _run(url: str, revision: str, *, up: bool) -> None:
    parsed = make_url(url)
    database = sqlite_file(parsed) if parsed.get_backend_name() == "sqlite" else None
    if database is None:
        _migrate(url, revision, up=up)
        return
    # SQLite: a fresh file's first connections race to switch it to WAL (PRAGMA journal_mode
    # needs the file to itself and can answer "database is locked" at once, busy timeout or
    # not: seen in CI with three first starts). Migrators of one file queue on a lock of its
    # folder (_folder_lock), which leaves no file behind.
    folder = Path(database).expanduser().resolve().parent
    folder.mkdir(parents=True, exist_ok=True)
    with _folder_lock(folder):
        _migrate(url, revision, up=up)


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` itself (opened read-only: Linux locks a
    directory's open file description like a file's), waiting for any other holder.

    Why the folder: a lock file beside the database (``<db>.migrate.lock``, filelock's) stayed
    after every command, and deleting it on release is unsafe (a waiter holding the unlinked
    file's descriptor and a newcomer creating a fresh file would both "hold" the lock). The
    folder exists as long as the database does, is the same inode for every name of it and for
    every user who can read it, and a crashed holder's lock goes with its process. It serializes
    the migrations of every SQLite database in the folder, which take milliseconds.

    Raises:
        OSError: the folder cannot be opened (permission denied).
    """
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # drops the lock


def _migrate(url: str, revision: str, *, up: bool) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                # Concurrent first starts would each CREATE the same tables and types (duplicate
                # key in pg_type). The transaction-level lock queues them; it is released at
                # commit, and a later migrator's Alembic then reads the committed version (READ
                # COMMITTED: every statement sees what committed before it) and finds nothing
                # to do. SQLite needs none: BEGIN IMMEDIATE already takes the write lock.
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
            config = alembic_config()
            # env.py migrates on this connection and leaves logging alone.
            config.attributes["connection"] = connection
            if up:
                command.upgrade(config, revision)
            else:
                command.downgrade(config, revision)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` (default: the newest), in one
    transaction on both SQLite and PostgreSQL. Safe to call from several processes at once (e.g.
    three workers' first starts on a fresh database): PostgreSQL migrators queue on an advisory
    lock (``MIGRATION_LOCK_KEY``), SQLite ones on the write lock; the later ones find the schema
    at ``revision`` and change nothing.

    Raises:
        sqlalchemy.exc.OperationalError: the database cannot be reached.
        alembic.util.CommandError: ``revision`` is unknown.
    """
    _run(url, revision, up=True)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"`` drops every table).

    Raises:
        sqlalchemy.exc.OperationalError: the database cannot be reached.
        alembic.util.CommandError: ``revision`` is unknown.
    """
    _run(url, revision, up=False)


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at; ``None`` when it was never migrated."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest revision shipped in ``db/migrations``."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()
