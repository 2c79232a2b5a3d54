"""The evolver's environment configuration (pydantic-settings, prefix ``KERNEVO_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class EvolverSettings(BaseSettings):
    """Where a job finds its LLM, which GPU it evaluates on and where it keeps its files.

    Environment variables: ``KERNEVO_LLM_BASE_URL``, ``KERNEVO_LLM_MODEL``,
    ``KERNEVO_LLM_API_KEY_ENV`` (the *name* of the variable holding the key, so the key itself
    never lands in a job record), ``KERNEVO_GPU`` (device index), ``KERNEVO_WORK_DIR``
    (checkpoints, OpenEvolve output, evaluation reports). With no base URL the built-in offline
    mutator proposes the diffs. Other ``KERNEVO_*`` variables belong to other layers and are
    ignored here; unknown keyword arguments are refused.

    Raises:
        pydantic.ValidationError: a value that does not parse (e.g. ``KERNEVO_GPU=first``).
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key_env: str | None = None
    gpu: int = Field(default=0, ge=0)
    work_dir: Path = Path("./runs")

    @field_validator("llm_base_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else None

    @field_validator("work_dir")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()
