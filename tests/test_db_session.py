"""Engine settings and environment configuration of the store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from db.session import make_engine, session_scope
from db.settings import DatabaseSettings


def test_database_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNEVO_DATABASE_URL", raising=False)
    assert DatabaseSettings().database_url == "sqlite:///./kernevo.db"
    monkeypatch.setenv("KERNEVO_DATABASE_URL", "postgresql+psycopg://u@db:5432/kernevo")
    assert DatabaseSettings().database_url == "postgresql+psycopg://u@db:5432/kernevo"


def test_sqlite_engine_uses_wal_foreign_keys_and_immediate_transactions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nested' / 'folder' / 'k.db'}"
    engine: Engine = make_engine(url)
    try:
        assert (tmp_path / "nested" / "folder").is_dir()
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            connection.execute(text("CREATE TABLE parent (id INTEGER PRIMARY KEY)"))
            connection.execute(
                text("CREATE TABLE child (id INTEGER PRIMARY KEY, p INTEGER REFERENCES parent(id))")
            )
            connection.commit()
        with pytest.raises(IntegrityError, match="FOREIGN KEY"), session_scope(engine) as s:
            s.execute(text("INSERT INTO child (id, p) VALUES (1, 42)"))
        # Even a read-only transaction holds the write lock from its BEGIN IMMEDIATE, so a
        # read-then-write transaction never has to upgrade its lock (and fail) halfway.
        with engine.connect() as holder:
            holder.execute(text("SELECT 1"))
            assert holder.in_transaction()
            probe = sqlite3.connect(tmp_path / "nested" / "folder" / "k.db", timeout=0.1)
            try:
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    probe.execute("BEGIN IMMEDIATE")
            finally:
                probe.close()
            holder.rollback()
    finally:
        engine.dispose()
