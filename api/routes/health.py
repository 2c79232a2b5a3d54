"""``GET /healthz``: the service is up, its database answers a query, its pages are intact (as
far as a bounded check reaches) and whether it can be written; open (no token), for load
balancers and compose health checks."""

from __future__ import annotations

from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, HTTPException, Request, status
from sqlalchemy.exc import DBAPIError

from api.deps import SessionDep
from api.responses import UNAVAILABLE
from api.routes.version import schema_head
from api.schemas import Health
from db.errors import DatabaseUnavailableError
from db.health import integrity, read_only
from db.session import unavailable_error

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, responses=UNAVAILABLE)
def healthz(request: Request, s: SessionDep) -> Health:
    """200 when the database answers: ``status`` ``ok``, or ``degraded`` when the database
    cannot be written (``read_only``: reads still work, job writes answer 503).

    Reading the ``alembic_version`` table makes SQLite read the file's header and schema, so a
    locked, damaged or missing file fails here (``SELECT 1`` alone never touches the file);
    then SQLite's ``PRAGMA quick_check`` reads every page within ``db.health``'s time budget
    (``integrity``: ``ok``, or ``unchecked`` when it ran out of time or on PostgreSQL).

    Raises:
        HTTPException: 503 with a one-line ``detail`` when the database is locked past the busy
            timeout, damaged or unreachable.
    """
    try:
        revision = MigrationContext.configure(s.connection()).get_current_revision()
        checked = integrity(s)
        writable = not read_only(request.app.state.engine, s)
    except DatabaseUnavailableError as exc:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=str(exc)) from exc
    except DBAPIError as exc:
        unavailable = unavailable_error(exc, request.app.state.read_engine)
        detail = str(unavailable) if unavailable else f"database error: {type(exc.orig).__name__}"
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=detail) from exc
    return Health(
        status="ok" if writable else "degraded",
        database="ok",
        schema_revision=revision,
        schema_head=schema_head(),
        integrity=checked,
        read_only=not writable,
    )
