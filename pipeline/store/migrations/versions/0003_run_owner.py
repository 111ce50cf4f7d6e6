"""The machine and process that run each flow (`pipeline_run.host`, `pipeline_run.pid`), so the
next run can mark a run whose process died as crashed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipeline_run") as batch:
        batch.add_column(sa.Column("host", AutoString(), nullable=True))
        batch.add_column(sa.Column("pid", sa.Integer(), nullable=True))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on): a batch copy of the table would drop the table that
    # every probe's and release's foreign key names, which SQLite refuses while they hold.
    op.drop_column("pipeline_run", "pid")
    op.drop_column("pipeline_run", "host")
