"""GPU identity shared by the evaluator, the service and the loader."""

from __future__ import annotations

import ctypes
import re


def normalize_gpu_name(name: str) -> str:
    """The GPU key used in the database, the API's ``gpu=`` parameter and the loader's cache.

    ``"NVIDIA H200"`` → ``"nvidia-h200"``;
    ``"NVIDIA H100 80GB HBM3"`` → ``"nvidia-h100-80gb-hbm3"``.
    An already-normalized key maps to itself.

    Raises:
        ValueError: the name holds no letters or digits, or a control character (refused, not
            rewritten: ``"x\x1b[2J"`` would otherwise become the key ``"x-2j"``).
    """
    if not name.isprintable():
        raise ValueError(f"not a GPU name: {name!r} must be printable text (no control characters)")
    key = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    if not key:
        raise ValueError(f"not a GPU name: {name!r}")
    return key


def arch_for_compute_capability(major: int, minor: int) -> str:
    """NVRTC's real-architecture name for a compute capability: (9, 0) → ``"sm_90"``."""
    return f"sm_{major}{minor}"


def no_gpu_reason(cuda_error: str) -> str:
    """One line for the CUDA runtime's error ``cuda_error`` when no device could be used.

    "no NVIDIA driver" only when libcuda itself cannot be loaded: the CUDA runtime reports that
    case, too, as ``cudaErrorInsufficientDriver``, which otherwise means a driver older than
    the runtime.
    """
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return f"no CUDA GPU found: no NVIDIA driver ({error})"
    if "InsufficientDriver" in cuda_error:
        return f"no CUDA GPU found: the NVIDIA driver is older than the CUDA runtime ({cuda_error})"
    if "NoDevice" in cuda_error:
        return f"no CUDA GPU found: no CUDA device ({cuda_error})"
    return f"no CUDA GPU found: {cuda_error}"
