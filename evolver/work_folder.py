"""A job's work folder belongs to one job of one database: named by both, marked, never shared.

Job ids restart at 1 in every database. Work folders used to be ``$KERNEVO_WORK_DIR/job-<id>/``,
so two databases with one work folder ran their job 1 in one folder: a new job took the other's
``initial_program.cu`` as its seed, and a resume called the other's checkpoints broken and
deleted them. Now:

- The folder is ``job-<id>-<k>/``, ``k`` the first :data:`KEY_DIGITS` hex digits of the job row's
  ``work_key`` (a random UUID drawn with the row, ``db.models.new_work_key``), so two jobs of
  equal ids in two databases get two folders.
- ``job.json`` in it (:data:`MARKER_NAME`) holds the job id, the whole key, the path, dtype and
  shape bucket and the database it was made for (password hidden). It is written when the job
  first takes the folder, and checked by every start and resume before anything in the folder is
  touched: a folder marked for another job, or one holding files but no marker, is refused in
  one line (:class:`WorkFolderError`), left as it is.
- A folder of the old name ``job-<id>/`` (a job created before migration ``3c8e5b1d9a27``) is
  taken over by that job's resume only when it is provably the job's: no marker of another job,
  at least one checkpoint program, every checkpoint program's id (OpenEvolve's UUIDs) recorded
  for this job in this database, and an ``initial_program.cu`` (if any) that is one of its
  recorded sources. It is then marked and renamed to the new name, under the job's lock.
  Otherwise it is left untouched (it may be another database's job) and the resume starts in
  the new folder, from the seed, with a line saying so; the job's recorded programs stay.

A copy of a database file copies its jobs' keys: a job resumed from both copies is one job to
the work folder (its lock keeps the two runs apart, but each copy's checkpoints are the other's
"not recorded" ones). Resume a job from one copy only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evolver.checkpoints import JobLock
from evolver.errors import WorkDirError

MARKER_NAME = "job.json"
MARKER_FORMAT = "kernevo.work-folder.v1"
# Hex digits of the work key in the folder's name: 48 random bits tell folders of equal job ids
# apart; the marker holds the whole key, so even a clash of these digits is refused, not shared.
KEY_DIGITS = 12
LOCK_NAME = "job.lock"

Write = Callable[[str], None]


class WorkFolderError(WorkDirError):
    """The job's work folder belongs to another job (its marker says so), or holds files without a
    marker: it is left as it is and the job does not run. One line, naming the folder and what to
    do."""


@dataclass(frozen=True)
class FolderOwner:
    """The job a work folder is for, as its marker ``job.json`` records it.

    ``work_key`` is the job row's 32-hex-digit key; ``database`` the database URL with any
    password hidden (a SQLite file as an absolute path), for people reading the marker.
    """

    job_id: int
    work_key: str
    path: str
    dtype: str
    shape_bucket: str
    database: str


def folder_name(job_id: int, work_key: str) -> str:
    """The name of a job's work folder: ``job-<id>-<first 12 hex digits of its work key>``."""
    return f"job-{job_id}-{work_key[:KEY_DIGITS]}"


def work_folder(work_root: Path, job_id: int, work_key: str) -> Path:
    """The absolute work folder of job ``job_id`` with ``work_key`` under ``work_root``
    (``KERNEVO_WORK_DIR``); nothing is created."""
    return work_root.expanduser().resolve() / folder_name(job_id, work_key)


def legacy_folder(work_root: Path, job_id: int) -> Path:
    """The folder a job had before work keys: ``job-<id>`` under ``work_root``, shared by every
    database's job of that id."""
    return work_root.expanduser().resolve() / f"job-{job_id}"


def database_label(url: Any) -> str:
    """``url`` (a SQLAlchemy ``URL`` or text) for the marker: password hidden, a SQLite file as an
    absolute path (``sqlite:///./kernevo.db`` says nothing once the working folder changed)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return "?"
    name = parsed.database
    is_file = parsed.get_backend_name() == "sqlite" and name not in (None, "", ":memory:")
    if is_file and name is not None and not name.startswith("file:"):
        parsed = parsed.set(database=str(Path(name).expanduser().resolve()))
    return parsed.render_as_string(hide_password=True)


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of ``folder`` as a mapping; ``None`` when the folder has none.

    Raises:
        WorkFolderError: the marker exists but cannot be read or is not a kernevo marker.
    """
    marker = folder / MARKER_NAME
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise WorkFolderError(
            f"work folder {folder}: {MARKER_NAME} cannot be read ({error}): left as it is; "
            "move the folder away if it is no job's"
        ) from None
    if not isinstance(data, dict) or data.get("format") != MARKER_FORMAT:
        raise WorkFolderError(
            f"work folder {folder}: {MARKER_NAME} is not a kernevo work-folder marker: left as it "
            "is; move the folder away if it is no job's"
        )
    return data


def _marks(marker: dict[str, Any], owner: FolderOwner) -> bool:
    return marker.get("work_key") == owner.work_key and marker.get("job_id") == owner.job_id


def _foreign_line(folder: Path, marker: dict[str, Any], owner: FolderOwner) -> str:
    """One line: ``folder`` is marked for another job than ``owner``, left as it is."""
    key = str(marker.get("work_key", "?"))[:KEY_DIGITS]
    return (
        f"job {owner.job_id}: work folder {folder} belongs to job {marker.get('job_id', '?')} "
        f"of database {marker.get('database', '?')} (work key {key}), not to this job (work "
        f"key {owner.work_key[:KEY_DIGITS]}): left as it is; move it away to run job "
        f"{owner.job_id}"
    )


def _write_marker(folder: Path, owner: FolderOwner) -> None:
    """Write ``folder``'s marker for ``owner`` (a temporary file renamed over the name: a kill
    leaves the old marker or the new one, never half of one)."""
    data = {"format": MARKER_FORMAT, **asdict(owner)}
    temporary = folder / f"{MARKER_NAME}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, folder / MARKER_NAME)


def _unmarked_files(folder: Path) -> list[str]:
    """Names in ``folder`` besides its lock and marker (and a marker being written)."""
    if not folder.is_dir():
        return []
    return sorted(
        entry.name
        for entry in folder.iterdir()
        if entry.name != LOCK_NAME and not entry.name.startswith(MARKER_NAME)
    )


def _check_folder(folder: Path, owner: FolderOwner) -> dict[str, Any] | None:
    """Refuse ``folder`` unless it is missing, ``owner``'s, or unmarked and empty; returns its
    marker (``None``: none yet).

    Raises:
        WorkFolderError: marked for another job, or files without a marker.
    """
    if not folder.is_dir():
        return None  # missing (made by the lock), or a file: the lock's error names it
    marker = read_marker(folder)
    if marker is None:
        files = _unmarked_files(folder)
        if files:
            more = f" and {len(files) - 1} more" if len(files) > 1 else ""
            raise WorkFolderError(
                f"job {owner.job_id}: work folder {folder} holds files ({files[0]}{more}) but "
                f"no {MARKER_NAME}, so it is not provably this job's: left as it is; move it "
                f"away to run job {owner.job_id}"
            )
        return None
    if not _marks(marker, owner):
        raise WorkFolderError(_foreign_line(folder, marker, owner))
    return marker


def _checkpoint_programs(folder: Path) -> Iterator[Path]:
    """Every program file of every checkpoint folder (complete or torn) in a work folder."""
    yield from (folder / "openevolve" / "checkpoints").glob("checkpoint_*/programs/*.json")


def legacy_ownership(
    folder: Path, owner: FolderOwner, recorded: Collection[str], sources: Collection[str]
) -> str | None:
    """Why the old-named ``folder`` is not provably ``owner``'s; ``None`` when it is.

    ``recorded``: the program ids (OpenEvolve UUIDs) the job recorded in its database;
    ``sources``: the sha256 of their sources. Provably the job's: no marker of another job
    (a marker of this job: a take-over a kill interrupted), at least one checkpoint program,
    every checkpoint program recorded for the job, and ``initial_program.cu``, if present, one
    of the job's recorded sources.

    Raises:
        WorkFolderError: the marker cannot be read.
    """
    marker = read_marker(folder)
    if marker is not None:
        return None if _marks(marker, owner) else "it is marked for another job"
    count = 0
    for program in _checkpoint_programs(folder):
        count += 1
        if program.stem not in recorded:
            return f"it holds checkpoints of another job (program {program.stem} is not this job's)"
    if count == 0:
        return "it holds no checkpoint to resume from"
    initial = folder / "initial_program.cu"
    if initial.is_file():
        digest = hashlib.sha256(initial.read_bytes()).hexdigest()
        if digest not in sources:
            return "its initial_program.cu is no program of this job"
    return None


def _take_over_legacy(
    legacy: Path,
    target: Path,
    owner: FolderOwner,
    recorded: Callable[[], tuple[Collection[str], Collection[str]]],
    write: Write,
) -> JobLock | None:
    """Take over the old-named ``legacy`` folder when it is provably ``owner``'s: lock it, mark
    it and rename it to ``target``; returns the held lock. ``None`` (the folder untouched, a line
    written) when it is not.

    Raises:
        JobBusyError: a process holds its lock (this job run by an older kernevo).
        OSError: it cannot be locked, marked or renamed.
    """
    uids, sources = recorded()
    why = legacy_ownership(legacy, owner, uids, sources)
    if why is not None:  # looked at, read-only: never locked, written or moved
        write(
            f"job {owner.job_id} | work folder {legacy} (named before work folders carried "
            f"their job's key) is not taken: {why}; left as it is; this job runs in {target}"
        )
        return None
    lock = JobLock(legacy, owner.job_id)
    lock.__enter__()
    try:
        uids, sources = recorded()  # again under the lock: nothing can change it meanwhile
        why = legacy_ownership(legacy, owner, uids, sources)
        if why is not None:
            raise WorkFolderError(
                f"job {owner.job_id}: work folder {legacy} changed while it was taken over "
                f"({why}): left as it is; resume again"
            )
        _write_marker(legacy, owner)
        os.rename(legacy, target)  # the lock is held on the file, which moves with the folder
        lock.path = target / LOCK_NAME
    except BaseException:
        lock.__exit__(None, None, None)
        raise
    write(
        f"job {owner.job_id} | work folder {legacy} (named before work folders carried their "
        f"job's key) holds this job's checkpoints: moved to {target}"
    )
    return lock


@contextmanager
def holding_work_folder(
    work_root: Path,
    owner: FolderOwner,
    *,
    recorded: Callable[[], tuple[Collection[str], Collection[str]]] | None = None,
    write: Write = print,
) -> Iterator[Path]:
    """Hold the job's work folder while the job runs: refuse one that is another job's, take
    over the job's old-named folder on a resume, create, lock (:class:`JobLock`) and mark it.

    ``recorded`` (a resume): returns the job's recorded program ids and source sha256s, asked
    only when an old-named ``job-<id>`` folder exists and the new one does not; ``None`` (a new
    job) never takes an old folder over.

    Yields:
        The folder (absolute), locked and marked for ``owner``.

    Raises:
        WorkFolderError: the folder belongs to another job, or holds files without a marker;
            nothing in it was changed.
        JobBusyError: another process holds the job's lock.
        OSError: the folder cannot be created, locked, marked (or an old one renamed).
    """
    target = work_folder(work_root, owner.job_id, owner.work_key)
    legacy = legacy_folder(work_root, owner.job_id)
    lock: JobLock | None = None
    if recorded is not None and not target.exists() and legacy.is_dir():
        lock = _take_over_legacy(legacy, target, owner, recorded, write)
    if lock is None:
        _check_folder(target, owner)  # before the lock: it writes job.lock into the folder
        lock = JobLock(target, owner.job_id)
        lock.__enter__()
    try:
        if _check_folder(target, owner) is None:  # again under the lock; then mark it
            _write_marker(target, owner)
        yield target
    finally:
        lock.__exit__(None, None, None)
