"""The loader's configuration, read from the environment (prefix ``KERNEVO_``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from kernevo.environment import (
    service_url_problem,
    settings_error,
    token_problem,
    warn_once,
)
from kernevo.keys import DEFAULT_KEY_DIR


class LoaderSettings(BaseSettings):
    """Where the loader finds the service, keeps its disk cache, and which kernels it trusts.

    Environment variables: ``KERNEVO_API_URL`` (the disk cache binds each champion and each
    remembered "no champion" to it: :mod:`kernevo.cache`), ``KERNEVO_API_TOKEN`` (sent to the
    service as a bearer token when set: a read token, for a service whose champion routes
    require one; at least :data:`kernevo.environment.MIN_TOKEN_LENGTH` (32) characters, the
    service's own rule), ``KERNEVO_CACHE_DIR`` (a folder, created on the first write; a path
    that exists and is not a folder is refused),
    ``KERNEVO_CACHE_MAX_AGE_S`` (seconds, default 3600: a disk-cache entry written less than
    this long ago that passes the trust checks is used without asking the service, and a 404
    the service answered less than this long ago is not asked again; older ones are asked
    about first; 0: always ask the service first), ``KERNEVO_REQUEST_TIMEOUT_S``;
    trust: ``KERNEVO_TRUSTED_KEYS`` (comma-separated Ed25519
    public keys, each base64 of the 32 raw bytes or a path to a PEM key file),
    ``KERNEVO_KEY_DIR`` (the local key pair ``kernevo evolve`` creates, default
    ``~/.config/kernevo/keys``), ``KERNEVO_TRUST_LOCAL_KEY`` (trust that local public key when
    it is private to this user; default true), ``KERNEVO_LOCK_FILE`` (only the champions it
    pins), ``KERNEVO_REQUIRE_SAME_TOOLKIT`` (cuBLAS, instead of the champion served with the
    difference stated, when its certificate's NVIDIA driver, CUDA driver API or NVRTC version
    differs from this device's or is unknown; default false). Unknown keyword arguments are
    refused (``extra="forbid"``).

    ``KERNEVO_WARM_START`` (:mod:`kernevo.warm_start` reads it raw, before this class is built:
    its point is that a warm start builds none) and ``KERNEVO_DEBUG`` (the CLI's) are fields
    only so that a value that is not a boolean is refused here, as every other boolean:
    :data:`kernevo.environment.BOOLEAN_TRUE` or :data:`~kernevo.environment.BOOLEAN_FALSE`, any
    case (the warm start reads the same set, :func:`kernevo.environment.parse_boolean`, and
    declines any other value so that this class refuses it). Unset or true, ``kernevo.load``
    replays the decisions an earlier process made the full way, from the warm-start memo beside
    the disk cache, while the ``KERNEVO_*`` variables, the trust inputs, the GPU, the loader's
    code and the disk-cache files they read are unchanged; false (``0``, ``false``, ``no``,
    ``off`` …) turns the memo off: nothing read, nothing written. The warm start reads
    ``KERNEVO_CACHE_DIR``,
    ``KERNEVO_KEY_DIR``, ``KERNEVO_TRUSTED_KEYS``, ``KERNEVO_LOCK_FILE`` and
    ``KERNEVO_CACHE_MAX_AGE_S`` raw too, and writes a memo only when it read them as this class
    does (``WarmStart.agrees_with``).

    Every ``KERNEVO_*`` variable of the environment is checked against the catalogue
    (``kernevo.environment``) when settings are built: an unknown one (a typo, or a variable of
    another layer's) is logged once as a warning on the ``"kernevo"`` logger (the loader runs
    inside someone's application, so it warns about names it does not read). A variable this
    class reads that is empty, does not parse or is out of range is refused (``SettingsError``
    below), as the CLI refuses it.

    ``trusted_keys`` given as a keyword argument is a sequence of entries; a bare string is read
    as the variable is, comma-separated (:func:`kernevo.load` refuses a bare string instead).

    Raises:
        kernevo.environment.SettingsError: (a ``ValueError``) one line naming the variable or
            argument that does not parse, is empty or out of range (e.g.
            ``KERNEVO_REQUEST_TIMEOUT_S=abc``, ``KERNEVO_WARM_START=abc``, a
            ``KERNEVO_API_TOKEN`` under 32 characters, a ``KERNEVO_CACHE_DIR`` that is a file).
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    api_url: str = "http://127.0.0.1:8000"
    api_token: SecretStr | None = None
    cache_dir: Path = Path("~/.cache/kernevo")
    # HTTP's max-age, decided by the loader (the service sends no Cache-Control): an hour keeps
    # a process starting within it off the network (issue 11: load + first call under 50 ms)
    # while a newly promoted champion still reaches every loader within the hour. A week at
    # most: beyond that a unit typo (ms) is likelier than intent.
    cache_max_age_s: float = Field(default=3600.0, ge=0, le=7 * 24 * 3600, allow_inf_nan=False)
    # The first call of each shape waits for the service; ten minutes bounds a unit typo
    # (2000 meant as milliseconds) while allowing any real network.
    request_timeout_s: float = Field(default=2.0, gt=0, le=600, allow_inf_nan=False)
    trusted_keys: Annotated[tuple[str, ...], NoDecode] = ()
    key_dir: Path = DEFAULT_KEY_DIR
    trust_local_key: bool = True
    lock_file: Path | None = None
    require_same_toolkit: bool = False
    warm_start: bool = True
    debug: bool = False

    def __init__(self, **values: Any) -> None:
        warn_once(os.environ, validated=(f"KERNEVO_{name}" for name in type(self).model_fields))
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise settings_error(error, arguments=values) from None

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_empty(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for the default")
        return value

    @field_validator("api_url")
    @classmethod
    def _service_url(cls, value: str) -> str:
        problem = service_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value.rstrip("/")

    @field_validator("api_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        problem = None if value is None else token_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("cache_dir", "key_dir", "lock_file")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @field_validator("cache_dir")
    @classmethod
    def _a_folder(cls, value: Path) -> Path:
        # Refused here rather than at the first write, where the loader would only warn and
        # run without its disk cache (offline and warm start both lost, silently).
        if value.exists() and not value.is_dir():
            raise ValueError("a path that exists and is not a directory; name a folder")
        return value

    @field_validator("trusted_keys", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value
