"""What runs on a Dask worker of the distributed evaluation backend (issue 10).

One Dask worker per GPU. Its :class:`GpuEvaluationPlugin` holds that GPU's long-lived GPU worker
process (``evaluator.worker.GpuWorker``: spawned, pinned through CUDA_VISIBLE_DEVICES, hard
timeouts, replaced after any CUDA error, one timed candidate per GPU under the GPU lock) and one
``Evaluator`` per (path, dtype, shape bucket) sharing it, so the isolation, timeout and restart
rules are exactly those of a local job. Compilation runs on the worker host's CPU in this
process's sandboxed compiler child, through the content-addressed cubin cache
(``evaluator.compile``): a candidate evaluated again, here or on a host sharing the cache
folder, compiles once.

The worker advertises two Dask resources: ``GPU=1`` (dask-cuda's convention, what a cluster
counts) and ``gpu-<key>=1`` (:func:`gpu_resource`; ``gpu-nvidia-h200``). A job submits every
task with ``{gpu-<its key>: 1}``: it runs only on workers of its GPU model, one at a time per
worker. A worker without a GPU (``gpu_index`` None) evaluates compile-only, as a compile-only
job's evaluator does; it advertises ``gpu-none`` (the compile-only key) unless told otherwise
(the tests simulate GPU models with compile-only workers under other keys).

The task functions (:func:`run_evaluation`, :func:`run_memcheck`, :func:`run_profile`) are
module-level so that Dask pickles them by name; they check the request's GPU key against the
plugin's (:class:`WrongWorkerError`), so a misrouted task fails instead of evaluating on the
wrong GPU model.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from distributed import WorkerPlugin, get_worker

from evaluator.candidate import evaluate_candidate
from evaluator.champion import ChampionReport, verify_champion
from evaluator.ncu_profile import attach_profile
from evaluator.new_best import MemcheckOutcome, memcheck
from evaluator.parent_context import Parent
from evaluator.pipeline import Evaluator
from evaluator.report import EvaluationReport
from evaluator.worker import GpuWorker

PLUGIN_NAME = "kernevo-gpu"
GPU_RESOURCE = "GPU"
# The GPU key of compile-only evaluation (evolver.runner.NO_GPU_KEY, db.queue.NO_GPU).
NO_GPU_KEY = "none"


def gpu_resource(gpu_key: str) -> str:
    """The Dask resource naming workers of GPU key ``gpu_key``: ``gpu-nvidia-h200``."""
    return f"gpu-{gpu_key}"


def worker_resources(gpu_key: str, *, has_gpu: bool) -> dict[str, float]:
    """The resources a worker of ``gpu_key`` advertises: one slot of its key, and ``GPU=1``
    when it has a GPU (a compile-only worker holds none)."""
    resources = {gpu_resource(gpu_key): 1.0}
    if has_gpu:
        resources[GPU_RESOURCE] = 1.0
    return resources


class NoPluginError(RuntimeError):
    """The task landed on a Dask worker started without :class:`GpuEvaluationPlugin`."""


class WrongWorkerError(RuntimeError):
    """The task's GPU key is not the worker's (a resource set by hand on the wrong worker)."""


@dataclass(frozen=True)
class JobContext:
    """What a worker needs to know of the job a task belongs to: path, shape bucket (``None``:
    the path's first), dtype, the arch a compile-only evaluation targets, and the GPU key the
    job evaluates on."""

    path: str
    bucket: str | None
    dtype: str
    arch: str
    gpu_key: str


@dataclass(frozen=True)
class EvaluationRequest:
    """One candidate to evaluate: its source (canonical text) and its parent's, with the
    parent's ``combined_score`` (``None``: no parent known)."""

    context: JobContext
    source: str
    parent_source: str | None = None
    parent_score: float = 0.0

    def parent(self) -> Parent | None:
        """The parent as ``evaluator.candidate.evaluate_candidate`` takes it."""
        if self.parent_source is None:
            return None
        return Parent(self.parent_source, self.parent_score)


@dataclass(frozen=True)
class EvaluationResponse:
    """A finished evaluation: the full report (``EvaluationReport.to_json()``), the candidate's
    cubin (empty when none was produced), and the worker that ran it (Dask name and address),
    its GPU index (``None``: compile-only) and host."""

    report_json: str
    cubin: bytes
    worker_name: str
    worker_address: str
    gpu_index: int | None
    host: str

    def worker(self) -> str:
        """How the report's note names the worker: ``gpu0@host (tcp://10.0.0.5:40123)``."""
        return f"{self.worker_name}@{self.host} ({self.worker_address})"


class GpuEvaluationPlugin(WorkerPlugin):
    """The GPU of one Dask worker: its GPU worker process and evaluators (see the module).

    ``gpu_index``: the CUDA device (``None``: compile-only); ``gpu_key``: the normalized GPU
    name (``seeds.hardware.normalize_gpu_name``) the worker's resource names; ``facts``: the
    device's properties as ``evolver.gpu.GpuFacts`` fields, which a job reads to describe the
    GPU to the LLM and record it (``None`` for compile-only workers).
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(
        self, gpu_index: int | None, gpu_key: str, facts: dict[str, Any] | None = None
    ) -> None:
        self.gpu_index = gpu_index
        self.gpu_key = gpu_key
        self.facts = facts
        self._gpu_worker: GpuWorker | None = None
        self._evaluators: dict[tuple[str, str, str | None, str], Evaluator] = {}
        self._lock = threading.Lock()
        self.worker_name = ""
        self.worker_address = ""

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped to the worker process before setup: only the configuration travels.
        return (type(self), (self.gpu_index, self.gpu_key, self.facts))

    def setup(self, worker: Any) -> None:
        """Note the worker's identity; the GPU worker process starts with the first task."""
        self.worker_name = str(worker.name)
        self.worker_address = str(worker.address)
        if self.gpu_index is not None:
            self._gpu_worker = GpuWorker(self.gpu_index)

    def teardown(self, worker: Any) -> None:
        """Stop the GPU worker process (it would die with this process anyway)."""
        if self._gpu_worker is not None:
            self._gpu_worker.stop()

    def evaluator(self, context: JobContext) -> Evaluator:
        """The evaluator of ``context``'s path, dtype and bucket, built once and sharing this
        worker's one GPU worker process.

        Raises:
            WrongWorkerError: ``context.gpu_key`` is not this worker's key.
            UnknownPathError, UnknownBucketError, UnknownDtypeError: a bad job context.
        """
        if context.gpu_key != self.gpu_key:
            raise WrongWorkerError(
                f"task for GPU key {context.gpu_key!r} on worker {self.worker_name!r} of key "
                f"{self.gpu_key!r}"
            )
        key = (context.path, context.dtype, context.bucket, context.arch)
        with self._lock:
            if key not in self._evaluators:
                evaluator = Evaluator(
                    context.path,
                    context.dtype,
                    self.gpu_index,
                    compile_arch=context.arch,
                    bucket=context.bucket,
                )
                if self._gpu_worker is not None:
                    evaluator.worker = self._gpu_worker  # one GPU process per worker, not per job
                self._evaluators[key] = evaluator
            return self._evaluators[key]


def plugin(worker: Any = None) -> GpuEvaluationPlugin:
    """The :class:`GpuEvaluationPlugin` of ``worker`` (default: the Dask worker running the
    calling task).

    Raises:
        NoPluginError: the worker was started without it.
    """
    worker = worker if worker is not None else get_worker()
    found = worker.plugins.get(PLUGIN_NAME)
    if not isinstance(found, GpuEvaluationPlugin):
        raise NoPluginError(
            f"Dask worker {worker.name!r} ({worker.address}) has no kernevo GPU plugin: start "
            "it with 'kernevo dask-worker' (docs/SCALING.md)"
        )
    return found


def run_evaluation(request: EvaluationRequest) -> EvaluationResponse:
    """The Dask task of one candidate: ``evaluator.candidate.evaluate_candidate`` on this
    worker's GPU (compile-only without one). Failures of the candidate are the report's status.

    Raises:
        NoPluginError, WrongWorkerError: the task reached a worker it must not run on.
    """
    gpu = plugin()
    evaluator = gpu.evaluator(request.context)
    report, cubin = evaluate_candidate(evaluator, request.source, request.parent())
    return EvaluationResponse(
        report_json=report.to_json(),
        cubin=cubin,
        worker_name=gpu.worker_name,
        worker_address=gpu.worker_address,
        gpu_index=gpu.gpu_index,
        host=os.uname().nodename,
    )


def run_memcheck(context: JobContext, cubin: bytes) -> MemcheckOutcome:
    """compute-sanitizer memcheck of ``cubin`` on this worker's GPU
    (``evaluator.new_best.memcheck``), for the job host's ``gate_new_best``.

    Raises:
        NoPluginError, WrongWorkerError: as :func:`run_evaluation`.
        ValueError: the worker has no GPU.
    """
    gpu = plugin()
    evaluator = gpu.evaluator(context)
    if gpu.gpu_index is None:
        raise ValueError(f"memcheck asked of compile-only worker {gpu.worker_name!r}")
    return memcheck(cubin, evaluator.spec, evaluator.dtype, gpu.gpu_index)


def run_profile(context: JobContext, report_json: str, cubin: bytes) -> str:
    """``report_json`` with the Nsight Compute profile of ``cubin`` attached on this worker's
    GPU (``evaluator.ncu_profile.attach_profile``; nothing on a compile-only worker).

    Raises:
        NoPluginError, WrongWorkerError: as :func:`run_evaluation`.
    """
    evaluator = plugin().evaluator(context)
    report = EvaluationReport.from_json(report_json)
    attach_profile(evaluator, cubin, report)
    return report.to_json()


def run_champion_verification(
    context: JobContext, source: str, rival_cubin: bytes | None
) -> ChampionReport:
    """``evaluator.champion.verify_champion`` of ``source`` on this worker's GPU at the job's
    shape bucket, ``rival_cubin`` (the current champion's) timed in the same rounds.

    Raises:
        NoPluginError, WrongWorkerError: as :func:`run_evaluation`.
        ValueError: the worker has no GPU.
    """
    gpu = plugin()
    gpu.evaluator(context)  # the key check
    if gpu.gpu_index is None:
        raise ValueError(f"champion verification asked of compile-only worker {gpu.worker_name!r}")
    return verify_champion(
        source, context.path, context.dtype, gpu.gpu_index, rival_cubin, bucket=context.bucket
    )


def worker_facts(dask_worker: Any = None) -> dict[str, Any]:
    """The worker's GPU key, index and device facts (the job's first question; run through
    ``Client.run``, which passes ``dask_worker``)."""
    gpu = plugin(dask_worker)
    return {"gpu_key": gpu.gpu_key, "gpu_index": gpu.gpu_index, "facts": gpu.facts}
