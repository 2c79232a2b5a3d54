"""Finding the checkpoint a job resumes from, and making sure one process runs a job at a time."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from evolver.errors import ResumeError


@dataclass(frozen=True)
class Checkpoint:
    """One complete OpenEvolve checkpoint: its folder and the last iteration it holds."""

    path: Path
    iteration: int

    def best_program(self) -> tuple[str, str, dict[str, float]] | None:
        """(program id, source, metrics) of the best program saved with the checkpoint, or
        ``None`` when the checkpoint holds none (or was torn after its metadata)."""
        try:
            info = json.loads((self.path / "best_program_info.json").read_text())
            source = next(self.path.glob("best_program.*")).read_text()
            return str(info["id"]), source, dict(info.get("metrics") or {})
        except (OSError, ValueError, KeyError, StopIteration):
            return None


def latest_checkpoint(output_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint under ``output_dir/checkpoints``, or ``None``.

    OpenEvolve writes every program file first and ``metadata.json`` last, so a checkpoint
    whose metadata parses is complete; one torn by a kill mid-write is skipped for the one
    before it.
    """
    found: list[Checkpoint] = []
    for folder in (output_dir / "checkpoints").glob("checkpoint_*"):
        try:
            meta = json.loads((folder / "metadata.json").read_text())
            found.append(Checkpoint(folder, int(meta["last_iteration"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return max(found, key=lambda c: c.iteration, default=None)


class JobLock:
    """An exclusive ``flock`` on the job's work folder, held while the job runs.

    The kernel drops it when the holder dies (SIGKILL included), so a resume after a crash
    takes it at once, and a resume while the job still runs is refused.
    """

    def __init__(self, work_dir: Path, job_id: int) -> None:
        self.path = work_dir / "job.lock"
        self.job_id = job_id
        self._fh: IO[str] | None = None

    def __enter__(self) -> JobLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - held for the job's lifetime
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise ResumeError(
                f"job {self.job_id} is running in another process (lock {self.path})"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
