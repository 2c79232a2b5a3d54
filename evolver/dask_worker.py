"""A Dask worker of one GPU for the distributed evaluation backend (``kernevo dask-worker``).

One worker per GPU: a ``distributed.Nanny`` (which starts the worker process and starts a new
one when it dies) whose worker holds ``evaluator.dask_plugin.GpuEvaluationPlugin`` for the
device, one thread, and the resources ``GPU=1`` and ``gpu-<key>=1``, the key being the device's
normalized name (``nvidia-h200``) asked of CuPy in a child (``evolver.gpu.query_gpu``).
Without a GPU (``--compile-only``) the worker evaluates compile-only under the key ``none``.

The worker process must not be daemonic (Dask's default): the GPU worker process it starts
with ``multiprocessing`` would be refused. :func:`allow_worker_children` sets
``distributed.worker.daemon`` to False in the process that starts the nannies; with Dask's own
``dask worker`` command, set ``DASK_DISTRIBUTED__WORKER__DAEMON=False`` (docs/SCALING.md).

``CUDA_VISIBLE_DEVICES`` (Slurm sets it to the GPUs a job was given): ``--gpu I`` then means
the I-th visible device; it is resolved to the physical index and the variable is dropped in
this process, because the GPU worker pins its child with ``CUDA_VISIBLE_DEVICES=<index>`` and
the GPU lock is per physical index (:func:`physical_gpu`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from evolver.errors import ClusterError

Write = Callable[[str], None]


def allow_worker_children() -> None:
    """Let Dask worker processes started from this process start processes of their own."""
    import dask

    dask.config.set({"distributed.worker.daemon": False})


def physical_gpu(index: int, environ: Mapping[str, str] | None = None) -> int:
    """The physical device index of ``index`` counted among ``CUDA_VISIBLE_DEVICES`` (when it
    is set to a list of integers), else ``index`` itself
    (``evaluator.visible_devices.physical_index``).

    Raises:
        ClusterError: the variable holds device UUIDs, or fewer devices than ``index + 1``.
    """
    from evaluator.visible_devices import VisibleDevicesError, physical_index

    try:
        return physical_index(index, environ)
    except VisibleDevicesError as error:
        raise ClusterError(str(error)) from None


def worker_plugin(gpu: int | None, gpu_key: str | None = None) -> Any:
    """The plugin of a worker for physical device ``gpu`` (``None``: compile-only, key
    ``gpu_key`` or ``none``). The GPU's key is asked of the device; a ``gpu_key`` that
    disagrees with it is refused.

    Raises:
        GpuNotFoundError: the device does not answer (one line).
        ClusterError: ``gpu_key`` is not the device's key.
    """
    from evaluator.dask_plugin import NO_GPU_KEY, GpuEvaluationPlugin
    from evolver.gpu import query_gpu

    if gpu is None:
        return GpuEvaluationPlugin(None, gpu_key or NO_GPU_KEY)
    facts = query_gpu(gpu)
    if gpu_key is not None and gpu_key != facts.key:
        raise ClusterError(f"GPU {gpu} is {facts.key}, not {gpu_key}")
    return GpuEvaluationPlugin(gpu, facts.key, asdict(facts))


def nanny_options(plugin: Any, name: str, *, silence_logs: int | None = None) -> dict[str, Any]:
    """``distributed.Nanny`` keyword arguments of the worker holding ``plugin``: its name, one
    thread, the resources of its key (``evaluator.dask_plugin.worker_resources``), the plugin,
    no dashboard."""
    from evaluator.dask_plugin import worker_resources

    options: dict[str, Any] = {
        "name": name,
        "nthreads": 1,
        "resources": worker_resources(plugin.gpu_key, has_gpu=plugin.gpu_index is not None),
        "plugins": (plugin,),
        "dashboard": False,
    }
    if silence_logs is not None:
        options["silence_logs"] = silence_logs
    return options


def default_name(gpu: int | None) -> str:
    """``<host>-gpu<index>``, or ``<host>-cpu-<pid>`` for a compile-only worker."""
    host = socket.gethostname()
    return f"{host}-gpu{gpu}" if gpu is not None else f"{host}-cpu-{os.getpid()}"


def serve(
    scheduler: str,
    gpu: int | None,
    *,
    gpu_key: str | None = None,
    name: str | None = None,
    write: Write = print,
) -> int:
    """Run one GPU's worker (see the module) against ``scheduler`` until SIGTERM or Ctrl-C,
    or until the scheduler goes away for good; returns the exit status (0; 143 after SIGTERM,
    130 after Ctrl-C).

    Raises:
        GpuNotFoundError, ClusterError: before the worker starts (one line).
    """
    physical = physical_gpu(gpu) if gpu is not None else None
    if physical is not None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # every index below is physical
    plugin = worker_plugin(physical, gpu_key)
    allow_worker_children()
    options = nanny_options(plugin, name or default_name(physical))
    return asyncio.run(_serve(scheduler, plugin, options, write))


async def _serve(scheduler: str, plugin: Any, options: dict[str, Any], write: Write) -> int:
    from distributed import Nanny

    received: list[int] = []
    nanny = Nanny(scheduler, **options)

    def stop(signum: int) -> None:
        received.append(signum)
        asyncio.ensure_future(nanny.close())

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await nanny
    except Exception as error:
        cause: BaseException = error
        while cause.__cause__ is not None:  # Dask wraps the reason: "Nanny failed to start."
            cause = cause.__cause__
        reason = " ".join(str(cause).split()) or type(cause).__name__
        raise ClusterError(f"Dask worker cannot join scheduler {scheduler}: {reason}") from None
    device = f"GPU {plugin.gpu_index}" if plugin.gpu_index is not None else "no GPU"
    write(
        f"dask worker {options['name']} | {device}, key {plugin.gpu_key}, resources "
        f"{options['resources']}; scheduler {scheduler}; worker {nanny.worker_address}"
    )
    await nanny.finished()
    if received:
        write(f"dask worker {options['name']} | stopped by {signal.Signals(received[0]).name}")
        return 128 + received[0] if received[0] == signal.SIGTERM else 130
    write(f"dask worker {options['name']} | closed")
    return 0
