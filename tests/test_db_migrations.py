"""Alembic owns the schema: upgrade, downgrade and re-upgrade on SQLite and PostgreSQL, and
concurrent first starts that all succeed."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url

from db.migrate import current_revision, downgrade, head_revision, upgrade
from db.session import make_engine

TABLES = {"job", "program", "evaluation", "champion", "champion_promotion", "api_token"}


def _inspect(url: str) -> tuple[set[str], dict[str, object]]:
    engine = make_engine(url)
    try:
        inspector = inspect(engine)
        tables = set(inspector.get_table_names())
        details: dict[str, object] = {}
        if "champion" in tables:
            details["champion_unique"] = [
                (u["name"], u["column_names"]) for u in inspector.get_unique_constraints("champion")
            ]
            details["program_fks"] = sorted(
                fk["name"] for fk in inspector.get_foreign_keys("program")
            )
            details["job_columns"] = {c["name"] for c in inspector.get_columns("job")}
        return tables, details
    finally:
        engine.dispose()


def test_upgrade_creates_named_schema_and_downgrade_drops_it(empty_database_url: str) -> None:
    url = empty_database_url
    assert current_revision(url) is None
    upgrade(url)
    tables, details = _inspect(url)
    assert tables == TABLES | {"alembic_version"}
    assert current_revision(url) == head_revision()
    key_columns = ["path", "dtype", "gpu_key", "shape_bucket"]
    unique_key = ("uq_champion_path_dtype_gpu_key_shape_bucket", key_columns)
    assert details["champion_unique"] == [unique_key]
    assert details["program_fks"] == ["fk_program_job_id_job", "fk_program_parent_id_program"]
    job_columns = details["job_columns"]
    assert isinstance(job_columns, set)
    assert {"state", "heartbeat_at", "best_speedup", "last_failure_kind"} <= job_columns

    downgrade(url, "base")
    tables, _ = _inspect(url)
    assert tables & TABLES == set()
    assert current_revision(url) is None

    upgrade(url)
    assert _inspect(url)[0] == TABLES | {"alembic_version"}


def test_upgrade_is_idempotent(empty_database_url: str) -> None:
    upgrade(empty_database_url)
    upgrade(empty_database_url)
    assert current_revision(empty_database_url) == head_revision()


def test_migrations_run_from_any_working_directory(tmp_path: Path) -> None:
    """``db.migrate`` finds alembic.ini through the package path, not the working directory."""
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    code = f"import db.migrate as m; m.upgrade({url!r}); print(m.current_revision({url!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == head_revision()


def test_models_match_the_migrations(fresh_database_url: str) -> None:
    """Autogenerate finds nothing to add: the ORM models and the migrations describe one schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from db.base import Base
    from db.models import Job  # noqa: F401  (registers the tables on Base.metadata)

    engine = make_engine(fresh_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


# --- concurrent first starts -------------------------------------------------------------------

# Rounds of three first starts released together; each round on a database of its own.
MIGRATION_ROUNDS = 20
STARTERS = 3


def _first_start(barrier: Any, url: str, results: Any) -> None:
    """One worker's first start (a forked process): wait for the others, then migrate."""
    try:
        barrier.wait(timeout=60)
        upgrade(url)
        results.put("ok")
    except BaseException as exc:  # reported to the test process, which asserts on it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        results.put(f"{type(exc).__name__}: {first}")


def _start_together(url: str) -> list[tuple[int | None, str]]:
    """``STARTERS`` processes released by one barrier, each running ``upgrade(url)``; their
    exit codes and outcomes. Forked, not spawned: a spawned interpreter takes a second to import
    SQLAlchemy and Alembic, and the barrier makes the start order irrelevant anyway."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(STARTERS)
    results = context.Queue()
    workers = [
        context.Process(target=_first_start, args=(barrier, url, results)) for _ in range(STARTERS)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    return [(worker.exitcode, outcome) for worker, outcome in zip(workers, outcomes, strict=True)]


@contextmanager
def _fresh_postgres_database(server_url: str) -> Iterator[str]:
    """A database created for the caller (CREATE DATABASE) and dropped afterwards."""
    name = f"kernevo_first_start_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.mark.postgres
def test_concurrent_first_starts_on_fresh_postgres_databases_all_succeed(
    postgres_server_url: str,
) -> None:
    """Three workers migrating one fresh database at once all succeed, 20 rounds running: the
    advisory lock queues them (without it, CREATE TABLE races end in a duplicate pg_type key)."""
    for round_no in range(MIGRATION_ROUNDS):
        with _fresh_postgres_database(postgres_server_url) as url:
            started = _start_together(url)
            assert started == [(0, "ok")] * STARTERS, (round_no, started)
            assert current_revision(url) == head_revision()
            assert _inspect(url)[0] == TABLES | {"alembic_version"}


def test_concurrent_first_starts_on_a_fresh_sqlite_file_all_succeed(tmp_path: Path) -> None:
    for round_no in range(MIGRATION_ROUNDS // 4):
        url = f"sqlite:///{tmp_path / f'first-start-{round_no}.db'}"
        started = _start_together(url)
        assert started == [(0, "ok")] * STARTERS, (round_no, started)
        assert current_revision(url) == head_revision()
