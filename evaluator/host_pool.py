"""A thread pool for the host side of an evaluation in the GPU worker process: the float64
references, the input draws and the timing audits' checks that band_bidiag's and solve_tri's
suites would otherwise compute one after another while the GPU idles (docs/EVALUATOR.md,
"Host work in a pool").

What runs here is only work that does not depend on the candidate (a band drawn from a seed
and its reference singular values, a problem of ``seeds.solve_tri.inputs``) or, in an audit,
the checks of outputs already read back. The caller reads the results in its own order and
acts on them exactly where it acted before (the first failure in that order wins), so a
verification reports what it reported when everything ran in one thread.

Why threads, not processes: the work is LAPACK, BLAS and NumPy array loops that release the GIL
while they run (SciPy's ``cython_lapack`` through ctypes' ``CFUNCTYPE``, ``numpy.linalg``,
``einsum``, ufuncs, matmul; the Python steps between them hold it, so solve_tri's row-by-row
substitution gains less than band_bidiag's LAPACK calls), no data is copied between processes,
and no child can outlive a GPU worker that is killed. In the GPU worker BLAS runs on one
thread per call (``evaluator.child_env.WORKER_SETTINGS``), so a task in the pool runs the same
code on the same library as the sequential call did: its results are the same, bit for bit
(``tests/test_host_pool.py``).

The pool lives as long as the process (the GPU worker serves a job's candidates), with
:func:`host_workers` threads, created on first use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# At most this many threads: an audit judges 8 sets (evaluator.timing.AUDITED_SETS) and a
# band_bidiag verification draws at most 8 bands per shape; the lent GPU machines have 16 cores
# for 1-8 GPU workers.
MAX_WORKERS = 8

_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
# Submitted tasks not yet finished (cancelled ones included until their callback runs).
_OUTSTANDING: set[Future[Any]] = set()


def host_workers() -> int:
    """The pool's threads: :data:`MAX_WORKERS`, or fewer when this process may run on fewer
    CPUs (its affinity mask, else the machine's count)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cpus))


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(host_workers(), thread_name_prefix="kernevo-host")
        return _POOL


def _finished(future: Future[Any]) -> None:
    with _LOCK:
        _OUTSTANDING.discard(future)


def submit(fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` in the pool; its future (``result()`` re-raises what ``fn`` raised)."""
    future = _pool().submit(fn, *args)
    with _LOCK:
        _OUTSTANDING.add(future)
    future.add_done_callback(_finished)  # runs at once when the task is already done
    return future


def wait_idle() -> None:
    """Wait until every task submitted so far has finished or been cancelled: for a
    measurement that must have the host's cores to itself (the LAPACK baseline's timing)."""
    with _LOCK:
        pending = list(_OUTSTANDING)
    wait(pending)


@contextmanager
def prefetched(
    calls: Sequence[Callable[[], T]], order: Sequence[int] | None = None
) -> Iterator[list[Future[T]]]:
    """Every call of ``calls`` submitted at once, in ``order`` (indices into ``calls``, each
    once; default: as given, so the first needed start first); yields their futures in the
    order of ``calls``. Leaving the block cancels those not started (a caller that stopped at
    a failure needs none of them); those already running finish in the background.

    Raises:
        ValueError: ``order`` is not a permutation of the indices of ``calls``.
    """
    sequence = list(range(len(calls))) if order is None else list(order)
    if sorted(sequence) != list(range(len(calls))):
        raise ValueError(f"order must list each of the {len(calls)} calls once; got {sequence}")
    futures: list[Future[T] | None] = [None] * len(calls)
    try:
        for index in sequence:
            futures[index] = submit(calls[index])
        yield [future for future in futures if future is not None]
    finally:
        for future in futures:
            if future is not None:
                future.cancel()
