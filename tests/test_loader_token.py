"""The loader's bearer token: with ``KERNEVO_API_TOKEN`` set it is sent to the service, which
needs a read token on its champion routes when ``KERNEVO_API_KERNELS_REQUIRE_READ=true``
(without one every fetch was a 401 and every call went to the fallback); unset, no header."""

from __future__ import annotations

import httpx
import pytest

from kernevo.client import ChampionKey, service_fetcher
from kernevo.settings import LoaderSettings

KEY = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")
TOKEN = "r" * 40


def fetch_headers(token: str | None) -> httpx.Headers:
    seen: list[httpx.Headers] = []

    def service(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(401, json={"detail": "a read token is required"})

    fetch = service_fetcher(
        "http://127.0.0.1:9", op="trsm", timeout_s=2.0,
        transport=httpx.MockTransport(service), token=token,
    )  # fmt: skip
    outcome = fetch(KEY, 64, 64)
    assert outcome.status == "invalid" and "401" in outcome.detail
    return seen[0]


def test_the_token_is_sent_as_a_bearer_header():
    assert fetch_headers(TOKEN)["authorization"] == f"Bearer {TOKEN}"


def test_no_token_no_header():
    assert "authorization" not in fetch_headers(None)


def test_the_settings_read_it_from_the_environment_and_never_show_it(monkeypatch):
    monkeypatch.setenv("KERNEVO_API_TOKEN", TOKEN)
    settings = LoaderSettings()
    assert settings.api_token is not None and settings.api_token.get_secret_value() == TOKEN
    assert TOKEN not in repr(settings) and TOKEN not in str(settings)


def test_an_empty_token_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv("KERNEVO_API_TOKEN", " ")
    with pytest.raises(ValueError, match="KERNEVO_API_TOKEN"):
        LoaderSettings()


def test_load_hands_the_token_to_its_fetcher(monkeypatch, tmp_path):
    import kernevo.client
    import kernevo.solver

    seen: dict[str, object] = {}

    def fetcher(api_url: str, **kwargs: object):  # noqa: ANN202
        seen.update(kwargs)
        return lambda key, *shape: None

    monkeypatch.setenv("KERNEVO_API_TOKEN", TOKEN)
    monkeypatch.setattr(kernevo.client, "service_fetcher", fetcher)
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: None)
    kernevo.solver.load("trsm", "float64", cache_dir=tmp_path, trusted_keys=())
    assert seen["token"] == TOKEN
