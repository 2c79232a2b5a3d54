"""job heartbeat interval: how often the process that runs a job beats for it

``job.heartbeat_interval_s`` (seconds; NULL: not recorded): a worker records its
``--heartbeat-s`` when it claims a job, and ``kernevo evolve`` (or ``--resume``) records its own
interval (30 s) when it runs a job no worker holds. The reaper returns a job to the queue only
once its heartbeat is older than both the reaping worker's grace period and three of the job's
own intervals, so a worker with a short grace period never requeues a job whose process beats
slowly but is alive (``kernevo evolve --resume`` of a queued job: 30 s beats, a 15 s grace).

Revision ID: 11ceaff132bd
Revises: b6d41e8a3f92
Create Date: 2026-12-04 09:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "11ceaff132bd"
down_revision: str | Sequence[str] | None = "b6d41e8a3f92"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("heartbeat_interval_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("heartbeat_interval_s")
