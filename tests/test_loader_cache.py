"""The loader's disk cache: a roundtrip returns the same champion; torn, truncated or edited
files are misses with a reason, never a crash and never an unverified kernel."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from kernevo.cache import ChampionCache
from kernevo.client import ChampionKernel, ChampionKey

KEY = ChampionKey("nvidia-h200", "trsm_small", "float64", "m64n64")


def make_champion(program_id: int = 17, cubin: bytes = b"\x7fELF fake cubin 1") -> ChampionKernel:
    """A champion as the service would send it (fake cubin bytes, consistent hashes)."""
    source = "// EVOLVE-BLOCK-START\n// fake kernel\n// EVOLVE-BLOCK-END\n"
    payload = {
        "path": KEY.path,
        "dtype": KEY.dtype,
        "gpu": KEY.gpu,
        "shape_bucket": KEY.shape_bucket,
        "program_id": program_id,
        "arch": "sm_90",
        "nvrtc_version": "13.0",
        "cubin_b64": base64.b64encode(cubin).decode(),
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
        "source": source,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "compile_options": ["-arch=sm_90", "-std=c++17", "-DKERNEVO_DTYPE=1"],
        "launch": {"kernel": "trsm_small_kernel", "config_kernel": "kernevo_launch_config"},
        "envelope": {"m_max": 64, "n_max": 64, "verified_shapes": [[1, 1], [64, 64]]},
        "metrics": {"combined_score": 1.7, "speedup_64": 1.4},
        "promoted_at": "2025-01-01T00:00:00Z",
    }
    return ChampionKernel.from_payload(payload, cubin)


def test_roundtrip_returns_the_same_champion(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    champion = make_champion()
    entry = cache.store(champion)

    assert entry == tmp_path / "nvidia-h200" / "trsm_small" / "float64" / "m64n64.json"
    assert (entry.parent / f"{champion.cubin_sha256}.cubin").read_bytes() == champion.cubin
    lookup = cache.load(KEY)
    assert lookup.champion == champion
    assert lookup.detail == "champion program 17 from disk cache"
    assert not [p for p in entry.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_newer_champion_replaces_the_entry(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    cache.store(make_champion(17, b"old cubin"))
    newer = make_champion(23, b"new cubin")
    cache.store(newer)

    assert cache.load(KEY).champion == newer


def test_missing_entry_is_a_miss(tmp_path: Path) -> None:
    lookup = ChampionCache(tmp_path / "nothing-here").load(KEY)

    assert lookup.champion is None
    assert lookup.detail == "disk cache: no entry"


@pytest.mark.parametrize("keep", [0, 1, 40, 200])
def test_torn_entry_is_a_miss(tmp_path: Path, keep: int) -> None:
    cache = ChampionCache(tmp_path)
    entry = cache.store(make_champion())
    entry.write_bytes(entry.read_bytes()[:keep])

    lookup = cache.load(KEY)
    assert lookup.champion is None
    assert "torn" in lookup.detail or "corrupt" in lookup.detail


def test_torn_cubin_is_a_miss(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    champion = make_champion()
    entry = cache.store(champion)
    cubin_file = entry.parent / f"{champion.cubin_sha256}.cubin"
    cubin_file.write_bytes(champion.cubin[:5])

    lookup = cache.load(KEY)
    assert lookup.champion is None
    assert "cubin digest mismatch" in lookup.detail


def test_missing_cubin_is_a_miss(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    champion = make_champion()
    entry = cache.store(champion)
    (entry.parent / f"{champion.cubin_sha256}.cubin").unlink()

    lookup = cache.load(KEY)
    assert lookup.champion is None
    assert "cubin missing" in lookup.detail


def test_tampered_payload_is_a_miss(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    entry = cache.store(make_champion())
    record = json.loads(entry.read_text())
    record["payload"]["envelope"]["m_max"] = 4096  # widen the envelope without re-hashing
    entry.write_text(json.dumps(record))

    lookup = cache.load(KEY)
    assert lookup.champion is None
    assert lookup.detail == "disk cache: payload sha256 mismatch (torn or tampered)"


def test_swapped_cubin_is_a_miss(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    champion = make_champion()
    entry = cache.store(champion)
    (entry.parent / f"{champion.cubin_sha256}.cubin").write_bytes(b"\x7fELF other kernel")

    lookup = cache.load(KEY)
    assert lookup.champion is None
    assert "cubin digest mismatch: cubin hashes to" in lookup.detail


def test_entry_moved_to_another_key_is_a_miss(tmp_path: Path) -> None:
    cache = ChampionCache(tmp_path)
    champion = make_champion()
    entry = cache.store(champion)
    other = ChampionKey(KEY.gpu, KEY.path, "float32", KEY.shape_bucket)
    target = cache.folder(other)
    target.mkdir(parents=True)
    (target / entry.name).write_bytes(entry.read_bytes())
    cubin_name = f"{champion.cubin_sha256}.cubin"
    (target / cubin_name).write_bytes((entry.parent / cubin_name).read_bytes())

    lookup = cache.load(other)
    assert lookup.champion is None
    assert lookup.detail == "disk cache: entry belongs to another key"


def test_key_parts_must_be_plain_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a plain name"):
        ChampionCache(tmp_path).load(ChampionKey("../etc", "trsm_small", "float64", "m64n64"))
