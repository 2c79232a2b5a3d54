"""The service's own settings, from the environment (``KERNEVO_API_TOKEN``,
``KERNEVO_API_KERNELS_REQUIRE_READ``)."""

from __future__ import annotations

from pydantic import SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The shortest configured write token accepted: 32 characters of ``secrets.token_urlsafe(32)``
# carry 192 bits, far past guessing; a one-letter ``KERNEVO_API_TOKEN=a`` would have been a
# write token anyone could guess (the database's own tokens are ``kvt_`` + 43 characters).
MIN_TOKEN_LENGTH = 32


class ApiSettings(BaseSettings):
    """How the service authenticates requests.

    ``KERNEVO_API_TOKEN``: a configured token with the ``write`` scope, accepted beside the
    tokens of the database (``kernevo token create``); unset, only those are accepted. An empty
    or blank value is refused (it reads as a forgotten token), and so is one shorter than
    :data:`MIN_TOKEN_LENGTH` (32) characters: ``kernevo serve`` and every other command refuse
    it at start with one line (exit 2), ``api.app.create_app`` raises.

    ``KERNEVO_API_KERNELS_REQUIRE_READ``: ``false`` (default) leaves the champion routes
    (``GET /v1/kernels/best``, ``GET /v1/manifest``, ``GET /v1/champions``: ``api.deps``'s
    ``KernelsScope``) open to anyone, as loaders ask them without a token; ``true`` makes them
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

    @field_validator("api_token")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"a configured token must be at least {MIN_TOKEN_LENGTH} characters, not "
                f"{len(value.get_secret_value())} (make one with: python3 -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        return value

    def token(self) -> str | None:
        """The configured write token, or ``None`` when none is configured."""
        return None if self.api_token is None else self.api_token.get_secret_value()
