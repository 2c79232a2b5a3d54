"""When ``kernevo jobs --watch`` ends: once no listed job is still to finish.

The rows are ``kernevo jobs``'s (the database's or the service's ``GET /v1/jobs``: dicts with
at least ``state``); the table itself is plain ``kernevo jobs``'s, redrawn by the CLI
(``kernevo.cli.jobs._watch_jobs``). A stale job's state is still ``running``, so it keeps the watch
going: a worker takes it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Job states that end by themselves (db.states.JobState: WAITING, RUNNING); a failed job waits
# for a resume, which the watch does not.
ACTIVE_STATES = ("waiting", "running")


def active(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any row is a job still to finish (``waiting`` or ``running``)."""
    return any(row.get("state") in ACTIVE_STATES for row in rows)
