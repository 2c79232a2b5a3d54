"""Files of the loader: read without waiting and within a bound, written atomically.

A FIFO in place of a file would block ``read_bytes()`` forever, a link to ``/dev/zero`` would
grow memory without end; the loader's disk cache, its key files and its lock file are all read
through :func:`read_regular_file`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kernevo.text import printable


def read_regular_file(path: Path, limit: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``limit`` bytes.

    Opened with ``O_NOFOLLOW`` (a symbolic link, e.g. to ``/dev/zero``, is refused rather than
    followed; ``follow_symlinks=True`` for files an operator configures, such as key files
    mounted through links, whose target is still checked below) and ``O_NONBLOCK`` (opening a
    FIFO does not wait for a writer); then ``fstat`` of the open file must say regular, so what
    is checked is what is read. At most ``limit + 1`` bytes are read, so a file that grows after
    the check is refused too.

    Raises:
        FileNotFoundError: there is no such file.
        OSError: a symbolic link (``ELOOP``), not a regular file, over ``limit`` bytes, or
            unreadable; the message says which.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags if follow_symlinks else flags | os.O_NOFOLLOW)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = stat.filemode(mode)
            raise OSError(f"{printable(str(path), 500)} is not a regular file ({kind})")
        data = bytearray()
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                return bytes(data)
            data += chunk
    finally:
        os.close(fd)
    raise OSError(f"{printable(str(path), 500)} is larger than {limit} bytes")


def write_atomically(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to a temporary file beside ``path``, then ``os.replace`` it into place,
    so a reader sees the old file or the new one, never a torn one. ``mode`` sets the file's
    permissions (default: ``mkstemp``'s 0600).

    Raises:
        OSError: the folder cannot be written.
    """
    # Imported here: the loader's warm start reads files only, and tempfile's imports (shutil,
    # random, bz2, lzma) were a tenth of its import time (RESULTS 24).
    import tempfile

    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
