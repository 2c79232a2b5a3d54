"""API tokens with scopes

``api_token``: bearer tokens of the REST API (``db/tokens.py``), each with a ``name``, a
``scope`` (``read``: sources, reports, lineage, jobs; ``write``: also creating and cancelling
jobs) and the SHA-256 (hex) of its secret, never the secret; ``revoked_at`` is set when it is
revoked (the row stays). ``KERNEVO_API_TOKEN`` still works beside them as a configured write
token.

Revision ID: 8e4b1f6a2c57
Revises: 5d2a7c9e1f04
Create Date: 2026-12-02 10:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8e4b1f6a2c57"
down_revision: str | Sequence[str] | None = "5d2a7c9e1f04"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_token",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("scope", sa.String(length=8), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("scope IN ('read', 'write')", name=op.f("ck_api_token_scope")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_token")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_api_token_token_sha256")),
    )


def downgrade() -> None:
    op.drop_table("api_token")
