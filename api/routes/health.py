"""``GET /healthz``: the service is up and its database answers."""

from __future__ import annotations

import functools

from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, HTTPException, status
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from api.deps import SessionDep
from api.schemas import Health
from db.migrate import head_revision

router = APIRouter(tags=["health"])


@functools.cache
def _schema_head() -> str | None:
    return head_revision()


@router.get("/healthz", response_model=Health)
def healthz(s: SessionDep) -> Health:
    """200 with the schema revision when the database answers ``SELECT 1``.

    Raises:
        HTTPException: 503 when the database cannot be reached.
    """
    try:
        connection = s.connection()
        connection.execute(text("SELECT 1"))
        revision = MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as exc:
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            detail=f"database unreachable: {type(exc).__name__}",
        ) from exc
    return Health(status="ok", database="ok", schema_revision=revision, schema_head=_schema_head())
