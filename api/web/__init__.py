"""The web page: ``GET /ui/`` serves a single page (HTML, CSS and JavaScript shipped in this
package, ``api/web/assets/``; nothing from a CDN, nothing fetched from elsewhere) that reads the
JSON API of the same origin: jobs and their progress, the best score over iterations, a job's
lineage tree with each edge's diff and score change, and the champion table with each
champion's verification facts. ``GET /`` redirects to it.

The page itself is open (it holds no data); the routes it reads keep their own access: a
``read`` token pasted into the page is kept in the tab's ``sessionStorage`` and sent as
``Authorization: Bearer``. Every answer carries a Content-Security-Policy that allows only this
origin's scripts, styles and requests (no inline script, no ``eval``), so data the page shows
(sources, diffs, names) cannot run as code even if the page had a bug that inserted it as
markup (it writes text with ``textContent`` only).
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import RedirectResponse, Response

router = APIRouter(include_in_schema=False)

# The assets, by name, and their media types: only these are served (no directory listing,
# no path traversal to resolve).
ASSETS: dict[str, str] = {
    "index.html": "text/html; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
    "api.js": "text/javascript; charset=utf-8",
    "format.js": "text/javascript; charset=utf-8",
    "plot.js": "text/javascript; charset=utf-8",
    "lineage.js": "text/javascript; charset=utf-8",
    "champions.js": "text/javascript; charset=utf-8",
    "jobs.js": "text/javascript; charset=utf-8",
    "main.js": "text/javascript; charset=utf-8",
}

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate on each load: a new service version's page is never mixed with old scripts.
    "Cache-Control": "no-cache",
}


def asset(name: str) -> bytes:
    """The bytes of the shipped asset ``name`` (one of :data:`ASSETS`).

    Raises:
        KeyError: ``name`` is not an asset.
        FileNotFoundError: the package was installed without its assets (a packaging bug).
    """
    if name not in ASSETS:
        raise KeyError(name)
    return (files(__package__) / "assets" / name).read_bytes()


@router.get("/")
def root() -> RedirectResponse:
    """The service's root: to the web page."""
    return RedirectResponse("/ui/", status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@router.get("/ui")
def ui_no_slash() -> RedirectResponse:
    """``/ui`` to ``/ui/``, so the page's relative asset paths resolve under ``/ui/``."""
    return RedirectResponse("/ui/", status_code=status.HTTP_307_TEMPORARY_REDIRECT)


@router.get("/ui/")
def page() -> Response:
    """The page."""
    return serve("index.html")


@router.get("/ui/{name}")
def serve(name: str) -> Response:
    """One asset of the page with its media type and the security headers; 404 for any other
    name."""
    if name not in ASSETS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail="no such asset of the web page")
    return Response(asset(name), media_type=ASSETS[name], headers=HEADERS)
