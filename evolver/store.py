"""Opening the lineage store for a job: migrate to the newest schema, then connect."""

from __future__ import annotations

from sqlalchemy import Engine

from evolver.errors import StoreError


def display_url(url: str) -> str:
    """``url`` with any password hidden, for messages."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _reason(error: BaseException) -> str:
    orig = getattr(error, "orig", None)
    text = str(orig if orig is not None else error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return first[:200]


def open_store(url: str) -> Engine:
    """An engine on the lineage store at ``url``, migrated to the newest schema (Alembic),
    so one command works on a fresh SQLite file.

    Raises:
        StoreError: one line: the URL does not parse, the server is unreachable, or a
            migration fails.
    """
    from alembic.util import CommandError
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    from db.migrate import upgrade
    from db.session import make_engine

    try:
        upgrade(url)
        engine = make_engine(url)
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except (SQLAlchemyError, CommandError, OSError, ValueError, ImportError) as error:
        raise StoreError(f"database {display_url(url)}: {_reason(error)}") from None
    return engine
