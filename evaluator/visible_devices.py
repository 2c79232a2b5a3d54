"""Which physical CUDA device a device index of this process names.

A process's CUDA device index counts among ``CUDA_VISIBLE_DEVICES`` when that is set (Slurm
sets it to the GPUs a job was given): ``--gpu 1`` under ``CUDA_VISIBLE_DEVICES=4,6`` is physical
device 6. The evaluator's children are pinned with ``CUDA_VISIBLE_DEVICES=<physical index>``
(the GPU worker, compute-sanitizer, ncu) and the GPU lock is per physical index, so both must
be resolved here first: pinned to the index as given, a child ran on physical device 1 (a GPU
the job was not given) while the job's facts came from device 6, and two processes with
different ``CUDA_VISIBLE_DEVICES`` took different locks for one GPU, or one lock for two.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


class VisibleDevicesError(ValueError):
    """``CUDA_VISIBLE_DEVICES`` cannot say which physical device an index names (one line)."""


def physical_index(index: int, environ: Mapping[str, str] | None = None) -> int:
    """The physical device index of device ``index`` of a process with ``environ`` (default:
    this one's): its entry in ``CUDA_VISIBLE_DEVICES`` when that is set to a list of integers,
    else ``index`` itself.

    Raises:
        VisibleDevicesError: the variable names devices by UUID, or holds fewer than
            ``index + 1`` devices.
    """
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None or visible.strip() == "":
        return index
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        raise VisibleDevicesError(
            f"CUDA_VISIBLE_DEVICES={visible!r} names devices by UUID: give device indices "
            "(Slurm: --gpu-bind=none, or unset it and pass --gpu with the physical index)"
        )
    if index >= len(parts):
        raise VisibleDevicesError(
            f"--gpu {index}: CUDA_VISIBLE_DEVICES={visible!r} makes {len(parts)} device(s) visible"
        )
    return int(parts[index])
