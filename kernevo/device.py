"""The GPU the loader serves: its key in the service, its NVRTC architecture, and the driver and
toolkit versions compared with a champion's certificate."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from kernevo.paths import hardware

# The NVIDIA kernel module's own report (Linux): its first line names the version, e.g.
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 ..." or, for the open
# module, "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ...".
# /proc/driver is the host kernel's, so a container sees it too.
PROC_DRIVER_VERSION = Path("/proc/driver/nvidia/version")
_NVRM_VERSION = re.compile(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)(?:\s|$)")


class NoGpuError(RuntimeError):
    """No usable CUDA device for the loader; the message is one line saying which case:
    no NVIDIA driver, a driver older than the CUDA runtime, or no device."""


@dataclass(frozen=True)
class GpuInfo:
    """One CUDA device: ``index`` (CuPy device id), ``name`` (``"NVIDIA H200"``), ``key``
    (``"nvidia-h200"``, the service's ``gpu=``), ``arch`` (``"sm_90"``), and the CUDA driver API
    and NVRTC versions here (``"12.8"``) and the NVIDIA driver's (``"580.95.05"``), each ``""``
    when unknown, compared with a champion's certificate."""

    index: int
    name: str
    key: str
    arch: str
    cuda_driver_api_version: str = ""
    nvrtc_version: str = ""
    nvidia_driver_version: str = ""


def parse_nvrm_version(text: str) -> str:
    """The driver version in the text of ``/proc/driver/nvidia/version`` (``"580.95.05"``), or
    ``""`` when its first line names none."""
    first_line = text.splitlines()[0] if text else ""
    match = _NVRM_VERSION.search(first_line)
    return match.group(1) if match else ""


@functools.cache
def nvidia_driver_version(proc_file: Path = PROC_DRIVER_VERSION) -> str:
    """The loaded NVIDIA kernel driver's version (``"580.95.05"``), ``""`` when unknown.

    Read once per process from ``proc_file`` (a file read: no subprocess, no CUDA call, so it
    may run on the loader's first call). CuPy exposes no NVML, and ``nvidia-smi`` would cost a
    process start, so a system without ``/proc/driver/nvidia`` (WSL) reads as unknown.
    """
    try:
        with open(proc_file, encoding="ascii", errors="replace") as fh:
            return parse_nvrm_version(fh.read(4096))
    except OSError:
        return ""


def current_gpu() -> GpuInfo:
    """The identity of CuPy's current device, queried once per device and process
    (:func:`gpu_info`): every ``kernevo.load`` after the first on that device asks CUDA only
    which device is current.

    Raises:
        NoGpuError: no NVIDIA driver, a driver too old for CuPy's CUDA runtime, or no device.
    """
    import cupy

    runtime = cupy.cuda.runtime
    try:
        index = runtime.getDevice()
    except runtime.CUDARuntimeError as error:
        raise NoGpuError(hardware.no_gpu_reason(str(error))) from None
    return gpu_info(index)


@functools.cache
def gpu_info(index: int) -> GpuInfo:
    """The identity of CUDA device ``index``: its properties (``cudaGetDeviceProperties``), the
    CUDA driver API version, the NVRTC version (``nvrtcVersion``, whose first call loads the
    NVRTC library: ~10 ms on the CI machine) and the NVIDIA driver's (a file read). Cached per
    process: none of these changes while a process runs.

    Raises:
        NoGpuError: the device cannot be queried (not cached: the next call asks again).
    """
    import cupy

    runtime = cupy.cuda.runtime
    try:
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
        nvidia_driver_version=nvidia_driver_version(),
    )
