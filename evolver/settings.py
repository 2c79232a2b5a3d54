"""The evolver's environment configuration (pydantic-settings, prefix ``KERNEVO_``)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from kernevo.environment import http_url_problem
from kernevo.keys import DEFAULT_KEY_DIR

# The CLI's --gpu range: far above any machine's device count, small enough to be a number.
_MAX_DEVICE_INDEX = 1023
# What a POSIX shell accepts as a variable name.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EvolverSettings(BaseSettings):
    """Where a job finds its LLM, which GPU it evaluates on and where it keeps its files.

    Environment variables: ``KERNEVO_LLM_BASE_URL``, ``KERNEVO_LLM_MODEL``,
    ``KERNEVO_LLM_API_KEY_ENV`` (the *name* of the variable holding the key, so the key itself
    never lands in a job record), ``KERNEVO_LLM_ALLOWED_BASE_URLS`` (comma-separated endpoints a
    job queued through the API may name besides ``KERNEVO_LLM_BASE_URL``: the worker's key goes
    only there, ``evolver.queued_llm``), ``KERNEVO_GPU (device index), ``KERNEVO_WORK_DIR``
    (checkpoints, OpenEvolve output, evaluation reports), ``KERNEVO_SIGNING_KEY`` (PEM Ed25519
    private key that signs promoted champions; unset: the local key pair in ``KERNEVO_KEY_DIR``,
    default ``~/.config/kernevo/keys``, created on the first promotion). With no base URL the
    built-in offline mutator proposes the diffs. Other ``KERNEVO_*`` variables belong to other
    layers and are ignored here; unknown keyword arguments are refused. Empty values are
    refused (unset the variable for the default).

    Raises:
        pydantic.ValidationError: a value that does not parse or is out of range (e.g.
            ``KERNEVO_GPU=first``, ``KERNEVO_GPU=-1``, ``KERNEVO_LLM_BASE_URL=localhost:11434``).
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key_env: str | None = None
    llm_allowed_base_urls: str | None = None
    gpu: int = Field(default=0, ge=0, le=_MAX_DEVICE_INDEX)
    work_dir: Path = Path("./runs")
    signing_key: Path | None = None
    key_dir: Path = DEFAULT_KEY_DIR

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_empty(cls, value: object) -> object:
        # An empty variable is a mistake, not "use the default": unset it instead.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for the default")
        return value

    @field_validator("llm_base_url")
    @classmethod
    def _strip_slash(cls, value: str | None) -> str | None:
        problem = http_url_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value.rstrip("/") if value else None

    @field_validator("llm_allowed_base_urls")
    @classmethod
    def _http_urls(cls, value: str | None) -> str | None:
        for url in [] if value is None else value.split(","):
            problem = http_url_problem(url.strip())
            if problem is not None:
                raise ValueError(f"{problem} (a comma-separated list of http(s) URLs)")
        return value

    def allowed_base_urls(self) -> frozenset[str]:
        """The endpoints a queued job may send this process's LLM key to: its own
        ``KERNEVO_LLM_BASE_URL`` and each of ``KERNEVO_LLM_ALLOWED_BASE_URLS``, without a
        trailing slash."""
        urls = [self.llm_base_url or "", *(self.llm_allowed_base_urls or "").split(",")]
        return frozenset(url.strip().rstrip("/") for url in urls if url.strip())

    @field_validator("llm_api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError("not an environment variable name (letters, digits and _)")
        return value

    @field_validator("work_dir", "signing_key", "key_dir")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None
