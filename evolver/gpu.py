"""What the evolver needs to know about the GPU, asked of CuPy in a child process.

The job's own process must stay CUDA-free: OpenEvolve's process pool and the evaluator start
workers from it, and a process that has touched CUDA must not be the parent of CUDA work. So
the question goes to a short-lived ``python -c`` child and comes back as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

from evolver.errors import NoGpuError

# Runs in the child: device count, then the properties of one device, as one JSON line.
_PROBE = r"""
import json, sys
index = int(sys.argv[1])
try:
    import cupy
    rt = cupy.cuda.runtime
    count = rt.getDeviceCount()
except Exception as error:
    print(json.dumps({"count": 0, "reason": f"{type(error).__name__}: {error}"}))
    raise SystemExit(0)
if index >= count:
    print(json.dumps({"count": count, "reason": f"device index {index} >= device count {count}"}))
    raise SystemExit(0)
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
        NoGpuError: no CUDA GPU is visible (no driver, no device, or ``index`` out of range),
            with the reason CuPy gave.
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
        raise NoGpuError(
            f"no CUDA GPU found: the device query timed out after {timeout_s:.0f} s"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise NoGpuError(f"no CUDA GPU found: the device query failed ({tail})")
    data = json.loads(lines[-1])
    if "name" not in data:
        raise NoGpuError(f"no CUDA GPU found ({data.get('reason', 'no device')})")
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
