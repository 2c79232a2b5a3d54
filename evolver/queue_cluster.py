"""``kernevo worker --scheduler``: the queue worker's view of the Dask cluster its jobs evaluate on.

A worker with ``--scheduler`` has one slot and no device of its own: each job it claims runs in
its job process as ``kernevo evolve --resume N --scheduler ADDRESS`` would
(``evolver.cluster.open_cluster`` with the row's GPU key), so its candidates go to the cluster's
workers of that key. What the worker itself needs of the cluster is here:

- the GPU key its slot claims jobs for (:meth:`SchedulerGate.open`): ``none`` with
  ``--compile-only``, ``--gpu-key``, else the one GPU model the cluster's workers advertise
  (``evolver.cluster.wait_for_workers``, as ``kernevo evolve --scheduler`` picks it); a job
  queued for any GPU takes that key when claimed;
- whether to claim now (:meth:`SchedulerGate.unready`): only while the scheduler answers and a
  worker of that key is connected. A job claimed without one would wait
  ``workers_timeout_s`` and fail (``worker_error``), so a scheduler that is down, or a cluster
  without workers of the key, would otherwise fail every waiting job in turn; they wait instead.
"""

from __future__ import annotations

from typing import Any

from evolver.cluster import ClusterOptions
from evolver.errors import ClusterError

# How long a later look blocks the worker's loop while the scheduler is down (it is retried every
# poll): short, so that signals and the reaper are not held up.
RECONNECT_TIMEOUT_S = 3.0


class SchedulerGate:
    """The worker's client of ``options.scheduler`` (one ``distributed.Client``, replaced once
    Dask gave it up); ``gpu_key``: the key its slot claims for, known after :meth:`open`."""

    def __init__(self, options: ClusterOptions, *, compile_only: bool) -> None:
        self.options = options
        self.compile_only = compile_only
        self.address = str(options.scheduler)
        self.gpu_key: str | None = None
        self._client: Any = None

    def open(self) -> str:
        """Connect and find the slot's GPU key (see the module); waits up to
        ``options.workers_timeout_s`` for a GPU worker when no key is named.

        Raises:
            ClusterError: one line: the scheduler does not answer within
                ``options.lost_after_s``, no GPU worker joined, or several GPU models and no
                ``--gpu-key``.
        """
        from evaluator.dask_client import quiet_distributed
        from evaluator.dask_plugin import NO_GPU_KEY
        from evolver.cluster import wait_for_workers

        quiet_distributed()  # Dask's reconnect warnings would interleave with the worker's lines
        try:
            self._client = self._connect(self.options.lost_after_s)
        except (OSError, TimeoutError) as error:
            raise ClusterError(f"Dask scheduler {self.address} unreachable: {error}") from None
        if self.compile_only:
            self.gpu_key = NO_GPU_KEY
        elif self.options.gpu_key is not None:
            self.gpu_key = self.options.gpu_key
        else:
            self.gpu_key, _ = wait_for_workers(self._client, None, self.options.workers_timeout_s)
        return self.gpu_key

    def unready(self) -> str | None:
        """Why the worker must not claim now (one phrase), or ``None``: the scheduler answers
        and at least one worker of :attr:`gpu_key` is connected to it."""
        from evolver.cluster import keys_of

        assert self.gpu_key is not None, "open() first"
        if self._client is None or self._client.status == "closed":
            self.close()  # Dask gave the connection up: a new client, at most once per look
            try:
                self._client = self._connect(RECONNECT_TIMEOUT_S)
            except (OSError, TimeoutError):
                return f"Dask scheduler {self.address} unreachable"
        if self._client.status != "running":  # reconnecting
            return f"Dask scheduler {self.address} unreachable"
        try:
            found = keys_of(self._client.scheduler_info(n_workers=-1)["workers"])
        except (OSError, TimeoutError):  # lost between the status and the question
            return f"Dask scheduler {self.address} unreachable"
        if not found.get(self.gpu_key):
            return f"no Dask worker of GPU key {self.gpu_key} on scheduler {self.address}"
        return None

    def close(self) -> None:
        """Close the client, if any."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _connect(self, timeout_s: float) -> Any:
        """A client of the scheduler; it reconnects for ``timeout_s`` after a loss, then closes.

        Raises:
            OSError, TimeoutError: the scheduler does not answer within ``timeout_s``.
        """
        from distributed import Client

        return Client(self.address, timeout=timeout_s, set_as_default=False)
