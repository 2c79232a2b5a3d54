"""The loader's fetch builds its TLS context once per process (``kernevo.client.tls_context``):
with certifi's CA bundle (httpx's default) only where TLS may be negotiated (an ``https://``
service or a proxy in the environment); a plain ``http://`` service without a proxy gets a
context that trusts no CA, so loading the bundle (~60 ms per ``httpx.Client`` on the CI
machine) is not paid, and a TLS handshake there would fail closed. The service is a closed port
on 127.0.0.1."""

from __future__ import annotations

import socket
import ssl

import pytest

from kernevo import client
from kernevo.client import ChampionKey, fetch_champion, tls_context

PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_plain_http_without_a_proxy_loads_no_ca_and_fails_closed(no_proxy: None) -> None:
    assert not client._may_use_tls("http://127.0.0.1:8000")
    context = tls_context(needs_ca=False)
    assert context.cert_store_stats()["x509_ca"] == 0
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)


def test_https_or_a_proxy_uses_httpxs_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert client._may_use_tls("HTTPS://kernels.example")
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:3128")
    assert client._may_use_tls("http://127.0.0.1:8000")
    context = tls_context(needs_ca=True)
    assert context.cert_store_stats()["x509_ca"] > 0
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_every_fetch_shares_one_context(no_proxy: None, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[bool] = []
    real = client.tls_context.__wrapped__  # type: ignore[attr-defined]

    @client.functools.cache
    def counting(*, needs_ca: bool) -> ssl.SSLContext:
        built.append(needs_ca)
        return real(needs_ca=needs_ca)  # type: ignore[no-any-return]

    monkeypatch.setattr(client, "tls_context", counting)
    key = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")
    url = f"http://127.0.0.1:{closed_port()}"
    for _ in range(3):
        outcome = fetch_champion(url, op="trsm", key=key, timeout_s=5.0, m=64, n=64)
        assert outcome.status == "unreachable"
    assert built == [False]
