"""The loader's cache-first rule (issue 11, Build item 4; ``KERNEVO_CACHE_MAX_AGE_S``), on CPU:
a disk-cache entry written less than the max age ago whose champion passes the trust checks is
used without asking the service; an older one, one dated ahead of the clock, or a max age of 0
ask the service first, as before; a fresh entry that is refused is judged once and the service
is asked. The fetcher is a fake that counts its calls; the disk cache and the trust checks are
the real ones, the champions signed with the key of ``test_loader_resolver``.

The last test runs ``kernevo.load`` and the first resolve in a fresh interpreter (the GPU
identity faked, nothing launched) and checks that the HTTP client is never imported when the
disk cache answers.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from test_loader_resolver import CUBIN, GPU, SIGNER, TRUST, champion_json

from kernevo.cache import ChampionCache
from kernevo.client import ChampionKernel, ChampionKey, FetchOutcome
from kernevo.environment import SettingsError
from kernevo.keys import public_raw_of
from kernevo.resolver import Resolver
from kernevo.settings import LoaderSettings

KEY = ChampionKey(GPU.key, "trsm_small", "float64", "m64n64")
HOUR = 3600.0
DOWN = FetchOutcome("unreachable", "service unreachable: ConnectError: connection refused")


def champion(program_id: int = 17, signer: Ed25519PrivateKey = SIGNER) -> ChampionKernel:
    """A signed champion of ``KEY`` as the service would send it."""
    return ChampionKernel.from_payload(champion_json(program_id=program_id, signer=signer), CUBIN)


class FakeFetcher:
    """Answers every fetch with ``outcome`` and records the keys asked for."""

    def __init__(self, outcome: FetchOutcome) -> None:
        self.outcome = outcome
        self.asked: list[ChampionKey] = []

    def __call__(self, key: ChampionKey, *shape: int) -> FetchOutcome:
        self.asked.append(key)
        return self.outcome


def serving(program_id: int) -> FakeFetcher:
    """A fetcher whose service has the signed champion ``program_id``."""
    return FakeFetcher(
        FetchOutcome("ok", f"champion program {program_id} from service", champion(program_id))
    )


def cached(
    tmp_path: Path, age_s: float, entry: ChampionKernel | None = None, service: str = ""
) -> ChampionCache:
    """A disk cache of ``service`` holding ``entry`` (default program 17), its entry file dated
    ``age_s`` seconds ago (negative: ahead of the clock)."""
    cache = ChampionCache(tmp_path / "cache", service=service)
    written = cache.store(entry if entry is not None else champion())
    when = time.time() - age_s
    os.utime(written, (when, when))
    return cache


def resolver(cache: ChampionCache, fetch: FakeFetcher, max_age_s: float = HOUR) -> Resolver:
    return Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=cache, trust=TRUST, cache_max_age_s=max_age_s
    )


def test_a_fresh_trusted_entry_is_used_without_asking_the_service(tmp_path: Path) -> None:
    fetch = serving(18)
    decision = resolver(cached(tmp_path, 12.4), fetch).resolve(64, 64)

    assert fetch.asked == []
    assert (decision.route, decision.path, decision.refusals) == ("kernel", "trsm_small", ())
    assert decision.champion is not None and decision.champion.program_id == 17
    assert decision.reason == (
        "champion program 17 from disk cache (written 12 s ago, within "
        "KERNEVO_CACHE_MAX_AGE_S=3600; service not asked)"
    )


def test_a_stale_entry_asks_the_service_whose_champion_then_serves_and_is_stored(
    tmp_path: Path,
) -> None:
    cache = cached(tmp_path, HOUR + 1)
    fetch = serving(18)
    decision = resolver(cache, fetch).resolve(64, 64)

    assert fetch.asked == [KEY]
    assert (decision.route, decision.reason) == ("kernel", "champion program 18 from service")
    # The service's answer rewrote the entry: the next process is served from the cache.
    age = cache.entry_age_s(KEY)
    assert age is not None and 0 <= age < 60
    again = serving(19)
    assert resolver(cache, again).resolve(64, 64).champion.program_id == 18  # type: ignore[union-attr]
    assert again.asked == []


def test_a_stale_entry_still_answers_when_the_service_is_down(tmp_path: Path) -> None:
    fetch = FakeFetcher(DOWN)
    decision = resolver(cached(tmp_path, 2 * HOUR), fetch).resolve(64, 64)

    assert fetch.asked == [KEY]
    assert (decision.route, decision.reason) == (
        "kernel",
        f"champion program 17 from disk cache ({DOWN.detail})",
    )


def test_max_age_zero_asks_the_service_first_as_before(tmp_path: Path) -> None:
    cache = cached(tmp_path, 1.0)
    fetch = serving(18)
    assert resolver(cache, fetch, 0.0).resolve(64, 64).reason == "champion program 18 from service"
    assert fetch.asked == [KEY]

    down = FakeFetcher(DOWN)
    decision = resolver(cache, down, 0.0).resolve(64, 64)
    assert down.asked == [KEY]
    assert decision.reason == f"champion program 18 from disk cache ({DOWN.detail})"


def test_the_resolver_asks_the_service_first_unless_told_a_max_age(tmp_path: Path) -> None:
    fetch = serving(18)
    Resolver(
        "trsm", "float64", gpu=GPU, fetch=fetch, cache=cached(tmp_path, 1.0), trust=TRUST
    ).resolve(64, 64)
    assert fetch.asked == [KEY]


def test_an_entry_dated_ahead_of_the_clock_asks_the_service(tmp_path: Path) -> None:
    fetch = serving(18)
    decision = resolver(cached(tmp_path, -600), fetch).resolve(64, 64)
    assert fetch.asked == [KEY] and decision.reason == "champion program 18 from service"


def test_a_fresh_entry_the_trust_checks_refuse_is_refused_then_the_service_answers(
    tmp_path: Path,
) -> None:
    stranger = Ed25519PrivateKey.generate()
    cache = cached(tmp_path, 5.0, champion(17, signer=stranger))
    fetch = serving(18)
    decision = resolver(cache, fetch).resolve(64, 64)

    assert fetch.asked == [KEY]
    assert (decision.route, decision.reason) == ("kernel", "champion program 18 from service")
    assert [(r.source, r.check) for r in decision.refusals] == [("disk cache", "unknown_key")]
    # The admitted champion replaced the refused entry.
    assert cache.load(KEY).champion.program_id == 18  # type: ignore[union-attr]


def test_a_fresh_refused_entry_with_the_service_down_is_judged_once(tmp_path: Path) -> None:
    stranger = Ed25519PrivateKey.generate()
    fetch = FakeFetcher(DOWN)
    decision = resolver(cached(tmp_path, 5.0, champion(17, signer=stranger)), fetch).resolve(64, 64)

    assert fetch.asked == [KEY]
    assert decision.route == "cublas"
    assert [(r.source, r.check) for r in decision.refusals] == [("disk cache", "unknown_key")]
    assert decision.reason.startswith(
        f"{DOWN.detail}; disk cache: refused champion program 17: signed by unknown key "
    )


def test_a_fresh_entry_edited_after_it_was_written_is_refused(tmp_path: Path) -> None:
    """Widening the envelope of a fresh entry and re-hashing it keeps it fresh but breaks its
    signature: refused, and the service asked."""
    from kernevo.cache import payload_sha256

    cache = cached(tmp_path, 0.0)
    entry = cache.entry_file(KEY)
    record = json.loads(entry.read_text())
    record["payload"]["envelope"]["m_max"] = 4096
    record["payload_sha256"] = payload_sha256(record["payload"])
    entry.write_text(json.dumps(record))
    fetch = FakeFetcher(DOWN)
    decision = resolver(cache, fetch).resolve(64, 64)

    assert fetch.asked == [KEY] and decision.route == "cublas"
    assert [(r.source, r.check) for r in decision.refusals] == [("disk cache", "bad_signature")]


def test_no_entry_asks_the_service(tmp_path: Path) -> None:
    fetch = FakeFetcher(DOWN)
    decision = resolver(ChampionCache(tmp_path / "empty"), fetch).resolve(64, 64)
    assert fetch.asked == [KEY]
    assert decision.reason == f"{DOWN.detail}; disk cache: no entry"


def test_entry_age_is_the_time_since_the_entry_was_written(tmp_path: Path) -> None:
    cache = cached(tmp_path, 100.0)
    assert cache.entry_age_s(KEY, now=time.time()) == pytest.approx(100.0, abs=5.0)
    assert ChampionCache(tmp_path / "empty").entry_age_s(KEY) is None


def test_the_setting_defaults_to_an_hour_and_refuses_what_is_not_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KERNEVO_CACHE_MAX_AGE_S", raising=False)
    assert LoaderSettings().cache_max_age_s == HOUR
    monkeypatch.setenv("KERNEVO_CACHE_MAX_AGE_S", "0")
    assert LoaderSettings().cache_max_age_s == 0.0
    for bad in ("-1", "abc", "nan", "1e9"):
        monkeypatch.setenv("KERNEVO_CACHE_MAX_AGE_S", bad)
        with pytest.raises(SettingsError) as caught:
            LoaderSettings()
        message = str(caught.value)
        assert message.startswith(f"KERNEVO_CACHE_MAX_AGE_S='{bad}': expected seconds")
        assert "\n" not in message


# A fresh interpreter: kernevo.load from a disk cache holding a fresh signed champion, the
# service at a closed port; the GPU identity is faked (no CUDA here) and nothing is launched:
# the first call's routing (explain) is what runs. Prints the decision and what was imported.
_CHILD = """
import json, sys, time
start = time.perf_counter()
import kernevo, kernevo.solver
from kernevo.device import GpuInfo
kernevo.solver.current_gpu = lambda: GpuInfo(**json.loads(sys.argv[1]))
imported = time.perf_counter()
solver = kernevo.load("trsm", "float64", api_url=sys.argv[2], cache_dir=sys.argv[3],
                      trusted_keys=[sys.argv[4]], key_dir=sys.argv[5])
loaded = time.perf_counter()
decision = solver.explain(64, 64)
done = time.perf_counter()
print(json.dumps({
    "route": decision.route, "reason": decision.reason,
    "modules": sorted({name.split(".")[0] for name in sys.modules}),
    "import_ms": (imported - start) * 1e3, "load_ms": (loaded - imported) * 1e3,
    "resolve_ms": (done - loaded) * 1e3,
}))
"""


def test_load_from_a_fresh_cache_entry_never_imports_the_http_client(tmp_path: Path) -> None:
    cached(tmp_path, 1.0, service="http://127.0.0.1:9")
    trusted = base64.b64encode(public_raw_of(SIGNER)).decode()
    gpu = {"index": 0, "name": GPU.name, "key": GPU.key, "arch": GPU.arch}
    # Port 9 (discard) on the loopback address: nothing listens there on a test machine, and
    # the service must not be asked at all.
    args = [json.dumps(gpu), "http://127.0.0.1:9", str(tmp_path / "cache"), trusted]
    args.append(str(tmp_path / "no-local-key"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNEVO_")}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env=env,
    )
    found: dict[str, Any] = json.loads(done.stdout)

    assert found["route"] == "kernel", found["reason"]
    assert found["reason"].startswith("champion program 17 from disk cache (written ")
    assert found["reason"].endswith("KERNEVO_CACHE_MAX_AGE_S=3600; service not asked)")
    assert "httpx" not in found["modules"] and "cupy" not in found["modules"]
    print(
        f"\nfresh interpreter (CPU, faked GPU): import kernevo {found['import_ms']:.0f} ms, "
        f"kernevo.load {found['load_ms']:.0f} ms, first resolve from the disk cache "
        f"{found['resolve_ms']:.0f} ms"
    )
