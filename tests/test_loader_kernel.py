"""Turning a champion into a driver: the verified cubin as is, or a recompile for another arch.

Compiling needs no GPU (NVRTC from the wheel), so the recompile runs for real here; the driver
(which loads the module on a device) is a fake.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from kernevo.client import ChampionKernel, Envelope
from kernevo.kernel import build_driver, compile_for_arch, retarget_options
from seeds.trsm_small.spec import TRSM_SMALL


def seed_champion(arch: str, cubin: bytes = b"\x7fELF verified for another arch") -> ChampionKernel:
    source = TRSM_SMALL.seed_source()
    return ChampionKernel(
        path="trsm_small",
        dtype="float64",
        gpu="nvidia-h200",
        shape_bucket="m64n64",
        program_id=1,
        arch=arch,
        nvrtc_version="13.0",
        cubin_sha256=hashlib.sha256(cubin).hexdigest(),
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
        compile_options=tuple(TRSM_SMALL.compile_options("float64", arch)),
        kernel_name=TRSM_SMALL.kernel_name,
        config_kernel_name=TRSM_SMALL.config_kernel_name,
        envelope=Envelope({"m_max": 64, "n_max": 64}),
        promoted_at=None,
        source=source,
        cubin=cubin,
    )


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes, str]] = []

    def __call__(self, path_id: str, cubin: bytes, dtype: str) -> object:
        self.calls.append((path_id, cubin, dtype))
        return object()


def test_retarget_replaces_the_arch_and_keeps_the_rest() -> None:
    assert retarget_options(("-arch=sm_80", "-std=c++17", "-DKERNEVO_DTYPE=1"), "sm_90") == [
        "-arch=sm_90",
        "-std=c++17",
        "-DKERNEVO_DTYPE=1",
    ]
    assert retarget_options(["--gpu-architecture=sm_80", "-O3"], "sm_100") == [
        "-arch=sm_100",
        "-O3",
    ]
    assert retarget_options(["-std=c++17"], "sm_90") == ["-arch=sm_90", "-std=c++17"]


def test_same_arch_loads_the_verified_cubin() -> None:
    champion = seed_champion("sm_90")
    factory = Recorder()

    def no_compile(source: str, options: list[str], arch: str) -> bytes:
        raise AssertionError("must not recompile")

    build_driver(champion, "sm_90", driver_factory=factory, compile_fn=no_compile)

    assert factory.calls == [("trsm_small", champion.cubin, "float64")]


def test_other_arch_recompiles_the_source_with_nvrtc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_COMPILE_CACHE", str(tmp_path))
    champion = seed_champion("sm_80")
    factory = Recorder()

    build_driver(champion, "sm_90", driver_factory=factory, compile_fn=compile_for_arch)

    [(path_id, cubin, dtype)] = factory.calls
    assert (path_id, dtype) == ("trsm_small", "float64")
    assert cubin.startswith(b"\x7fELF") and cubin != champion.cubin


def test_failed_recompile_raises_with_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEVO_COMPILE_CACHE", str(tmp_path))
    broken = replace(seed_champion("sm_80"), source="__global__ void k() { not c++ }")

    with pytest.raises(RuntimeError, match="recompiling for sm_90 failed"):
        build_driver(broken, "sm_90", driver_factory=Recorder(), compile_fn=compile_for_arch)


def test_kernel_names_must_match_the_path() -> None:
    champion = replace(seed_champion("sm_90"), kernel_name="other_kernel")

    with pytest.raises(ValueError, match="champion launches"):
        build_driver(champion, "sm_90", driver_factory=Recorder())
