"""The GPU the loader serves: its key in the service and its NVRTC architecture."""

from __future__ import annotations

from dataclasses import dataclass

from kernevo.paths import hardware


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device: ``index`` (CuPy device id), ``name`` (``"NVIDIA H200"``), ``key``
    (``"nvidia-h200"``, the service's ``gpu=``) and ``arch`` (``"sm_90"``)."""

    index: int
    name: str
    key: str
    arch: str


def current_gpu() -> GpuInfo:
    """The identity of CuPy's current device.

    Raises:
        cupy.cuda.runtime.CUDARuntimeError: no CUDA driver or no device.
    """
    import cupy

    index = cupy.cuda.runtime.getDevice()
    props = cupy.cuda.runtime.getDeviceProperties(index)
    raw = props["name"]
    name = raw.decode() if isinstance(raw, bytes) else str(raw)
    return GpuInfo(
        index=index,
        name=name,
        key=hardware.normalize_gpu_name(name),
        arch=hardware.arch_for_compute_capability(int(props["major"]), int(props["minor"])),
    )
