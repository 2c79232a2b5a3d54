"""Where the lineage store lives, from the environment (``KERNEVO_DATABASE_URL``)."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    """``KERNEVO_DATABASE_URL``: a SQLAlchemy URL.

    Default ``sqlite:///./kernevo.db`` (a file in the working directory, nothing to start); for
    many workers use PostgreSQL through psycopg 3: ``postgresql+psycopg://user:pw@host:5432/db``.
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    database_url: str = "sqlite:///./kernevo.db"
