"""Each probe shard keeps the CPU its process spent probing and storing, beside its wall:
shards run in parallel, so the run's work on the machine is its busiest shard's CPU, not the
sum, and an operator sees which shard's process was busy rather than waiting. Shards stored
before have none.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("probe_shard") as batch:
        batch.add_column(sa.Column("cpu_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("probe_shard") as batch:
        batch.drop_column("cpu_seconds")
