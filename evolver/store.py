"""Opening the lineage store for a job: migrate to the newest schema, then connect."""

from __future__ import annotations

from sqlalchemy import Engine

from evolver.errors import StoreError


def display_url(url: str) -> str:
    """``url`` with any password hidden, for messages; a URL without a password is shown as it
    was given (SQLAlchemy's rendering would percent-encode a SQLite URI's ``file:`` as
    ``file%3A``, which is not what the user typed)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return url
    if parsed.password is None:
        return url
    return parsed.render_as_string(hide_password=True)


def _reason(error: BaseException) -> str:
    orig = getattr(error, "orig", None)
    text = str(orig if orig is not None else error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:200]


# What a refusal of a missing SQLite file suggests: the two commands that create one.
_CREATES_IT = "'kernevo evolve' or 'kernevo serve' creates and migrates it"


def _missing_sqlite_file(url: str) -> str | None:
    """The refusal of ``url`` when it names a SQLite file (not a ``file:`` URI) that does not
    exist, else ``None`` (a URL that does not parse is left to the caller)."""
    from pathlib import Path

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    if Path(database).expanduser().is_file():
        return None
    return f"database {display_url(url)}: no such file {database} ({_CREATES_IT})"


def open_store(url: str, *, create: bool = True) -> Engine:
    """An engine on the lineage store at ``url``, migrated to the newest schema (Alembic),
    so one command works on a fresh SQLite file. ``create=False`` (``kernevo token``,
    ``kernevo cancel``: commands with nothing to do in a new database) refuses a SQLite file
    that does not exist instead of creating it, as the read-only commands do
    (:func:`open_existing_store`); an existing one is still migrated.

    Raises:
        StoreError: one line: the URL does not parse or names an in-memory SQLite database,
            the SQLite file is missing (with ``create=False``), the server is unreachable, or
            a migration fails.
    """
    from alembic.util import CommandError
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from db.migrate import upgrade
    from db.session import in_memory_problem, make_engine

    if (problem := in_memory_problem(url)) is not None:
        raise StoreError(problem)
    if not create and (missing := _missing_sqlite_file(url)) is not None:
        raise StoreError(missing)
    try:
        upgrade(url)
        engine = make_engine(url)
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except (SQLAlchemyError, CommandError, OSError, ValueError, ImportError) as error:
        raise StoreError(f"database {display_url(url)}: {_reason(error)}") from None
    return engine


def open_existing_store(url: str) -> Engine:
    """An engine on the lineage store at ``url``, which must already exist at the newest schema.

    For read-only commands (``kernevo jobs``): a read engine (``db.session.make_read_engine``;
    use it with ``read_scope``), so nothing is created, migrated or written, neither a SQLite
    file nor its folder nor a table; only ``kernevo evolve`` and ``kernevo serve`` do that.

    Raises:
        StoreError: one line: the URL does not parse, the SQLite file does not exist, the server
            is unreachable, or the database is not at this kernevo's schema.
    """

    from alembic.runtime.migration import MigrationContext
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from db.migrate import head_revision
    from db.session import in_memory_problem, make_read_engine

    shown = display_url(url)
    try:
        make_url(url)
    except ArgumentError as error:
        raise StoreError(f"database {shown}: {_reason(error)}") from None
    hint = _CREATES_IT
    if (problem := in_memory_problem(url)) is not None:
        raise StoreError(problem)
    if (missing := _missing_sqlite_file(url)) is not None:
        raise StoreError(missing)
    try:
        engine = make_read_engine(url)
        with engine.connect() as connection:
            revision = MigrationContext.configure(connection).get_current_revision()
    except (SQLAlchemyError, OSError, ValueError, ImportError) as error:
        raise StoreError(f"database {shown}: {_reason(error)}") from None
    head = head_revision()
    if revision != head:
        engine.dispose()
        found = "has no kernevo tables" if revision is None else f"is at schema {revision}"
        raise StoreError(f"database {shown}: {found}, not {head} ({hint})")
    return engine
