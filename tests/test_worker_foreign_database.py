"""``kernevo worker`` on another application's SQLite database is refused before it writes
anything: a fresh-user trial found the refusal right but ``<file>.worker.lock`` left beside the
file, where README says nothing is written."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from kernevo.cli import main


def test_a_foreign_database_is_refused_before_the_lock_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    database = tmp_path / "other.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE users (id INTEGER)")
    connection.close()
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    url = f"sqlite:///{database}"
    code = main(["worker", "--compile-only", "--database-url", url, "--work-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err == (
        f"kernevo: database {url}: not a kernevo database: it has 1 table (users) and no kernevo "
        "schema revision (no alembic_version table) (point --database-url (or "
        "KERNEVO_DATABASE_URL) at a kernevo database, or at a new SQLite file or an empty "
        "database to start one)\n"
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["other.db"]
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before
