"""champion certificates

``champion.certificate``: the JSON certificate built at promotion (``kernevo/certificate.py``:
checks passed, seeds, shapes, GPU, driver and NVRTC versions, timings, what was not verified),
covered by the champion's signature; NULL for a champion promoted before it.

Revision ID: 3b8f0d6e4a21
Revises: 7c1e5a9d2b30
Create Date: 2026-12-01 09:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "3b8f0d6e4a21"
down_revision: str | Sequence[str] | None = "7c1e5a9d2b30"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    document = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("champion") as batch:
        batch.add_column(sa.Column("certificate", document, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("champion") as batch:
        batch.drop_column("certificate")
