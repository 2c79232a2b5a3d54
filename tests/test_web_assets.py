"""The web page's assets without a browser: every file the page loads is shipped in the package
(the service's wheel included), served with its media type and the security headers, and none
refers to another origin (no CDN: an offline cluster must get the whole page from the
service). tests/test_web_page.py drives the page itself in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

from fastapi.testclient import TestClient

from api.web import ASSETS, CONTENT_SECURITY_POLICY

ROOT = Path(__file__).resolve().parents[1]
ASSET_DIR = files("api.web") / "assets"
# The one absolute URL an asset may hold: the SVG namespace, an identifier never fetched.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def _text(name: str) -> str:
    return (ASSET_DIR / name).read_text(encoding="utf-8")


def test_the_asset_list_is_exactly_the_shipped_folder() -> None:
    shipped = {entry.name for entry in ASSET_DIR.iterdir()}
    assert shipped == set(ASSETS)


def test_every_file_the_page_loads_is_an_asset() -> None:
    """index.html's ``src``/``href`` and every module's ``import … from "./x.js"``."""
    referenced = set(re.findall(r'(?:src|href)="([^"]+)"', _text("index.html")))
    for name in ASSETS:
        if name.endswith(".js"):
            referenced |= set(re.findall(r'from "\./([^"]+)"', _text(name)))
    assert referenced, "the page loads nothing?"
    assert referenced <= set(ASSETS), sorted(referenced - set(ASSETS))
    assert {"main.js", "style.css", "favicon.svg", "api.js", "plot.js"} <= referenced


def test_no_asset_refers_to_another_origin() -> None:
    for name in ASSETS:
        text = _text(name).replace(SVG_NAMESPACE, "")
        assert not re.search(r"(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text), name
        assert "@import" not in text and "url(" not in text, name


def test_the_page_and_its_assets_are_served_with_security_headers(
    api_client: TestClient,
) -> None:
    page = api_client.get("/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.text == _text("index.html")
    for name, media_type in ASSETS.items():
        response = api_client.get(f"/ui/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"] == media_type
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.content == (ASSET_DIR / name).read_bytes()
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
    assert "'unsafe-eval'" not in CONTENT_SECURITY_POLICY


def test_the_root_redirects_to_the_page_and_nothing_else_is_served(
    api_client: TestClient,
) -> None:
    for path in ("/", "/ui"):
        response = api_client.get(path, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (307, "/ui/")
    for name in ("app.py", "..%2F__init__.py", "%2E%2E%2Fapp.py", "assets", "__init__.py"):
        response = api_client.get(f"/ui/{name}")
        assert response.status_code == 404, name  # a name with a slash matches no route
    assert api_client.get("/ui/app.py").json() == {"detail": "no such asset of the web page"}
    assert not any(path.startswith("/ui") or path == "/" for path in _documented(api_client))


def _documented(client: TestClient) -> list[str]:
    return list(client.get("/openapi.json").json()["paths"])


def test_the_service_wheel_ships_the_assets(tmp_path: Path) -> None:
    """``pip wheel`` of the service (a copy of its packaging inputs) holds every asset: the
    package-data entry of pyproject.toml, not only the editable checkout, serves the page."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("api", "db", "evolver", "evaluator", "seeds", "kernevo"):
        shutil.copytree(ROOT / package, source / package, ignore=ignore)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(out)],
        check=True,
        timeout=600,
    )
    (wheel,) = out.glob("kernevo_service-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {f"api/web/assets/{name}" for name in ASSETS} <= names
