"""The FastAPI application factory.

Run it with ``kernevo serve`` (which migrates first) or
``uvicorn --factory api.app:create_app`` on an already migrated database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from api.docs_pages import docs_router
from api.errors import install_error_handlers
from api.head_requests import HeadAsGet
from api.json_body import BodyLimit, refuse_non_json_body, refuse_repeated_body_keys
from api.query_params import refuse_repeated_query, refuse_unknown_query
from api.routes import (
    champions,
    health,
    jobs,
    kernels,
    lineage,
    manifest,
    programs,
    tokens,
    version,
)
from api.routes.version import service_version
from api.settings import ApiSettings
from api.web import router as web_router
from db.session import in_memory_problem, make_engine, make_read_engine
from db.settings import DatabaseSettings


def create_app(database_url: str | None = None, *, busy_timeout_s: float | None = None) -> FastAPI:
    """The kernevo service on the database at ``database_url`` (default
    ``KERNEVO_DATABASE_URL``, see ``db.settings``).

    GET routes read through a read-only engine (``db.session.make_read_engine``: on SQLite the
    file opened ``mode=ro`` with deferred transactions, so they neither wait for nor block a
    running job's writer, and never change the file); writes go through the writer engine. A
    database that is locked past ``busy_timeout_s`` (SQLite; default
    ``db.session.SQLITE_BUSY_TIMEOUT_S``), damaged or
    unreachable answers 503 with a one-line ``detail``, and so does ``/healthz``.

    It never creates or alters tables: the database must already be at the Alembic head
    (``db.migrate.upgrade(url)``, which ``kernevo serve`` runs first), so starting the service
    has no side effects on the schema; a missing table shows up as a 500 on the first query and
    ``/healthz`` reports ``schema_revision`` beside ``schema_head``. The settings
    (``api.settings.ApiSettings``: ``KERNEVO_API_TOKEN``, ``KERNEVO_API_KERNELS_REQUIRE_READ``)
    are read once here; tokens of the database are looked up per request (``api.deps``), so
    one created or revoked with ``kernevo token`` counts at once. The engines are disposed on
    shutdown.

    Raises:
        sqlalchemy.exc.ArgumentError: ``database_url`` is not a valid SQLAlchemy URL.
        pydantic.ValidationError: the ``KERNEVO_`` environment holds an invalid value.
        ValueError: an in-memory SQLite database (``db.session.in_memory_problem``): the
            writer and the readers would each see their own empty one.
    """
    settings = ApiSettings()  # the environment first: its errors do not depend on the URL
    url = database_url if database_url is not None else DatabaseSettings().database_url
    problem = in_memory_problem(url)
    if problem is not None:
        raise ValueError(problem)
    engine = make_engine(url, busy_timeout_s=busy_timeout_s)
    read_engine = make_read_engine(url, busy_timeout_s=busy_timeout_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        read_engine.dispose()
        engine.dispose()

    app = FastAPI(
        title="kernevo",
        version=service_version(),
        summary="Verified CUDA kernels from LLM-driven evolution, and their lineage.",
        lifespan=lifespan,
        # ?dtype=a&dtype=b, ?dtyp=a and {"path": …, "path": …}: 422, every route; a body
        # not sent as JSON: 415
        dependencies=[
            Depends(refuse_repeated_query),
            Depends(refuse_unknown_query),
            Depends(refuse_non_json_body),
            Depends(refuse_repeated_body_keys),
        ],
        docs_url=None,  # FastAPI's pages load their files from CDNs: api.docs_pages serves them
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.read_engine = read_engine
    app.state.settings = settings
    install_error_handlers(app)
    app.add_middleware(BodyLimit)  # 413 past api.json_body.MAX_BODY_BYTES, JSON like the rest
    app.add_middleware(HeadAsGet)  # HEAD on every GET route: curl -I, load balancers' checks
    for module in (health, version, kernels, manifest, champions, programs, jobs, lineage, tokens):
        app.include_router(module.router)
    app.include_router(web_router)  # the web page at /ui/ (api.web), outside the OpenAPI document
    assert app.openapi_url is not None
    app.include_router(docs_router(app.title, app.openapi_url))  # /docs, /redoc: no CDN
    return app
