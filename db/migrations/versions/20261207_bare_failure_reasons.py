"""bare failure reasons: a stored reason no longer names its own job

Every view of ``job.failure_reason`` puts ``job N failed: `` before it (``kernevo jobs``, the
web page, a worker's stderr), and since ``evolver.runner.stored_reason`` the runner and the
worker's job process store the bare reason. Rows written before that still begin with their
own job, so they were shown ``job 3 failed: job 3 failed: …``. This data migration rewrites
those rows to the bare form the current code stores, dropping every leading mention of the
row's own job id in the forms older versions wrote:

- ``job N: `` (an ``evolver.errors`` error's line, the worker's job process's line),
- ``job N failed: `` (the runner's summary line),
- ``job N (<path> <dtype>) failed: `` (the runner's unexpected-error line),
- ``job N `` before ``stopped`` (``job N stopped by SIGTERM at iteration 2 of 5; …``, ``job N
  stopped by SIGINT in its setup; …``: stored now as ``stopped …``),

repeated while one of them leads (``job 3 failed: job 3: …`` is bare twice over). A reason
naming another job, or one that would be left empty, is kept as it is. Idempotent: a bare
reason begins with none of these, so a second run (or a database written by the current code)
changes nothing.

``downgrade`` changes nothing: the older code shows a stored reason the same way (``job N
failed: `` before it), so a bare reason reads right there too, and which prefix a row had is
not kept to put back.

Revision ID: 7b2d4f6a8c13
Revises: 3c8e5b1d9a27
Create Date: 2026-12-07 09:00:00+00:00
"""

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7b2d4f6a8c13"
down_revision: str | Sequence[str] | None = "3c8e5b1d9a27"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def bare_reason(job_id: int, reason: str) -> str:
    """``reason`` (job ``job_id``'s) without every leading mention of its own job, as the
    module doc lists them; ``reason`` itself when nothing would be left."""
    own = re.compile(rf"job {job_id}(?:: | failed: | \([^()]*\) failed: | (?=stopped\b))", re.ASCII)
    bare = reason
    while (match := own.match(bare)) is not None:
        bare = bare[match.end() :]
    return bare or reason


def upgrade() -> None:
    connection = op.get_bind()
    job = sa.table("job", sa.column("id", sa.Integer()), sa.column("failure_reason", sa.Text()))
    # Only rows that may name their job (LIKE narrows, bare_reason decides): the text is
    # rewritten here, not in SQL, since neither backend's SQL matches "the row's own id" alike.
    rows = connection.execute(
        sa.select(job.c.id, job.c.failure_reason).where(job.c.failure_reason.like("job %"))
    ).all()
    for job_id, reason in rows:
        bare = bare_reason(job_id, reason)
        if bare != reason:
            connection.execute(sa.update(job).where(job.c.id == job_id).values(failure_reason=bare))


def downgrade() -> None:
    """Nothing to undo (module doc)."""
