"""Folders a command writes (the work folder, the key folder, the export folder): refused, one
line, when a file is in the way."""

from __future__ import annotations

from typing import Any


def _check_work_dir(work_dir: Any) -> None:
    """Refuse a work folder (``--work-dir``, else ``KERNEVO_WORK_DIR``) that is a file, or below
    one, before anything runs: one line saying so, where creating it would say only "File
    exists" or "Not a directory". Exit 1, as any work folder that cannot be made (the runner
    creates it and checks it is writable: ``evolver.errors.WorkDirError``).

    Raises:
        WorkDirError: the folder, or a folder above it, is a file.
    """
    from evolver.errors import WorkDirError

    problem = _file_in_the_way("work folder", work_dir, "--work-dir, else KERNEVO_WORK_DIR")
    if problem is not None:
        raise WorkDirError(problem)


def _file_in_the_way(what: str, folder: Any, where: str) -> str | None:
    """Why the folder ``folder`` (``what``: "work folder", "key folder"; ``where``: the
    options naming it) cannot be used because it, or a folder above it, is a file: one line,
    where creating it would say only "File exists" or "Not a directory". ``None`` when no file
    is in the way (whether the folder can be written is for its writer to find)."""
    from pathlib import Path

    from kernevo.text import printable

    root = Path(folder).expanduser().resolve()
    above = next((path for path in (root, *root.parents) if path.exists()), None)
    if above is None or above.is_dir():
        return None
    shown = printable(str(root), 300)
    if above == root:
        return f"{what} {shown} is a file, not a folder ({where})"
    return f"{what} {shown} cannot be created: {printable(str(above), 300)} is a file, not a folder"
