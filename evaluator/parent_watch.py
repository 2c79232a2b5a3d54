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
for it (compute-sanitizer, ncu) can take :func:`arm_pdeathsig` as its ``preexec_fn``; the
target such a tool starts is not its child but a grandchild under the tool's own launcher
(compute-sanitizer's ``TreeLauncherSubreaper`` outlives a killed compute-sanitizer, and so did
its target, seen on the H200), so the target watches the evaluating process itself
(:func:`die_with_process`).
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


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks), or None when the process
    is gone or a zombie: a pid the kernel hands out again has another start time."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the name in parentheses may hold blanks
    return None if fields[0] == "Z" else fields[19]


def _watch_process(pid: int, started: str, group: int, poll_s: float) -> None:
    while _start_time(pid) == started:
        time.sleep(poll_s)
    if os.getpgrp() != group:  # never the watched process's own group
        os.killpg(os.getpgrp(), signal.SIGKILL)  # this process, its launcher, the tool's rest
    _kill_self()


def die_with_process(pid: int, *, poll_s: float = POLL_S) -> None:
    """Make this process end (SIGKILL) when process ``pid`` ends: it exits, becomes a zombie,
    or its pid is reused; and with it this process's whole process group, when that is not
    ``pid``'s (a tool started in a session of its own: compute-sanitizer's launcher, which
    outlives its tool, goes too). For a process started through a tool's launcher, whose
    parent is not the process it serves. Linux only (``/proc``); does not return when ``pid``
    is already gone.
    """
    started = _start_time(pid)
    if started is None:
        _kill_self()
    group = os.getpgid(pid)
    name = f"kernevo-process-watch-{pid}"
    threading.Thread(
        target=_watch_process, args=(pid, started, group, poll_s), name=name, daemon=True
    ).start()


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
