"""Each complete day keeps its rollup evidence in columns beside its rollup rows: the score
stage reads a past day's probe counts and timed responses from that one row, not from the
day's rows of every entry (some 1.45 million rows a span of 50,000 entries with 30 nights).
Days rolled up before keep none; they are read from their rows until they leave the window.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rolled_day") as batch:
        batch.add_column(sa.Column("evidence_entries", sa.Text(), nullable=True))
        batch.add_column(sa.Column("evidence", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rolled_day") as batch:
        batch.drop_column("evidence")
        batch.drop_column("evidence_entries")
