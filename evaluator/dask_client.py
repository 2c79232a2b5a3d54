"""The job's side of the Dask evaluation backend: send a candidate to a GPU worker, wait for it.

``evaluator.openevolve_entry.evaluate`` runs in each of OpenEvolve's pool workers; with
``KERNEVO_EVAL_SCHEDULER`` set it calls :meth:`RemoteEvaluations.evaluate` instead of the
local GPU worker. That submits one Dask task (``evaluator.dask_plugin.run_evaluation``)
restricted to the resource of the job's GPU key, so only a worker of that GPU model runs it,
one at a time per worker, and waits for its result. What needs the job-wide state stays here:
the job's best (``evaluator.new_best.JobBest``, a file on this host) decides whether a passing
candidate runs memcheck before it becomes the best; memcheck and the profile then run as two
more tasks on a worker of the key (any one: the cubin travels with the task).

Faults, as data (an ``infra_error`` report with numeric metrics, so OpenEvolve keeps the child):
- a worker that dies mid-task (its node lost, SIGKILL, out of memory): the scheduler gives the
  task to another worker of the key and this wait goes on, so the candidate is evaluated again
  elsewhere and its one result recorded once; after ``distributed.scheduler.allowed-failures``
  (3) deaths with it the task is given up: check ``workers_lost``;
- no result within ``KERNEVO_EVAL_WAIT_S`` (queued behind other jobs, or running): the task is
  cancelled, check ``evaluation_deadline``. The evolver sets it below OpenEvolve's own timeout,
  which would drop the child;
- the scheduler unreachable or gone: check ``scheduler_lost`` (the job's watchdog,
  ``evolver.cluster``, stops the job with one line);
- an exception raised by the task (a worker without the plugin, a bug of ours): check
  ``worker_exception``.

Each pool worker keeps one ``distributed.Client`` (a process-wide singleton,
:func:`remote_evaluations`), reconnected when it closed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any, TypeVar

from distributed import Client, Future, KilledWorker

from evaluator.dask_plugin import (
    EvaluationRequest,
    EvaluationResponse,
    JobContext,
    gpu_resource,
    run_evaluation,
    run_memcheck,
    run_profile,
)
from evaluator.new_best import JobBest, MemcheckOutcome, gate_new_best
from evaluator.parent_context import Parent
from evaluator.report import CheckFailure, EvaluationReport

SCHEDULER_VARIABLE = "KERNEVO_EVAL_SCHEDULER"
GPU_KEY_VARIABLE = "KERNEVO_EVAL_GPU_KEY"
WAIT_VARIABLE = "KERNEVO_EVAL_WAIT_S"
# Without KERNEVO_EVAL_WAIT_S: below OpenEvolve's evaluation timeout the evolver allows
# (evolver.job_config: more than 810 s).
DEFAULT_WAIT_S = 800.0
# How long connecting (and reconnecting) to the scheduler may take before it counts as gone.
CONNECT_TIMEOUT_S = 30.0
# Between two attempts to reach a scheduler that went away; also how often a wait looks at
# :data:`ABANDONED`.
RECONNECT_POLL_S = 1.0
# Set in the job's own process when its watchdog gave the scheduler up (``evolver.cluster``):
# an evaluation waiting there (the seed's) stops waiting at once. The watch clears it when it
# ends, so a lost scheduler never fails a later evaluation of the same process.
ABANDONED = threading.Event()

T = TypeVar("T")


class EvaluationAbandoned(Exception):
    """A task of the candidate produced no result; ``check`` and the message say why."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check


def quiet_distributed() -> None:
    """Dask's own reconnect warnings and tracebacks would interleave with the job's lines; what
    they mean reaches the job as an ``infra_error`` report and the watchdog's line. Dask's
    logging configuration gives some of its loggers levels of their own (``distributed.client``
    among them), so each is set, not only the package's."""
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def context_from_environment() -> JobContext:
    """The job context the evolver set for its pool workers (``KERNEVO_EVAL_*``).

    Raises:
        KeyError: ``KERNEVO_EVAL_PATH``, ``KERNEVO_EVAL_DTYPE`` or ``KERNEVO_EVAL_GPU_KEY`` unset.
    """
    return JobContext(
        path=os.environ["KERNEVO_EVAL_PATH"],
        bucket=os.environ.get("KERNEVO_EVAL_BUCKET") or None,
        dtype=os.environ["KERNEVO_EVAL_DTYPE"],
        arch=os.environ.get("KERNEVO_EVAL_ARCH", "sm_90"),
        gpu_key=os.environ[GPU_KEY_VARIABLE],
    )


class RemoteEvaluations:
    """Evaluates candidates of one job on the Dask workers of its GPU key.

    ``address``: the scheduler (``tcp://host:8786``); ``context``: the job; ``wait_s``: the
    longest :meth:`evaluate` waits for all its tasks together; ``connect_s``: how long
    connecting or reconnecting to the scheduler may take.
    """

    def __init__(
        self,
        address: str,
        context: JobContext,
        *,
        wait_s: float = DEFAULT_WAIT_S,
        connect_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.address = address
        self.context = context
        self.wait_s = wait_s
        self.connect_s = connect_s
        self.resources = {gpu_resource(context.gpu_key): 1}
        self._client: Client | None = None

    def client(self) -> Client:
        """The connected client (connecting again when the previous one closed).

        Raises:
            OSError, TimeoutError: the scheduler cannot be reached within ``connect_s``.
        """
        if self._client is None or self._client.status in ("closing", "closed"):
            quiet_distributed()
            self._client = Client(self.address, timeout=self.connect_s, set_as_default=False)
        return self._client

    def close(self) -> None:
        """Close the client (pending tasks of this process are released)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _call(self, deadline: float, name: str, func: Callable[..., T], *args: Any) -> T:
        """Run ``func(*args)`` as a task on a worker of the job's key and return its result.

        A broken connection to the scheduler is waited out until ``deadline`` (a scheduler
        restarted at the same address serves the task again, submitted anew: the old one went
        with it); the job's watchdog stops the job long before when the scheduler stays away.

        Raises:
            EvaluationAbandoned: no result (see the module's list of faults).
        """
        lost = ""
        while True:
            future: Future | None = None
            try:
                future = self.client().submit(
                    func,
                    *args,
                    key=f"kernevo-{name}-{uuid.uuid4().hex}",
                    resources=self.resources,
                    pure=False,
                )
                return self._wait(future, deadline)
            except TimeoutError:
                if future is None:  # the client could not connect in time
                    lost = lost or f"Dask scheduler {self.address} unreachable"
                else:
                    future.cancel()
                    raise EvaluationAbandoned(
                        "evaluation_deadline",
                        f"no result from the Dask workers of {self.context.gpu_key} within "
                        f"{self.wait_s:.0f} s (queued or running); the task was cancelled",
                    ) from None
            except KilledWorker as error:
                raise EvaluationAbandoned(
                    "workers_lost", f"every Dask worker that ran it died: {error}"
                ) from None
            except (CancelledError, OSError) as error:
                # The connection broke (the client cancels its futures) or cannot be made.
                lost = f"Dask scheduler {self.address} lost: {type(error).__name__} {error}"
            except Exception as error:  # raised by the task on the worker: ours, not a candidate's
                first = str(error).splitlines()[0] if str(error) else ""
                raise EvaluationAbandoned(
                    "worker_exception", f"{type(error).__name__}: {first}"[:2000]
                ) from None
            if time.monotonic() >= deadline or ABANDONED.is_set():
                raise EvaluationAbandoned("scheduler_lost", lost.strip())
            time.sleep(RECONNECT_POLL_S)

    @staticmethod
    def _wait(future: Future, deadline: float) -> Any:
        """``future``'s result by ``deadline``, looking at :data:`ABANDONED` every second.

        Raises:
            TimeoutError: the deadline passed.
            CancelledError: :data:`ABANDONED` was set (the scheduler was given up), or the
                client cancelled the future (its connection broke).
        """
        while True:
            if ABANDONED.is_set():
                raise CancelledError("the job gave the Dask scheduler up")
            left = deadline - time.monotonic()
            try:
                return future.result(timeout=max(min(left, RECONNECT_POLL_S), 0.0))
            except TimeoutError:
                if left <= RECONNECT_POLL_S:
                    raise

    def evaluate(self, source: str, parent: Parent | None, job_best: JobBest) -> EvaluationReport:
        """The full evaluation of ``source`` (timed against ``parent``) on a worker of the job's
        GPU key; a passing candidate that beats ``job_best`` runs memcheck there first and is
        then profiled, as ``evaluator.openevolve_entry.evaluate`` does locally. The report
        notes which worker evaluated it. Never raises for a fault of the cluster: the report is
        then ``infra_error`` with the check named in the module's docstring.
        """
        deadline = time.monotonic() + self.wait_s
        request = EvaluationRequest(
            context=self.context,
            source=source,
            parent_source=parent.source if parent is not None else None,
            parent_score=parent.combined_score if parent is not None else 0.0,
        )
        sha = hashlib.sha256(source.encode()).hexdigest()[:16]
        try:
            response: EvaluationResponse = self._call(
                deadline, f"evaluate-{sha}", run_evaluation, request
            )
        except EvaluationAbandoned as error:
            return self._abandoned(error)
        report = EvaluationReport.from_json(response.report_json)
        report.notes.append(f"evaluated on Dask worker {response.worker()}")
        if not report.passed or response.gpu_index is None:
            return report
        cubin = response.cubin

        def remote_memcheck() -> MemcheckOutcome:
            return self._call(deadline, f"memcheck-{sha}", run_memcheck, self.context, cubin)

        try:
            if gate_new_best(report, job_best, remote_memcheck):
                profiled = self._call(
                    deadline, f"profile-{sha}", run_profile, self.context, report.to_json(), cubin
                )
                report = EvaluationReport.from_json(profiled)
        except EvaluationAbandoned as error:
            if report.passed and "memcheck" not in report.phase_seconds:
                # Memcheck itself never ran: the candidate cannot become the job's best.
                return self._abandoned(error)
            report.notes.append(f"profile not taken: {error.check}: {error}")
        return report

    def _abandoned(self, error: EvaluationAbandoned) -> EvaluationReport:
        report = EvaluationReport(self.context.path, self.context.dtype)
        return report.fail("infra_error", CheckFailure(error.check, detail=str(error)))


_REMOTE: RemoteEvaluations | None = None


def remote_evaluations() -> RemoteEvaluations:
    """This process's :class:`RemoteEvaluations` for the job environment
    (``KERNEVO_EVAL_SCHEDULER``, ``KERNEVO_EVAL_WAIT_S`` and the job context), built again
    (the previous client closed) when the environment names another scheduler or job: the
    job's own process evaluates the seed here, and may run several jobs one after another."""
    global _REMOTE
    wait = os.environ.get(WAIT_VARIABLE)
    address, context = os.environ[SCHEDULER_VARIABLE], context_from_environment()
    wait_s = float(wait) if wait else DEFAULT_WAIT_S
    current = _REMOTE
    if current is not None and (current.address, current.context, current.wait_s) == (
        address,
        context,
        wait_s,
    ):
        return current
    if current is not None:
        current.close()
    _REMOTE = RemoteEvaluations(address, context, wait_s=wait_s)
    return _REMOTE


def close_remote_evaluations() -> None:
    """Close this process's client, if any (a job's process at the end of the job: its seed
    was evaluated through it, and the scheduler may go away afterwards)."""
    global _REMOTE
    if _REMOTE is not None:
        _REMOTE.close()
        _REMOTE = None
