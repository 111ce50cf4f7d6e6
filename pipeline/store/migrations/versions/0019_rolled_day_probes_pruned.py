"""Each rolled-up day says whether its raw probes were pruned: pruning now keeps the probes of
a run that is still an entry's latest trusted run (its published status is read from them), so
a pruned day may hold some probes and can no longer be told by holding none. Filled here for
the days already pruned: rolled up with probes counted, and no probe stored in them.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rolled_day") as batch:
        batch.add_column(sa.Column("probes_pruned", sa.Boolean(), nullable=False,
                                   server_default="0"))
    rolled_day = sa.table("rolled_day", sa.column("day", sa.Date),
                          sa.column("probes_pruned", sa.Boolean))
    rollup = sa.table("daily_entry", sa.column("day", sa.Date),
                      sa.column("probes", sa.Integer))
    probe = sa.table("probe", sa.column("id", sa.Integer),
                     sa.column("checked_at", sa.DateTime(timezone=True)))
    bind = op.get_bind()
    counted = bind.execute(sa.select(rollup.c.day).distinct().where(rollup.c.probes > 0)).scalars()
    for day in sorted(counted):
        start = datetime.combine(day, time.min, tzinfo=UTC)
        held = bind.execute(sa.select(probe.c.id).where(
            probe.c.checked_at >= start,
            probe.c.checked_at <= start + timedelta(days=1, microseconds=-1)).limit(1)).first()
        if held is None:
            bind.execute(rolled_day.update().where(rolled_day.c.day == day)
                         .values(probes_pruned=True))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on), as 0017's columns are.
    op.drop_column("rolled_day", "probes_pruned")
