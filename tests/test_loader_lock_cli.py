"""`kernevo lock`: pin the champions of the loader's disk cache that this machine's keys
trust; a loader with that lock file uses exactly those."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from test_loader_resolver import CUBIN, SIGNER, TRUST, champion_json

from kernevo.cache import ChampionCache
from kernevo.cli import main
from kernevo.client import ChampionKernel
from kernevo.keys import public_raw_of
from kernevo.lockfile import LockFile


def _champion(**kwargs: object) -> ChampionKernel:
    body = champion_json(**kwargs)  # type: ignore[arg-type]
    return ChampionKernel.from_payload(body, base64.b64decode(body["cubin_b64"]))


@pytest.fixture
def cache_with_three(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ChampionCache:
    """A signed float64 champion, an unsigned float32 one, a complex128 one signed by a
    stranger; the loader trusts SIGNER only."""
    cache = ChampionCache(tmp_path / "cache")
    cache.store(_champion(program_id=17))
    cache.store(_champion(program_id=18, dtype="float32", signer=None))
    cache.store(_champion(program_id=19, dtype="complex128", signer=Ed25519PrivateKey.generate()))
    trusted = base64.b64encode(public_raw_of(SIGNER)).decode()
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", trusted)
    monkeypatch.setenv("KERNEVO_TRUST_LOCAL_KEY", "false")
    monkeypatch.setenv("KERNEVO_CACHE_DIR", str(cache.root))
    return cache


def test_lock_pins_only_trusted_champions(
    cache_with_three: ChampionCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock_path = tmp_path / "kernevo.lock"
    assert main(["lock", "-o", str(lock_path)]) == 0
    out = capsys.readouterr().out
    assert "pinned  nvidia-h200/trsm_small/float64/m64n64: program 17" in out
    assert "skipped nvidia-h200/trsm_small/float32/m64n64: unsigned" in out
    assert "skipped nvidia-h200/trsm_small/complex128/m64n64: signed by unknown key" in out
    lock = LockFile.load(lock_path)
    assert list(lock.entries) == ["nvidia-h200/trsm_small/float64/m64n64"]
    # The pinned champion passes a policy holding the lock; another build of that key does not.
    policy = TRUST.__class__(TRUST.keys, lock=lock)
    assert policy.check(_champion(program_id=17)) is None
    other = policy.check(_champion(program_id=17, cubin=CUBIN + b"v2"))
    assert other is not None and other.check == "lock_digest_differs"


def test_lock_with_nothing_trusted_writes_nothing_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = ChampionCache(tmp_path / "cache")
    cache.store(_champion(program_id=18, signer=None))
    monkeypatch.setenv("KERNEVO_TRUST_LOCAL_KEY", "false")
    lock_path = tmp_path / "kernevo.lock"
    assert main(["lock", "-o", str(lock_path), "--cache-dir", str(cache.root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernevo: no trusted champion in the disk cache") and "\n" not in err
    assert not lock_path.exists()


def test_a_tampered_cache_entry_is_not_pinned(
    cache_with_three: ChampionCache, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (cubin,) = (cache_with_three.root / "nvidia-h200/trsm_small/float64").glob("*.cubin")
    cubin.write_bytes(cubin.read_bytes() + b"\0")
    assert main(["lock", "-o", str(tmp_path / "kernevo.lock")]) == 1
    assert "skipped nvidia-h200/trsm_small/float64/m64n64: disk cache:" in capsys.readouterr().out


def test_lock_ignores_the_lock_file_it_may_be_rewriting(
    cache_with_three: ChampionCache,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """KERNEVO_LOCK_FILE naming the file about to be written (missing yet, or broken) must
    neither block nor decide the new pins."""
    lock_path = tmp_path / "kernevo.lock"
    monkeypatch.setenv("KERNEVO_LOCK_FILE", str(lock_path))
    assert main(["lock", "-o", str(lock_path)]) == 0
    lock_path.write_text("not json")
    assert main(["lock", "-o", str(lock_path)]) == 0
    assert list(LockFile.load(lock_path).entries) == ["nvidia-h200/trsm_small/float64/m64n64"]
    capsys.readouterr()


def test_an_unusable_trusted_key_is_one_printable_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNEVO_TRUSTED_KEYS", str(tmp_path / "key\udcff\x1b[31m.pub"))
    assert main(["lock", "-o", str(tmp_path / "kernevo.lock")]) == 1
    err = capsys.readouterr().err
    # policy_from_settings names the variable the key came from.
    assert err.startswith("kernevo: KERNEVO_TRUSTED_KEYS: trusted key ") and err.count("\n") == 1
    assert err.isprintable() or err[:-1].isprintable()
    err.encode("utf-8")  # a lone surrogate would raise here
