"""initial schema: job, program, evaluation, champion, champion_promotion

Revision ID: 0414ad4304b1
Revises:
Create Date: 2026-11-30 02:49:06+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0414ad4304b1"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _timestamp(name: str, *, nullable: bool = False, now: bool = True) -> sa.Column:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        server_default=sa.func.now() if now else None,
        nullable=nullable,
    )


def _key_columns() -> list[sa.Column]:
    return [
        sa.Column("path", sa.String(length=64), nullable=False),
        sa.Column("dtype", sa.String(length=16), nullable=False),
        sa.Column("gpu_key", sa.String(length=128), nullable=False),
        sa.Column("shape_bucket", sa.String(length=64), nullable=False),
    ]


def upgrade() -> None:
    """Create the lineage store's tables."""
    op.create_table(
        "job",
        sa.Column("id", sa.Integer(), nullable=False),
        *_key_columns(),
        sa.Column("config", _json(), nullable=False),
        sa.Column("backend", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("state", sa.String(length=16), server_default="waiting", nullable=False),
        sa.Column("iteration", sa.Integer(), server_default="0", nullable=False),
        sa.Column("best_score", sa.Float(), nullable=True),
        sa.Column("best_speedup", sa.Float(), nullable=True),
        sa.Column("last_failure_kind", sa.String(length=64), nullable=True),
        _timestamp("heartbeat_at", nullable=True, now=False),
        _timestamp("created_at"),
        sa.CheckConstraint(
            "state IN ('waiting', 'running', 'complete', 'failed', 'cancelled')",
            name=op.f("ck_job_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job")),
    )
    op.create_table(
        "program",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=128), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_sha256", sa.String(length=64), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("diff", sa.Text(), nullable=True),
        sa.Column("backend", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=256), nullable=True),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"], name=op.f("fk_program_job_id_job")),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["program.id"], name=op.f("fk_program_parent_id_program")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_program")),
        sa.UniqueConstraint("uid", name=op.f("uq_program_uid")),
    )
    op.create_index(op.f("ix_program_job_id"), "program", ["job_id"])
    op.create_index(op.f("ix_program_parent_id"), "program", ["parent_id"])
    op.create_index(op.f("ix_program_source_sha256"), "program", ["source_sha256"])
    op.create_table(
        "evaluation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("program_id", sa.Integer(), nullable=False),
        sa.Column("gpu_key", sa.String(length=128), nullable=False),
        sa.Column("gpu_name", sa.String(length=256), nullable=False),
        sa.Column("arch", sa.String(length=16), nullable=False),
        sa.Column("driver_version", sa.String(length=64), nullable=True),
        sa.Column("nvrtc_version", sa.String(length=64), nullable=True),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("error_kind", sa.String(length=64), nullable=True),
        sa.Column("report", _json(), nullable=False),
        _timestamp("created_at"),
        sa.CheckConstraint(
            "state IN ('scored', 'failed', 'verified')", name=op.f("ck_evaluation_state")
        ),
        sa.ForeignKeyConstraint(
            ["program_id"], ["program.id"], name=op.f("fk_evaluation_program_id_program")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluation")),
    )
    op.create_index(op.f("ix_evaluation_program_id"), "evaluation", ["program_id"])
    op.create_table(
        "champion",
        sa.Column("id", sa.Integer(), nullable=False),
        *_key_columns(),
        sa.Column("program_id", sa.Integer(), nullable=False),
        sa.Column("evaluation_id", sa.Integer(), nullable=False),
        sa.Column("cubin", sa.LargeBinary(), nullable=False),
        sa.Column("cubin_sha256", sa.String(length=64), nullable=False),
        sa.Column("arch", sa.String(length=16), nullable=False),
        sa.Column("nvrtc_version", sa.String(length=64), nullable=True),
        sa.Column("compile_options", _json(), nullable=False),
        sa.Column("launch", _json(), nullable=False),
        sa.Column("envelope", _json(), nullable=False),
        sa.Column("metrics", _json(), nullable=False),
        _timestamp("promoted_at"),
        sa.ForeignKeyConstraint(
            ["evaluation_id"], ["evaluation.id"], name=op.f("fk_champion_evaluation_id_evaluation")
        ),
        sa.ForeignKeyConstraint(
            ["program_id"], ["program.id"], name=op.f("fk_champion_program_id_program")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_champion")),
        sa.UniqueConstraint(
            "path",
            "dtype",
            "gpu_key",
            "shape_bucket",
            name=op.f("uq_champion_path_dtype_gpu_key_shape_bucket"),
        ),
    )
    op.create_table(
        "champion_promotion",
        sa.Column("id", sa.Integer(), nullable=False),
        *_key_columns(),
        sa.Column("program_id", sa.Integer(), nullable=False),
        sa.Column("evaluation_id", sa.Integer(), nullable=False),
        sa.Column("cubin_sha256", sa.String(length=64), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        _timestamp("promoted_at"),
        sa.ForeignKeyConstraint(
            ["evaluation_id"],
            ["evaluation.id"],
            name=op.f("fk_champion_promotion_evaluation_id_evaluation"),
        ),
        sa.ForeignKeyConstraint(
            ["program_id"], ["program.id"], name=op.f("fk_champion_promotion_program_id_program")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_champion_promotion")),
    )
    op.create_index(
        "ix_champion_promotion_key",
        "champion_promotion",
        ["path", "dtype", "gpu_key", "shape_bucket"],
    )


def downgrade() -> None:
    """Drop the lineage store's tables, children first."""
    op.drop_index("ix_champion_promotion_key", table_name="champion_promotion")
    op.drop_table("champion_promotion")
    op.drop_table("champion")
    op.drop_index(op.f("ix_evaluation_program_id"), table_name="evaluation")
    op.drop_table("evaluation")
    op.drop_index(op.f("ix_program_source_sha256"), table_name="program")
    op.drop_index(op.f("ix_program_parent_id"), table_name="program")
    op.drop_index(op.f("ix_program_job_id"), table_name="program")
    op.drop_table("program")
    op.drop_table("job")
