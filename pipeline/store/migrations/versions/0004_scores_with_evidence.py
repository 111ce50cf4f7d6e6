"""Rubric 2.0: a sub-score without its minimum evidence is stored as null, and each day's
rollup says whether its grade was provisional (`daily_entry.provisional`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("daily_entry") as batch:
        for column in ("pricing", "latency", "depth"):
            batch.alter_column(column, existing_type=sa.Integer(), nullable=True)
        batch.add_column(sa.Column("provisional", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("daily_entry") as batch:
        batch.drop_column("provisional")
        for column in ("pricing", "latency", "depth"):
            batch.alter_column(column, existing_type=sa.Integer(), nullable=False)
