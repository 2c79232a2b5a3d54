"""``GET /v1/version``: which service answers (distribution, version, API, schema head); open."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter

from api.schemas import VersionOut
from db.migrate import head_revision

router = APIRouter(tags=["health"])

DISTRIBUTION = "kernevo-service"


@functools.cache
def service_version() -> str:
    """The installed ``kernevo-service`` version (``0+unknown`` when it is not installed)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


@functools.cache
def schema_head() -> str | None:
    """The newest Alembic revision this code ships (``db.migrate.head_revision``), read once."""
    return head_revision()


@router.get("/v1/version", response_model=VersionOut)
def service_version_route() -> VersionOut:
    """The service's distribution and version, the API version (``v1``) and the newest schema
    revision it knows; it reads no database, so it answers while the database is down."""
    return VersionOut(
        service=DISTRIBUTION, version=service_version(), api="v1", schema_head=schema_head()
    )
