"""Start kernevo's GPU workers on Slurm with dask-jobqueue, then point jobs at the scheduler.

Run this on a login node of the cluster, in the kernevo environment (the compute nodes must see
the same Python, e.g. a virtual environment on a shared file system) with dask-jobqueue
installed (``pip install dask-jobqueue``; not a dependency of kernevo). It starts a Dask
scheduler here and submits one Slurm job per GPU; each job runs Dask's own worker with
``--preload evolver.dask_preload``, which finds the GPU Slurm gave it (``--gres=gpu:1``:
``CUDA_VISIBLE_DEVICES``), adds kernevo's GPU plugin and advertises ``GPU=1`` and
``gpu-<key>=1`` (``gpu-nvidia-h200``). Then, from any host that reaches the scheduler::

    kernevo evolve --path trsm_small --dtype float64 --iterations 600 \\
        --scheduler tcp://<login node>:8786

Several GPU models in one cluster: run one such script per partition (or one cluster with
several ``scale`` calls of different clusters' jobs pointing at one scheduler) and give each
job ``--gpu-key nvidia-h200``; a job's tasks carry ``gpu-<its key>=1``, so they run only on
workers of that model. docs/SCALING.md explains what travels and what limits the job.

It prints the job script Slurm will run (``cluster.job_script()``) and submits nothing until
you answer ``y`` (or pass ``--yes``). Adapt ``queue``, ``account``, ``--gres`` and the paths.
"""

from __future__ import annotations

import sys
import time

from dask_jobqueue import SLURMCluster

GPUS = 8  # one Slurm job, one Dask worker, one GPU each

cluster = SLURMCluster(
    queue="gpu",
    account="my-project",
    cores=8,  # CPU cores of the job: NVRTC compiles and the float64 reference checks run here
    processes=1,  # one Dask worker per job; its gpu-<key>=1 resource runs one evaluation at once
    memory="64GB",
    walltime="12:00:00",
    job_extra_directives=["--gres=gpu:1"],
    job_script_prologue=[
        # The worker starts the GPU worker process: a daemonic Dask worker may not.
        "export DASK_DISTRIBUTED__WORKER__DAEMON=False",
        "source /shared/kernevo/.venv/bin/activate",
        # A cubin cache the nodes share: a candidate evaluated again elsewhere compiles once.
        "export KERNEVO_COMPILE_CACHE=/shared/kernevo/cubin",
    ],
    worker_extra_args=["--preload", "evolver.dask_preload"],
    scheduler_options={"host": "0.0.0.0", "port": 8786, "dashboard_address": ":8787"},
)
print(cluster.job_script())
if "--yes" not in sys.argv[1:] and input(f"submit {GPUS} Slurm jobs? [y/N] ").strip() != "y":
    cluster.close()
    sys.exit("nothing submitted")
cluster.scale(jobs=GPUS)
print(f"scheduler at {cluster.scheduler_address}; kernevo evolve ... --scheduler <that>")
try:
    while True:  # the scheduler lives in this process: keep it running
        time.sleep(3600)
except KeyboardInterrupt:
    cluster.close()
