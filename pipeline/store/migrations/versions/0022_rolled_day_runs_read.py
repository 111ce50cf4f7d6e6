"""Each rolled-up day names the trusted runs whose probes its rollup read. A day was taken as
complete when no trusted run with probes in it was judged after it was rolled up, two stamps of
wall clocks: a clock stepped back, or another machine's sharing the store, judged a run "before"
a rollup that had not read it, and its probes were left out of the day for good.

Filled here for the days already rolled up, as the stamps tell it: the trusted runs with
probes that day (by their first and last check times) judged before the day was rolled up.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-30
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def _utc(moment: datetime) -> datetime:
    """A stored moment as UTC (SQLite gives it back without its zone)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def upgrade() -> None:
    with op.batch_alter_table("rolled_day") as batch:
        batch.add_column(sa.Column("runs_read", sa.Text(), nullable=True))
    rolled_day = sa.table("rolled_day", sa.column("day", sa.Date),
                          sa.column("rolled_at", sa.DateTime(timezone=True)),
                          sa.column("runs_read", sa.Text))
    run = sa.table("pipeline_run", sa.column("id", sa.Integer),
                   sa.column("network_suspect", sa.Boolean),
                   sa.column("judged_at", sa.DateTime(timezone=True)),
                   sa.column("first_checked_at", sa.DateTime(timezone=True)),
                   sa.column("last_checked_at", sa.DateTime(timezone=True)))
    bind = op.get_bind()
    trusted = bind.execute(sa.select(run.c.id, run.c.first_checked_at, run.c.last_checked_at,
                                     run.c.judged_at).where(
        run.c.judged_at.is_not(None), run.c.network_suspect.is_(False),
        run.c.first_checked_at.is_not(None))).all()
    days = bind.execute(sa.select(rolled_day.c.day, rolled_day.c.rolled_at)).all()
    for day, rolled_at in days:
        start = datetime.combine(day, time.min, tzinfo=UTC)
        end = start + timedelta(days=1, microseconds=-1)
        read = sorted(run_id for run_id, first, last, judged_at in trusted
                      if _utc(first) <= end and _utc(last) >= start
                      and _utc(judged_at) < _utc(rolled_at))
        if read:
            bind.execute(rolled_day.update().where(rolled_day.c.day == day).values(
                runs_read=",".join(map(str, read))))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on), as 0017's columns are.
    op.drop_column("rolled_day", "runs_read")
