"""db.tokens: tokens stored as their SHA-256 only, found by secret, listed, revoked."""

from __future__ import annotations

import hashlib
import re

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from db.errors import InvalidValueError, NotFoundError
from db.models import ApiToken
from db.tokens import (
    MAX_NAME_LENGTH,
    MAX_TOKEN_LENGTH,
    Scope,
    create_token,
    find_token,
    list_tokens,
    revoke_token,
    token_sha256,
)


def test_a_token_is_stored_as_its_sha256_only(db_session: Session) -> None:
    row, secret = create_token(db_session, scope="read", name="dashboard")
    assert re.fullmatch(r"kvt_[A-Za-z0-9_-]{43}", secret)
    assert row.token_sha256 == hashlib.sha256(secret.encode()).hexdigest()
    assert (row.name, row.scope, row.revoked_at) == ("dashboard", "read", None)
    assert row.created_at.tzinfo is not None
    stored = db_session.execute(select(ApiToken.__table__)).mappings().one()
    assert secret not in {str(value) for value in stored.values()}
    assert find_token(db_session, secret) == row


def test_two_tokens_differ_and_unknown_secrets_find_nothing(db_session: Session) -> None:
    first, secret_a = create_token(db_session, scope="write", name="ci")
    second, secret_b = create_token(db_session, scope="write", name="ci")
    assert secret_a != secret_b and first.id != second.id
    assert find_token(db_session, secret_a + "x") is None
    assert find_token(db_session, "") is None
    assert find_token(db_session, "k" * (MAX_TOKEN_LENGTH + 1)) is None
    assert find_token(db_session, "\ud800") is None  # a lone surrogate hashes, matches nothing
    assert token_sha256("abc") == hashlib.sha256(b"abc").hexdigest()


def test_revoke_keeps_the_row_and_the_first_time(db_session: Session) -> None:
    row, secret = create_token(db_session, scope="read", name="old")
    kept, _ = create_token(db_session, scope="write", name="kept")
    revoked, already = revoke_token(db_session, row.id)
    assert revoked.revoked_at is not None and not already
    first_time = revoked.revoked_at
    again, already = revoke_token(db_session, row.id)
    assert again.revoked_at == first_time and already
    assert find_token(db_session, secret) == revoked  # found, and the caller sees it revoked
    assert [t.name for t in list_tokens(db_session)] == ["old", "kept"]
    assert [t.id for t in list_tokens(db_session, include_revoked=False)] == [kept.id]
    with pytest.raises(NotFoundError, match="token 424242 not found"):
        revoke_token(db_session, 424242)


@pytest.mark.parametrize(
    ("scope", "name", "message"),
    [
        ("admin", "x", "unknown scope 'admin'"),
        ("READ", "x", "unknown scope 'READ'"),
        ("read", "   ", "1..128 printable"),
        ("read", "a\nb", "1..128 printable"),
        ("read", "n" * (MAX_NAME_LENGTH + 1), "1..128 printable"),
    ],
)
def test_bad_scope_or_name_is_refused(
    db_session: Session, scope: str, name: str, message: str
) -> None:
    with pytest.raises(InvalidValueError, match=re.escape(message)):
        create_token(db_session, scope=scope, name=name)
    assert list_tokens(db_session) == []


def test_write_implies_read() -> None:
    assert Scope.WRITE.allows(Scope.READ) and Scope.WRITE.allows(Scope.WRITE)
    assert Scope.READ.allows(Scope.READ) and not Scope.READ.allows(Scope.WRITE)
