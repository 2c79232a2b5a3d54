"""The explicit states of jobs and evaluations, and which job state changes are allowed."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Life cycle of an evolution job: WAITING → RUNNING → COMPLETE / FAILED / CANCELLED."""

    WAITING = "waiting"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELLED = "cancelled"


class EvaluationState(StrEnum):
    """Outcome of one evaluation: scored (passed checks, timed), failed, or verified (passed the
    champion checks: held-out shapes, determinism, compute-sanitizer)."""

    SCORED = "scored"
    FAILED = "failed"
    VERIFIED = "verified"


# A job may stay in its state (progress updates, a repeated cancel). FAILED → RUNNING is a resume
# from checkpoint after a crash; RUNNING → WAITING and FAILED → WAITING return a queued job to
# the queue (db.queue: its worker died, or was stopped and its job interrupted); COMPLETE and
# CANCELLED are final, so a worker that keeps writing progress cannot undo a cancel.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.WAITING: frozenset(
        {JobState.WAITING, JobState.RUNNING, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.RUNNING: frozenset(
        {
            JobState.RUNNING,
            JobState.WAITING,
            JobState.COMPLETE,
            JobState.FAILED,
            JobState.CANCELLED,
        }
    ),
    JobState.FAILED: frozenset(
        {JobState.FAILED, JobState.WAITING, JobState.RUNNING, JobState.CANCELLED}
    ),
    JobState.COMPLETE: frozenset({JobState.COMPLETE}),
    JobState.CANCELLED: frozenset({JobState.CANCELLED}),
}


# ``job.last_failure_kind`` values that describe the job itself rather than one of its candidates
# (whose kinds are the evaluator's: ``compile_error``, ``wrong`` …), each written with the move to
# FAILED: ``interrupted`` and ``error`` (evolver.runner), ``worker_error`` (evolver.worker,
# evolver.worker_child), ``worker_lost`` (db.queue). They are cleared when the job runs or waits
# again, as its ``failure_reason`` is: a resumed job that completes does not keep showing them.
JOB_FAILURE_KINDS = frozenset({"interrupted", "error", "worker_error", "worker_lost"})


def job_transition_allowed(current: JobState, new: JobState) -> bool:
    """Whether a job in ``current`` may move to ``new`` (see ``JOB_TRANSITIONS``)."""
    return new in JOB_TRANSITIONS[current]
