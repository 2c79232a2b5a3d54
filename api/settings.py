"""The service's own settings, from the environment (``KERNEVO_API_TOKEN``)."""

from __future__ import annotations

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiSettings(BaseSettings):
    """``KERNEVO_API_TOKEN``: the bearer token writes must carry.

    Unset or empty: every write is refused with 401, so a service started without a token is
    read-only rather than open.
    """

    model_config = SettingsConfigDict(env_prefix="KERNEVO_", extra="forbid")

    api_token: SecretStr | None = None

    def token(self) -> str | None:
        """The configured token, or ``None`` when writes are disabled."""
        if self.api_token is None or not self.api_token.get_secret_value():
            return None
        return self.api_token.get_secret_value()
