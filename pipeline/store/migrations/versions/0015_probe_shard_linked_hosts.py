"""Each probe shard keeps the hosts it was dealt beyond its targets' own: hosts its targets
redirected to on an earlier night, which only that shard probes (and every other shard shares
politely). Shards stored before have none.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("probe_shard") as batch:
        batch.add_column(sa.Column("linked_hosts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("probe_shard") as batch:
        batch.drop_column("linked_hosts")
