"""Memcheck before a candidate becomes the job's best (issue 6).

The pipeline's integrity checks compare bytes: a kernel that writes past B and puts back what it
read there leaves every guard band as it was, so no content check can see the write. Only
compute-sanitizer's memcheck does (it watches addresses, not contents). Run on the champion
alone, it came too late: the lineage had kept the candidate as its best, a parent to mutate, for
the whole job. So a candidate that passed and would become the job's best runs memcheck first
(:func:`gate_new_best`): on a small ragged shape and on the largest timed shape, in
``evaluator.run_once`` (CuPy's pool off, A and B allocated at exactly m·m and m·n elements).
A finding fails the report (status ``wrong``, check ``sanitizer_memcheck``, score 0, so
OpenEvolve never keeps it as its best) and leaves the job's best as it was.

"The job's best" is one record for every evaluating process of the job (OpenEvolve evaluates in
several worker processes, each with its own Evaluator): :class:`JobBest`, a small JSON file in
``KERNEVO_REPORT_DIR`` read, compared and updated under a file lock. Without a report folder
(``evaluate`` called outside ``kernevo evolve``) the record is per process, so each process
memchecks its own new bests: more runs, never fewer. A record written by an earlier run of the
job (another ``KERNEVO_JOB_PID``: the job was resumed from a checkpoint that may not hold that
best) counts as no record, so the resumed run memchecks its new bests again.

Without compute-sanitizer on the machine the candidate keeps its score and becomes the best, and
its report says ``memcheck not run: compute-sanitizer not found``: refusing every candidate would
stop evolution on a machine without the CUDA toolkit, and promotion still refuses a champion that
compute-sanitizer has not passed (``evaluator.champion``: ``sanitizer_missing``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from evaluator.report import CheckFailure, EvaluationReport
from evaluator.tools import find_tool, run_sanitizer
from seeds.spec import PathSpec

RECORD_NAME = "job-best.json"
RECORD_FORMAT = "kernevo.job-best.v1"
JOB_PID_VARIABLE = "KERNEVO_JOB_PID"
# Seconds one memcheck run may take: a Python start, CuPy's import and one solve under the
# sanitizer, which slows kernels by 10-100x; a few seconds expected.
MEMCHECK_TIMEOUT_S = 90.0
NO_SANITIZER_NOTE = "memcheck not run: compute-sanitizer not found"


def memcheck_shapes(spec: PathSpec) -> list[tuple[int, ...]]:
    """The shapes memcheck runs on: the path's ``sanitizer_shape`` (ragged, (33, 31) for
    trsm_small) and its largest timed shape (by the product of its values: trsm's m·n), each
    once."""
    ragged = tuple(spec.sanitizer_shape)
    largest = tuple(max(spec.timed_shapes, key=math.prod))
    return [ragged] if largest == ragged else [ragged, largest]


class JobBest:
    """The best ``combined_score`` a passing candidate of this job reached (after memcheck).

    Shared by every process of the job through ``<folder>/job-best.json``
    (``{"format", "job_pid", "combined_score"}``), read and written under
    ``<folder>/job-best.json.lock`` (a kernel ``flock``: released if its holder dies), replaced
    atomically (``os.replace``), so a reader never sees half a record. ``folder`` ``None``: a
    record in this object only. A record that cannot be read, or of another run of the job
    (``job_pid`` differs from ``KERNEVO_JOB_PID``), counts as no best (0.0): memcheck then runs
    once more than needed, never once less.
    """

    def __init__(self, folder: Path | None, job_pid: str | None = None) -> None:
        self._path = folder / RECORD_NAME if folder is not None else None
        self._job_pid = job_pid
        self._local = 0.0

    @classmethod
    def from_environment(cls) -> JobBest:
        """The record of the job named by ``KERNEVO_REPORT_DIR`` and ``KERNEVO_JOB_PID``
        (per process when no report folder is set)."""
        folder = os.environ.get("KERNEVO_REPORT_DIR")
        return cls(Path(folder) if folder else None, os.environ.get(JOB_PID_VARIABLE))

    def score(self) -> float:
        """The best score recorded so far (0.0: none)."""
        if self._path is None:
            return self._local
        with self._lock():
            return self._read()

    def beats(self, score: float) -> bool:
        """Whether ``score`` is strictly above the best recorded (an equal score does not make
        a new best: OpenEvolve keeps the program it already has)."""
        return score > self.score()

    def record(self, score: float) -> bool:
        """Make ``score`` the best if it is still strictly above the recorded one (read,
        compared and written under the lock: another process may have recorded a better one
        while this one ran memcheck). Returns whether it did.

        Raises:
            OSError: the record cannot be written.
        """
        if self._path is None:
            if score <= self._local:
                return False
            self._local = score
            return True
        with self._lock():
            if score <= self._read():
                return False
            document = {
                "format": RECORD_FORMAT,
                "job_pid": self._job_pid,
                "combined_score": score,
            }
            tmp = self._path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(document))
            os.replace(tmp, self._path)
            return True

    def _lock(self) -> FileLock:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        # fallback_to_soft=False: a soft lock (a file's existence) would outlive a killed holder.
        return FileLock(f"{self._path}.lock", mode=0o600, fallback_to_soft=False)

    def _read(self) -> float:
        assert self._path is not None
        try:
            document = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return 0.0
        if (
            not isinstance(document, dict)
            or document.get("format") != RECORD_FORMAT
            or document.get("job_pid") != self._job_pid
        ):
            return 0.0
        score = document.get("combined_score")
        return float(score) if isinstance(score, int | float) else 0.0


@dataclass(frozen=True)
class MemcheckOutcome:
    """One memcheck of a candidate: ``failure`` the first finding (check ``sanitizer_memcheck``,
    with the shape) or ``None``; ``ran`` False when compute-sanitizer is missing; ``shapes``
    the shapes it ran clean on."""

    failure: CheckFailure | None
    ran: bool
    shapes: tuple[tuple[int, ...], ...] = ()
    # The clean shapes in the op's own terms (``PathSpec.shape_text``: "m=33 n=31", "n=64 k=6
    # b2=4 b3=2"), comma-separated, for the report's note.
    clean_at: str = ""


def memcheck(
    cubin: bytes, spec: PathSpec, dtype: str, gpu_index: int, sanitizer: str | None = None
) -> MemcheckOutcome:
    """compute-sanitizer memcheck of ``cubin`` at :func:`memcheck_shapes`, one process per
    shape (so a finding names its shape), stopping at the first finding. ``sanitizer``: the
    executable (default: :func:`evaluator.tools.find_tool`)."""
    sanitizer = sanitizer or find_tool("compute-sanitizer")
    if sanitizer is None:
        return MemcheckOutcome(None, ran=False)
    clean: list[tuple[int, ...]] = []
    for shape in memcheck_shapes(spec):
        failure = run_sanitizer(
            sanitizer, "memcheck", cubin, spec.path_id, dtype, shape, gpu_index,
            MEMCHECK_TIMEOUT_S,
        )  # fmt: skip
        if failure is not None:
            return MemcheckOutcome(failure, ran=True, shapes=tuple(clean))
        clean.append(shape)
    clean_at = ", ".join(spec.shape_text(shape) for shape in clean)
    return MemcheckOutcome(None, ran=True, shapes=tuple(clean), clean_at=clean_at)


def gate_new_best(
    report: EvaluationReport, best: JobBest, run_memcheck: Callable[[], MemcheckOutcome]
) -> bool:
    """Let ``report`` become the job's best only after memcheck; returns whether it did.

    Nothing happens unless the report passed and its ``combined_score`` is strictly above the
    job's best. Then ``run_memcheck`` runs (its wall time goes to
    ``report.phase_seconds["memcheck"]`` when compute-sanitizer ran, so that phase says memcheck
    ran): a finding fails the report (``wrong``, score 0) and
    the best stays; a clean run (or none, without compute-sanitizer: noted in the report)
    records the score as the job's best, unless another process recorded a better one since.
    """
    if not report.passed or not best.beats(report.combined_score):
        return False
    t0 = time.perf_counter()
    outcome = run_memcheck()
    if outcome.ran:
        report.phase_seconds["memcheck"] = time.perf_counter() - t0
    if outcome.failure is not None:
        report.fail("wrong", outcome.failure)
        return False
    if outcome.ran:
        where = outcome.clean_at or ", ".join(str(shape) for shape in outcome.shapes)
        report.notes.append(f"memcheck before becoming the job's best: clean at {where}")
    else:
        report.notes.append(NO_SANITIZER_NOTE)
    return best.record(report.combined_score)
