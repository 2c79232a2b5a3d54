"""The GPU the loader serves: its key in the service and its NVRTC architecture."""

from __future__ import annotations

from dataclasses import dataclass

from kernevo.paths import hardware


class NoGpuError(RuntimeError):
    """No usable CUDA device for the loader; the message is one line saying which case:
    no NVIDIA driver, a driver older than the CUDA runtime, or no device."""


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device: ``index`` (CuPy device id), ``name`` (``"NVIDIA H200"``), ``key``
    (``"nvidia-h200"``, the service's ``gpu=``), ``arch`` (``"sm_90"``), and the CUDA driver API
    and NVRTC versions here (``"12.8"``; ``""`` when unknown), compared with a champion's
    certificate."""

    index: int
    name: str
    key: str
    arch: str
    cuda_driver_api_version: str = ""
    nvrtc_version: str = ""


def current_gpu() -> GpuInfo:
    """The identity of CuPy's current device.

    Raises:
        NoGpuError: no NVIDIA driver, a driver too old for CuPy's CUDA runtime, or no device.
    """
    import cupy

    runtime = cupy.cuda.runtime
    try:
        index = runtime.getDevice()
        props = runtime.getDeviceProperties(index)
    except runtime.CUDARuntimeError as error:
        raise NoGpuError(hardware.no_gpu_reason(str(error))) from None
    raw = props["name"]
    name = raw.decode() if isinstance(raw, bytes) else str(raw)
    driver = runtime.driverGetVersion()
    try:
        major, minor = cupy.cuda.nvrtc.getVersion()
        nvrtc = f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - NVRTC missing only makes the version unknown
        nvrtc = ""
    return GpuInfo(
        index=index,
        name=name,
        key=hardware.normalize_gpu_name(name),
        arch=hardware.arch_for_compute_capability(int(props["major"]), int(props["minor"])),
        cuda_driver_api_version=f"{driver // 1000}.{driver % 1000 // 10}",
        nvrtc_version=nvrtc,
    )
