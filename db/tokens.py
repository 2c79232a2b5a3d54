"""Bearer tokens of the REST API, stored hashed, each with a scope (``read`` or ``write``).

A token is ``kvt_`` followed by 43 URL-safe base64 characters: 32 bytes (256 bits) from
``secrets.token_bytes``. Only its SHA-256 is stored (``api_token.token_sha256``). A plain,
unsalted, unkeyed hash is enough here because the secret is uniformly random and 256 bits long:
salts and slow key-derivation functions (bcrypt, scrypt, Argon2) exist to stop dictionary and
brute-force guessing of low-entropy passwords, and nobody can enumerate 2^256 candidates, while a
stolen table of digests gives no token back (SHA-256 preimage resistance). A slow hash would only
add its cost (tens of milliseconds) to every authenticated request. The lookup is by digest on a
unique index, so it does not compare secrets byte by byte; what its timing could leak is a
digest's prefix, from which the token cannot be recovered.

Like ``db.repository``, every function takes an open ``Session`` and never commits.
"""

from __future__ import annotations

import hashlib
import secrets
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.errors import InvalidValueError, NotFoundError
from db.models import ApiToken

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_TOKEN_LENGTH",
    "TOKEN_PREFIX",
    "Scope",
    "create_token",
    "find_token",
    "list_tokens",
    "revoke_token",
    "token_sha256",
]

# Marks a kernevo token in logs and secret scanners; not part of its entropy.
TOKEN_PREFIX = "kvt_"
# Random bytes per token: 256 bits.
TOKEN_BYTES = 32
# A presented token longer than this cannot be one of ours (ours are 47 characters; a configured
# KERNEVO_API_TOKEN may be longer): it is refused without hashing it.
MAX_TOKEN_LENGTH = 1024
MAX_NAME_LENGTH = 128


class Scope(StrEnum):
    """What a token may do: ``read`` sources, reports, lineage and jobs; ``write`` also creates
    and cancels jobs (write implies read)."""

    READ = "read"
    WRITE = "write"

    def allows(self, needed: Scope) -> bool:
        """Whether a token of this scope may do what ``needed`` guards."""
        return self is Scope.WRITE or needed is Scope.READ


def token_sha256(secret: str) -> str:
    """Lower-case hex SHA-256 of the token's UTF-8 bytes (what ``api_token`` stores)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def _scope(value: str) -> Scope:
    try:
        return Scope(value)
    except ValueError:
        raise InvalidValueError(f"unknown scope {value!r}; expected read or write") from None


def _name(value: str) -> str:
    name = value.strip()
    if not name or len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise InvalidValueError(
            f"a token name is 1..{MAX_NAME_LENGTH} printable characters on one line"
        )
    return name


def create_token(s: Session, *, scope: str, name: str) -> tuple[ApiToken, str]:
    """A new token of ``scope`` called ``name``: its row (id and ``created_at`` loaded) and its
    secret, which exists only in this return value (the row keeps its SHA-256).

    Raises:
        InvalidValueError: ``scope`` is not ``read`` or ``write``, or ``name`` is empty, longer
            than ``MAX_NAME_LENGTH`` or not printable.
    """
    checked_scope, checked_name = _scope(scope), _name(name)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
    row = ApiToken(name=checked_name, scope=checked_scope.value, token_sha256=token_sha256(secret))
    s.add(row)
    s.flush()
    s.refresh(row)
    return row, secret


def find_token(s: Session, secret: str) -> ApiToken | None:
    """The row of the token ``secret`` (revoked or not), or ``None`` when no such token was
    ever created (or ``secret`` is longer than ``MAX_TOKEN_LENGTH``)."""
    if len(secret) > MAX_TOKEN_LENGTH:
        return None
    return s.scalar(select(ApiToken).where(ApiToken.token_sha256 == token_sha256(secret)))


def list_tokens(s: Session, *, include_revoked: bool = True) -> list[ApiToken]:
    """Every token, oldest first; without the revoked ones unless ``include_revoked``."""
    query = select(ApiToken).order_by(ApiToken.id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return list(s.scalars(query))


def revoke_token(s: Session, token_id: int) -> tuple[ApiToken, bool]:
    """Revoke the token ``token_id`` from now on (database clock); revoking twice keeps the
    first time. Returns the row and whether it was revoked already (read under the row's lock,
    so a caller can say "nothing changed" rather than claim a revocation).

    Raises:
        NotFoundError: no token ``token_id``.
    """
    row = s.scalar(select(ApiToken).where(ApiToken.id == token_id).with_for_update())
    if row is None:
        raise NotFoundError(f"token {token_id} not found")
    already = row.revoked_at is not None
    if not already:
        row.revoked_at = func.now()
        s.flush()
        s.refresh(row)
    return row, already
