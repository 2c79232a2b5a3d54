"""``/docs`` and ``/redoc`` load nothing from another origin (the tester's were blank offline:
Swagger UI, ReDoc, Google fonts and the favicon came from CDNs); their files are served by the
service (``api.docs_pages``)."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest
from fastapi.testclient import TestClient

from api.docs_pages import DOCS_ASSETS

# Anything the page would fetch: a src or href attribute, a CSS url(), the spec's url, or any
# absolute URL at all in the page.
_FETCHED = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\(([^)]+)\)""")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_pages_load_only_from_the_service(api_client: TestClient, page: str) -> None:
    response = api_client.get(page)
    assert response.status_code == 200
    html = response.text
    assert not re.search(r"https?://", html), re.findall(r"https?://\S+", html)
    fetched = [a or b for a, b in _FETCHED.findall(html)]
    assert fetched, html
    assert all(url.startswith("/docs/assets/") for url in fetched), fetched
    for url in fetched:
        asset = api_client.get(url)
        assert asset.status_code == 200, url
    assert "/openapi.json" in html


def test_swagger_ui_does_not_ask_the_online_validator(api_client: TestClient) -> None:
    assert '"validatorUrl": null' in api_client.get("/docs").text


@pytest.mark.parametrize("name", sorted(DOCS_ASSETS))
def test_every_asset_is_the_packaged_file(api_client: TestClient, name: str) -> None:
    response = api_client.get(f"/docs/assets/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"] == DOCS_ASSETS[name]
    assert response.content == files("fastapi_offline").joinpath("static", name).read_bytes()


@pytest.mark.parametrize("name", ["core.py", "..%2Fcore.py", "LICENSE", "x.js"])
def test_nothing_else_is_served_from_the_package(api_client: TestClient, name: str) -> None:
    assert api_client.get(f"/docs/assets/{name}").status_code == 404


def test_the_redirect_page_of_swagger_ui_stays(api_client: TestClient) -> None:
    response = api_client.get("/docs/oauth2-redirect")
    assert response.status_code == 200 and not re.search(r"https?://", response.text)
