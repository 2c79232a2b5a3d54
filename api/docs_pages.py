"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with every file they load served by the
service itself: the pages work on a cluster that cannot reach a CDN.

FastAPI's default pages load Swagger UI, ReDoc, Google fonts and a favicon from CDNs, so they
are blank offline. This is FastAPI's documented self-hosting of the docs assets ("Custom Docs UI
Static Assets"), with the files of the ``fastapi-offline`` package (Swagger UI's bundle and
stylesheet, ReDoc's standalone bundle, a favicon: MIT, updated with their upstream releases).
The pages are built by FastAPI's own ``get_swagger_ui_html`` / ``get_redoc_html`` with those
local URLs, ReDoc without Google fonts and Swagger UI without its online validator badge
(``validatorUrl: null``, an image from validator.swagger.io). The files are served by
``GET /docs/assets/{name}`` (only the names of :data:`DOCS_ASSETS`), open like the pages.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse, Response

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
ASSETS_URL = "/docs/assets"
# Every file the two pages load, and its media type.
DOCS_ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}


def docs_router(title: str, openapi_url: str) -> APIRouter:
    """The routes of the two pages, their OAuth2 redirect and their files, outside the OpenAPI
    document; ``openapi_url`` is the app's (``/openapi.json``)."""
    router = APIRouter(include_in_schema=False)

    def asset(request: Request, name: str) -> str:
        return f"{request.scope.get('root_path', '')}{ASSETS_URL}/{name}"

    @router.get(DOCS_URL)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{title} - Swagger UI",
            oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
            swagger_js_url=asset(request, "swagger-ui-bundle.js"),
            swagger_css_url=asset(request, "swagger-ui.css"),
            swagger_favicon_url=asset(request, "favicon.png"),
            swagger_ui_parameters={"validatorUrl": None},
        )

    @router.get(OAUTH2_REDIRECT_URL)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @router.get(REDOC_URL)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{openapi_url}",
            title=f"{title} - ReDoc",
            redoc_js_url=asset(request, "redoc.standalone.js"),
            redoc_favicon_url=asset(request, "favicon.png"),
            with_google_fonts=False,
        )

    @router.get(f"{ASSETS_URL}/{{name}}")
    def docs_asset(name: str) -> Response:
        """One file of :data:`DOCS_ASSETS`; 404 for any other name."""
        media_type = DOCS_ASSETS.get(name)
        if media_type is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no docs asset {name!r}")
        data = files("fastapi_offline").joinpath("static", name).read_bytes()
        return Response(data, media_type=media_type, headers={"Cache-Control": "max-age=3600"})

    return router
