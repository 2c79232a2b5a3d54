"""job queue: jobs created through the API, claimed by workers

``job.queued_at`` (when the job entered the queue: created through ``POST /v1/jobs`` or returned
to it by the reaper; NULL for a job that ``kernevo evolve`` runs in its own process, which no
worker may claim), ``job.claimed_by`` (the worker that holds the job: ``host:pid:token``),
``job.claimed_at``, ``job.claimed_gpu`` (the device index it runs on) and ``job.attempts`` (how
many times a worker claimed it). The index serves the workers' claim query: waiting jobs in
queue order.

Revision ID: 5d2a7c9e1f04
Revises: 3b8f0d6e4a21
Create Date: 2026-12-02 09:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5d2a7c9e1f04"
down_revision: str | Sequence[str] | None = "3b8f0d6e4a21"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("claimed_by", sa.String(128), nullable=True))
        batch.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("claimed_gpu", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
    op.create_index("ix_job_queue", "job", ["state", "queued_at"])


def downgrade() -> None:
    op.drop_index("ix_job_queue", table_name="job")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("attempts")
        batch.drop_column("claimed_gpu")
        batch.drop_column("claimed_at")
        batch.drop_column("claimed_by")
        batch.drop_column("queued_at")
