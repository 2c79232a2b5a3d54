"""The loader's warm-start memo (``kernevo.warm_start``, issue 11 Build item 4), on CPU.

A disk cache holding a champion signed by a key made for the test, trusted through a key file
(``KERNEVO_TRUSTED_KEYS``), the service a closed port, the GPU identity faked
(``kernevo.solver.current_gpu``) and, where a call runs, the path's driver class faked (the real
``build_driver``/``path_driver`` load it through the registry): the first ``kernevo.load`` decides
the full way and writes the memo; a later one replays it without building settings or running a
trust check (spied), and goes the full way again whenever anything the decision rested on changed.
A fresh interpreter checks that the replay imports no pydantic, cryptography, httpx or asyncio.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import importlib
import json
import logging
import os
import re
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_loader_resolver import CUBIN, GPU, champion_json, problem

import kernevo
import kernevo.solver
import kernevo.trust
import kernevo.warm_start as warm_start
from kernevo import environment, keys, lockfile
from kernevo.cache import ChampionCache
from kernevo.client import MAX_CUBIN_BYTES, ChampionKernel, ChampionKey
from kernevo.decision import Decision
from kernevo.environment import SettingsError
from kernevo.paths import ops, package
from kernevo.settings import LoaderSettings
from kernevo.warm_start import CacheFile, MemoKernel, WarmStart

# Never imported when a load and first call are answered from the memo (issue 11: ~220 ms).
HEAVY = ("pydantic", "pydantic_settings", "cryptography", "httpx", "asyncio")
FROM_MEMO = "warm-start memo (decided "
FROM_CACHE = "champion program 17 from disk cache (written "
TOKEN = "a-read-token-that-must-never-be-written-in-the-clear"
# Port 9 (discard) on the loopback: nothing listens there; most decisions never ask.
SERVICE = "http://127.0.0.1:9"


@dataclass
class World:
    """The files of one loader: its disk cache, key folder, trusted key file and signer."""

    root: Path
    cache: ChampionCache
    entry: Path
    trusted_key_file: Path
    signer: keys.SigningKey

    @property
    def memo_file(self) -> Path:
        """The float64 memo under this world's secret (named by its id; the secret must exist)."""
        secret_id = warm_start.secret_id(self.secret_file.read_bytes())
        return self.cache.root / "warm-start" / f"trsm.float64.{GPU.key}.{secret_id}.json"

    @property
    def secret_file(self) -> Path:
        return self.root / "keys" / warm_start.SECRET_FILE

    @property
    def cubin_file(self) -> Path:
        return self.entry.parent / f"{hashlib.sha256(CUBIN).hexdigest()}.cubin"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    signer = keys.generate_key_pair(tmp_path / "signer")
    # Entries of the service KERNEVO_API_URL names (below): only those are fresh for the loader.
    cache = ChampionCache(tmp_path / "cache", service=SERVICE)
    entry = cache.store(
        ChampionKernel.from_payload(champion_json(signer=signer.private_key), CUBIN)
    )
    trusted = tmp_path / "signer" / keys.PUBLIC_KEY_FILE
    monkeypatch.setenv("KERNEVO_CACHE_DIR", str(cache.root))
    # An existing folder: only the default key folder is created for the secret.
    (tmp_path / "keys").mkdir(mode=0o700)
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", str(trusted))
    monkeypatch.setenv("KERNEVO_API_URL", SERVICE)
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: GPU)
    return World(tmp_path, cache, entry, trusted, signer)


@dataclass
class Spies:
    """How often the full path's settings were built and its trust checks ran."""

    settings: int = 0
    trust_checks: int = 0


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Spies:
    counts = Spies()
    check, init = kernevo.trust.TrustPolicy.check, LoaderSettings.__init__

    def counted_check(self: Any, champion: Any) -> Any:
        counts.trust_checks += 1
        return check(self, champion)

    def counted_init(self: Any, **values: Any) -> None:
        counts.settings += 1
        init(self, **values)

    monkeypatch.setattr(kernevo.trust.TrustPolicy, "check", counted_check)
    monkeypatch.setattr(LoaderSettings, "__init__", counted_init)
    return counts


def decide(*shape: int, dtype: str = "float64", **arguments: Any) -> Decision:
    """A new solver's decision for ``shape`` (default 64×64), as a new process would take it."""
    return kernevo.load("trsm", dtype, **arguments).explain(*(shape or (64, 64)))


class FakeDriver:
    """Stands in for ``TrsmSmallDriver`` (built by the registry from the memo'd cubin): solves
    with NumPy and remembers the cubins it was built from."""

    built: list[bytes] = []

    def __init__(self, cubin: bytes, dtype: str, spec: Any) -> None:
        FakeDriver.built.append(cubin)

    def solve(self, a: np.ndarray, b: np.ndarray, stream: Any = None) -> np.ndarray:
        b[...] = np.linalg.solve(np.tril(a), b)
        return b


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> type[FakeDriver]:
    module = importlib.import_module(f"{package.__name__}.trsm_small.driver")
    monkeypatch.setattr(module, "TrsmSmallDriver", FakeDriver)
    FakeDriver.built = []
    return FakeDriver


# --- written after a full decision -------------------------------------------------------------


def test_a_full_decision_writes_a_memo_macd_with_a_private_secret(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_API_TOKEN", TOKEN)
    decision = decide()

    assert decision.route == "kernel" and decision.reason.startswith(FROM_CACHE)
    text = world.memo_file.read_text()
    record = json.loads(text)
    assert record["format"] == "kernevo.warm-start.v1"
    shape = record["body"]["shapes"]["64,64"]
    assert (shape["route"], shape["path"], shape["shape_bucket"], shape["reason"]) == (
        "kernel", "trsm_small", "m64n64", decision.reason
    )  # fmt: skip
    assert shape["kernel"]["program_id"] == 17
    assert shape["kernel"]["cubin_sha256"] == hashlib.sha256(CUBIN).hexdigest()
    cubin_file = world.cubin_file.relative_to(world.cache.root).as_posix()
    assert shape["kernel"]["cubin_file"] == cubin_file
    assert [(f["name"], f["fresh"]) for f in shape["files"]] == [
        (world.entry.relative_to(world.cache.root).as_posix(), True)
    ]
    # The fingerprint is HMACs: neither the token nor the service's address is in the file.
    assert TOKEN not in text and "127.0.0.1:9" not in text
    assert stat.S_IMODE(world.secret_file.stat().st_mode) == 0o600
    assert world.secret_file.stat().st_size == warm_start.SECRET_BYTES
    assert stat.S_IMODE(world.secret_file.parent.stat().st_mode) == 0o700


# --- replayed by a new solver ------------------------------------------------------------------


def test_a_new_solver_replays_the_memo_without_settings_or_trust_checks(
    world: World, spies: Spies
) -> None:
    first = decide()
    assert spies.settings == 1 and spies.trust_checks == 1
    spies.settings = spies.trust_checks = 0

    again = decide()

    assert (spies.settings, spies.trust_checks) == (0, 0)
    assert again.route == "kernel"
    assert again.reason.startswith(FROM_MEMO) and again.reason.endswith(f": {first.reason}")
    assert (again.path, again.shape_bucket, again.compared) == (
        "trsm_small", "m64n64", first.compared
    )  # fmt: skip
    assert isinstance(again.champion, MemoKernel)
    assert (again.champion.program_id, again.champion.cubin) == (17, CUBIN)


def test_the_first_call_of_a_memoed_shape_launches_the_memoed_cubin(
    world: World, spies: Spies, fake_driver: type[FakeDriver]
) -> None:
    a, b, x = problem(64, 64)
    kernevo.load("trsm", "float64")(a, b)  # the full path: decides, builds, launches
    spies.settings = spies.trust_checks = 0
    fake_driver.built = []

    solver = kernevo.load("trsm", "float64")
    a, b, x = problem(64, 64, seed=1)
    assert solver(a, b) is b

    np.testing.assert_allclose(b, x, rtol=1e-12)
    assert fake_driver.built == [CUBIN]
    assert solver.runs_kernel(a, b) and solver.explain(64, 64).reason.startswith(FROM_MEMO)
    assert (spies.settings, spies.trust_checks) == (0, 0)


def test_a_shape_not_in_the_memo_is_decided_the_full_way_and_added(
    world: World, spies: Spies
) -> None:
    decide(64, 64)
    solver = kernevo.load("trsm", "float64")
    assert solver.explain(64, 64).reason.startswith(FROM_MEMO)
    assert spies.settings == 1  # the first load's only

    inside = solver.explain(32, 16)
    beyond = solver.explain(100, 100)

    assert inside.route == "kernel" and inside.reason.startswith(FROM_CACHE)
    assert (beyond.route, beyond.reason) == ("cublas", "no path serves m=100 n=100")
    assert spies.settings == 2  # the full resolver, built for the shape the memo lacked
    solver = kernevo.load("trsm", "float64")
    for shape in [(64, 64), (32, 16), (100, 100)]:
        assert solver.explain(*shape).reason.startswith(FROM_MEMO), shape
    assert spies.settings == 2


def test_a_memoed_kernel_that_fails_is_pinned_to_cublas_and_a_broken_full_path_is_a_reason(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    decide()
    memo = WarmStart.open("trsm", "float64", GPU, {})
    assert memo is not None and memo.holds_decisions()

    def full() -> Any:
        raise keys.KeyFileError("trusted key /gone.pub: cannot read (no such file)")

    resolver = kernevo.solver.WarmResolver("trsm", "float64", GPU, memo, full)
    memoed = resolver.resolve(64, 64)
    pinned = resolver.mark_failed((64, 64), RuntimeError("launch failed"))
    with caplog.at_level(logging.WARNING, logger="kernevo"):
        other = resolver.resolve(32, 16)

    assert pinned.route == "cublas" and pinned.reason == "kernel error: RuntimeError: launch failed"
    assert (pinned.path, pinned.champion) == ("trsm_small", memoed.champion)
    assert resolver.resolve(64, 64) is pinned
    assert other.route == "cublas" and other.reason.startswith("loader error: KeyFileError: ")
    assert "could not build the loader's resolver" in caplog.text


def test_a_remembered_404_is_replayed_until_the_service_is_asked_again(
    world: World, spies: Spies
) -> None:
    """complex128 64×64: trsm_small's champion from the disk cache, trsm_small_z64's 404
    remembered (the resolver's question 2b); the memo rests on both files."""
    world.cache.store(
        ChampionKernel.from_payload(
            champion_json(dtype="complex128", signer=world.signer.private_key), CUBIN
        )
    )
    z64 = ChampionKey(GPU.key, "trsm_small_z64", "complex128", "m64eq_n64")
    world.cache.remember_absent(z64)
    assert decide(dtype="complex128").route == "kernel"
    assert decide(dtype="complex128").reason.startswith(FROM_MEMO)

    world.cache.remember_absent(z64)  # a new 404 written by another process

    again = decide(dtype="complex128")
    assert again.route == "kernel" and not again.reason.startswith(FROM_MEMO)


# --- anything changed: the full path ----------------------------------------------------------


def test_a_memo_whose_mac_fails_warns_once_and_is_rewritten(
    world: World, spies: Spies, caplog: pytest.LogCaptureFixture
) -> None:
    decide()
    record = json.loads(world.memo_file.read_text())
    record["body"]["shapes"]["64,64"]["reason"] = "champion program 99 from service"
    world.memo_file.write_text(json.dumps(record))
    spies.trust_checks = 0

    with caplog.at_level(logging.WARNING, logger="kernevo"):
        forged = decide()
        decide()  # the rewritten memo: no second warning

    assert forged.reason.startswith(FROM_CACHE) and spies.trust_checks == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "does not match its MAC" in warnings[0], warnings
    assert decide().reason.startswith(FROM_MEMO)


def _set_variable(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_REQUEST_TIMEOUT_S", "3")


def _rewrite_trusted_key_file(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same key as base64 text instead of PEM: the file changed, what it says did not.
    world.trusted_key_file.write_text(base64.b64encode(world.signer.public_raw).decode())


def _another_driver(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = replace(GPU, nvidia_driver_version="590.1.2")
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: gpu)


def _replace_the_entry(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = json.loads(world.entry.read_text())["payload"]
    world.cache.store(ChampionKernel.from_payload(payload, CUBIN))  # a refetch rewrites it


@pytest.mark.parametrize(
    "change",
    [_set_variable, _rewrite_trusted_key_file, _another_driver, _replace_the_entry],
    ids=lambda change: change.__name__.strip("_"),
)
def test_a_change_of_what_the_decision_rested_on_sends_it_down_the_full_path(
    world: World, spies: Spies, monkeypatch: pytest.MonkeyPatch, change: Any
) -> None:
    decide()
    assert decide().reason.startswith(FROM_MEMO)
    spies.trust_checks = 0

    change(world, monkeypatch)
    decision = decide()

    assert decision.route == "kernel" and decision.reason.startswith(FROM_CACHE)
    assert spies.trust_checks == 1
    assert decide().reason.startswith(FROM_MEMO)  # the full path wrote it again


def test_a_revoked_key_sends_the_shape_down_the_full_path_to_cublas(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    decide()
    other = keys.generate_key_pair(world.root / "other")
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", base64.b64encode(other.public_raw).decode())

    decision = decide()

    assert decision.route == "cublas" and "signed by unknown key" in decision.reason
    # Refused, then the service asked (unreachable): an answer the disk cache does not keep,
    # so the next process decides the full way again.
    assert not decide().reason.startswith(FROM_MEMO)


def test_an_edited_lock_file_sends_the_shape_down_the_full_path(
    world: World, spies: Spies, monkeypatch: pytest.MonkeyPatch
) -> None:
    champion = ChampionKernel.from_payload(json.loads(world.entry.read_text())["payload"], CUBIN)
    lock = lockfile.write_lock_file(world.root / "kernevo.lock", [champion])
    monkeypatch.setenv("KERNEVO_LOCK_FILE", str(lock))
    decide()
    assert decide().reason.startswith(FROM_MEMO)
    spies.trust_checks = 0

    lock.write_text(json.dumps(json.loads(lock.read_text()), indent=4))  # same pins, new bytes

    decision = decide()
    assert decision.route == "kernel" and decision.reason.startswith(FROM_CACHE)
    assert spies.trust_checks == 1


def test_an_edited_cubin_is_not_launched(world: World, spies: Spies) -> None:
    decide()
    world.cubin_file.write_bytes(b"\x7fELF another module")

    decision = decide()

    assert decision.route == "cublas" and "cubin digest mismatch" in decision.reason
    assert spies.trust_checks == 1  # the full path found the entry's cubin changed


def test_an_entry_older_than_the_max_age_is_not_replayed(
    world: World, spies: Spies, monkeypatch: pytest.MonkeyPatch
) -> None:
    decide()
    spies.trust_checks = 0
    later = time.time() + warm_start.DEFAULT_MAX_AGE_S + 1
    monkeypatch.setattr(warm_start, "time", SimpleNamespace(time=lambda: later))

    decision = decide()

    assert not decision.reason.startswith(FROM_MEMO) and spies.trust_checks == 1


def test_a_fresh_file_is_within_the_max_age_and_not_dated_ahead(tmp_path: Path) -> None:
    (tmp_path / "entry.json").write_text("{}")
    seen = CacheFile.observe(tmp_path, tmp_path / "entry.json", fresh=True)
    assert seen.version is not None
    written = seen.version[2] / 1e9

    assert seen.change(tmp_path, written + 3599, 3600) is None
    assert "not within 3600 s" in (seen.change(tmp_path, written + 3600, 3600) or "")
    assert "not within 3600 s" in (seen.change(tmp_path, written - 5, 3600) or "")
    stale = CacheFile(seen.name, seen.version, fresh=False)
    assert stale.change(tmp_path, written + 10**6, 3600) is None
    (tmp_path / "entry.json").unlink()
    assert "changed since the decision" in (seen.change(tmp_path, written, 3600) or "")
    assert CacheFile("entry.json", None).change(tmp_path, written, 3600) is None


def test_an_argument_of_load_is_part_of_the_fingerprint(world: World) -> None:
    decide()
    assert not decide(cache_max_age_s=1800).reason.startswith(FROM_MEMO)
    assert decide(cache_max_age_s=1800).reason.startswith(FROM_MEMO)


# --- turned off, or a secret that is not private -----------------------------------------------


def test_warm_start_off_reads_and_writes_no_memo(
    world: World, monkeypatch: pytest.MonkeyPatch, spies: Spies
) -> None:
    monkeypatch.setenv("KERNEVO_WARM_START", "0")

    assert WarmStart.open("trsm", "float64", GPU, {}) is None
    decide()
    decide()

    assert not (world.cache.root / "warm-start").exists() and not world.secret_file.exists()
    assert spies.trust_checks == 2


@pytest.mark.parametrize("value", ["perhaps", "abc", "-1", " true", ""])
def test_a_switch_value_that_is_not_a_boolean_is_refused_by_the_settings(
    world: World, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Check: ``_switched_on`` declines (``open`` is ``None``: no memo read), and the full path's
    ``LoaderSettings.warm_start`` field raises the one-line ``SettingsError``."""
    monkeypatch.setenv("KERNEVO_WARM_START", value)
    assert WarmStart.open("trsm", "float64", GPU, {}) is None
    with pytest.raises(SettingsError) as info:
        kernevo.load("trsm", "float64")
    assert info.value.name == "KERNEVO_WARM_START"
    assert str(info.value).startswith(f"KERNEVO_WARM_START={value!r}: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KERNEVO_DEBUG", "abc"), ("KERNEVO_TRUST_LOCAL_KEY", "-1"), ("KERNEVO_API_TOKEN", "short")],
)
def test_a_bad_setting_after_a_memo_was_written_is_refused_not_replayed(
    world: World, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """Check: the fingerprint's ``environment`` part. A memo is written only by a full path whose
    settings parsed, so a bad value never matches one: the full path runs and raises."""
    decide()
    assert decide().reason.startswith(FROM_MEMO)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=f"^{variable}"):
        decide()


@pytest.mark.parametrize("value", ["1", "true", "YES", "on", "T", "y"])
def test_every_true_spelling_of_the_switch_turns_it_on(
    world: World, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KERNEVO_WARM_START", value)
    assert WarmStart.open("trsm", "float64", GPU, {}) is not None


def test_the_switch_takes_the_spellings_of_every_other_boolean() -> None:
    """One spelling set: the warm start's copy is the catalogue's (pydantic's own)."""
    assert warm_start._ON == environment.BOOLEAN_TRUE
    assert warm_start._OFF == environment.BOOLEAN_FALSE


def test_two_key_folders_sharing_one_cache_each_keep_a_warm_memo(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Check: the memo's file name carries ``secret_id`` of the secret, so a process of another
    key folder neither reads (no false MAC warning) nor overwrites this folder's memo."""
    other_keys = world.root / "other-keys"
    other_keys.mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="kernevo"):
        for _ in range(2):
            for key_dir in (world.root / "keys", other_keys):
                monkeypatch.setenv("KERNEVO_KEY_DIR", str(key_dir))
                decide()
        for key_dir in (world.root / "keys", other_keys):
            monkeypatch.setenv("KERNEVO_KEY_DIR", str(key_dir))
            assert decide().reason.startswith(FROM_MEMO)
    assert "does not match its MAC" not in caplog.text
    assert len(list((world.cache.root / "warm-start").glob("trsm.float64.*.json"))) == 2


def test_a_secret_others_can_read_turns_the_warm_start_off(
    world: World, spies: Spies, caplog: pytest.LogCaptureFixture
) -> None:
    decide()
    world.secret_file.chmod(0o644)
    spies.trust_checks = 0

    with caplog.at_level(logging.WARNING, logger="kernevo"):
        decision = decide()

    assert decision.reason.startswith(FROM_CACHE) and spies.trust_checks == 1
    assert "readable or writable by others" in caplog.text


def test_a_process_losing_the_race_for_the_secret_uses_the_winners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    winner = b"w" * warm_start.SECRET_BYTES
    link = os.link

    def linked_by_another_first(source: str, target: Path) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, winner)
        os.close(fd)
        link(source, target)  # FileExistsError, as for the process that lost

    monkeypatch.setattr(warm_start.os, "link", linked_by_another_first)
    (tmp_path / "keys").mkdir(mode=0o700)
    assert warm_start._create_secret(tmp_path / "keys") == winner
    assert [p.name for p in (tmp_path / "keys").iterdir()] == [warm_start.SECRET_FILE]


# --- attacks: what stops each (each defect found is fixed in kernevo.warm_start / solver) -------


def _debug_lines(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == "kernevo")


def _mac_not_ascii(world: World) -> None:
    # Found: hmac.compare_digest raised TypeError on it, out of kernevo.load (a cache writer's
    # way to make every load raise). Now compared as bytes: a MAC that does not match.
    record = json.loads(world.memo_file.read_text())
    record["mac"] = "é" * 64
    world.memo_file.write_text(json.dumps(record))


def _mac_lone_surrogate(world: World) -> None:
    text = world.memo_file.read_text()
    mac = json.loads(text)["mac"]
    world.memo_file.write_text(text.replace(mac, "\\ud800" + mac[1:]))


def _nan_in_body(world: World) -> None:
    text = world.memo_file.read_text()
    world.memo_file.write_text(re.sub(r'"decided_at": [0-9.e+]+', '"decided_at": NaN', text))


def _corrupt_json(world: World) -> None:
    world.memo_file.write_text('{"format": "kernevo.warm-start.v1", "body": {')


def _oversized(world: World) -> None:
    world.memo_file.write_bytes(b" " * (warm_start.MAX_MEMO_BYTES + 1))


def _memo_a_directory(world: World) -> None:
    world.memo_file.unlink()
    world.memo_file.mkdir()


def _memo_a_fifo(world: World) -> None:
    world.memo_file.unlink()
    os.mkfifo(world.memo_file)


def _memo_a_symlink(world: World) -> None:
    copy = world.root / "memo-copy.json"  # a memo that would verify, reached through a link
    world.memo_file.rename(copy)
    world.memo_file.symlink_to(copy)


def _folder_a_file(world: World) -> None:
    world.memo_file.unlink()
    world.memo_file.parent.rmdir()
    world.memo_file.parent.write_text("not a folder")


def _secret_a_directory(world: World) -> None:
    world.secret_file.unlink()
    world.secret_file.mkdir(mode=0o700)


def _secret_a_symlink(world: World) -> None:
    copy = world.root / "secret-copy"
    world.secret_file.rename(copy)
    world.secret_file.symlink_to(copy)


def _secret_short(world: World) -> None:
    world.secret_file.write_bytes(b"short")


# Each hostile memo, memo folder or secret, and what stops it (the line logged).
HOSTILE = {
    "mac_not_ascii": (_mac_not_ascii, "does not match its MAC"),
    "mac_lone_surrogate": (_mac_lone_surrogate, "does not match its MAC"),
    "nan_in_body": (_nan_in_body, "does not match its MAC"),
    "corrupt_json": (_corrupt_json, "unreadable"),
    "oversized": (_oversized, f"larger than {warm_start.MAX_MEMO_BYTES} bytes"),
    "memo_a_directory": (_memo_a_directory, "is not a regular file"),
    "memo_a_fifo": (_memo_a_fifo, "is not a regular file"),
    "memo_a_symlink": (_memo_a_symlink, f"unreadable: [Errno {errno.ELOOP}]"),
    "folder_a_file": (_folder_a_file, f"unreadable: [Errno {errno.ENOTDIR}]"),
    "secret_a_directory": (_secret_a_directory, "is not a regular file"),
    "secret_a_symlink": (_secret_a_symlink, f"secret unusable: [Errno {errno.ELOOP}]"),
    "secret_short": (_secret_short, "holds 5 bytes, not 32"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_memo_or_secret_is_the_full_path_never_an_exception(
    world: World, spies: Spies, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    spoil, stopped_by = HOSTILE[kind]
    decide()
    spoil(world)
    spies.trust_checks = 0

    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        decision = decide()

    assert decision.route == "kernel" and decision.reason.startswith(FROM_CACHE)
    assert spies.trust_checks == 1
    assert stopped_by in _debug_lines(caplog)


def test_a_variable_of_undecodable_bytes_is_the_full_path_then_replayed(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found: os.environ holds bytes that are not UTF-8 as lone surrogates, which the
    fingerprint's strict encoding refused: with a memo there, ``kernevo.load`` raised
    UnicodeEncodeError. Now encoded one-to-one (surrogatepass): the fingerprint's
    ``environment`` part differs, and the next process replays."""
    decide()
    monkeypatch.setenv("KERNEVO_API_TOKEN", "token-" + "x" * 32 + "\udcff")  # ends in byte 0xff

    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        assert decide().reason.startswith(FROM_CACHE)

    assert "is for other ['environment']" in _debug_lines(caplog)
    assert decide().reason.startswith(FROM_MEMO)


def test_the_environment_part_cannot_read_two_ways() -> None:
    """Found: ``name=value`` lines let a value holding a line break pass for two variables,
    the fingerprint of another environment (here one whose lock file is unset). Now JSON."""
    settings = warm_start.read_settings({}, {})
    assert settings is not None
    one = {"KERNEVO_API_TOKEN": "t\nKERNEVO_LOCK_FILE=/pins.lock"}
    two = {"KERNEVO_API_TOKEN": "t", "KERNEVO_LOCK_FILE": "/pins.lock"}

    first, second = (
        warm_start.fingerprint_material({}, env, GPU, settings, code="")["environment"]
        for env in (one, two)
    )

    assert first != second


def test_a_key_folder_that_is_a_file_is_the_full_path(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = world.root / "keys-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("KERNEVO_KEY_DIR", str(not_a_folder))

    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        assert decide().reason.startswith(FROM_CACHE)
        assert decide().reason.startswith(FROM_CACHE)

    assert "memo not written: no secret" in _debug_lines(caplog)
    assert not (world.cache.root / "warm-start").exists()


def test_a_trusted_key_path_given_with_a_line_break_binds_that_file(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found: the fingerprint digested ``"<path>\\n"`` (missing) while the full path strips the
    entry and reads ``<path>``; replacing the key file (revoking the key) kept the memo. Now
    the trust part follows ``kernevo.keys.trusted_keys``' reading."""
    monkeypatch.delenv("KERNEVO_TRUSTED_KEYS")
    read_from_a_file = [f" {world.trusted_key_file}\n"]  # as open(...).read() gives it
    assert decide(trusted_keys=read_from_a_file).route == "kernel"
    assert decide(trusted_keys=read_from_a_file).reason.startswith(FROM_MEMO)
    other = keys.generate_key_pair(world.root / "other")
    world.trusted_key_file.write_bytes(other.path.with_name(keys.PUBLIC_KEY_FILE).read_bytes())

    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        decision = decide(trusted_keys=read_from_a_file)

    assert decision.route == "cublas" and "signed by unknown key" in decision.reason
    assert "is for other ['trust']" in _debug_lines(caplog)


def _toolkit_check_dropped(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNEVO_REQUIRE_SAME_TOOLKIT")


def _toolkit_check_restored(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEVO_REQUIRE_SAME_TOOLKIT", "true")


def _champion_pinned(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    champion = ChampionKernel.from_payload(json.loads(world.entry.read_text())["payload"], CUBIN)
    lockfile.write_lock_file(world.root / "kernevo.lock", [champion])


def _pin_reverted(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    lockfile.write_lock_file(world.root / "kernevo.lock", [])


CODE_DIGEST = warm_start._code_digest


def _source_edited(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_start, "_code_digest", lambda: "an edited loader")


def _source_restored(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_start, "_code_digest", CODE_DIGEST)


# What changes while a warm-started process runs (before the full path reads its inputs for a
# shape the memo lacks), what undoes it for the next process, what the full path then says,
# and the fingerprint part that changed.
IN_PROCESS = {
    "variable": (_toolkit_check_dropped, _toolkit_check_restored, "KERNEVO_REQUIRE_SAME_TOOLKIT",
                 "environment"),
    "lock_file": (_champion_pinned, _pin_reverted, "not in lock file", "trust"),
    "loader_source": (_source_edited, _source_restored, None, "code"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(IN_PROCESS))
def test_inputs_changed_after_load_are_not_recorded_under_its_fingerprint(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """Found: a WarmResolver builds the full resolver on the first shape its memo lacks, maybe
    long after load took the fingerprint; a decision made under the inputs of then was recorded
    under load's fingerprint, and a later process under load's inputs replayed it (a kernel its
    KERNEVO_REQUIRE_SAME_TOOLKIT or lock file refuses). Now ``WarmStart.inputs_unchanged``."""
    change, undo, refusal, part = IN_PROCESS[kind]
    if kind == "variable":
        monkeypatch.setenv("KERNEVO_REQUIRE_SAME_TOOLKIT", "true")
    if kind == "lock_file":
        _pin_reverted(world, monkeypatch)
        monkeypatch.setenv("KERNEVO_LOCK_FILE", str(world.root / "kernevo.lock"))
    decide(100, 100)  # a decision of no champion: the memo holds something
    solver = kernevo.load("trsm", "float64")
    assert solver.explain(100, 100).reason.startswith(FROM_MEMO)

    change(world, monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        meanwhile = solver.explain(64, 64)
    undo(world, monkeypatch)

    assert meanwhile.route == "kernel"  # decided under the changed inputs
    assert f"memo not written: ['{part}'] changed since load" in _debug_lines(caplog)
    assert list(json.loads(world.memo_file.read_text())["body"]["shapes"]) == ["100,100"]
    after = decide()
    assert not after.reason.startswith(FROM_MEMO)
    if refusal is not None:
        assert after.route == "cublas" and refusal in after.reason


def test_a_file_used_as_fresh_but_gone_when_observed_does_not_replay_past_the_max_age(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Found: the 404 marker dated fresh, then removed (a concurrent store) before the resolver
    observed it, was recorded fresh but absent; the entry, read whatever its age, was recorded
    not fresh: nothing dated the replay, which went on past the max age. Now a file used as
    fresh must be there (``CacheFile.change``)."""
    two_hours_ago = time.time() - 2 * 3600
    os.utime(world.entry, (two_hours_ago, two_hours_ago))
    dated, named = ChampionCache.absent_age_s, ChampionCache.absent_service
    monkeypatch.setattr(ChampionCache, "absent_age_s", lambda self, key, now=None: 5.0)
    monkeypatch.setattr(ChampionCache, "absent_service", lambda self, key: SERVICE)
    decision = decide()
    monkeypatch.setattr(ChampionCache, "absent_age_s", dated)
    monkeypatch.setattr(ChampionCache, "absent_service", named)
    assert decision.route == "kernel" and "no champion on service 5 s ago" in decision.reason
    files = json.loads(world.memo_file.read_text())["body"]["shapes"]["64,64"]["files"]
    assert [(f["name"].rsplit(".", 1)[1], f["version"], f["fresh"]) for f in files][0] == (
        "absent", None, True
    )  # fmt: skip

    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        later = decide()

    assert not later.reason.startswith(FROM_MEMO)
    assert "m64n64.absent used as fresh but absent" in _debug_lines(caplog)


def test_a_shape_of_odd_values_is_not_recorded_and_the_memo_stays_readable(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    """Found: ``explain(32.0, 16)`` was recorded as ``"32.0,16"``, which the next process could
    not parse: its whole memo was dropped (no warm start for any shape). Now ``explain`` refuses
    such a shape (``checked_shape``) and the memo records only integers (``_shape_text``,
    reached here through the resolver itself)."""
    decide(64, 64)
    solver = kernevo.load("trsm", "float64")
    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        for shape in [(32.0, 16), (float("nan"), 16), (float("inf"), 16)]:
            with pytest.raises(ops.ShapeError, match="is not an integer"):
                solver.explain(*shape)
            solver._resolver.resolve(*shape)
    solver.explain(np.int64(16), np.int64(8))  # an integer, as NumPy gives it

    assert "shape (32.0, 16) not recorded (not integers)" in _debug_lines(caplog)
    shapes = json.loads(world.memo_file.read_text())["body"]["shapes"]
    assert sorted(shapes) == ["16,8", "64,64"]
    again = kernevo.load("trsm", "float64")
    assert again.explain(64, 64).reason.startswith(FROM_MEMO)
    assert again.explain(16, 8).reason.startswith(FROM_MEMO)


def test_a_memo_copied_from_another_dtype_or_gpu_is_not_replayed(
    world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped already: another dtype's memo has this process's fingerprint (it holds no op
    nor dtype) and a MAC under this secret, and is refused by the body's op/dtype/GPU check;
    another GPU's by the fingerprint's ``gpu`` part."""
    decide(100, 100, dtype="float32")  # no path serves it: recorded from no file at all
    secret_id = warm_start.secret_id(world.secret_file.read_bytes())
    float32 = world.memo_file.with_name(f"trsm.float32.{GPU.key}.{secret_id}.json")
    other_gpu = replace(GPU, key="nvidia-b200", name="NVIDIA B200", arch="sm_100")
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: other_gpu)
    decide(100, 100)
    monkeypatch.setattr(kernevo.solver, "current_gpu", lambda: GPU)
    b200 = world.memo_file.with_name(f"trsm.float64.{other_gpu.key}.{secret_id}.json")

    for copied, stopped_by in [(float32, "is another problem's"), (b200, "is for other ['gpu']")]:
        world.memo_file.write_bytes(copied.read_bytes())
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="kernevo"):
            decision = decide(100, 100)
        assert not decision.reason.startswith(FROM_MEMO), copied
        assert stopped_by in _debug_lines(caplog), copied


def test_the_bytes_launched_are_the_bytes_hashed_though_the_cubin_is_swapped_after(
    world: World, fake_driver: type[FakeDriver]
) -> None:
    """Stopped already: the memo's cubin is read once, hashed and passed on as bytes; a swap
    of the file between the replay's hash and the launch does not reach the driver."""
    decide()
    solver = kernevo.load("trsm", "float64")
    assert solver.explain(64, 64).reason.startswith(FROM_MEMO)  # read and hashed here
    world.cubin_file.write_bytes(b"\x7fELF swapped after the hash")

    a, b, x = problem(64, 64)
    solver(a, b)

    assert fake_driver.built == [CUBIN]
    np.testing.assert_allclose(b, x, rtol=1e-12)


def _cubin_through_a_link(world: World) -> str:
    copy = world.root / "cubin-copy"  # the same bytes, reached through a symbolic link
    world.cubin_file.rename(copy)
    world.cubin_file.symlink_to(copy)
    return "cubin unreadable"


def _entry_through_a_link(world: World) -> str:
    copy = world.root / "entry-copy.json"
    world.entry.rename(copy)
    world.entry.symlink_to(copy)
    return "m64n64.json changed since the decision"


@pytest.mark.parametrize("link", [_cubin_through_a_link, _entry_through_a_link],
                         ids=lambda link: link.__name__.strip("_"))  # fmt: skip
def test_a_disk_cache_file_swapped_for_a_link_is_not_replayed(
    world: World, caplog: pytest.LogCaptureFixture, link: Any
) -> None:
    """Stopped already: a cache file is looked at itself (``lstat``; the cubin opened with
    ``O_NOFOLLOW``), as the full path reads it, even where the link leads to the same bytes."""
    decide()
    stopped_by = link(world)

    with caplog.at_level(logging.DEBUG, logger="kernevo"):
        decision = decide()

    assert decision.route == "cublas" and "symbolic link" in decision.reason
    assert stopped_by in _debug_lines(caplog)


def test_warm_start_off_opens_neither_memo_nor_secret(
    world: World, monkeypatch: pytest.MonkeyPatch, spies: Spies
) -> None:
    decide()
    memo, secret = world.memo_file.read_bytes(), world.secret_file.read_bytes()
    monkeypatch.setenv("kernevo_warm_start", "off")  # any case, as pydantic-settings reads
    opened: list[Path] = []
    real_open = os.open

    def recording_open(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(Path(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    spies.trust_checks = 0

    assert decide().reason.startswith(FROM_CACHE) and spies.trust_checks == 1
    assert not {world.memo_file, world.secret_file} & set(opened)
    assert opened  # the full path's own reads went through the spy
    assert (world.memo_file.read_bytes(), world.secret_file.read_bytes()) == (memo, secret)


def test_two_processes_writing_the_memo_leave_the_last_writers_whole(world: World) -> None:
    """Two processes that opened the memo before either wrote it: each writes its own decisions
    whole (atomically), the last one stays and verifies; the other's shape is decided the full
    way again by the next process, and added."""
    first, second = (WarmStart.open("trsm", "float64", GPU, {}) for _ in range(2))
    assert first is not None and second is not None
    kernevo.solver._full_resolver("trsm", "float64", {}, GPU, first).resolve(64, 64)
    kernevo.solver._full_resolver("trsm", "float64", {}, GPU, second).resolve(100, 100)

    solver = kernevo.load("trsm", "float64")
    assert solver.explain(100, 100).reason.startswith(FROM_MEMO)
    assert not solver.explain(64, 64).reason.startswith(FROM_MEMO)
    assert decide(64, 64).reason.startswith(FROM_MEMO)


# --- the full path's constants, mirrored without importing it ----------------------------------


def test_the_defaults_the_warm_start_reads_raw_are_the_full_paths() -> None:
    fields = LoaderSettings.model_fields
    assert Path(warm_start.DEFAULT_CACHE_DIR) == fields["cache_dir"].default
    assert Path(warm_start.DEFAULT_KEY_DIR) == keys.DEFAULT_KEY_DIR == fields["key_dir"].default
    assert fields["cache_max_age_s"].default == warm_start.DEFAULT_MAX_AGE_S
    assert LoaderSettings(cache_max_age_s=warm_start.MAX_AGE_LIMIT_S).cache_max_age_s > 0
    with pytest.raises(ValueError, match="cache_max_age_s"):
        LoaderSettings(cache_max_age_s=warm_start.MAX_AGE_LIMIT_S + 1)
    assert warm_start.PUBLIC_KEY_FILE == keys.PUBLIC_KEY_FILE
    assert warm_start.KEY_FILE_MAX_BYTES == keys.KEY_FILE_MAX_BYTES
    assert warm_start.LOCK_FILE_MAX_BYTES == lockfile.LOCK_FILE_MAX_BYTES
    assert warm_start.MAX_CUBIN_BYTES == MAX_CUBIN_BYTES
    assert warm_start._RAW_KEY_B64.pattern == keys._RAW_KEY_B64.pattern


# --- a fresh interpreter: what the warm start imports ------------------------------------------

# Replays the memo the test wrote: kernevo.load, explain and a first call (the path's driver
# class faked, the operands NumPy arrays that say they live on device 0). Prints the decision,
# the result's error, the modules loaded and the times: importing kernevo.solver (NumPy and
# CuPy already imported, as in an application), load, the first call.
_CHILD = """
import json, sys, time
from types import SimpleNamespace
import numpy as np
import cupy  # an application's process has CuPy before the loader's first call
start = time.perf_counter()
import kernevo, kernevo.solver
from kernevo.device import GpuInfo
from kernevo.paths import package
kernevo.solver.current_gpu = lambda: GpuInfo(**json.loads(sys.argv[1]))
import importlib
class FakeDriver:
    def __init__(self, cubin, dtype, spec):
        self.cubin = cubin
    def solve(self, a, b, stream=None):
        b[...] = np.linalg.solve(np.tril(a), b)
        return b
imported = time.perf_counter()
driver_module = importlib.import_module(package.__name__ + ".trsm_small.driver")
driver_module.TrsmSmallDriver = FakeDriver
class DeviceArray(np.ndarray):
    device = SimpleNamespace(id=0)
rng = np.random.default_rng(0)
a = np.asfortranarray(np.eye(64) + np.tril(rng.uniform(-1e-3, 1e-3, (64, 64)), -1))
b = np.asfortranarray(rng.uniform(-1, 1, (64, 64)))
x = np.linalg.solve(np.tril(a), b)
a, b = a.view(DeviceArray), b.view(DeviceArray)
ready = time.perf_counter()
solver = kernevo.load("trsm", "float64")
loaded = time.perf_counter()
solver(a, b)
called = time.perf_counter()
decision = solver.explain(64, 64)
print(json.dumps({
    "route": decision.route, "reason": decision.reason,
    "error": float(np.abs(np.asarray(b) - x).max()),
    "modules": sorted({name.split(".")[0] for name in sys.modules}),
    "import_ms": (imported - start) * 1e3, "load_ms": (loaded - ready) * 1e3,
    "first_call_ms": (called - loaded) * 1e3,
}))
"""


def test_a_warm_process_imports_no_pydantic_cryptography_httpx_or_asyncio(world: World) -> None:
    decide()  # this process writes the memo, as the first process of an application would
    gpu = {"index": 0, "name": GPU.name, "key": GPU.key, "arch": GPU.arch}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(gpu)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env=dict(os.environ),  # the fixture's KERNEVO_* variables: the same fingerprint
    )
    found: dict[str, Any] = json.loads(done.stdout)

    assert found["route"] == "kernel" and found["reason"].startswith(FROM_MEMO), found["reason"]
    assert found["error"] < 1e-12
    assert sorted(set(found["modules"]) & set(HEAVY)) == []
    print(
        f"\nfresh interpreter (CPU, faked GPU and driver, NumPy and CuPy imported): import "
        f"kernevo.solver {found['import_ms']:.1f} ms, kernevo.load from the warm-start memo "
        f"{found['load_ms']:.1f} ms, first call {found['first_call_ms']:.1f} ms"
    )


def test_a_key_folder_that_does_not_exist_is_not_created_unless_it_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped KERNEVO_KEY_DIR appeared on disk holding a secret (re-trial finding). Caught
    by _create_secret: only the default key folder is created; elsewhere no memo is written."""
    typo = tmp_path / "keyz"
    with pytest.raises(OSError, match="does not exist"):
        warm_start._create_secret(typo)
    assert not typo.exists()
    monkeypatch.setattr(warm_start, "DEFAULT_KEY_DIR", str(typo))
    assert warm_start._create_secret(typo) is not None
    assert (typo / warm_start.SECRET_FILE).is_file()
