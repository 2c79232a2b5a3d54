"""``GET /healthz``: the service is up and its database answers a query; open (no token), for
load balancers and compose health checks."""

from __future__ import annotations

from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, HTTPException, status
from sqlalchemy.exc import DBAPIError

from api.deps import SessionDep
from api.responses import UNAVAILABLE
from api.routes.version import schema_head
from api.schemas import Health
from db.errors import database_unavailable

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses=UNAVAILABLE)
def healthz(s: SessionDep) -> Health:
    """200 with the schema revision when the database answers a real query: reading the
    ``alembic_version`` table makes SQLite read the file's header and schema, so a locked,
    damaged or missing file fails here (``SELECT 1`` alone never touches the file).

    Raises:
        HTTPException: 503 with a one-line ``detail`` when the database is locked past the busy
            timeout, damaged or unreachable.
    """
    try:
        revision = MigrationContext.configure(s.connection()).get_current_revision()
    except DBAPIError as exc:
        unavailable = database_unavailable(exc)
        detail = str(unavailable) if unavailable else f"database error: {type(exc.orig).__name__}"
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=detail) from exc
    return Health(status="ok", database="ok", schema_revision=revision, schema_head=schema_head())
