"""The `band_bidiag` seed kernel and its driver without a GPU: NVRTC compiles the seed in float32
and float64 for several combinations of its three tunables (and refuses complex dtypes); the
spec's fields; and the driver's whole launch sequence (``BandBidiagDriver.reduce_raw``: stages,
cycles, kernel arguments in order) run against a Python transcription of the kernel's block loop
(``band_bidiag_kernel``: block x takes the x-th active sweep of a launch, then every
gridDim.x-th, stopping at the first sweep past its last step) and of ``kernevo_launch_config``,
over NumPy storage, with the emulation's task for each block's work. With few blocks per launch
(BB_MAX_BLOCKS small) blocks run several sweeps; the result must be the emulation's, bit for
bit (tasks of a launch commute exactly).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from evaluator.checks.device_state import device_state_failure
from evaluator.compile import compile_cubin
from evaluator.screen import screen
from seeds.band_bidiag import emulation, inputs, schedule
from seeds.band_bidiag.driver import BandBidiagDriver
from seeds.band_bidiag.layout import PaddedLayout, bidiagonal, pack
from seeds.band_bidiag.spec import BAND_BIDIAG, BUCKETS
from seeds.driver import LaunchGeometry
from seeds.ops import get_op
from seeds.tunables import parse_tunables

SEED = BAND_BIDIAG.seed_source()
ARCH = "sm_90"


def with_tunables(tw: int, threads: int, max_blocks: int) -> str:
    return (
        SEED.replace("#define BB_TW 32 ", f"#define BB_TW {tw} ")
        .replace("#define BB_THREADS 128 ", f"#define BB_THREADS {threads} ")
        .replace("#define BB_MAX_BLOCKS 192 ", f"#define BB_MAX_BLOCKS {max_blocks} ")
    )


def test_the_three_tunables_are_declared():
    tunables = {t.name: t for t in parse_tunables(SEED)}
    assert set(tunables) == {"BB_TW", "BB_THREADS", "BB_MAX_BLOCKS"}
    assert tunables["BB_TW"].value == "32" and "16" in tunables["BB_TW"].choices
    assert all(int(c) % 32 == 0 for c in tunables["BB_THREADS"].choices)
    assert with_tunables(16, 64, 96) != SEED


@pytest.mark.parametrize("dtype", BAND_BIDIAG.dtypes)
@pytest.mark.parametrize(
    ("tw", "threads", "max_blocks"), [(32, 128, 192), (16, 64, 96), (4, 32, 48), (64, 512, 768)]
)
def test_the_seed_compiles_with_nvrtc(dtype, tw, threads, max_blocks, tmp_path):
    options = BAND_BIDIAG.compile_options(dtype, ARCH)
    result = compile_cubin(
        with_tunables(tw, threads, max_blocks), options, ARCH, cache_dir=tmp_path
    )
    assert result.ok, result.log
    assert {"band_bidiag_kernel", "kernevo_launch_config", "kernevo_tile_width"} <= set(
        result.resources
    )
    if tw <= 16 or dtype == "float32" and tw <= 32:
        assert result.resources["band_bidiag_kernel"].spill_store_bytes == 0
    assert device_state_failure(result.cubin) is None  # no state outlives a launch


def test_seed_passes_the_screen():
    assert screen(SEED, SEED) is None


@pytest.mark.parametrize("code", [2, 3])
def test_complex_dtypes_do_not_compile(code, tmp_path):
    options = [f"-arch={ARCH}", "-std=c++17", f"-DKERNEVO_DTYPE={code}"]
    result = compile_cubin(SEED, options, ARCH, cache_dir=tmp_path)
    assert not result.ok and "band_bidiag is real" in result.log


def test_a_thread_count_off_whole_warps_does_not_compile(tmp_path):
    options = BAND_BIDIAG.compile_options("float32", ARCH)
    result = compile_cubin(with_tunables(32, 48, 192), options, ARCH, cache_dir=tmp_path)
    assert not result.ok and "whole warps" in result.log


def test_spec_shapes_lie_in_the_envelope_and_buckets():
    assert BAND_BIDIAG.op == "band_bidiag" and BAND_BIDIAG.dtypes == ("float32", "float64")
    assert BAND_BIDIAG.params == ("n", "bandwidth")
    for bucket in BUCKETS:
        spec = BAND_BIDIAG.for_bucket(bucket.name)
        shapes = (*spec.quick_shapes, *spec.verify_shapes, *spec.timed_shapes,
                  *spec.held_out_shapes, spec.sanitizer_shape)  # fmt: skip
        assert all(BAND_BIDIAG.serves(n, bw) for n, bw in shapes)
        for shape in shapes:  # the op's ranges and its relation bandwidth <= n - 1
            assert get_op("band_bidiag").check_shape(shape) == shape
        assert all(bucket.serves(n, bw) for n, bw in spec.timed_shapes)
    assert BAND_BIDIAG.bucket_of(8192, 32) == "n2049_16384"
    assert BAND_BIDIAG.bucket_of(1024, 128) == "n1_2048"
    assert BAND_BIDIAG.bucket_of(1024, 129) is None
    # Ragged n and BW = 1 among the verified shapes.
    verify = BAND_BIDIAG.verify_shapes
    assert any(bw == 1 for _, bw in verify) and any(n % 32 and n > 64 for n, _ in verify)


# ---- the kernel's control flow, transcribed from kernel.cu ----------------------------------


def launch_config(n: int, bw: int, tw: int, threads: int, max_blocks: int) -> LaunchGeometry:
    """kernevo_launch_config, line for line."""
    most, b = 1, min(bw, n - 1)
    while b > 1:
        t = min(tw, b - 1)
        if n - 2 - (b - t) >= 0:
            most = max(most, ((n - 2 + t) // b + 2) // 3)
        b -= t
    return LaunchGeometry((min(most, max_blocks), 1, 1), (threads, 1, 1), 0)


def kernel_launch(store: emulation.Storage, n: int, b: int, t: int, cycle: int, grid: int) -> None:
    """band_bidiag_kernel's loop over sweeps for every block of one launch (blocks in reverse
    order, to show that their order does not matter)."""
    last = n - 2 - (b - t)
    first_active = min(last, cycle // 3)
    stage = schedule.Stage(b, t)
    for block in reversed(range(grid)):
        r = first_active - block
        while r >= 0:
            k = cycle - 3 * r
            if k >= (n - 2 - r + t) // b:
                break
            c0 = r - t + (k + 1) * b
            task = schedule.Task(r, k, r if k == 0 else c0 - b, c0, min(c0 + t, n - 1))
            assert task == schedule.task(n, stage, r, k)
            emulation.run_task(store, stage, task)
            r -= grid


class TranscribedKernel:
    """Stands in for ``seeds.driver.CompiledKernel``: runs each launch on NumPy storage."""

    def __init__(self, tw: int, threads: int, max_blocks: int) -> None:
        self.tw, self.threads, self.max_blocks = tw, threads, max_blocks
        self.memory: dict[int, emulation.Storage] = {}
        self.launches: list[tuple[Any, ...]] = []

    def geometry(self, n: int, bw: int) -> LaunchGeometry:
        return launch_config(n, bw, self.tw, self.threads, self.max_blocks)

    def launch(self, geometry: LaunchGeometry, args: tuple[Any, ...], stream: Any = None) -> None:
        ptr, ldab, ku, n, b, t, cycle = (int(a) for a in args)
        assert [type(a) for a in args] == [np.uint64] + [np.int32] * 6
        store = self.memory[ptr]
        assert (ldab, ku) == (store.layout.ldab, store.layout.ku)
        self.launches.append((b, t, cycle))
        kernel_launch(store, n, b, t, cycle, geometry.grid[0])


def transcribed_driver(tw: int, threads: int, max_blocks: int) -> BandBidiagDriver:
    driver = BandBidiagDriver.__new__(BandBidiagDriver)
    driver.dtype, driver.spec, driver.tw = "float64", BAND_BIDIAG, tw
    driver.compiled = TranscribedKernel(tw, threads, max_blocks)  # type: ignore[assignment]
    driver._workspace, driver._graphs = {}, {}
    return driver


@pytest.mark.parametrize(
    ("n", "bw", "tw", "max_blocks"),
    [(2, 1, 32, 192), (40, 64, 16, 192), (97, 12, 4, 2), (150, 40, 16, 3), (150, 40, 32, 192),
     (211, 17, 8, 1), (64, 63, 64, 48)],
)  # fmt: skip
def test_the_drivers_launches_reproduce_the_emulation(n, bw, tw, max_blocks):
    band = inputs.random_band(n, bw, np.float64, np.random.default_rng(n))
    driver = transcribed_driver(tw, 128, max_blocks)
    ab, layout = pack(band)
    kernel = driver.compiled
    kernel.memory[12345] = emulation.Storage(ab, layout)  # type: ignore[attr-defined]
    driver.reduce_raw(12345, n, bw, layout.ldab, layout.ku)
    d, e = bidiagonal(ab, layout)
    want_d, want_e = emulation.reduce(band, tw)
    np.testing.assert_array_equal(d, want_d)
    np.testing.assert_array_equal(e, want_e)
    expected = [(s.b, s.t, c) for s, c in schedule.all_cycles(n, bw, tw)]
    assert kernel.launches == expected  # type: ignore[attr-defined]
    assert len(expected) == driver.launches(n, bw)


def test_the_launch_config_transcription_is_the_schedules_bound():
    for n, bw, tw in itertools.product((1, 2, 3, 50, 1000, 8192), (0, 1, 2, 32, 128), (4, 16, 64)):
        geometry = launch_config(n, bw, tw, 128, 10**9)
        assert geometry.grid[0] == schedule.max_active(n, bw, tw)
    assert launch_config(8192, 32, 32, 128, 192).grid[0] == 86  # ⌈⌊8221/32⌋/3⌉ = ⌈256/3⌉
    assert launch_config(16384, 32, 32, 128, 96).grid[0] == 96


def test_reduce_raw_refuses_storage_without_room_and_skips_bidiagonal_input():
    driver = transcribed_driver(8, 128, 192)
    with pytest.raises(ValueError, match="needs ku"):
        driver.reduce_raw(1, 100, 16, 48, 16)  # ku 16 < 31
    with pytest.raises(ValueError, match="needs ku"):
        driver.reduce_raw(1, 100, 16, 40, 31)  # ldab 40 < 47
    driver.reduce_raw(1, 100, 1, 3, 1)  # BW = 1: nothing to launch, nothing touched
    driver.reduce_raw(1, 1, 5, 3, 1)
    assert driver.compiled.launches == []  # type: ignore[attr-defined]
    assert PaddedLayout.of(100, 16).ku == 31
