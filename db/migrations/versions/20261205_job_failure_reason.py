"""job failure reason: why a failed job failed, stored with it

``job.failure_reason`` (one line; NULL while the job is not failed): the runner's error line, or
the worker's (an error before the job ran, ``worker_lost`` after too many deaths). A queued
job's reason was printed only on its worker's stderr; ``kernevo jobs`` and ``GET /v1/jobs/{id}``
now show it.

Revision ID: 5f0c2a9d7e41
Revises: 11ceaff132bd
Create Date: 2026-12-05 09:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5f0c2a9d7e41"
down_revision: str | Sequence[str] | None = "11ceaff132bd"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("failure_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("failure_reason")
