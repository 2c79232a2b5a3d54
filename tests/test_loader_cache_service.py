"""The disk cache's answers are bound to the service they came from (``KERNEVO_API_URL``): a
user who ran against a wrong URL (a server answering 404 to everything) must not be told "no
champion (remembered by the disk cache)" for an hour after fixing it, and a champion cached
from service A must not be served as fresh to a loader pointed at service B. The fetcher is a
fake that counts its calls; the disk cache and the trust checks are real.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from test_loader_cache_first import DOWN, HOUR, KEY, FakeFetcher, cached, serving
from test_loader_negative_cache import NONE
from test_loader_resolver import GPU, TRUST

import kernevo
import kernevo.client
import kernevo.solver
from kernevo.cache import ChampionCache
from kernevo.environment import service_id
from kernevo.resolver import Resolver

A = "http://service-a.example:8000"
B = "http://127.0.0.1:9"


def resolver_of(root: Path, service: str, fetch: FakeFetcher) -> Resolver:
    """A resolver asking ``service`` (through ``fetch``) with the disk cache at ``root``."""
    cache = ChampionCache(root, service=service)
    return Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=cache, trust=TRUST, cache_max_age_s=HOUR
    )


def test_a_404_of_another_service_is_not_remembered_for_this_one(tmp_path: Path) -> None:
    """Check: ``Resolver._fresh_age`` compares ``ChampionCache.absent_service`` with its own."""
    wrong = FakeFetcher(NONE)
    assert resolver_of(tmp_path, A, wrong).resolve(64, 64).route == "cublas"
    assert wrong.asked == [KEY]
    assert ChampionCache(tmp_path).absent_service(KEY) == A

    fixed = serving(18)
    decision = resolver_of(tmp_path, B, fixed).resolve(64, 64)
    assert fixed.asked == [KEY]
    assert (decision.route, decision.reason) == ("kernel", "champion program 18 from service")
    # The same service's 404 is still remembered (the max-age rule as before).
    again = FakeFetcher(NONE)
    resolver_of(tmp_path / "other", A, again).resolve(64, 64)
    resolver_of(tmp_path / "other", A, again).resolve(64, 64)
    assert again.asked == [KEY]


def test_a_fresh_champion_of_another_service_is_asked_about(tmp_path: Path) -> None:
    """Check: ``Resolver._acquire`` reads ``CacheLookup.service`` before serving a fresh entry;
    another service's entry is treated as older than the max age."""
    cached(tmp_path, 10.0, service=A)
    fetch = serving(18)
    decision = resolver_of(tmp_path / "cache", B, fetch).resolve(64, 64)
    assert fetch.asked == [KEY]
    assert (decision.route, decision.reason) == ("kernel", "champion program 18 from service")
    # Rewritten for B: B's next loader is served from the disk cache.
    assert ChampionCache(tmp_path / "cache").load(KEY).service == B
    quiet = serving(19)
    assert (
        resolver_of(tmp_path / "cache", B, quiet)
        .resolve(64, 64)
        .reason.startswith("champion program 18 from disk cache (written ")
    )
    assert quiet.asked == []


def test_another_services_champion_still_serves_when_this_one_is_unreachable(
    tmp_path: Path,
) -> None:
    """As a stale entry does (question 2c), saying where it was cached from."""
    cached(tmp_path, 10.0, service=A)
    fetch = FakeFetcher(DOWN)
    decision = resolver_of(tmp_path / "cache", B, fetch).resolve(64, 64)
    assert fetch.asked == [KEY]
    assert decision.route == "kernel"
    assert decision.reason == (
        f"champion program 17 from disk cache, cached from service {A} ({DOWN.detail})"
    )


def test_entries_and_markers_of_an_older_loader_are_not_fresh(tmp_path: Path) -> None:
    """No ``service`` recorded (an entry, or an empty marker, of a loader before the binding):
    another service's."""
    cache = cached(tmp_path, 10.0, service=B)
    record = json.loads(cache.entry_file(KEY).read_text())
    del record["service"]
    written = time.time() - 10
    cache.entry_file(KEY).write_text(json.dumps(record))
    os.utime(cache.entry_file(KEY), (written, written))
    assert cache.load(KEY).service is None
    fetch = FakeFetcher(DOWN)
    decision = resolver_of(tmp_path / "cache", B, fetch).resolve(64, 64)
    assert fetch.asked == [KEY]
    assert "cached by a loader that did not record its service" in decision.reason

    empty = ChampionCache(tmp_path / "empty-markers")
    empty.remember_absent(KEY)
    assert empty.absent_file(KEY).read_bytes() == b""
    asked = FakeFetcher(NONE)
    resolver_of(tmp_path / "empty-markers", B, asked).resolve(64, 64)
    assert asked.asked == [KEY]


def test_the_service_recorded_has_no_credentials() -> None:
    assert (
        service_id("https://alice:s3cret@host.example:8443/v1/") == "https://host.example:8443/v1"
    )
    assert service_id("https://TOKEN@host.example") == "https://host.example"
    assert service_id("http://127.0.0.1:9/") == service_id("http://127.0.0.1:9")


def test_load_binds_the_cache_to_its_api_url_and_the_warm_start_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through ``kernevo.load``: the disk cache is opened for ``service_id(KERNEVO_API_URL)``;
    a memo written under service A is not replayed under B (its fingerprint holds the
    ``KERNEVO_*`` variables), and B is asked."""
    asked: list[str] = []

    def fake_fetcher(url: str, **kwargs: Any) -> Any:
        def fetch(key: Any, *shape: int) -> Any:
            asked.append(url)
            return NONE

        return fetch

    monkeypatch.setattr(kernevo.client, "service_fetcher", fake_fetcher)
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: GPU)
    monkeypatch.setenv("KERNEVO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "keys"))
    trusted = [base64.b64encode(raw).decode() for raw in TRUST.keys.values()]
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", ",".join(trusted))
    wrong = "http://user:pw@127.0.0.1:19/"  # another port: another service
    for url in (wrong, wrong, B, B):
        monkeypatch.setenv("KERNEVO_API_URL", url)
        decision = kernevo.load("trsm", "float64").explain(64, 64)
        assert decision.route == "cublas"
    # Each service asked once: its own 404 remembered (and replayed by the memo) after.
    assert asked == ["http://user:pw@127.0.0.1:19", B]
    marker = ChampionCache(tmp_path / "cache").absent_file(KEY)
    assert marker.read_text() == B and "pw" not in marker.read_text()
