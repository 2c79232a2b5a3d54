"""A GPU worker process per device, with a hard timeout, replaced after any CUDA error.

OpenEvolve calls ``evaluate()`` in a thread of a pool worker and cannot kill it on timeout, so
all GPU work runs in a child process started with the ``spawn`` method (a forked child of a
process that touched CUDA inherits a broken context) and pinned to one GPU through
CUDA_VISIBLE_DEVICES. A hung kernel is ended by killing the child; a CUDA error (illegal address,
launch failure) leaves a context that cannot be trusted, so the child is retired and the next
task starts a fresh one. A reader/writer lock per GPU (``evaluator.gpu_lock``, in a private
folder) keeps one timed candidate per GPU at a time, across every process of every job: a
``time`` task holds the device alone, every other kind shares it. The child dies with the
process that started it (``evaluator.parent_watch``): a ``kill -9`` of the job leaves no GPU
worker behind.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

from evaluator.child_env import allow_listed_environ
from evaluator.gpu_lock import gpu_lock
from evaluator.parent_watch import die_with_parent
from evaluator.visible_devices import physical_index

# Task kinds that hold the GPU alone (``evaluator.gpu_tasks``): timing and the re-check after
# it. Every other kind (info, check, champion) shares the device with other shared work.
EXCLUSIVE_KINDS = frozenset({"time"})
# Exceptions whose class lives in these modules come from CUDA: the context is suspect.
_CUDA_ERROR_MODULES = ("cupy_backends.cuda", "cupy.cuda")


def _serve(conn: Connection, physical: int, parent_pid: int) -> None:
    """Child main loop on physical CUDA device ``physical`` (its only visible device, index 0
    here): receive task dicts, answer result dicts until the pipe closes.

    Dies with ``parent_pid`` (the pool worker that started it) by the watchdog only: the parent
    starts it from an OpenEvolve evaluation thread, whose end would fire PR_SET_PDEATHSIG.
    A pool worker killed with the job (SIGTERM) ends the pipe either way: end of file, or
    ECONNRESET when it left an answer unread (the pipe is a socket pair); the loop ends quietly
    on both. It had printed a ``ConnectionResetError`` traceback under a job's stop line (lent
    H200, 2026-12-02).
    """
    die_with_parent(parent_pid)
    os.environ["CUDA_VISIBLE_DEVICES"] = str(physical)
    from evaluator import gpu_tasks

    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        reply = _answer(gpu_tasks.run, task)
        try:
            conn.send(reply)
        except OSError:  # the pool worker died while the task ran
            return
        if reply.get("cuda_error"):
            return


def _answer(run: Any, task: dict[str, Any]) -> dict[str, Any]:
    """The reply to ``task``: its result, or the exception it raised, saying whether it came
    from CUDA (the worker then retires: its context is suspect)."""
    try:
        return {"ok": True, "result": _run_task(run, task)}
    except Exception as exc:  # a candidate's fault or our bug: report it, decide who retires
        return {
            "ok": False,
            "cuda_error": type(exc).__module__.startswith(_CUDA_ERROR_MODULES),
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5),
        }


def _run_task(run: Any, task: dict[str, Any]) -> dict[str, Any]:
    """``run(task)``; under cProfile when ``KERNEVO_PROFILE_DIR`` names a folder, the profile
    written there as ``<kind>-<pid>-<ns>.prof`` (``scripts/task_profile.py`` sums them per kind):
    where a task's seconds go (drawing inputs, replays, audits, checks) is host-side Python that
    Nsight tools do not see. A profile that cannot be written is said on stderr, the task's
    result kept."""
    folder = os.environ.get("KERNEVO_PROFILE_DIR")
    if not folder:
        return run(task)
    import cProfile

    profile = cProfile.Profile()
    try:
        return profile.runcall(run, task)
    finally:
        name = f"{task.get('kind', 'task')}-{os.getpid()}-{time.time_ns()}.prof"
        try:
            os.makedirs(folder, exist_ok=True)
            profile.dump_stats(os.path.join(folder, name))
        except OSError as error:
            print(f"kernevo: task profile not written to {folder}: {error}", file=sys.stderr)


class WorkerTimeout(Exception):
    """The task ran past its hard timeout; the worker was killed."""


class WorkerFault(Exception):
    """The task raised a CUDA error or the worker died; the worker was retired."""


class TaskError(Exception):
    """The task raised a non-CUDA exception in the worker (a bug of ours or bad input)."""


class GpuWorker:
    """Runs evaluator.gpu_tasks in a spawned child pinned to this process's CUDA device
    ``gpu_index``: the child's ``CUDA_VISIBLE_DEVICES`` is its physical index.

    Raises:
        VisibleDevicesError: ``CUDA_VISIBLE_DEVICES`` cannot say which device it is (one line).
    """

    def __init__(self, gpu_index: int) -> None:
        self.gpu_index = gpu_index
        self.physical_index = physical_index(gpu_index)
        self._proc: Any = None
        self._conn: Connection | None = None
        self.restarts = 0
        # One task at a time through the pipe: threads of a Dask worker share this object, and
        # two shared holds of the GPU lock no longer keep them apart.
        self._pipe = threading.Lock()
        # Seconds the last run() waited for the GPU lock (a report's ``gpu_lock_wait`` phase).
        self.last_lock_wait_s = 0.0

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve, args=(child, self.physical_index, os.getpid()), daemon=True
        )
        with allow_listed_environ():  # the child's /proc/<pid>/environ: no keys, no tokens
            self._proc.start()
        child.close()
        self._conn = parent

    def stop(self) -> None:
        """Kill the child (if any); the next task starts a fresh one."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
            self.restarts += 1
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None

    def run(self, task: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send ``task``, wait at most ``timeout_s`` seconds for its result, holding the GPU
        lock (alone for :data:`EXCLUSIVE_KINDS`, shared otherwise; the wait is not part of
        ``timeout_s``).

        Raises:
            WorkerTimeout: no answer in time (the child is killed).
            WorkerFault: a CUDA error or the child died (the child is retired).
            TaskError: a non-CUDA exception inside the task.
        """
        t0 = time.perf_counter()
        with (
            self._pipe,
            gpu_lock(self.gpu_index, shared=task.get("kind") not in EXCLUSIVE_KINDS),
        ):
            self.last_lock_wait_s = time.perf_counter() - t0
            if self._proc is None or not self._proc.is_alive():
                self._start()
            assert self._conn is not None
            try:
                self._conn.send(task)
                ready = self._conn.poll(timeout_s)
                reply = self._conn.recv() if ready else None
            except (EOFError, OSError, BrokenPipeError) as exc:
                self.stop()
                raise WorkerFault(f"GPU worker died: {exc}") from None
            if reply is None:
                self.stop()
                raise WorkerTimeout(f"no result within {timeout_s:.0f} s; worker killed")
            if reply["ok"]:
                return reply["result"]
            if reply["cuda_error"]:
                self.stop()
                raise WorkerFault(reply["error"])
            raise TaskError(reply["error"] + "\n" + reply["traceback"])
