"""Alembic owns the schema: upgrade, downgrade and re-upgrade on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import inspect

from db.migrate import current_revision, downgrade, head_revision, upgrade
from db.session import make_engine

TABLES = {"job", "program", "evaluation", "champion", "champion_promotion"}


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
