"""Apply the Alembic migrations in ``db/migrations`` programmatically, from any working directory.

Alembic owns the schema: nothing calls ``metadata.create_all``. The command line works too:
``alembic -c db/alembic.ini upgrade head`` (URL from ``KERNEVO_DATABASE_URL``).

``upgrade`` migrates only a database that is empty or kernevo's (``schema_problem``): one that
holds another application's tables is refused (``db.errors.ForeignSchemaError``) before anything
is written, whichever command migrates (``kernevo serve``, ``evolve``, ``worker``, ``token``
through ``evolver.store.open_store``).
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
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, make_url

from db.errors import ForeignSchemaError
from db.session import make_engine, make_read_engine, sqlite_file

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
        if up:
            _refuse_foreign_file(url, Path(database).expanduser())
        _migrate(url, revision, up=up)


def _refuse_foreign_file(url: str, path: Path) -> None:
    """Read an existing SQLite file's schema through a read engine (``mode=ro``) before the
    writer connects: the writer switches the file to WAL on connecting, which would already
    change another application's file. ``_migrate`` checks again inside its transaction.

    Raises:
        ForeignSchemaError: the file holds another application's tables.
        sqlalchemy.exc.DatabaseError: the file is not a SQLite database.
    """
    try:
        if path.stat().st_size == 0:  # a new or empty file: a fresh database
            return
    except FileNotFoundError:
        return
    engine = make_read_engine(url)
    try:
        with engine.connect() as connection:
            problem = schema_problem(connection)
    finally:
        engine.dispose()
    if problem is not None:
        raise problem


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
            if up and (problem := schema_problem(connection)) is not None:
                raise problem  # rolls the transaction back: nothing written
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
    at ``revision`` and change nothing. A database with no tables (a new SQLite file, an empty
    PostgreSQL schema) gets kernevo's; one holding another application's tables is refused,
    nothing written (:func:`schema_problem`).

    Raises:
        db.errors.ForeignSchemaError: the database has tables but no kernevo revision.
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


def known_revisions() -> frozenset[str]:
    """Every revision shipped in ``db/migrations`` (the head and each one before it)."""
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return frozenset(script.revision for script in scripts.walk_revisions())


# Table names a refusal lists before "…": enough to recognize whose database it is.
_TABLES_SHOWN = 5
_NAME_SHOWN = 64


def _tables_text(tables: tuple[str, ...]) -> str:
    shown = [" ".join(name.split())[:_NAME_SHOWN] for name in tables[:_TABLES_SHOWN]]
    more = ", …" if len(tables) > _TABLES_SHOWN else ""
    count = f"{len(tables)} table{'' if len(tables) == 1 else 's'}"
    return f"{count} ({', '.join(shown)}{more})"


def schema_problem(connection: Connection) -> ForeignSchemaError | None:
    """Why the database on ``connection`` is not one kernevo may migrate, else ``None``.

    ``None`` for a database without tables or views (in the connection's default schema: the
    one kernevo's tables go to), and for one at a revision of ``db/migrations``
    (:func:`known_revisions`; an older kernevo schema is migrated) or holding only an empty
    ``alembic_version`` (kernevo's, downgraded to base). Otherwise a
    ``ForeignSchemaError`` whose one-line message says what was found: tables but no
    ``alembic_version`` table, tables beside an empty one, or a revision none of ours names
    (another application's migrations, or a newer kernevo's). Reads only: works on a read
    engine's connection.
    """
    inspector = inspect(connection)
    tables = tuple(sorted({*inspector.get_table_names(), *inspector.get_view_names()}))
    if not tables:
        return None
    version_table = "alembic_version"
    if version_table not in tables:
        reason = f"no {version_table} table"
    else:
        heads = MigrationContext.configure(connection).get_current_heads()
        unknown = sorted(head for head in heads if head not in known_revisions())
        if unknown:
            named = ", ".join(repr(" ".join(head.split())[:_NAME_SHOWN]) for head in unknown)
            return ForeignSchemaError(
                f"its {version_table} revision {named} is not one of kernevo's (another "
                "application's migrations, or a newer kernevo's)",
                tables=tables,
                revision=unknown[0],
            )
        if heads or tables == (version_table,):
            return None
        reason = f"{version_table} is empty"
    return ForeignSchemaError(
        f"it has {_tables_text(tables)} and no kernevo schema revision ({reason})",
        tables=tables,
        revision=None,
    )


def head_revision() -> str | None:
    """The newest revision shipped in ``db/migrations``."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()
