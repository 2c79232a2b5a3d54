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
import os
from typing import Any

import click

from evolver.dask_worker import physical_gpu, worker_plugin


@click.command()
@click.option("--gpu", type=int, default=0, help="device index among CUDA_VISIBLE_DEVICES")
@click.option("--compile-only", is_flag=True, help="no GPU: compile-only evaluations (key none)")
async def dask_setup(worker: Any, gpu: int, compile_only: bool) -> None:
    """Add the GPU plugin to ``worker``, then advertise its resources (see the module).

    Raises:
        GpuNotFoundError, ClusterError: the device does not answer (the worker fails to start).
    """
    from evaluator.dask_plugin import worker_resources

    index = None if compile_only else physical_gpu(gpu)
    if index is not None:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # every index below is physical
    plugin = await asyncio.get_running_loop().run_in_executor(None, worker_plugin, index)
    await worker.plugin_add(plugin, name=plugin.name)
    await worker.set_resources(**worker_resources(plugin.gpu_key, has_gpu=index is not None))
