"""Alembic environment: migrate on the connection ``db.migrate`` hands over, or on
``KERNEVO_DATABASE_URL`` when run from the ``alembic`` command line."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from db.base import Base
from db.models import Champion, ChampionPromotion, Evaluation, Job, Program  # noqa: F401
from db.session import make_engine
from db.settings import DatabaseSettings

config = context.config
target_metadata = Base.metadata


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit the SQL for ``KERNEVO_DATABASE_URL``'s dialect instead of running it."""
    context.configure(
        url=DatabaseSettings().database_url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate on the handed-over connection, or on a fresh one to ``KERNEVO_DATABASE_URL``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    if config.config_file_name is not None:
        fileConfig(config.config_file_name)
    engine = make_engine(DatabaseSettings().database_url)
    try:
        with engine.begin() as fresh:
            _configure(fresh)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
