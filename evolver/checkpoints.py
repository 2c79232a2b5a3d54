"""Checkpoints of a job: which one a resume starts from (every program in it checked first),
keeping only the newest few, and making sure one process runs a job at a time.

OpenEvolve writes a checkpoint as ``checkpoints/checkpoint_<iteration>/``: one JSON file per
program in ``programs/``, then ``metadata.json`` (islands, archive, last iteration), then the best
program. Each holds the whole population with its prompts, so a checkpoint grows with the job
(about 13 MB at 200 programs) and keeping all of them cost 256 MB for a 200-iteration job.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from evolver.errors import JobBusyError

# Checkpoints kept by default: the newest, and two to fall back to if it turns out broken.
DEFAULT_KEEP = 3
_FOLDER = re.compile(r"checkpoint_(\d+)")

CheckName = Literal[
    "metadata", "program_file", "program_id", "metrics", "missing_program", "not_recorded",
    "source_sha256",
]  # fmt: skip


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


def _folders(output_dir: Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint_<n>`` folder, complete or torn, with the ``n`` of its name."""
    found = []
    for folder in (output_dir / "checkpoints").glob("checkpoint_*"):
        match = _FOLDER.fullmatch(folder.name)
        if match and folder.is_dir():
            found.append((int(match.group(1)), folder))
    return found


def complete_checkpoints(output_dir: Path) -> list[Checkpoint]:
    """The complete checkpoints under ``output_dir/checkpoints``, newest first.

    OpenEvolve writes every program file first and ``metadata.json`` last, so a checkpoint
    whose metadata parses is complete; one torn by a kill mid-write is left out.
    """
    found: list[Checkpoint] = []
    for _, folder in _folders(output_dir):
        try:
            meta = json.loads((folder / "metadata.json").read_text())
            found.append(Checkpoint(folder, int(meta["last_iteration"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(found, key=lambda c: c.iteration, reverse=True)


def latest_checkpoint(output_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint under ``output_dir/checkpoints``, or ``None`` (not
    validated: :func:`choose_resume_point` checks its programs)."""
    found = complete_checkpoints(output_dir)
    return found[0] if found else None


@dataclass(frozen=True)
class CheckpointFailure:
    """Why a checkpoint cannot be resumed from: the check that failed, the program (OpenEvolve
    id) it failed on, and what was found."""

    check: CheckName
    program: str | None
    detail: str

    def describe(self) -> str:
        """One line: ``check (program …): detail``."""
        where = f" (program {self.program})" if self.program else ""
        return f"{self.check}{where}: {self.detail}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_program(file: Path, recorded: Mapping[str, str]) -> CheckpointFailure | None:
    """One program file: parses, names itself, numeric metrics, recorded with this source."""
    stem = file.stem
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return CheckpointFailure("program_file", stem, f"does not parse: {error}")
    if not isinstance(data, dict) or not isinstance(data.get("code"), str):
        return CheckpointFailure("program_file", stem, "not a program (no source code)")
    if data.get("id") != stem:
        return CheckpointFailure("program_id", stem, f"file holds program {data.get('id')!r}")
    metrics = data.get("metrics")
    if not isinstance(metrics, dict):
        return CheckpointFailure("metrics", stem, "no metrics mapping")
    bad = sorted(k for k, v in metrics.items() if not _is_number(v))
    if bad:
        return CheckpointFailure("metrics", stem, f"not a finite number: {', '.join(bad)}")
    if stem not in recorded:
        return CheckpointFailure("not_recorded", stem, "not in the lineage store")
    digest = hashlib.sha256(data["code"].encode("utf-8")).hexdigest()
    if digest != recorded[stem]:
        return CheckpointFailure(
            "source_sha256",
            stem,
            f"source sha256 {digest[:12]}… differs from the recorded {recorded[stem][:12]}…",
        )
    return None


def validate_checkpoint(
    checkpoint: Checkpoint, recorded: Mapping[str, str]
) -> CheckpointFailure | None:
    """Check every program of ``checkpoint`` before a resume loads it; ``None`` when sound.

    ``recorded`` maps the job's recorded program uids (OpenEvolve ids) to the sha256 of their
    source, from the lineage store. A sound checkpoint has a metadata file whose islands and
    archive name only programs with a file, and every program file parses, is named after its
    id, has finite numeric metrics, and is recorded with the same source. OpenEvolve itself
    skips a program file that does not parse with a warning: the program would be lost.
    """
    try:
        meta = json.loads((checkpoint.path / "metadata.json").read_text())
        named = {str(uid) for island in meta.get("islands", []) for uid in island}
        named |= {str(uid) for uid in meta.get("archive", [])}
    except (OSError, ValueError, TypeError, AttributeError) as error:
        return CheckpointFailure("metadata", None, f"metadata.json unreadable: {error}")
    files = sorted((checkpoint.path / "programs").glob("*.json"))
    for file in files:
        if failure := _check_program(file, recorded):
            return failure
    missing = sorted(named - {file.stem for file in files})
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return CheckpointFailure("missing_program", missing[0], f"no program file{more}")
    return None


@dataclass(frozen=True)
class ResumePoint:
    """Where a resume starts: the newest sound checkpoint (``None``: from the seed), the newer
    ones rejected and why (newest first), and the folders removed (rejected and torn ones
    newer than the start, which OpenEvolve would otherwise write into again)."""

    checkpoint: Checkpoint | None
    rejected: tuple[tuple[str, CheckpointFailure], ...]
    removed: tuple[str, ...]


def choose_resume_point(output_dir: Path, recorded: Mapping[str, str]) -> ResumePoint:
    """The newest checkpoint that passes :func:`validate_checkpoint`, falling back to older ones;
    every ``checkpoint_<n>`` folder newer than it is deleted (the iterations it held run again).
    """
    rejected: list[tuple[str, CheckpointFailure]] = []
    chosen: Checkpoint | None = None
    for checkpoint in complete_checkpoints(output_dir):
        failure = validate_checkpoint(checkpoint, recorded)
        if failure is None:
            chosen = checkpoint
            break
        rejected.append((checkpoint.path.name, failure))
    start = chosen.iteration if chosen else -1
    removed = []
    for number, folder in sorted(_folders(output_dir)):
        if number > start:
            shutil.rmtree(folder)
            removed.append(folder.name)
    return ResumePoint(chosen, tuple(rejected), tuple(removed))


def prune_checkpoints(output_dir: Path, keep: int = DEFAULT_KEEP) -> list[Path]:
    """Delete every checkpoint folder (complete or torn) older than the newest ``keep`` complete
    ones; returns the folders deleted. Call it once a new checkpoint is complete. A folder that
    cannot be deleted is left (disk use is not worth failing the job over).

    Raises:
        ValueError: ``keep`` < 1.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    kept = complete_checkpoints(output_dir)[:keep]
    if len(kept) < keep:
        return []
    oldest = kept[-1].iteration
    removed = []
    for number, folder in sorted(_folders(output_dir)):
        if number < oldest:
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    return removed


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
            raise JobBusyError(
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
