"""Progress of a running job: one terminal line per iteration, the job row's heartbeat, and the
cancellation check (a ``PATCH /v1/jobs/{id}`` to ``cancelled`` stops the job gracefully).

The terminal is a convenience, never a condition of the job: when stdout goes away (``kernevo
evolve … | head -1``, a closed terminal) the lines stop and the job runs on
(:class:`ConsoleWriter`); the job row keeps the progress.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from sqlalchemy import Engine

from evolver.lineage import COMPILED_STATUS, Recorded

if TYPE_CHECKING:
    from seeds.spec import PathSpec

# Seconds between heartbeats while an iteration runs (an evaluation can take minutes). A running
# job whose heartbeat is 3 intervals old shows as stale (db.heartbeat.STALE_AFTER_S).
HEARTBEAT_INTERVAL_S = 30.0


def speedup_text(speedup: float | None, at: str) -> str:
    """How the progress and summary lines show a job's best speedup over the vendor library:
    ``speedup 1.52x at m=64 n=64`` (``at``: the shape it was timed at, the bucket's largest
    timed shape, as the ``speedup_64`` metric is; :func:`largest_timed_shape`), or ``speedup
    n/a`` while no program was timed (compile-only jobs, nothing passed yet): a ``0.00x`` at
    64×64 read as a measured slowdown at a shape the path may not even serve."""
    if not speedup or speedup <= 0:
        return "speedup n/a"
    where = f" at {at}" if at else ""
    return f"speedup {speedup:.2f}x{where}"


def largest_timed_shape(spec: PathSpec) -> str:
    """The shape of ``spec``'s (a path at one bucket) largest timed problem, in its op's
    parameters (``m=129 n=8192`` for trsm_blocked's m128_2048): where the ``speedup_64`` metric
    is measured (``EvaluationReport.speedup_at_largest``: the largest by product)."""
    from seeds.ops import get_op

    largest = max(spec.timed_shapes, key=math.prod)
    return get_op(spec.op).assignments(list(largest))


class ConsoleWriter:
    """Writes progress lines to ``stream`` (stdout by default) until it fails, then drops them.

    A reader that went away (a closed pipe: ``BrokenPipeError``; a hung-up terminal: ``EIO``) or
    a full disk under a redirect must not fail the job. On the first failure the stream's file
    descriptor is pointed at ``/dev/null``, so later writes elsewhere in the process and the
    interpreter's last flush (which would otherwise print "Exception ignored … BrokenPipeError"
    and exit 120) succeed silently. ``closed`` says whether that happened.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self.closed = False

    def __call__(self, line: str) -> None:
        if self.closed:
            return
        stream = self._stream or sys.stdout
        try:
            print(line, file=stream, flush=True)
        except OSError:
            self.closed = True
            self._silence(stream)

    @staticmethod
    def _silence(stream: TextIO) -> None:
        try:
            fd = stream.fileno()
        except (OSError, ValueError):  # not backed by a descriptor (a test's StringIO)
            return
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


@dataclass
class Best:
    """The best program recorded so far (combined score and speedup at the largest shape)."""

    uid: str
    source: str
    score: float
    speedup: float
    iteration: int


class ProgressReporter:
    """Listens to the lineage recorder: prints progress, writes it to the job row, notices a
    cancellation and asks for champion promotions when the best improves.

    ``promote`` is called with the new best at most once every ``promote_every`` iterations;
    ``stop`` asks OpenEvolve to finish the iteration in flight and return.
    """

    def __init__(
        self,
        engine: Engine,
        job_id: int,
        total_iterations: int,
        *,
        write: Callable[[str], None],
        stop: Callable[[], None],
        promote: Callable[[Best], None] | None = None,
        promote_every: int = 10,
        best_score: float | None = None,
        best_speedup: float | None = None,
        speedup_at: str = "",
    ) -> None:
        self.engine = engine
        self.speedup_at = speedup_at  # where the speedup is timed (largest_timed_shape)
        self.job_id = job_id
        self.total_iterations = total_iterations
        self._write = write
        self._stop = stop
        self._promote = promote
        self._promote_every = promote_every
        self.iteration = 0
        self.best: Best | None = None
        self.best_score = best_score or 0.0
        self.best_speedup = best_speedup or 0.0
        self.last_failure: str | None = None
        self.last_failure_iteration = 0
        self.cancelled = False
        self.recorded = 0
        self._promoted_uid: str | None = None
        self._promoted_at = -promote_every
        self._lock = threading.Lock()

    def __call__(self, rec: Recorded) -> None:
        with self._lock:
            self.iteration = max(self.iteration, rec.iteration)
            if rec.new and rec.kind != "lost":
                self.recorded += 1
            if rec.error_kind:
                self.last_failure = rec.error_kind
                self.last_failure_iteration = rec.iteration
            improved = (
                rec.error_kind is None
                and rec.kind in ("seed", "child")
                and rec.source is not None
                and rec.uid is not None
                and rec.score > self.best_score
            )
            if improved:
                assert rec.uid is not None and rec.source is not None
                self.best = Best(rec.uid, rec.source, rec.score, rec.speedup, rec.iteration)
                self.best_score, self.best_speedup = rec.score, rec.speedup
        self.heartbeat(write_progress=True)
        if rec.kind != "migrant":
            self._write(self.line(rec))
        if (
            self._promote is not None
            and self.best is not None
            and self.best.uid != self._promoted_uid
            and self.iteration - self._promoted_at >= self._promote_every
        ):
            self.promote_now()

    def consider(self, uid: str, source: str, score: float, speedup: float) -> None:
        """Offer OpenEvolve's final best: taken when better than the best seen, or when none was
        seen in this process (a resumed job whose best was recorded before the resume)."""
        with self._lock:
            if self.best is None or score > self.best.score:
                self.best = Best(uid, source, score, speedup, self.iteration)
            if score > self.best_score:
                self.best_score, self.best_speedup = score, speedup

    def promote_now(self) -> None:
        """Promote the current best if it was not promoted already."""
        if self._promote is None or self.best is None or self.best.uid == self._promoted_uid:
            return
        self._promoted_uid = self.best.uid
        self._promoted_at = self.iteration
        self._promote(self.best)

    def line(self, rec: Recorded) -> str:
        """One terminal line: iteration, this outcome, best score and speedup, last failure."""
        outcome = {
            "seed": "seed",
            "child": "child",
            "migrant": "migrant",
            "failure": "no program",
            "lost": "lost",
        }[rec.kind]
        if rec.rerun:
            outcome += " (re-run)"
        result = f"score {rec.score:.3f}"
        if rec.status == COMPILED_STATUS and not rec.error_kind:
            result = "compiled"  # compile-only: nothing ran, so there is no score to show
        if rec.error_kind:
            # The check names which one refused (wrong (ill_conditioned)); a failure that is its
            # own check (diff_error, llm_error) is named once, not "diff_error (diff_error)".
            shown = rec.check and rec.check != rec.error_kind
            result = f"{rec.error_kind} ({rec.check})" if shown else rec.error_kind
        return (
            f"job {self.job_id} | iter {rec.iteration}/{self.total_iterations} | "
            f"{outcome}: {result} | best {self.best_score:.3f} "
            f"({speedup_text(self.best_speedup, self.speedup_at)}) | last failure: "
            f"{self._last_failure_text(rec.iteration)}"
        )

    def _last_failure_text(self, iteration: int) -> str:
        """The last failure's kind and when, from the line of ``iteration``:
        ``compile_error (iteration 3, 12 ago)``, ``… (this iteration)``; ``-`` before any. The
        kind alone read as the state of the job, though it may be hundreds of iterations old."""
        if self.last_failure is None:
            return "-"
        ago = iteration - self.last_failure_iteration
        when = "this iteration" if ago <= 0 else f"{ago} ago"
        return f"{self.last_failure} (iteration {self.last_failure_iteration}, {when})"

    def heartbeat(self, *, write_progress: bool) -> None:
        """Take the heartbeat (database clock), with progress when ``write_progress``; stop the
        job when its row says ``cancelled``."""
        from db import repository
        from db.session import session_scope

        with self._lock:
            fields = (
                {
                    "iteration": self.iteration,
                    "best_score": self.best_score,
                    "best_speedup": self.best_speedup,
                    "last_failure_kind": self.last_failure,
                }
                if write_progress
                else {}
            )
        with session_scope(self.engine) as s:
            job = repository.update_job_progress(s, self.job_id, **fields)
            state = job.state
        if state == "cancelled" and not self.cancelled:
            self.cancelled = True
            self._write(f"job {self.job_id} | cancelled: finishing the iteration in flight")
        if self.cancelled:
            self._stop()


class Heartbeat:
    """A daemon thread that beats every ``interval_s`` seconds while iterations are running
    (an evaluation can take minutes) and so also notices a cancellation between iterations."""

    def __init__(self, reporter: ProgressReporter, interval_s: float = HEARTBEAT_INTERVAL_S):
        self._reporter = reporter
        self._interval_s = interval_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kernevo-heartbeat", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=self._interval_s + 5)

    def _run(self) -> None:
        while not self._done.wait(self._interval_s):
            try:
                self._reporter.heartbeat(write_progress=False)
            except Exception as error:  # a database hiccup must not kill the job; keep trying
                self.error = error
