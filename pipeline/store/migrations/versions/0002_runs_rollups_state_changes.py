"""Orchestrated runs, daily rollups and state changes: the flow run id of each run, the
tables `daily_entry`, `daily_endpoint`, `state_change` and `entry_state`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipeline_run") as batch:
        batch.add_column(sa.Column("flow_run_id", AutoString(), nullable=True))
        batch.create_index("ix_pipeline_run_flow_run_id", ["flow_run_id"])
    op.create_table(
        "daily_entry",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("entry_id", AutoString(), nullable=False),
        sa.Column("probes", sa.Integer(), nullable=False),
        sa.Column("responses", sa.Integer(), nullable=False),
        sa.Column("live", sa.Integer(), nullable=False),
        sa.Column("live_share", sa.Float(), nullable=True),
        sa.Column("p50_ms", sa.Float(), nullable=True),
        sa.Column("p90_ms", sa.Float(), nullable=True),
        sa.Column("state", AutoString(), nullable=False),
        sa.Column("pricing", sa.Integer(), nullable=False),
        sa.Column("latency", sa.Integer(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=False),
        sa.Column("percent", sa.Integer(), nullable=False),
        sa.Column("grade", AutoString(), nullable=False),
        sa.Column("rubric", AutoString(), nullable=False),
        sa.ForeignKeyConstraint(["entry_id"], ["entry.id"]),
        sa.PrimaryKeyConstraint("day", "entry_id"),
    )
    op.create_table(
        "daily_endpoint",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("entry_id", AutoString(), nullable=False),
        sa.Column("url", AutoString(), nullable=False),
        sa.Column("endpoint_id", sa.Integer(), nullable=True),
        sa.Column("probes", sa.Integer(), nullable=False),
        sa.Column("responses", sa.Integer(), nullable=False),
        sa.Column("live", sa.Integer(), nullable=False),
        sa.Column("live_share", sa.Float(), nullable=True),
        sa.Column("p50_ms", sa.Float(), nullable=True),
        sa.Column("p90_ms", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["endpoint_id"], ["endpoint.id"]),
        sa.ForeignKeyConstraint(["entry_id"], ["entry.id"]),
        sa.PrimaryKeyConstraint("day", "entry_id", "url"),
    )
    op.create_table(
        "state_change",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entry_id", AutoString(), nullable=False),
        sa.Column("from_state", AutoString(), nullable=False),
        sa.Column("to_state", AutoString(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["entry_id"], ["entry.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["pipeline_run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_state_change_at", "state_change", ["at"])
    op.create_index("ix_state_change_entry_id", "state_change", ["entry_id"])
    op.create_table(
        "entry_state",
        sa.Column("entry_id", AutoString(), nullable=False),
        sa.Column("state", AutoString(), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["entry_id"], ["entry.id"]),
        sa.PrimaryKeyConstraint("entry_id"),
    )


def downgrade() -> None:
    for table in ("entry_state", "state_change", "daily_endpoint", "daily_entry"):
        op.drop_table(table)
    # Dropped in place (SQLite 3.35 on): a batch copy of the table would drop the table that
    # every probe's and release's foreign key names, which SQLite refuses while they hold.
    op.drop_index("ix_pipeline_run_flow_run_id", table_name="pipeline_run")
    op.drop_column("pipeline_run", "flow_run_id")
