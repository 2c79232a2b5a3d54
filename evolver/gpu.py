"""What the evolver needs to know about the GPU, asked of CuPy in a child process.

The job's own process must stay CUDA-free: OpenEvolve's process pool and the evaluator start
workers from it, and a process that has touched CUDA must not be the parent of CUDA work. So
the question goes to a short-lived ``python -c`` child and comes back as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Literal

from evolver.errors import NoGpuError

# Runs in the child: the driver library, the device count, then the properties of one device,
# as one JSON line; a missing GPU is a JSON line with a ``kind`` (see ``GpuAbsence``). The
# driver is looked for first, by loading libcuda itself: without it the CUDA runtime reports
# cudaErrorInsufficientDriver (35), the same code as a driver that is merely too old.
_PROBE = r"""
import ctypes, json, sys
index = int(sys.argv[1])
def absent(kind, reason, **more):
    print(json.dumps({"kind": kind, "reason": reason, **more}))
    raise SystemExit(0)
try:
    libcuda = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    absent("no_driver", f"libcuda.so.1 cannot be loaded: {error}")
driver = ctypes.c_int(0)
libcuda.cuDriverGetVersion(ctypes.byref(driver))
try:
    import cupy
    rt = cupy.cuda.runtime
    count = rt.getDeviceCount()
except Exception as error:
    status = getattr(error, "status", None)
    kind = {35: "old_driver", 100: "no_device"}.get(status, "query_failed")
    try:
        runtime = cupy.cuda.runtime.runtimeGetVersion()
    except Exception:
        runtime = 0
    absent(kind, f"{type(error).__name__}: {error}", driver=driver.value, runtime=runtime)
if count == 0:
    absent("no_device", "cudaGetDeviceCount() is 0")
if index >= count:
    absent("index_out_of_range", f"device index {index} >= device count {count}", count=count)
p = rt.getDeviceProperties(index)
name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
print(json.dumps({
    "count": count,
    "name": name,
    "major": p["major"],
    "minor": p["minor"],
    "sm_count": p["multiProcessorCount"],
    "shared_per_block_optin": p.get("sharedMemPerBlockOptin", 0),
    "shared_per_sm": p.get("sharedMemPerMultiprocessor", 0),
    "registers_per_block": p.get("regsPerBlock", 0),
    "l2_bytes": p.get("l2CacheSize", 0),
    "driver_version": rt.driverGetVersion(),
    "runtime_version": rt.runtimeGetVersion(),
}))
"""


GpuAbsence = Literal["no_driver", "old_driver", "no_device", "index_out_of_range", "query_failed"]


class GpuNotFoundError(NoGpuError):
    """No usable CUDA device, with ``kind`` naming which check found that (a ``GpuAbsence``)."""

    def __init__(self, kind: GpuAbsence, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _cuda_version(code: int) -> str:
    return f"{code // 1000}.{code % 1000 // 10}"


def absence_message(index: int, data: dict[str, Any]) -> str:
    """The one-line reason for a probe answer without a device (``data["kind"]`` set).

    ``"no NVIDIA driver"`` only when libcuda itself is missing; a driver older than the CUDA
    runtime, no device (``CUDA_VISIBLE_DEVICES`` named when it is set), and an index past the
    device count each say so.
    """
    kind, reason = data.get("kind"), data.get("reason", "")
    if kind == "no_driver":
        return f"no CUDA GPU found: no NVIDIA driver ({reason})"
    if kind == "old_driver":
        return (
            f"no CUDA GPU found: the NVIDIA driver (CUDA {_cuda_version(data.get('driver', 0))}) "
            f"is older than the CUDA runtime ({_cuda_version(data.get('runtime', 0))}); "
            "update the driver"
        )
    if kind == "no_device":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        hidden = f"; CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
        return f"no CUDA GPU found: no CUDA device ({reason}{hidden})"
    if kind == "index_out_of_range":
        count = int(data.get("count", 0))
        return (
            f"no CUDA GPU found: device index {index} out of range "
            f"({count} device{'s' if count != 1 else ''}: 0..{count - 1})"
        )
    return f"no CUDA GPU found: the device query failed ({reason})"


@dataclass(frozen=True)
class GpuFacts:
    """One CUDA device as the prompts and the job record describe it.

    Memory sizes in bytes; versions as CUDA encodes them (``12080`` is 12.8).
    """

    index: int
    name: str
    key: str
    arch: str
    sm_count: int
    shared_per_block_optin: int
    shared_per_sm: int
    registers_per_block: int
    l2_bytes: int
    driver_version: int
    runtime_version: int

    def describe(self) -> str:
        """One sentence (no final period) for the LLM's system message and the job's header."""
        return (
            f"{self.name} ({self.arch}, compute capability {self.arch[3:-1]}.{self.arch[-1]}), "
            f"{self.sm_count} SMs, {self.shared_per_block_optin // 1024} KB shared memory per "
            f"block with the opt-in attribute (48 KB static limit), "
            f"{self.shared_per_sm // 1024} KB shared memory per SM, "
            f"{self.registers_per_block} registers per block, "
            f"{self.l2_bytes // (1024 * 1024)} MB L2"
        )


def query_gpu(index: int, *, timeout_s: float = 120.0) -> GpuFacts:
    """Facts about CUDA device ``index``, asked in a child process.

    Raises:
        GpuNotFoundError: (a ``NoGpuError``) no usable GPU; ``kind`` says why: no NVIDIA driver,
            a driver older than the CUDA runtime, no device, ``index`` out of range, or a failed
            query (see :func:`absence_message`).
    """
    from seeds.hardware import arch_for_compute_capability, normalize_gpu_name

    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, str(index)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GpuNotFoundError(
            "query_failed", f"no CUDA GPU found: the device query timed out after {timeout_s:.0f} s"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GpuNotFoundError(
            "query_failed", f"no CUDA GPU found: the device query failed ({tail})"
        )
    data = json.loads(lines[-1])
    if "name" not in data:
        raise GpuNotFoundError(data.get("kind", "query_failed"), absence_message(index, data))
    return GpuFacts(
        index=index,
        name=data["name"],
        key=normalize_gpu_name(data["name"]),
        arch=arch_for_compute_capability(data["major"], data["minor"]),
        sm_count=int(data["sm_count"]),
        shared_per_block_optin=int(data["shared_per_block_optin"]),
        shared_per_sm=int(data["shared_per_sm"]),
        registers_per_block=int(data["registers_per_block"]),
        l2_bytes=int(data["l2_bytes"]),
        driver_version=int(data["driver_version"]),
        runtime_version=int(data["runtime_version"]),
    )
