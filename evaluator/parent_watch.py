"""Child processes that die with their parent: no pool, GPU or compiler worker outlives its job.

A ``kill -9`` of ``kernevo evolve`` runs no cleanup, so its children must notice on their own.
Every child the evolver or the evaluator starts (OpenEvolve's pool workers, the GPU worker, the
compiler child) calls :func:`die_with_parent` first thing, with the pid of the process that
started it. Two mechanisms, because each has a gap:

* ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux): the kernel kills the child the moment its parent
  goes, even while the child is stuck in C code holding the GIL. But the kernel ties it to the
  parent *thread* that created the child (prctl(2)): a child created from a short-lived thread
  is killed when that thread ends, its process still alive. So it is armed only where the
  caller knows the creating thread lives as long as the process needs the child
  (``pdeathsig=True``): OpenEvolve's pool workers, created by the job's main thread and the
  executor's manager thread.
* A watchdog thread that compares ``os.getppid()`` with the expected parent every
  :data:`POLL_S` seconds and kills its own process when the parent changed (an orphan is
  re-parented to init or a subreaper). It works from any thread and on any POSIX system, and
  runs in every child; it is the only mechanism of children created from threads (the GPU
  worker, started inside an OpenEvolve evaluation thread).

The parent may already be gone when the child starts; that is checked after arming, so there is
no window in which a death goes unseen. A tool run under ``subprocess`` from a thread that waits
for it (compute-sanitizer, ncu) can take :func:`arm_pdeathsig` as its ``preexec_fn``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass

# <linux/prctl.h>
PR_SET_PDEATHSIG = 1
# Seconds between parent checks of the watchdog: a tree of depth 3 (job → pool worker → GPU
# worker) is gone within about 2 × POLL_S after the job dies, well inside the 5 s the issue sets.
POLL_S = 0.25


@dataclass(frozen=True)
class ParentWatch:
    """How a child watches its parent: the pid it expects, whether the kernel's parent-death
    signal is armed, and the watchdog thread's name."""

    parent_pid: int
    pdeathsig: bool
    watchdog: str


def arm_pdeathsig(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when the thread that created it exits.

    Returns False where that is unavailable (not Linux, no ``prctl`` in the C library, or the
    call failed); the caller then relies on the watchdog. Safe as a ``preexec_fn``.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return False
    return int(prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0


def _kill_self() -> None:
    """End this process as the kernel's parent-death signal would: no cleanup, no handlers."""
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(parent_pid: int, poll_s: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    _kill_self()


def die_with_parent(
    parent_pid: int, *, pdeathsig: bool = False, poll_s: float = POLL_S
) -> ParentWatch:
    """Make this process end (SIGKILL) when ``parent_pid``, the process that started it, dies.

    Call it first thing in the child. ``parent_pid`` is passed by the parent (its
    ``os.getpid()``), not read here: a parent that died before this call has already handed the
    child to init, and only the expected pid reveals that. ``pdeathsig=True`` also arms the
    kernel's parent-death signal: only for a child created by a thread that lives as long as
    the child is needed (see the module notes). Does not return when the parent is already
    gone.
    """
    armed = arm_pdeathsig() if pdeathsig else False
    if os.getppid() != parent_pid:  # checked after arming: a death before it is seen here
        _kill_self()
    name = f"kernevo-parent-watch-{parent_pid}"
    threading.Thread(target=_watch, args=(parent_pid, poll_s), name=name, daemon=True).start()
    return ParentWatch(parent_pid, armed, name)
