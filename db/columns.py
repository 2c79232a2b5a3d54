"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

# JSON documents: JSONB on PostgreSQL (indexable, compact), JSON text elsewhere.
JSONDocument = JSON().with_variant(JSONB(), "postgresql")
# Signed JSON documents (a champion's certificate): JSON text on every backend. JSONB stores
# numbers as numeric and returns an integral float as an integer, which changes the canonical
# JSON a signature covers (migration b6d41e8a3f92).
SignedJSONDocument = JSON()


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware in UTC.

    PostgreSQL stores ``timestamptz``; SQLite stores text without an offset (its
    ``CURRENT_TIMESTAMP``, which ``func.now()`` compiles to, is UTC), so naive values read back are
    tagged UTC and aware values written are converted to UTC first.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Convert an aware datetime to UTC; a naive one is taken to be UTC already."""
        if value is None or value.tzinfo is None:
            return value
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        """Tag naive values UTC; convert aware ones to UTC."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
