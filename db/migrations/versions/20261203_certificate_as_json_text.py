"""champion certificates stored as JSON text on PostgreSQL

``champion.certificate`` was JSONB on PostgreSQL, which stores numbers as ``numeric`` and gives
an integral float back as an integer (``1.152921504606847e+18`` → ``1152921504606847000``; a
float64 verification's input scales, 2^±900, are such numbers). The certificate's digest is
taken over its canonical JSON and signed, so the stored certificate no longer matched its
signature: promotion refused to publish it (``the signed payload differs from the stored
champion``). PostgreSQL's ``json`` type keeps the text as written. No champion with such a
certificate can exist on PostgreSQL (the promotion rolled back), so the cast loses nothing.

Revision ID: b6d41e8a3f92
Revises: 8e4b1f6a2c57
Create Date: 2026-12-03 09:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "b6d41e8a3f92"
down_revision: str | Sequence[str] | None = "8e4b1f6a2c57"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "champion", "certificate", type_=sa.JSON(), existing_type=postgresql.JSONB(),
            postgresql_using="certificate::text::json",
        )  # fmt: skip


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "champion", "certificate", type_=postgresql.JSONB(), existing_type=sa.JSON(),
            postgresql_using="certificate::jsonb",
        )  # fmt: skip
