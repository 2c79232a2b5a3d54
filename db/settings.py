"""Where the lineage store lives, from the environment (``KERNEVO_DATABASE_URL``)."""

from __future__ import annotations

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./kernevo.db"


class DatabaseSettings(BaseSettings):
    """``KERNEVO_DATABASE_URL``: a SQLAlchemy URL.

    Default ``sqlite:///./kernevo.db`` (a file in the working directory, nothing to start); for
    many workers use PostgreSQL through psycopg 3: ``postgresql+psycopg://user:pw@host:5432/db``.
    An empty value is refused (unset the variable for the default), and so is a value that is
    not a SQLAlchemy URL or names a dialect SQLAlchemy does not know (``db.session.url_problem``):
    the CLI exits 2 for either, as for any ``KERNEVO_*`` value that does not parse.

    Raises:
        pydantic.ValidationError: an empty value, or one that names no database.
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    database_url: str = DEFAULT_DATABASE_URL

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_empty(cls, value: object) -> object:
        # An empty variable is a mistake, not "use the default": unset it instead.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for the default")
        return value

    @field_validator("database_url")
    @classmethod
    def _refuse_unparsable(cls, value: str) -> str:
        if value == DEFAULT_DATABASE_URL:  # no SQLAlchemy import for the default
            return value
        from db.session import url_problem

        problem = url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value
