"""A job's Dask cluster: where its candidates are evaluated when it is not on the local GPU.

``kernevo evolve --scheduler tcp://host:8786`` joins a running cluster; ``--gpus 0,1`` starts
one on this machine for the job's lifetime (a scheduler and one worker per listed GPU,
``evolver.dask_worker``). Without either, nothing here runs and Dask is never imported: the
job evaluates on its local GPU worker as before.

:func:`open_cluster` connects, finds the job's GPU key (a compile-only job: ``none``; a resumed
job: the key it ran on; otherwise ``--gpu-key`` or the one GPU model the cluster's workers
advertise, ``gpu-<key>`` resources), waits for a worker of that key, and asks one for the
device's facts (the job's record and the LLM's system message describe that GPU). The
:class:`EvaluationCluster` it yields gives the pool workers their environment
(``KERNEVO_EVAL_SCHEDULER``, ``KERNEVO_EVAL_GPU_KEY``, ``KERNEVO_EVAL_WAIT_S``; read by
``evaluator.dask_client``), the number of candidates to keep in flight (OpenEvolve's
``parallel_evaluations``: by default twice the workers of the key), champion verification on a
worker of the key, and a watchdog: a scheduler that stays unreachable for ``lost_after_s``
stops the job, which then fails with one line naming the scheduler and the resume command.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from evolver.errors import ClusterError
from evolver.gpu import GpuFacts

# Scheduler unreachable this long (the client's reconnect window) and the job stops.
DEFAULT_LOST_AFTER_S = 30.0
# How long a job waits at start for a worker of its GPU key to join.
DEFAULT_WORKERS_TIMEOUT_S = 60.0
# Candidates in flight per worker of the key, unless --in-flight says otherwise: one evaluating,
# one being generated (LLM, diff) and queued behind it.
IN_FLIGHT_PER_WORKER = 2
# Champion verification (held-out shapes, sanitizers, determinism) may take minutes.
CHAMPION_WAIT_S = 3600.0
_WATCH_POLL_S = 0.25
# A first TCP connection to the scheduler, made before Dask's client: Dask retries a refused
# connection until its timeout (30 s), where the refusal itself is known at once. A scheduler
# that does not answer within this long is left to Dask's own timeout.
PROBE_TIMEOUT_S = 3.0
# Dask's default scheduler port (``dask scheduler --port``), for an address without one.
DEFAULT_SCHEDULER_PORT = 8786


def scheduler_host_port(address: str) -> tuple[str, int]:
    """Host and port of a Dask address ``tcp://host:port`` (``tls://`` too; an IPv6 host in
    brackets; no port: :data:`DEFAULT_SCHEDULER_PORT`).

    Raises:
        ValueError: one line: no host, or a port that is not an integer in 1..65535.
    """
    rest = address.partition("://")[2]
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else None
        if tail and port_text is None:
            raise ValueError(f"{address!r}: expected [host]:port after the scheme")
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
    else:
        host, port_text = rest, None
    if not host:
        raise ValueError(f"{address!r} names no host (tcp://host:8786)")
    if port_text is None:
        return host, DEFAULT_SCHEDULER_PORT
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{address!r}: the port must be an integer in 1..65535, not {port_text!r}")
    return host, int(port_text)


def check_reachable(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once when nothing can accept a connection at the scheduler ``address``: the
    connection is refused, the host is unknown or unreachable. A connection that neither
    opens nor fails within ``timeout_s`` passes (Dask's client then waits its own timeout).

    Raises:
        ClusterError: one line naming the address and what happened.
    """
    host, port = scheduler_host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except TimeoutError:
        return
    except socket.gaierror as error:
        reason = f"unknown host {host!r} ({error.strerror})"
    except ConnectionRefusedError:
        reason = "connection refused (no scheduler listens on that port)"
    except OSError as error:
        reason = error.strerror or errno.errorcode.get(error.errno or 0, str(error))
    raise ClusterError(f"Dask scheduler {address} unreachable: {reason}")


@dataclass(frozen=True)
class ClusterOptions:
    """How a job reaches its Dask cluster: ``scheduler`` (an address) or ``gpus`` (device
    indices of a cluster started here; with a compile-only job, that many compile-only
    workers); ``gpu_key`` picks the GPU model in a cluster of several; ``in_flight``
    candidates at once (default :data:`IN_FLIGHT_PER_WORKER` per worker of the key at start);
    ``lost_after_s``: how long the scheduler may stay unreachable before the job stops;
    ``workers_timeout_s``: how long to wait at start for a worker of the key."""

    scheduler: str | None = None
    gpus: tuple[int, ...] = ()
    gpu_key: str | None = None
    in_flight: int | None = None
    lost_after_s: float = DEFAULT_LOST_AFTER_S
    workers_timeout_s: float = DEFAULT_WORKERS_TIMEOUT_S

    def problem(self) -> str | None:
        """Why these options contradict each other, or ``None``."""
        if self.scheduler and self.gpus:
            return "--scheduler and --gpus exclude each other (--gpus starts a local cluster)"
        if not self.scheduler and not self.gpus:
            return "a cluster needs --scheduler ADDRESS or --gpus I,J"
        if len(set(self.gpus)) != len(self.gpus):
            return f"--gpus lists a device twice: {','.join(map(str, self.gpus))}"
        return None

    def resume_options(self) -> str:
        """The command-line options that reach this cluster again, for the resume hint."""
        if self.scheduler:
            return f" --scheduler {self.scheduler}"
        return f" --gpus {','.join(map(str, self.gpus))}"


def keys_of(workers: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """GPU key → addresses of the workers advertising it (``gpu-<key>`` resources), from
    ``Client.scheduler_info()["workers"]``."""
    from evaluator.dask_plugin import gpu_resource

    found: dict[str, list[str]] = {}
    for address, info in workers.items():
        for name in info.get("resources") or {}:
            if name.startswith(gpu_resource("")):
                found.setdefault(name[len(gpu_resource("")) :], []).append(address)
    return found


class EvaluationCluster:
    """A connected cluster serving one job (see the module). ``address``: the scheduler;
    ``gpu_key``: the key the job evaluates on; ``workers``: addresses of its workers at
    start; ``facts``: their device (``None`` for compile-only); ``in_flight``: candidates at
    once; ``lost``: the one-line reason once the watchdog gave the scheduler up."""

    def __init__(
        self,
        client: Any,
        options: ClusterOptions,
        gpu_key: str,
        workers: list[str],
        facts: GpuFacts | None,
        local: Any = None,
    ) -> None:
        self.client = client
        self.options = options
        self.address = str(client.scheduler.address)
        self.gpu_key = gpu_key
        self.workers = workers
        self.facts = facts
        self.in_flight = options.in_flight or max(IN_FLIGHT_PER_WORKER * len(workers), 1)
        self.lost: str | None = None
        self._local = local

    def describe(self) -> str:
        """One phrase for the job's header: where and how wide it evaluates."""
        where = "a local Dask cluster" if self._local is not None else "Dask scheduler"
        return (
            f"{where} {self.address}: {len(self.workers)} worker(s) of {self.gpu_key}, "
            f"{self.in_flight} candidates in flight"
        )

    def environment(self, wait_s: float) -> dict[str, str]:
        """What the pool workers need (``evaluator.dask_client``); ``wait_s``: the longest one
        evaluation waits for its tasks (below OpenEvolve's own timeout)."""
        from evaluator.dask_client import GPU_KEY_VARIABLE, SCHEDULER_VARIABLE, WAIT_VARIABLE

        return {
            SCHEDULER_VARIABLE: self.address,
            GPU_KEY_VARIABLE: self.gpu_key,
            WAIT_VARIABLE: f"{wait_s:g}",
        }

    def lost_line(self, job_id: int) -> str:
        """The job's failure once the scheduler is gone, with the command that resumes it."""
        return (
            f"{self.lost}; resume with 'kernevo evolve --resume {job_id}"
            f"{self.options.resume_options()}'"
        )

    @contextmanager
    def watching(self, stop: Callable[[], None]) -> Iterator[None]:
        """Inside the block a thread checks the scheduler connection every 0.25 s; unreachable
        for ``lost_after_s`` (the client reconnecting meanwhile), it sets :attr:`lost`, ends
        any evaluation waiting in this process (``evaluator.dask_client.ABANDONED``: the
        seed's, evaluated before OpenEvolve's pool exists) and calls ``stop`` (OpenEvolve's
        graceful shutdown) until the block ends: the pool may start only after the seed.
        ``ABANDONED`` is cleared again when the block ends: it is process-wide, and left set
        it would fail at once every later evaluation of this process (another job's, or any
        ``RemoteEvaluations``) with ``scheduler_lost``."""
        from evaluator.dask_client import ABANDONED

        done = threading.Event()
        ABANDONED.clear()

        def watch() -> None:
            down_since: float | None = None
            while not done.wait(_WATCH_POLL_S):
                if self.lost is not None:
                    stop()
                    continue
                if self.client.status == "running":
                    down_since = None
                    continue
                now = time.monotonic()
                down_since = down_since if down_since is not None else now
                if now - down_since >= self.options.lost_after_s:
                    self.lost = (
                        f"the Dask scheduler {self.address} stopped answering "
                        f"(unreachable for {self.options.lost_after_s:g} s)"
                    )
                    ABANDONED.set()
                    stop()

        thread = threading.Thread(target=watch, name="kernevo-scheduler-watch", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            ABANDONED.clear()  # the lost scheduler was this job's; nothing of it waits now

    def champion_verifier(
        self, path: str, bucket: str, dtype: str
    ) -> Callable[[str, bytes | None], Any]:
        """``verify(source, rival_cubin) -> ChampionReport`` of the job's path at ``bucket``
        in ``dtype`` on a worker of the job's key
        (``evaluator.dask_plugin.run_champion_verification``), for
        ``evolver.champion.promote_best``."""
        from evaluator.dask_plugin import JobContext, gpu_resource, run_champion_verification

        arch = self.facts.arch if self.facts is not None else "sm_90"
        context = JobContext(path, bucket, dtype, arch, self.gpu_key)

        def verify(source: str, rival_cubin: bytes | None) -> Any:
            future = self.client.submit(
                run_champion_verification,
                context,
                source,
                rival_cubin,
                resources={gpu_resource(self.gpu_key): 1},
                pure=False,
            )
            return future.result(timeout=CHAMPION_WAIT_S)

        return verify

    def close(self) -> None:
        """Close the clients of this process (this one and the one that evaluated the seed),
        and the local cluster if this job started it."""
        from evaluator.dask_client import close_remote_evaluations

        close_remote_evaluations()
        self.client.close()
        if self._local is not None:
            self._local.close()


def start_local_cluster(gpus: tuple[int, ...], *, compile_only: bool) -> Any:
    """A scheduler on 127.0.0.1 and one worker per device of ``gpus`` (``evolver.dask_worker``;
    compile-only workers under the key ``none`` when ``compile_only``), in processes of this
    machine, living as long as the returned ``SpecCluster``. A device index counts among
    ``CUDA_VISIBLE_DEVICES`` when it is set (``evolver.dask_worker.physical_gpu``).

    Raises:
        GpuNotFoundError: a listed device does not answer.
        ClusterError: ``CUDA_VISIBLE_DEVICES`` holds UUIDs or too few devices.
    """
    from distributed import Nanny, Scheduler, SpecCluster

    from evolver.dask_worker import (
        allow_worker_children,
        nanny_options,
        physical_gpu,
        worker_plugin,
    )

    allow_worker_children()
    physical = {index: physical_gpu(index) for index in gpus}  # as kernevo dask-worker does
    if not compile_only:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # every index below is physical
    workers = {}
    for index in gpus:
        plugin = worker_plugin(None if compile_only else physical[index])
        name = f"local-gpu{index}"
        options = nanny_options(plugin, name, silence_logs=logging.ERROR)
        workers[name] = {"cls": Nanny, "options": options}
    scheduler = {
        "cls": Scheduler,
        "options": {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"},
    }
    return SpecCluster(
        workers=workers, scheduler=scheduler, silence_logs=logging.ERROR, name="kernevo-local"
    )


def _choose_key(found: dict[str, list[str]], wanted: str | None, address: str) -> str | None:
    """The GPU key the job evaluates on, or ``None`` while no GPU worker has joined.

    Raises:
        ClusterError: several GPU models and none named.
    """
    from evaluator.dask_plugin import NO_GPU_KEY

    if wanted is not None:
        return wanted
    gpu_keys = sorted(k for k in found if k != NO_GPU_KEY)
    if len(gpu_keys) > 1:
        raise ClusterError(
            f"Dask scheduler {address} has workers of several GPU models ({', '.join(gpu_keys)}): "
            "name the job's with --gpu-key"
        )
    return gpu_keys[0] if gpu_keys else None


def wait_for_workers(client: Any, wanted: str | None, timeout_s: float) -> tuple[str, list[str]]:
    """The GPU key ``wanted`` (``None``: the one GPU model the workers advertise) and the
    sorted addresses of its workers on ``client``'s scheduler, once one of them has joined
    (asked every 0.5 s). ``open_cluster`` finds a job's workers with it, ``kernevo worker
    --scheduler`` the key its slot claims jobs for.

    Raises:
        ClusterError: one line: no worker of the key within ``timeout_s`` seconds (the keys
            seen are named), several GPU models and none wanted, or the scheduler stopped
            answering meanwhile.
    """
    address = str(client.scheduler.address)
    deadline = time.monotonic() + timeout_s
    while True:
        found = _workers_by_key(client, wanted, address)
        key = _choose_key(found, wanted, address)
        if key is not None and found.get(key):
            return key, sorted(found[key])
        if time.monotonic() >= deadline:
            seen = ", ".join(f"{k} ({len(v)})" for k, v in sorted(found.items())) or "none"
            what = f"of GPU key {key}" if key is not None else "with a GPU"
            raise ClusterError(
                f"no Dask worker {what} joined scheduler {address} within {timeout_s:g} s "
                f"(workers by key: {seen}); start one with 'kernevo dask-worker --scheduler "
                f"{address} --gpu I'"
            )
        time.sleep(0.5)


def _workers_by_key(client: Any, wanted: str | None, address: str) -> dict[str, list[str]]:
    """``keys_of`` the scheduler's workers, asked once.

    Raises:
        ClusterError: the client lost its scheduler (it reconnects for its timeout, then
            closes); ``scheduler_info`` then answers without ``workers``, from its cache.
    """
    from concurrent.futures import CancelledError

    try:
        info = client.scheduler_info(n_workers=-1) if client.status == "running" else {}
    except (OSError, TimeoutError, CancelledError):
        info = {}
    if "workers" in info:
        return keys_of(info["workers"])
    what = f"of GPU key {wanted}" if wanted is not None else "with a GPU"
    raise ClusterError(
        f"Dask scheduler {address} stopped answering while waiting for workers {what}"
    )


@contextmanager
def open_cluster(
    options: ClusterOptions, *, compile_only: bool, gpu_key: str | None = None
) -> Iterator[EvaluationCluster]:
    """Connect to (or start) the cluster of ``options`` for one job (see the module);
    ``gpu_key``: the key a resumed job ran on (``options.gpu_key`` may not contradict it).

    Raises:
        ClusterError: one line: the scheduler does not answer, no worker of the key joined
            within ``workers_timeout_s`` (the keys seen are named), or several GPU models
            and none named.
        GpuNotFoundError: a device of ``--gpus`` does not answer.
    """
    from distributed import Client

    from evaluator.dask_client import quiet_distributed
    from evaluator.dask_plugin import NO_GPU_KEY, worker_facts

    if (problem := options.problem()) is not None:
        raise ClusterError(problem)
    if gpu_key is not None and options.gpu_key is not None and gpu_key != options.gpu_key:
        raise ClusterError(f"the job ran on {gpu_key}, not on --gpu-key {options.gpu_key}")
    if compile_only and options.gpu_key not in (None, NO_GPU_KEY):
        raise ClusterError(
            f"a compile-only job evaluates under the key {NO_GPU_KEY}, not --gpu-key "
            f"{options.gpu_key}: leave out --gpu-key"
        )
    if options.scheduler:
        check_reachable(options.scheduler)
    quiet_distributed()  # the watchdog and the reports say what matters
    local = start_local_cluster(options.gpus, compile_only=compile_only) if options.gpus else None
    address = local.scheduler_address if local is not None else str(options.scheduler)
    try:
        client = Client(address, timeout=options.lost_after_s, set_as_default=False)
    except (OSError, TimeoutError) as error:
        if local is not None:
            local.close()
        raise ClusterError(f"Dask scheduler {address} unreachable: {error}") from None
    try:
        wanted = NO_GPU_KEY if compile_only else (gpu_key or options.gpu_key)
        key, workers = wait_for_workers(client, wanted, options.workers_timeout_s)
        facts = None
        if key != NO_GPU_KEY:
            answer = client.run(worker_facts, workers=[workers[0]])[workers[0]]
            facts = GpuFacts(**answer["facts"]) if answer.get("facts") else None
            if facts is None:
                raise ClusterError(
                    f"Dask worker {workers[0]} of {key} has no GPU (a compile-only worker "
                    "under a GPU key)"
                )
        cluster = EvaluationCluster(client, options, key, workers, facts, local)
    except BaseException:
        client.close()
        if local is not None:
            local.close()
        raise
    try:
        yield cluster
    finally:
        cluster.close()
