"""GPU identity shared by the evaluator, the service and the loader."""

from __future__ import annotations

import re


def normalize_gpu_name(name: str) -> str:
    """The GPU key used in the database, the API's ``gpu=`` parameter and the loader's cache.

    ``"NVIDIA H200"`` → ``"nvidia-h200"``;
    ``"NVIDIA H100 80GB HBM3"`` → ``"nvidia-h100-80gb-hbm3"``.
    An already-normalized key maps to itself.

    Raises:
        ValueError: the name holds no letters or digits.
    """
    key = re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")
    if not key:
        raise ValueError(f"not a GPU name: {name!r}")
    return key


def arch_for_compute_capability(major: int, minor: int) -> str:
    """NVRTC's real-architecture name for a compute capability: (9, 0) → ``"sm_90"``."""
    return f"sm_{major}{minor}"
