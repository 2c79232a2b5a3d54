"""Opening the lineage store for a job: migrate to the newest schema, then connect."""

from __future__ import annotations

from sqlalchemy import Engine

from db.errors import ForeignSchemaError
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
# What a refusal of another application's database suggests: no command of kernevo's takes it.
FOREIGN_DATABASE_HINT = "point --database-url (or KERNEVO_DATABASE_URL) at a kernevo database"
_NEW_DATABASE_HINT = (
    f"{FOREIGN_DATABASE_HINT}, or at a new SQLite file or an empty database to start one"
)


def _sqlite_path(url: str) -> str | None:
    """The SQLite file ``url`` names, as written (``./kernevo.db``); ``None`` for another
    database, an in-memory one, a ``file:`` URI or a URL that does not parse (the caller's
    error)."""
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
    return database


def sqlite_file_problem(url: str, *, missing_hint: str | None = None) -> str | None:
    """The one-line refusal of ``url`` when it names a SQLite path that cannot be a database
    file, else ``None``: a directory or another file that is not a regular one (SQLite would
    say only "unable to open database file", and a worker's lock "Is a directory"), or, given
    ``missing_hint`` (the command needs an existing database; the hint says what to do
    instead), nothing at that path. Checked before anything opens or creates the file."""
    from pathlib import Path

    database = _sqlite_path(url)
    if database is None:
        return None
    path = Path(database).expanduser()
    try:
        if path.is_dir():
            return f"database {display_url(url)}: {database} is a directory, not a database file"
        if path.exists() and not path.is_file():
            return f"database {display_url(url)}: {database} is not a regular file"
    except OSError as error:  # a name too long, a folder without search permission
        return _path_unusable(url, database, error)
    if missing_hint is not None and not path.exists():
        return f"database {display_url(url)}: no such file {database} ({missing_hint})"
    return None


def _path_unusable(url: str, database: str, error: OSError) -> str:
    """The refusal of ``url``, whose SQLite path ``database`` cannot even be looked at: errno's
    words, the database named (Python's ``[Errno 36] File name too long: '…'`` named neither)."""
    return (
        f"database {display_url(url)}: {database} cannot be used as a database file "
        f"({error.strerror or type(error).__name__})"
    )


def make_sqlite_folder(url: str) -> None:
    """Create the folder of the SQLite file ``url`` names when it is missing (as the migration
    would), so that a folder that cannot be made is said in one line naming it rather than as
    errno's ``[Errno 2] No such file or directory: '/proc/xx'``. Nothing for another database.
    ``open_store`` calls it (``create=True``), and ``kernevo worker`` before it locks the file.

    Raises:
        StoreError: the folder, or a folder above it, is a file; or it cannot be created (its
            parent does not take new folders: ``/proc``, a read-only or foreign file system);
            or its path cannot be looked at (a name too long).
    """
    from pathlib import Path

    database = _sqlite_path(url)
    if database is None:
        return
    folder = Path(database).expanduser().parent
    try:
        if folder.is_dir():
            return
        above = next((f for f in (folder, *folder.parents) if f.exists()), None)
    except OSError as error:  # a name too long
        raise StoreError(_path_unusable(url, database, error)) from None
    shown = display_url(url)
    if above is not None and not above.is_dir():
        raise StoreError(f"database {shown}: {above} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(
            f"database {shown}: folder {folder} does not exist and cannot be created "
            f"({error.strerror or type(error).__name__})"
        ) from None


def _not_kernevo(url: str, hint: str) -> str:
    """The refusal of ``url``, an existing database holding no kernevo schema (no Alembic
    revision): an empty SQLite file (0 bytes, which SQLite reads as an empty database) is
    said as such."""
    from pathlib import Path

    shown = display_url(url)
    database = _sqlite_path(url)
    try:
        empty = database is not None and Path(database).expanduser().stat().st_size == 0
    except OSError:  # gone since it was read: say what was found
        empty = False
    if empty:
        return f"database {shown}: {database} is an empty file, not a kernevo database ({hint})"
    return f"database {shown}: not a kernevo database, it has no kernevo tables ({hint})"


def _read_revision(url: str) -> tuple[Engine, str | None, ForeignSchemaError | None]:
    """A read engine on ``url`` (``db.session.make_read_engine``: it creates, migrates and
    writes nothing), the Alembic revision the database is at (``None``: no kernevo schema) and
    why it holds another application's schema (``db.migrate.schema_problem``), if it does.

    Raises:
        sqlalchemy.exc.SQLAlchemyError, OSError, ValueError, ImportError: the database cannot
            be opened or read (SQLite's "file is not a database" for a foreign file).
    """
    from alembic.runtime.migration import MigrationContext

    from db.migrate import schema_problem
    from db.session import make_read_engine

    engine = make_read_engine(url)
    try:
        with engine.connect() as connection:
            problem = schema_problem(connection)
            revision = MigrationContext.configure(connection).get_current_revision()
            return engine, revision, problem
    except BaseException:
        engine.dispose()
        raise


def _foreign(url: str, problem: ForeignSchemaError, hint: str) -> StoreError:
    """The refusal of ``url``, a database holding another application's tables."""
    return StoreError(f"database {display_url(url)}: not a kernevo database: {problem} ({hint})")


def foreign_refusal(url: str) -> StoreError | None:
    """:func:`open_store`'s refusal of ``url`` when it holds another application's tables,
    found by reading only, so that a caller refuses before it writes anything of its own
    (``kernevo worker``'s lock file beside a SQLite file); ``None`` otherwise, and when the
    database cannot be read now (:func:`open_store` says why in its own line)."""
    from pathlib import Path

    from sqlalchemy.exc import SQLAlchemyError

    database = _sqlite_path(url)
    if database is not None and not Path(database).expanduser().is_file():
        return None  # a new SQLite file: open_store creates it; a missing one has no tables
    try:
        engine, _, foreign = _read_revision(url)
    except (SQLAlchemyError, OSError, ValueError, ImportError):
        return None
    engine.dispose()
    return None if foreign is None else _foreign(url, foreign, _NEW_DATABASE_HINT)


def open_store(
    url: str, *, create: bool = True, hint: str = _CREATES_IT, foreign_hint: str | None = None
) -> Engine:
    """An engine on the lineage store at ``url``, migrated to the newest schema (Alembic),
    so one command works on a fresh SQLite file. ``create=False`` (``kernevo evolve --resume``,
    ``kernevo cancel``, ``kernevo token create|revoke``: commands with nothing to do in a new
    database) migrates only a database that already holds a kernevo schema (an older one): a
    SQLite file that does not exist, an empty file or a database without kernevo tables is
    refused, read but never written, and ``hint`` (in parentheses) says what to do instead. A
    SQLite path that is a directory is refused either way, and so is a database holding another
    application's tables (``db.migrate.schema_problem``: tables but no kernevo revision), before
    anything is written, with ``foreign_hint`` (default: point the URL at a kernevo database,
    or, with ``create``, at a new one).

    Raises:
        StoreError: one line: the URL does not parse or names an in-memory SQLite database,
            the SQLite path is a directory, the SQLite file is missing or the database is not
            a kernevo one (with ``create=False``), the database holds another application's
            schema, the server is unreachable, or a migration fails.
    """
    from alembic.util import CommandError
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from db.migrate import upgrade
    from db.session import in_memory_problem, make_engine

    if foreign_hint is None:
        foreign_hint = _NEW_DATABASE_HINT if create else FOREIGN_DATABASE_HINT
    if (problem := in_memory_problem(url)) is not None:
        raise StoreError(problem)
    if (problem := sqlite_file_problem(url, missing_hint=None if create else hint)) is not None:
        raise StoreError(problem)
    if create:
        make_sqlite_folder(url)
    try:
        if not create:
            engine, revision, foreign = _read_revision(url)
            engine.dispose()
            if foreign is not None:
                raise _foreign(url, foreign, foreign_hint)
            if revision is None:
                raise StoreError(_not_kernevo(url, hint))
        upgrade(url)  # refuses another application's schema before writing anything
        engine = make_engine(url)
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except ForeignSchemaError as error:  # a ValueError: before the generic clause
        raise _foreign(url, error, foreign_hint) from None
    except (SQLAlchemyError, CommandError, OSError, ValueError, ImportError) as error:
        raise StoreError(f"database {display_url(url)}: {_reason(error)}") from None
    return engine


def open_existing_store(url: str) -> Engine:
    """An engine on the lineage store at ``url``, which must already exist at the newest schema.

    For read-only commands (``kernevo jobs``): a read engine (``db.session.make_read_engine``;
    use it with ``read_scope``), so nothing is created, migrated or written, neither a SQLite
    file nor its folder nor a table; only ``kernevo evolve`` and ``kernevo serve`` do that.

    Raises:
        StoreError: one line: the URL does not parse, the SQLite path is a directory or does
            not exist, the server is unreachable, or the database is not at this kernevo's
            schema (an empty file, a database without kernevo tables and one holding another
            application's are said as such).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from db.migrate import head_revision
    from db.session import in_memory_problem

    shown = display_url(url)
    try:
        make_url(url)
    except ArgumentError as error:
        raise StoreError(f"database {shown}: {_reason(error)}") from None
    if (problem := in_memory_problem(url)) is not None:
        raise StoreError(problem)
    if (problem := sqlite_file_problem(url, missing_hint=_CREATES_IT)) is not None:
        raise StoreError(problem)
    try:
        engine, revision, foreign = _read_revision(url)
    except (SQLAlchemyError, OSError, ValueError, ImportError) as error:
        raise StoreError(f"database {shown}: {_reason(error)}") from None
    if foreign is not None:
        engine.dispose()
        raise _foreign(url, foreign, FOREIGN_DATABASE_HINT)
    if revision is None:
        engine.dispose()
        raise StoreError(_not_kernevo(url, _CREATES_IT))
    head = head_revision()
    if revision != head:
        engine.dispose()
        raise StoreError(f"database {shown}: is at schema {revision}, not {head} ({_CREATES_IT})")
    return engine
