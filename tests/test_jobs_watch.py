"""``kernevo jobs --watch`` ends once no listed job is waiting or running (evolver.watch); the
table it redraws is plain ``kernevo jobs``'s (tests/test_cli_one_answer.py)."""

from __future__ import annotations

import pytest

from db.states import JobState
from evolver.watch import ACTIVE_STATES, active


@pytest.mark.parametrize(
    ("states", "going"),
    [
        ((), False),
        (("complete", "failed", "cancelled"), False),
        (("complete", "waiting"), True),
        (("failed", "running"), True),  # a stale job is still running: a worker takes it back
    ],
)
def test_the_watch_goes_on_while_a_job_is_waiting_or_running(
    states: tuple[str, ...], going: bool
) -> None:
    assert active([{"id": i, "state": s} for i, s in enumerate(states)]) is going


def test_the_active_states_are_the_job_states_that_end_by_themselves() -> None:
    # A failed job may be resumed, but only by someone: the watch does not wait for that.
    ended = {JobState.COMPLETE, JobState.FAILED, JobState.CANCELLED}
    assert set(ACTIVE_STATES) == {state.value for state in JobState} - {s.value for s in ended}
