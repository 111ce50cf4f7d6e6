"""Probe shards on workers: each shard of a run's probe stage, planned once by the run, keeps
its targets in the store for a worker on any machine to read, then where it ran and what it
counted.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "probe_shard",
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("pipeline_run.id"), primary_key=True),
        sa.Column("shard", sa.Integer(), primary_key=True),
        sa.Column("targets", sa.JSON(), nullable=False),
        sa.Column("flow_run_id", sa.String(), nullable=True),
        sa.Column("host", sa.String(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("started_at", UtcDateTime, nullable=True),
        sa.Column("finished_at", UtcDateTime, nullable=True),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("peak_rss_mib", sa.Float(), nullable=True),
        sa.Column("outcomes", sa.JSON(), nullable=True),
        sa.Column("connect_failures", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("probe_shard")
