"""Each run keeps the highest run id in the store when it ended (`last_run_at_end`): where its
end falls among the runs' starts, as the store's ids order them, since the clock times that
different machines stamp may disagree.

Filled here for the runs already ended, from the only record they have: the highest id of the
runs started by the time they ended, as stamped (never below their own id).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipeline_run") as batch:
        batch.add_column(sa.Column("last_run_at_end", sa.Integer(), nullable=True))
    run = sa.table("pipeline_run", sa.column("id", sa.Integer),
                   sa.column("started_at", sa.DateTime(timezone=True)),
                   sa.column("finished_at", sa.DateTime(timezone=True)),
                   sa.column("last_run_at_end", sa.Integer))
    other = run.alias("other")
    started_by_then = (sa.select(sa.func.max(other.c.id))
                       .where(other.c.started_at <= run.c.finished_at).scalar_subquery())
    op.execute(run.update().where(run.c.finished_at.is_not(None)).values(
        last_run_at_end=sa.case((started_by_then > run.c.id, started_by_then),
                                else_=run.c.id)))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on), as 0024's column is.
    op.drop_column("pipeline_run", "last_run_at_end")
