"""Another application's database is refused by every command that migrates, nothing written
(fresh-user trial: ``kernevo serve --database-url sqlite:///./other.db`` on a file holding only
another program's table added all of kernevo's tables, while ``kernevo jobs`` refused the same
file as "not a kernevo database").

The one check is ``db.migrate.schema_problem``, run by ``db.migrate.upgrade`` (on SQLite first
through a read-only connection, so the writer's switch to WAL never touches the file, then again
inside the migration's transaction) and by ``evolver.store``'s readers: a database with tables
but no ``alembic_version`` table, an empty one beside other tables, or a revision none of
``db/migrations`` names. An empty database and a missing SQLite file are still created and
migrated. Exit 1 (an error of the input), one line. SQLite always; PostgreSQL at
``KERNEVO_TEST_POSTGRES_URL`` in a schema of its own, dropped afterwards (conftest's
``empty_database_url``)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from db.errors import ForeignSchemaError
from db.migrate import current_revision, downgrade, head_revision, schema_problem, upgrade
from evolver.errors import StoreError
from evolver.store import display_url, open_store
from kernevo.cli import main

KERNEVO_DATABASE = "point --database-url (or KERNEVO_DATABASE_URL) at a kernevo database"
NEW_DATABASE = f"{KERNEVO_DATABASE}, or at a new SQLite file or an empty database to start one"
JOB_DATABASE = "point --database-url (or KERNEVO_DATABASE_URL) at the job's database"
NO_VERSION_TABLE = (
    "it has 1 table (notes) and no kernevo schema revision (no alembic_version table)"
)
FOREIGN_REVISION = (
    "its alembic_version revision 'feedface0001' is not one of kernevo's (another "
    "application's migrations, or a newer kernevo's)"
)

# Every command that would migrate a database it is given (serve is refused before it binds).
MIGRATING = [
    (["serve", "--port", "1"], NEW_DATABASE),
    (["evolve", "--path", "trsm_small", "--dtype", "float64", "--compile-only"], NEW_DATABASE),
    (["worker", "--compile-only"], NEW_DATABASE),
    (["token", "create", "--scope", "read"], KERNEVO_DATABASE),
    (["token", "revoke", "1"], KERNEVO_DATABASE),
    (["evolve", "--resume", "41"], JOB_DATABASE),
    (["cancel", "41"], JOB_DATABASE),
]
READING = [
    (["jobs"], KERNEVO_DATABASE),
    (["token", "list"], KERNEVO_DATABASE),
    (
        ["export", "--op", "trsm", "--dtype", "float64", "--gpu", "nvidia-h200", "-o", "out"],
        KERNEVO_DATABASE,
    ),
]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The command's working folder: a new temporary one (``--work-dir`` defaults below it)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The one line ``kernevo argv`` printed on stderr, having exited 1 with nothing on stdout."""
    status = main(argv)
    captured = capsys.readouterr()
    assert (status, captured.out) == (1, ""), captured.err
    assert captured.err.count("\n") == 1, captured.err
    return captured.err.rstrip("\n")


def _sqlite(path: Path, *statements: str) -> None:
    connection = sqlite3.connect(path)
    for statement in statements:
        connection.execute(statement)
    connection.commit()
    connection.close()


def _database_files(folder: Path, name: str) -> dict[str, bytes]:
    """The database file and any SQLite side file (-wal, -shm, -journal) with their bytes; the
    worker's ``<db>.worker.lock`` is its own and left out."""
    return {
        p.name: p.read_bytes()
        for p in folder.iterdir()
        if p.name.startswith(name) and not p.name.endswith(".worker.lock")
    }


NOTES = ("CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')")
ALIEN_VERSION = (
    "CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)",
    "INSERT INTO alembic_version VALUES ('feedface0001')",
    "CREATE TABLE widgets (x INTEGER)",
)


@pytest.mark.parametrize(("argv", "hint"), MIGRATING + READING)
@pytest.mark.parametrize(
    ("statements", "problem"), [(NOTES, NO_VERSION_TABLE), (ALIEN_VERSION, FOREIGN_REVISION)]
)
def test_another_applications_sqlite_file_is_refused_and_left_as_it_was(
    in_tmp: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    hint: str,
    statements: tuple[str, ...],
    problem: str,
) -> None:
    _sqlite(in_tmp / "other.db", *statements)
    before = _database_files(in_tmp, "other.db")
    url = "sqlite:///./other.db"
    assert _refusal(capsys, [*argv, "--database-url", url]) == (
        f"kernevo: database {url}: not a kernevo database: {problem} ({hint})"
    )
    assert _database_files(in_tmp, "other.db") == before


def test_an_empty_version_table_beside_other_tables_is_foreign(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sqlite(
        in_tmp / "other.db",
        "CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)",
        *NOTES,
    )
    before = _database_files(in_tmp, "other.db")
    url = "sqlite:///./other.db"
    assert _refusal(capsys, ["serve", "--port", "1", "--database-url", url]) == (
        f"kernevo: database {url}: not a kernevo database: it has 2 tables (alembic_version, "
        f"notes) and no kernevo schema revision (alembic_version is empty) ({NEW_DATABASE})"
    )
    assert _database_files(in_tmp, "other.db") == before


def test_many_tables_are_named_up_to_five(in_tmp: Path) -> None:
    _sqlite(in_tmp / "other.db", *(f"CREATE TABLE t{i} (x INTEGER)" for i in range(7)))
    with pytest.raises(ForeignSchemaError) as raised:
        upgrade("sqlite:///./other.db")
    assert str(raised.value) == (
        "it has 7 tables (t0, t1, t2, t3, t4, …) and no kernevo schema revision "
        "(no alembic_version table)"
    )
    assert raised.value.tables == tuple(f"t{i}" for i in range(7))
    assert raised.value.revision is None


# --- either backend: the one check, in db.migrate ----------------------------------------------


def test_another_applications_schema_is_refused_on_either_backend(
    empty_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """PostgreSQL too (a schema of its own, dropped by the fixture): the check runs inside the
    migration's transaction, which it rolls back; the table stays the only one."""
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE notes (body TEXT)"))
            connection.execute(text("INSERT INTO notes VALUES ('mine')"))
        with pytest.raises(ForeignSchemaError, match=r"^it has 1 table \(notes\) and no kernevo"):
            upgrade(empty_database_url)
        shown = display_url(empty_database_url)
        for argv in (["serve", "--port", "1"], ["token", "create", "--scope", "read"]):
            hint = NEW_DATABASE if argv[0] == "serve" else KERNEVO_DATABASE
            assert _refusal(capsys, [*argv, "--database-url", empty_database_url]) == (
                f"kernevo: database {shown}: not a kernevo database: {NO_VERSION_TABLE} ({hint})"
            )
        assert inspect(engine).get_table_names() == ["notes"]
        with engine.connect() as connection:
            assert connection.execute(text("SELECT body FROM notes")).scalars().all() == ["mine"]
            assert schema_problem(connection) is not None
    finally:
        engine.dispose()


def test_a_foreign_revision_is_refused_on_either_backend(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            for statement in ALIEN_VERSION:
                connection.execute(text(statement))
        with pytest.raises(
            StoreError, match=re.escape(f": not a kernevo database: {FOREIGN_REVISION} ")
        ):
            open_store(empty_database_url).dispose()
        assert sorted(inspect(engine).get_table_names()) == ["alembic_version", "widgets"]
    finally:
        engine.dispose()


# --- what is still created and migrated --------------------------------------------------------


def test_an_empty_database_of_either_backend_is_still_migrated(empty_database_url: str) -> None:
    assert schema_problem_of(empty_database_url) is None
    open_store(empty_database_url).dispose()
    assert current_revision(empty_database_url) == head_revision()


def test_a_missing_sqlite_file_and_its_folder_are_still_created(in_tmp: Path) -> None:
    url = "sqlite:///./new/lineage.db"
    open_store(url).dispose()
    assert current_revision(url) == head_revision()


def test_an_older_kernevo_schema_and_one_at_base_are_still_migrated(in_tmp: Path) -> None:
    url = "sqlite:///./kernevo.db"
    upgrade(url)
    downgrade(url, "-1")
    assert schema_problem_of(url) is None
    open_store(url).dispose()
    assert current_revision(url) == head_revision()
    downgrade(url, "base")  # only alembic_version is left, empty: kernevo's own
    assert schema_problem_of(url) is None
    upgrade(url)
    assert current_revision(url) == head_revision()


def schema_problem_of(url: str) -> ForeignSchemaError | None:
    """``schema_problem`` on a plain connection to ``url``."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return schema_problem(connection)
    finally:
        engine.dispose()
