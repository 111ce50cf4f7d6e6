"""Each run keeps the count of its targets not probed (their host given up on): they store
no probe row, so a run read back from the store counted none of them. The runs already
stored counted none either: 0.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipeline_run") as batch:
        batch.add_column(sa.Column("probes_unchecked", sa.Integer(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on), as 0021's column is.
    op.drop_column("pipeline_run", "probes_unchecked")
