"""``kernevo.device.current_gpu`` queries a device's identity once per process (issue 11, Build
item 4: the loader's start-up): a second ``kernevo.load`` on the same device asks CUDA only which
device is current, not its properties (``cudaGetDeviceProperties``), driver or NVRTC version
again; a device that cannot be queried is a ``NoGpuError`` and is asked again next time. CuPy's
runtime is replaced by a counting fake (no GPU here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cupy
import pytest

from kernevo import device
from kernevo.device import GpuInfo, NoGpuError, current_gpu

H200 = {"name": b"NVIDIA H200", "major": 9, "minor": 0}


class FakeRuntime:
    """CuPy's runtime functions that ``current_gpu`` calls, counting property queries;
    ``broken`` devices raise CuPy's ``CUDARuntimeError`` as an unusable device does."""

    CUDARuntimeError = cupy.cuda.runtime.CUDARuntimeError

    def __init__(self) -> None:
        self.device = 0
        self.queried: list[int] = []
        self.broken: set[int] = set()

    def getDevice(self) -> int:  # noqa: N802 - CuPy's name
        return self.device

    def getDeviceProperties(self, index: int) -> dict[str, Any]:  # noqa: N802
        self.queried.append(index)
        if index in self.broken:
            raise self.CUDARuntimeError(100)  # cudaErrorNoDevice
        return H200

    def driverGetVersion(self) -> int:  # noqa: N802
        return 13000


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRuntime]:
    fake = FakeRuntime()
    monkeypatch.setattr(cupy.cuda, "runtime", fake)
    monkeypatch.setattr(cupy.cuda.nvrtc, "getVersion", lambda: (12, 8))
    device.gpu_info.cache_clear()
    yield fake
    device.gpu_info.cache_clear()


def test_a_device_is_queried_once_per_process(runtime: FakeRuntime) -> None:
    first = current_gpu()
    assert first == current_gpu() == GpuInfo(
        index=0, name="NVIDIA H200", key="nvidia-h200", arch="sm_90",
        cuda_driver_api_version="13.0", nvrtc_version="12.8",
        nvidia_driver_version=first.nvidia_driver_version,
    )  # fmt: skip
    runtime.device = 1
    assert current_gpu().index == 1
    assert runtime.queried == [0, 1]


def test_a_device_that_cannot_be_queried_is_asked_again(runtime: FakeRuntime) -> None:
    runtime.broken.add(0)
    for _ in range(2):
        with pytest.raises(NoGpuError):
            current_gpu()
    assert runtime.queried == [0, 0]
