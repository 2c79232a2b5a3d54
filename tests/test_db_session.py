"""Engine settings and environment configuration of the store; read-only engines; locked,
damaged and unreachable databases as typed errors."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, OperationalError

from db.errors import DatabaseUnavailableError
from db.migrate import upgrade
from db.models import Job
from db.session import make_engine, make_read_engine, read_scope, session_scope
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
        # Even a writer engine's read-only transaction holds the write lock from its BEGIN
        # IMMEDIATE, so a read-then-write transaction never has to upgrade its lock (and fail)
        # halfway; readers use make_read_engine instead (below).
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


# --- read-only engines ------------------------------------------------------------------------


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Another connection holding the SQLite file exclusively (locking_mode EXCLUSIVE: even WAL
    readers must wait), as a crashed tool or a manual ``sqlite3`` shell might."""
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("CREATE TABLE IF NOT EXISTS lock_holder (x)")
        yield
        holder.execute("ROLLBACK")
    finally:
        holder.close()


def fingerprint(path: Path) -> tuple[int, bytes]:
    """The file's mtime and bytes: equal before and after means it was not written."""
    return path.stat().st_mtime_ns, path.read_bytes()


def _one_job(url: str) -> None:
    engine = make_engine(url)
    try:
        with session_scope(engine) as s:
            s.add(_job())
    finally:
        engine.dispose()


def _job() -> Job:
    return Job(
        path="trsm_small",
        dtype="float64",
        gpu_key="nvidia-h200",
        shape_bucket="m64n64",
        config={},
        backend="offline",
        model=None,
        state="waiting",
        iteration=0,
    )


def _count_jobs(engine: Engine) -> int:
    with read_scope(engine) as s:
        return s.scalar(select(func.count()).select_from(Job)) or 0


def _add_job(engine: Engine) -> None:
    with session_scope(engine) as s:
        s.add(_job())


def _write_through_read_scope(engine: Engine) -> None:
    with read_scope(engine) as s:
        s.add(_job())


def test_sqlite_readers_do_not_wait_for_a_writer_and_see_a_snapshot(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    _one_job(url)
    writer = make_engine(url)
    reader = make_read_engine(url, busy_timeout_s=0.1)
    try:
        with session_scope(writer) as w:
            w.add(_job())
            w.flush()  # the writer holds the write lock (BEGIN IMMEDIATE) and an uncommitted row
            # A deferred BEGIN: a reader that queued for the write lock would fail after 0.1 s.
            assert _count_jobs(reader) == 1
            probe = sqlite3.connect(tmp_path / "k.db", timeout=0.05)
            try:  # ... and the reader never took the write lock away from the writer
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    probe.execute("BEGIN IMMEDIATE")
            finally:
                probe.close()
        assert _count_jobs(reader) == 2
    finally:
        reader.dispose()
        writer.dispose()


def test_a_write_through_a_read_session_fails_instead_of_locking(fresh_database_url: str) -> None:
    engine = make_read_engine(fresh_database_url)
    try:
        with pytest.raises(DatabaseUnavailableError, match="read-only") as refused:
            _write_through_read_scope(engine)
        assert refused.value.kind == "read_only"
        with pytest.raises(DatabaseUnavailableError) as refused, read_scope(engine) as s:
            s.execute(text("DELETE FROM job"))
        assert refused.value.kind == "read_only"
    finally:
        engine.dispose()


def test_read_scope_refuses_a_writer_engine(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'k.db'}")
    try:
        with pytest.raises(ValueError, match="make_read_engine"), read_scope(engine):
            pass
    finally:
        engine.dispose()


def test_reading_never_creates_or_changes_the_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "k.db"
    engine = make_read_engine(f"sqlite:///{missing}")
    try:
        with pytest.raises(DatabaseUnavailableError, match="unable to open") as failed:
            _count_jobs(engine)
        assert failed.value.kind == "unreachable"
    finally:
        engine.dispose()
    assert not (tmp_path / "no").exists()

    path = tmp_path / "k.db"
    upgrade(f"sqlite:///{path}")
    _one_job(f"sqlite:///{path}")
    before = fingerprint(path)
    engine = make_read_engine(f"sqlite:///{path}")
    try:
        for _ in range(3):
            with read_scope(engine) as s:
                assert s.scalar(select(func.count()).select_from(Job)) == 1
    finally:
        engine.dispose()
    assert fingerprint(path) == before


def test_a_locked_sqlite_database_is_a_typed_error_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    upgrade(f"sqlite:///{path}")
    engine = make_read_engine(f"sqlite:///{path}", busy_timeout_s=0.2)
    try:
        with exclusive_lock(path):
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError, match="^database is locked") as failed:
                _count_jobs(engine)
            assert 0.2 <= time.monotonic() - started < 5
        assert failed.value.kind == "locked"
        assert isinstance(failed.value.__cause__, OperationalError)
        with read_scope(engine) as s:  # the lock is gone: reads work again
            assert s.scalar(select(func.count()).select_from(Job)) == 0
    finally:
        engine.dispose()


def test_a_locked_sqlite_database_fails_writers_with_the_same_error(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    upgrade(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}", busy_timeout_s=0.2)
    try:
        with exclusive_lock(path), pytest.raises(DatabaseUnavailableError) as failed:
            _add_job(engine)
        assert failed.value.kind == "locked"
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("garbage", "file is not a database"),  # SQLITE_NOTADB: the header is wrong
        ("torn_pages", "malformed"),  # SQLITE_CORRUPT: a valid header, pages overwritten
    ],
)
def test_a_damaged_sqlite_database_is_a_typed_error(
    tmp_path: Path, damage: str, reason: str
) -> None:
    path = tmp_path / "k.db"
    if damage == "garbage":
        path.write_bytes(bytes(range(256)) * 64)
    else:
        upgrade(f"sqlite:///{path}")
        _one_job(f"sqlite:///{path}")
        data = bytearray(path.read_bytes())
        page_size = int.from_bytes(data[16:18], "big")
        data[page_size:] = b"\xa5" * (len(data) - page_size)  # every page after the first
        path.write_bytes(bytes(data))
    before = fingerprint(path)
    engine = make_read_engine(f"sqlite:///{path}", busy_timeout_s=0.2)
    try:
        with pytest.raises(DatabaseUnavailableError, match=reason) as failed:
            _count_jobs(engine)
        assert failed.value.kind == "damaged"
        assert str(failed.value).startswith("database is damaged: ")
        assert "\n" not in str(failed.value)
    finally:
        engine.dispose()
    assert fingerprint(path) == before


@pytest.mark.postgres
def test_postgres_reads_are_read_only_transactions(fresh_database_url: str) -> None:
    if make_url(fresh_database_url).get_backend_name() != "postgresql":
        pytest.skip("PostgreSQL only")
    engine = make_read_engine(fresh_database_url)
    try:
        with read_scope(engine) as s:
            assert s.scalar(text("SHOW transaction_read_only")) == "on"
    finally:
        engine.dispose()


def test_an_unreachable_postgres_server_is_a_typed_error() -> None:
    with socket.socket() as sock:  # a local port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    engine = make_read_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/none")
    try:
        with pytest.raises(DatabaseUnavailableError, match="^database is unreachable") as failed:
            _count_jobs(engine)
        assert failed.value.kind == "unreachable"
    finally:
        engine.dispose()


def test_a_write_refused_as_read_only_reopens_the_database_for_the_next(tmp_path: Path) -> None:
    """SQLite opens a file it may not write read-only, and that pooled connection stayed so
    after the file became writable: the service answered every write 503 until restarted (a
    fresh-user trial, 2026-12-02, with ``chattr +i``). Here the first connection is made
    read-only (``PRAGMA query_only``, as root cannot be refused a file); the refused write drops
    the pool, and the next write, on a fresh connection, is stored."""
    from sqlalchemy import event

    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade(url)
    engine = make_engine(url)
    opened: list[int] = []

    @event.listens_for(engine, "connect")
    def first_read_only(connection: sqlite3.Connection, record: object) -> None:
        if not opened:
            connection.execute("PRAGMA query_only = ON")
        opened.append(1)

    try:
        with pytest.raises(DatabaseUnavailableError) as refused, session_scope(engine) as s:
            s.add(_job())
        assert refused.value.kind in ("read_only", "read_only_database")
        with session_scope(engine) as s:
            s.add(_job())
        reader = make_read_engine(url)
        assert _count_jobs(reader) == 1
        reader.dispose()
        assert len(opened) >= 2
    finally:
        engine.dispose()
