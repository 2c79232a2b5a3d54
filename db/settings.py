"""Where the lineage store lives, from the environment (``KERNEVO_DATABASE_URL``)."""

from __future__ import annotations

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class DatabaseSettings(BaseSettings):
    """``KERNEVO_DATABASE_URL``: a SQLAlchemy URL.

    Default ``sqlite:///./kernevo.db`` (a file in the working directory, nothing to start); for
    many workers use PostgreSQL through psycopg 3: ``postgresql+psycopg://user:pw@host:5432/db``.
    An empty value is refused (unset the variable for the default).

    Raises:
        pydantic.ValidationError: an empty value.
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    database_url: str = "sqlite:///./kernevo.db"

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_empty(cls, value: object) -> object:
        # An empty variable is a mistake, not "use the default": unset it instead.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for the default")
        return value
