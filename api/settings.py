"""The service's own settings, from the environment (``KERNEVO_API_TOKEN``)."""

from __future__ import annotations

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    """``KERNEVO_API_TOKEN``: the bearer token writes must carry.

    Unset: every write is refused with 401, so a service started without a token is read-only
    rather than open. An empty or blank value is refused (it reads as a forgotten token).

    Raises:
        pydantic.ValidationError: an empty value.
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    api_token: SecretStr | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_empty(cls, value: object) -> object:
        # An empty variable is a mistake, not "use the default": unset it instead.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; unset it for the default")
        return value

    def token(self) -> str | None:
        """The configured token, or ``None`` when writes are disabled."""
        return None if self.api_token is None else self.api_token.get_secret_value()
