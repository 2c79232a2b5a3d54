"""The loader's negative disk-cache entries (issue 11, Build item 4): a 404 from the service
("no champion for this path and bucket") is remembered, dated, in the disk cache, and within
``KERNEVO_CACHE_MAX_AGE_S`` of it the service is not asked again; an older one, one dated ahead
of the clock, a max age of 0, or an unreachable service ask as before; storing a champion drops
the marker. The case that motivated it: complex128 64×64 is served by trsm_small and
trsm_small_z64, and with trsm_small's champion fresh in the disk cache and trsm_small_z64 known
to have none, the first call must not wait for the service (466 ms on the H200 host, most of it
importing the HTTP client and refusing a connection; docs/results/2026-11-30_s17_call3_startup.txt).
The fetcher is a fake that counts its calls; the disk cache and the trust checks are real.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from test_loader_cache_first import DOWN, HOUR, KEY, FakeFetcher, cached, resolver, serving
from test_loader_resolver import CUBIN, GPU, TRUST, champion_json

from kernevo.cache import ChampionCache
from kernevo.client import ChampionKernel, ChampionKey, FetchOutcome
from kernevo.resolver import Resolver

NONE = FetchOutcome("not_found", "no champion on service (404: no promoted kernel)")


def absent_since(cache: ChampionCache, key: ChampionKey, age_s: float) -> None:
    """A negative entry for ``key`` dated ``age_s`` seconds ago (negative: ahead of the clock)."""
    marker = cache.remember_absent(key)
    when = time.time() - age_s
    os.utime(marker, (when, when))


def test_a_404_is_remembered_and_the_next_loader_does_not_ask(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path / "cache")
    first = FakeFetcher(NONE)
    decision = resolver(cache, first).resolve(64, 64)
    assert first.asked == [KEY] and decision.route == "cublas"
    age = cache.absent_age_s(KEY)
    assert age is not None and 0 <= age < 60

    second = FakeFetcher(NONE)
    decision = resolver(cache, second).resolve(64, 64)
    assert second.asked == []
    assert decision.route == "cublas"
    assert decision.reason.startswith("no champion on service ")
    assert decision.reason.endswith(
        " s ago (remembered by the disk cache, within KERNEVO_CACHE_MAX_AGE_S=3600; "
        "service not asked); disk cache: no entry"
    )


def test_an_old_or_future_dated_404_asks_again(tmp_path: Path) -> None:
    for age in (HOUR + 1, -600.0):
        cache = ChampionCache(tmp_path / f"cache{age:g}")
        absent_since(cache, KEY, age)
        fetch = serving(18)
        decision = resolver(cache, fetch).resolve(64, 64)
        assert fetch.asked == [KEY]
        assert (decision.route, decision.reason) == ("kernel", "champion program 18 from service")
        # The champion the service now has replaces the negative entry.
        assert cache.absent_age_s(KEY) is None
        assert cache.load(KEY).champion.program_id == 18  # type: ignore[union-attr]


def test_max_age_zero_asks_despite_a_remembered_404(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path / "cache")
    absent_since(cache, KEY, 1.0)
    fetch = FakeFetcher(NONE)
    resolver(cache, fetch, 0.0).resolve(64, 64)
    assert fetch.asked == [KEY]


def test_an_unreachable_service_is_not_remembered(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path / "cache")
    resolver(cache, FakeFetcher(DOWN)).resolve(64, 64)
    assert cache.absent_age_s(KEY) is None
    again = FakeFetcher(DOWN)
    resolver(cache, again).resolve(64, 64)
    assert again.asked == [KEY]


def test_a_remembered_404_still_lets_an_older_cache_entry_answer(tmp_path: Path) -> None:
    """As when the service is asked and answers 404: the disk cache's champion, whatever its
    age, serves (question 2c)."""
    cache = cached(tmp_path, 2 * HOUR)
    absent_since(cache, KEY, 10.0)
    fetch = FakeFetcher(NONE)
    decision = resolver(cache, fetch).resolve(64, 64)
    assert fetch.asked == []
    assert decision.route == "kernel"
    assert decision.reason.startswith("champion program 17 from disk cache (no champion on ")


def test_two_paths_one_cached_one_known_absent_start_without_the_service(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path / "cache")
    small = ChampionKernel.from_payload(champion_json(dtype="complex128"), CUBIN)
    cache.store(small)
    z64 = ChampionKey(GPU.key, "trsm_small_z64", "complex128", "m64eq_n64")
    absent_since(cache, z64, 30.0)
    fetch = FakeFetcher(NONE)
    decision = Resolver(
        "trsm", "complex128", gpu=GPU, fetch=fetch, cache=cache, trust=TRUST, cache_max_age_s=HOUR
    ).resolve(64, 64)

    assert fetch.asked == []
    assert (decision.route, decision.path) == ("kernel", "trsm_small")
    assert [(item.path, item.route) for item in decision.compared] == [
        ("trsm_small", "kernel"),
        ("trsm_small_z64", "cublas"),
    ]
    assert decision.compared[1].reason.startswith("no champion on service 30 s ago")
