"""Dask's own ``dask worker`` as a kernevo GPU worker: ``--preload evolver.dask_preload``.

For schedulers that start workers with Dask's command line (dask-jobqueue on Slurm or PBS,
``dask worker`` by hand) rather than ``kernevo dask-worker``: the preload runs in the worker
process once it has started, asks the device for its key (``evolver.gpu.query_gpu``), adds
``evaluator.dask_plugin.GpuEvaluationPlugin`` and only then advertises the resources
``GPU=1`` and ``gpu-<key>=1``, so no evaluation reaches the worker before its plugin. The
device is the ``--gpu``-th of ``CUDA_VISIBLE_DEVICES`` (default the first: Slurm's
``--gres=gpu:1`` gives a job one), resolved to its physical index as ``kernevo dask-worker``
does (``evolver.dask_worker.physical_gpu``)::

    DASK_DISTRIBUTED__WORKER__DAEMON=False dask worker tcp://host:8786 --nthreads 1 \\
        --preload evolver.dask_preload [--gpu 1 | --compile-only]

(the options after the preload's name are the preload's).

``DASK_DISTRIBUTED__WORKER__DAEMON=False`` lets the worker process start the GPU worker
process (a daemonic process may not have children). docs/SCALING.md has the Slurm example.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import click

from evolver.dask_worker import physical_gpu, worker_plugin
from evolver.errors import ClusterError, NoGpuError

logger = logging.getLogger(__name__)
# The close task of a worker whose device failed: the event loop keeps only weak references.
_CLOSING: set[asyncio.Task[Any]] = set()


@click.command()
@click.option("--gpu", type=int, default=0, help="device index among CUDA_VISIBLE_DEVICES")
@click.option("--compile-only", is_flag=True, help="no GPU: compile-only evaluations (key none)")
async def dask_setup(worker: Any, gpu: int, compile_only: bool) -> None:
    """Add the GPU plugin to ``worker`` and give it its resources (see the module).

    The preload runs before the worker registers (``Worker.start_unsafe``), so the resources
    are set on the worker's state, which registration sends; ``Worker.set_resources`` would ask
    a scheduler that does not know the worker yet (distributed 2026.8: ``KeyError`` logged by
    both). A device that does not answer (``GpuNotFoundError``, ``ClusterError``) is logged in
    one line and the worker closes once started, its nanny with it: an exception here is only
    logged by Dask's ``PreloadManager``, and the worker would stay up without resources.
    """
    from evaluator.dask_plugin import worker_resources

    try:
        index = None if compile_only else physical_gpu(gpu)
        if index is not None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # every index below is physical
        plugin = await asyncio.get_running_loop().run_in_executor(None, worker_plugin, index)
    except (NoGpuError, ClusterError) as error:
        reason = f"kernevo GPU worker not started: {' '.join(str(error).split())}"
        logger.error("%s; closing the worker and its nanny", reason)
        task = asyncio.get_running_loop().create_task(_close_once_started(worker, reason))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
        return
    await worker.plugin_add(plugin, name=plugin.name)
    for name, quantity in worker_resources(plugin.gpu_key, has_gpu=index is not None).items():
        worker.state.total_resources[name] = quantity
        worker.state.available_resources[name] = quantity


async def _close_once_started(worker: Any, reason: str) -> None:
    """Close ``worker`` and its nanny (which then neither restarts it nor stays up) once its
    start has finished: while it starts, its nanny cannot be told (``Worker.close``)."""
    await worker
    await worker.close(nanny=True, reason=reason)
