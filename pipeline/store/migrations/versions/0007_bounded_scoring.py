"""Bounded scoring: each entry's daily rollup keeps the day's timed responses, and each day
records when it was last rolled up for every entry, so the score stage reads complete past
days from the rollups and only the raw probes of the days its windows cut through.

Rollups stored before this revision lack the timed responses: the score stage rolls those
days up again once (their `rolled_day` row is missing).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("daily_entry") as batch:
        batch.add_column(sa.Column("timed_ms", sa.JSON(), nullable=True))
    op.create_table(
        "rolled_day",
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("rolled_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("rolled_day")
    with op.batch_alter_table("daily_entry") as batch:
        batch.drop_column("timed_ms")
