"""The loader's configuration, read from the environment (prefix ``KERNEVO_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class LoaderSettings(BaseSettings):
    """Where the loader finds the service and keeps its disk cache.

    Environment variables: ``KERNEVO_API_URL``, ``KERNEVO_CACHE_DIR``,
    ``KERNEVO_REQUEST_TIMEOUT_S``. Unknown keyword arguments are refused (``extra="forbid"``).

    Raises:
        pydantic.ValidationError: a value that does not parse (e.g. a negative timeout).
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    api_url: str = "http://127.0.0.1:8000"
    cache_dir: Path = Path("~/.cache/kernevo")
    request_timeout_s: float = Field(default=2.0, gt=0)

    @field_validator("api_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("cache_dir")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()
