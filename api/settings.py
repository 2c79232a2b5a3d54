"""The service's own settings, from the environment (``KERNEVO_API_TOKEN``,
``KERNEVO_API_KERNELS_REQUIRE_READ``)."""

from __future__ import annotations

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    """How the service authenticates requests.

    ``KERNEVO_API_TOKEN``: a configured token with the ``write`` scope, accepted beside the
    tokens of the database (``kernevo token create``); unset, only those are accepted. An empty
    or blank value is refused (it reads as a forgotten token).

    ``KERNEVO_API_KERNELS_REQUIRE_READ``: ``false`` (default) leaves ``GET /v1/kernels/best`` and
    ``GET /v1/manifest`` open to anyone, as loaders ask them without a token; ``true`` makes them
    need a ``read`` token like every other ``/v1`` read.

    Raises:
        pydantic.ValidationError: an empty value, or a boolean that does not parse.
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    api_token: SecretStr | None = None
    api_kernels_require_read: bool = False

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_empty(cls, value: object) -> object:
        # An empty variable is a mistake, not "use the default": unset it instead.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for the default")
        return value

    def token(self) -> str | None:
        """The configured write token, or ``None`` when none is configured."""
        return None if self.api_token is None else self.api_token.get_secret_value()
