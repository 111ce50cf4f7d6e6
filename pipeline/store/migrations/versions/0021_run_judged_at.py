"""Each run keeps when its probes were judged: a run's probes count only once it was counted
and found not network-suspect. A shard commits its rows before the run is judged, so a run
still open, or one whose process died between a shard's commit and the judgement, had its
probes counted as trusted (a publish in between showed them, and a run reaped as crashed kept
them in uptime for 30 days).

Filled here for the runs already stored: every run keeps its judgement as it is (judged at
its last probe, else when it ended or began), but one that never counted a probe and was not
completed (left running, crashed or failed before its count), whose stored probes, if any,
were never judged and now no longer count.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipeline_run") as batch:
        batch.add_column(sa.Column("judged_at", sa.DateTime(timezone=True), nullable=True))
    run = sa.table("pipeline_run", sa.column("state", sa.String), sa.column("probes", sa.Integer),
                   sa.column("started_at", sa.DateTime(timezone=True)),
                   sa.column("finished_at", sa.DateTime(timezone=True)),
                   sa.column("last_checked_at", sa.DateTime(timezone=True)),
                   sa.column("judged_at", sa.DateTime(timezone=True)))
    op.execute(run.update().where(sa.or_(run.c.state == "completed", run.c.probes > 0)).values(
        judged_at=sa.func.coalesce(run.c.last_checked_at, run.c.finished_at, run.c.started_at)))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on), as 0017's columns are.
    op.drop_column("pipeline_run", "judged_at")
