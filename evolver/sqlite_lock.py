"""One ``kernevo worker`` per SQLite database *file*, whatever name the file is reached by.

The worker's lock was a file named after the database path as written (``<path>.worker.lock``),
so a second worker given a symbolic link or a hard link to the same database took a lock of
its own (the tester's bypass). Two locks now, both held while the worker runs and dropped by
the kernel when it dies:

- ``<real path>.worker.lock`` (``flock``), beside the file that ``os.path.realpath`` resolves
  every symbolic link to; it holds the worker's pid, which the refusal quotes;
- an open-file-description lock (Linux ``F_OFD_SETLK``) on one byte of the database file
  itself, at :data:`LOCK_OFFSET`. It belongs to the file's inode (``st_dev``, ``st_ino``), so
  any name of the file (a hard link in another folder, another user's link) meets it.
  SQLite's own locks are POSIX locks on bytes ``[2**30, 2**30 + 512)`` (its ``PENDING_BYTE``
  and shared range) and never touch that byte; unlike a POSIX lock, an OFD lock is not dropped
  when SQLite closes another descriptor of the file in this process, and unlike ``flock`` it
  is a byte-range lock on NFS too, where ``flock`` on the whole file would block SQLite.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from evolver.errors import WorkerError

# One byte far past SQLite's lock bytes (2**30 .. 2**30 + 511, sqlite3.c's PENDING_BYTE and
# SHARED_FIRST/SHARED_SIZE): a lock there never meets SQLite's. Locks may lie past the end of
# a file.
LOCK_OFFSET = 1 << 40
# ``struct flock`` (fcntl(2)): l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t,
# 0 for OFD locks), padded to its native size (32 bytes on x86-64 and aarch64).
_FLOCK = "@hhqqi4x"


def _busy(shown: str, holder: str, hint: str) -> WorkerError:
    return WorkerError(
        f"another kernevo worker ({holder}) already serves the SQLite database {shown}: "
        f"concurrent workers need PostgreSQL ({hint})"
    )


def _pid_lock(real: Path, shown: str, hint: str) -> IO[str]:
    """The ``flock`` on ``<real>.worker.lock``, the worker's pid written in it.

    Raises:
        WorkerError: another worker holds it (its pid quoted).
    """
    fh: IO[str] = open(f"{real}.worker.lock", "a+")  # noqa: SIM115 - held by the caller
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise _busy(shown, f"pid {holder}", hint) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def _inode_lock(real: Path, shown: str, hint: str) -> int:
    """A descriptor of the database file holding the OFD write lock on :data:`LOCK_OFFSET`
    (the file is created empty when missing: SQLite takes an empty file for a new database).

    Raises:
        WorkerError: another worker holds it, through another name of the file.
        OSError: the file cannot be opened for writing.
    """
    fd = os.open(real, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    request = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, LOCK_OFFSET, 1, 0)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
    except OSError as error:
        os.close(fd)
        if error.errno in (errno.EAGAIN, errno.EACCES):  # held by another file description
            st = os.stat(real)
            raise _busy(
                shown,
                f"through another name of the file {real}, device {st.st_dev} inode {st.st_ino}",
                hint,
            ) from None
        raise
    return fd


@contextmanager
def hold_sqlite_file(database: str, shown: str, hint: str) -> Iterator[Path]:
    """Hold both locks of the SQLite file ``database`` (a path, ``~`` expanded; its folder is
    created when missing) for the block; yields the real path. ``shown`` names the database
    in messages, ``hint`` says how to use PostgreSQL instead.

    Raises:
        WorkerError: another worker holds the file, under this name or any other.
        OSError: the folder or the file cannot be created or opened for writing.
    """
    real = Path(os.path.realpath(Path(database).expanduser()))
    real.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as held:
        held.callback(_pid_lock(real, shown, hint).close)  # closing drops the lock
        held.callback(os.close, _inode_lock(real, shown, hint))
        yield real
