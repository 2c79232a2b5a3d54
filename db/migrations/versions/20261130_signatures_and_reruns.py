"""champion signatures and re-run programs

``champion.signature`` (base64 Ed25519 signature over the champion's signed payload, see
``kernevo/signature.py``) and ``champion.signing_key_id`` (sha256 fingerprint of the public key);
``program.rerun`` marks a program of an iteration that ran again after the job was killed and
resumed from an earlier checkpoint.

Revision ID: 7c1e5a9d2b30
Revises: 0414ad4304b1
Create Date: 2026-11-30 09:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7c1e5a9d2b30"
down_revision: str | Sequence[str] | None = "0414ad4304b1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("champion") as batch:
        batch.add_column(sa.Column("signature", sa.Text(), nullable=True))
        batch.add_column(sa.Column("signing_key_id", sa.String(64), nullable=True))
    with op.batch_alter_table("champion_promotion") as batch:
        batch.add_column(sa.Column("signing_key_id", sa.String(64), nullable=True))
    with op.batch_alter_table("program") as batch:
        batch.add_column(
            sa.Column("rerun", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("program") as batch:
        batch.drop_column("rerun")
    with op.batch_alter_table("champion_promotion") as batch:
        batch.drop_column("signing_key_id")
    with op.batch_alter_table("champion") as batch:
        batch.drop_column("signing_key_id")
        batch.drop_column("signature")
