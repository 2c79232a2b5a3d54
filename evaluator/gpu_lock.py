"""One timed candidate per GPU at a time, while untimed GPU work shares the device: a
``filelock`` reader/writer lock per device in a private folder.

Timing (``exclusive``) holds the device alone: nothing else of ours runs a kernel while a
candidate's CUDA graphs are replayed. Verification, sanitizers and champion checks
(``shared``) run beside one another, so several jobs on one GPU overlap their host-bound checks
and wait only for each other's timing (RESULTS section 20: with one lock held alone for the
whole evaluation, two jobs on one H200 ran at the pace of one). A timer that waits keeps new
shared holders out until it has had its turn, so a stream of verifications never starves
timing: it holds a second lock, the gate, while it waits and while it times, and a shared
holder passes through the gate before it takes its share. (``filelock.ReadWriteLock`` alone
prefers a waiting writer only in a single-threaded process: with other threads running, as in
OpenEvolve's pool workers, it retries every 50 ms and a reader can slip in between.)

The lock file lives in a folder only this user can enter (mode 0700): ``$XDG_RUNTIME_DIR/
kernevo/locks`` when the session has a runtime folder (a per-user tmpfs), else
``$XDG_CACHE_HOME/kernevo/locks`` (``~/.cache/kernevo/locks``). A fixed name in a
world-writable ``/tmp`` let any other user pre-create the file, or hold the lock forever. The
locks are SQLite's POSIX advisory lock on one file (``filelock.ReadWriteLock``) and a kernel
``flock`` on the other (``filelock.FileLock``, never its soft fallback): the kernel drops both
when the holder dies, ``kill -9`` included, so a killed job never wedges a GPU.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, ReadWriteLock

from evaluator.visible_devices import physical_index

PRIVATE_MODE = 0o700


class LockDirError(OSError):
    """The lock folder cannot be made private to this user (wrong owner, not a folder)."""


def _runtime_dir() -> Path | None:
    """``$XDG_RUNTIME_DIR`` when it is a folder of this user that no one else may enter."""
    value = os.environ.get("XDG_RUNTIME_DIR")
    if not value:
        return None
    try:
        st = os.stat(value)
    except OSError:
        return None
    private = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077
    return Path(value) if private else None


def lock_dir() -> Path:
    """The private folder of this user's kernevo locks, created with mode 0700.

    Raises:
        LockDirError: one line: the path is a symlink or not a folder, belongs to another
            user, or cannot be created.
    """
    runtime = _runtime_dir()
    if runtime is not None:
        folder = runtime / "kernevo" / "locks"
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = Path(cache) / "kernevo" / "locks"
    try:
        folder.parent.mkdir(mode=PRIVATE_MODE, parents=True, exist_ok=True)
        folder.mkdir(mode=PRIVATE_MODE, exist_ok=True)
        st = os.lstat(folder)
    except OSError as error:
        raise LockDirError(
            f"GPU lock folder {folder} cannot be created: {error.strerror or error}"
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        raise LockDirError(f"GPU lock folder {folder} is not a folder (a symlink?)")
    if st.st_uid != os.getuid():
        raise LockDirError(f"GPU lock folder {folder} belongs to uid {st.st_uid}, not to this user")
    if stat.S_IMODE(st.st_mode) != PRIVATE_MODE:
        os.chmod(folder, PRIVATE_MODE)  # ours but opened up (umask, a copy): close it again
    return folder


def gpu_lock_path(gpu_index: int) -> Path:
    """The reader/writer lock file of this process's CUDA device ``gpu_index`` (created on
    first use), named by its physical index (``evaluator.visible_devices``): one lock per GPU
    whatever ``CUDA_VISIBLE_DEVICES`` each holder runs under.

    Raises:
        VisibleDevicesError: ``CUDA_VISIBLE_DEVICES`` cannot say which device it is.
    """
    return lock_dir() / f"gpu{physical_index(gpu_index)}.rwlock"


def gpu_gate_path(gpu_index: int) -> Path:
    """The gate of this process's CUDA device ``gpu_index`` (named as :func:`gpu_lock_path`
    names its lock): held by a timer from before it waits until it is done, passed through by
    every shared holder (created on first use)."""
    return lock_dir() / f"gpu{physical_index(gpu_index)}.gate"


@contextmanager
def gpu_lock(gpu_index: int, *, shared: bool = False) -> Iterator[None]:
    """Hold the lock of CUDA device ``gpu_index`` for the block, across processes and threads:
    alone (default; timing, profiling), or ``shared`` with other shared holders (verification,
    sanitizers). Waits as long as a conflicting holder has it.

    Raises:
        LockDirError: the private lock folder is unusable (see :func:`lock_dir`).
        VisibleDevicesError: ``CUDA_VISIBLE_DEVICES`` cannot say which device it is.
    """
    # Lock objects per hold: filelock's singleton per path is one SQLite connection, which
    # cannot hold two modes, or wait in two threads, at once; a FileLock of its own is a file
    # description of its own, so two threads of one process exclude each other at the gate.
    # fallback_to_soft=False: a soft lock (a file's existence) would outlive a killed holder.
    gate = FileLock(gpu_gate_path(gpu_index), mode=0o600, fallback_to_soft=False)
    lock = ReadWriteLock(gpu_lock_path(gpu_index), is_singleton=False)
    try:
        if shared:
            with gate:
                pass
            with lock.read_lock():
                yield
        else:
            with gate, lock.write_lock():
                yield
    finally:
        lock.close()
