"""job work key: a random UUID per job, which names the job's work folder

Job ids restart at 1 in every database, and work folders were named ``job-<id>`` alone, so two
databases sharing a ``KERNEVO_WORK_DIR`` (one folder, ``kernevo.db`` then ``b.db``) ran their
job 1 in one folder: a new job took the other's ``initial_program.cu`` as its seed, and a resume
called the other's checkpoints broken and deleted them. ``job.work_key`` (32 hex digits, unique,
drawn with the row) names the folder now: ``job-<id>-<first 12 digits>``, marked with the whole
key (``evolver.work_folder``). Every existing row gets a key of its own here; its old
``job-<id>`` folder is taken over by its next resume only when that folder's checkpoints are
this job's (``evolver.work_folder``).

Revision ID: 3c8e5b1d9a27
Revises: 5f0c2a9d7e41
Create Date: 2026-12-06 09:00:00+00:00
"""

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3c8e5b1d9a27"
down_revision: str | Sequence[str] | None = "5f0c2a9d7e41"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("work_key", sa.String(length=32), nullable=True))
    connection = op.get_bind()
    job = sa.table("job", sa.column("id", sa.Integer()), sa.column("work_key", sa.String(32)))
    ids = connection.execute(sa.select(job.c.id)).scalars().all()
    for job_id in ids:  # one random key per row: no SQL function draws a UUID on both backends
        connection.execute(
            sa.update(job).where(job.c.id == job_id).values(work_key=uuid.uuid4().hex)
        )
    with op.batch_alter_table("job") as batch:
        batch.alter_column("work_key", existing_type=sa.String(length=32), nullable=False)
        batch.create_unique_constraint("uq_job_work_key", ["work_key"])


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_constraint("uq_job_work_key", type_="unique")
        batch.drop_column("work_key")
