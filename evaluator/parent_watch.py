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
its target, seen on the H200), so such a tool runs in a session of its own, watched by a
separate reaper process (:func:`start_group_reaper`) that kills the whole group when the
evaluating process dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
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


# The group reaper: a process of its own, so it acts even while the target holds its GIL in C
# code (a CUDA call under compute-sanitizer's instrumentation: the target's own watchdog thread
# did not run within 5 s on the H200). No imports beyond the standard library's core: it starts
# in ~20 ms and needs no PYTHONPATH.
_GROUP_REAPER = """
import os, signal, sys, time
pid, started, group, poll_s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def start_time(p):
    try:
        with open(f"/proc/{p}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else fields[19]
while True:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        sys.exit(0)
    if start_time(pid) != started:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
        sys.exit(0)
    time.sleep(poll_s)
"""


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


def start_group_reaper(group: int, *, poll_s: float = POLL_S) -> subprocess.Popen[bytes]:
    """Start a process that SIGKILLs process group ``group`` when this process ends (exits,
    becomes a zombie, or its pid is reused), and exits by itself once the group is gone.

    For a tool started in a session of its own (``start_new_session=True``: ``group`` is its
    pid) whose processes do not all die with it: compute-sanitizer's launcher
    (``TreeLauncherSubreaper``) and the target under it outlived a ``kill -9`` of the job on
    the H200. The caller kills and waits for the reaper once the tool has ended. Linux only
    (``/proc``).
    """
    me = os.getpid()
    started = _start_time(me)
    assert started is not None  # this process is running
    return subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _GROUP_REAPER, str(me), started, str(group),
         str(poll_s)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={},
        start_new_session=True,  # not in any group a terminal's Ctrl-C or our killpg reaches
    )  # fmt: skip


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
