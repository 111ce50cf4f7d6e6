"""Health with evidence: each probe records what a browser would be told (CORS), its TLS
connection, and whether it was the second look at a failure and of which class; each entry's
lifecycle, and the catalogue's events (added, retired, lifecycle transitions).

The entries already stored get their `added` event at the time they were first seen, and a
retired one its `retired` event, so the history of the catalogue starts complete.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UtcDateTime = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("probe") as batch:
        batch.add_column(sa.Column("cors_allow_origin", sa.String(), nullable=True))
        batch.add_column(sa.Column("cors_allow_credentials", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("tls_version", sa.String(), nullable=True))
        batch.add_column(sa.Column("cert_expires_at", UtcDateTime, nullable=True))
        batch.add_column(sa.Column("confirmation", sa.Boolean(), nullable=False,
                                   server_default="0"))
        batch.add_column(sa.Column("failure_class", sa.String(), nullable=True))
    op.create_table(
        "entry_lifecycle",
        sa.Column("entry_id", sa.String(), sa.ForeignKey("entry.id"), primary_key=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("since", UtcDateTime, nullable=False),
        sa.Column("down_runs", sa.Integer(), nullable=False),
        sa.Column("dead_since", UtcDateTime, nullable=True),
        sa.Column("judged_run_id", sa.Integer(), sa.ForeignKey("pipeline_run.id"),
                  nullable=True),
    )
    events = op.create_table(
        "entry_event",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("entry_id", sa.String(), sa.ForeignKey("entry.id"), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("from_value", sa.String(), nullable=True),
        sa.Column("to_value", sa.String(), nullable=True),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("run_id", sa.Integer(), sa.ForeignKey("pipeline_run.id"), nullable=True),
    )
    op.create_index("ix_entry_event_entry_id", "entry_event", ["entry_id"])
    op.create_index("ix_entry_event_at", "entry_event", ["at"])
    entry = sa.table("entry", sa.column("id", sa.String()),
                     sa.column("first_seen_at", UtcDateTime),
                     sa.column("retired_at", UtcDateTime))
    op.execute(events.insert().from_select(
        ["entry_id", "kind", "at"],
        sa.select(entry.c.id, sa.literal("added"), entry.c.first_seen_at)))
    op.execute(events.insert().from_select(
        ["entry_id", "kind", "at"],
        sa.select(entry.c.id, sa.literal("retired"), entry.c.retired_at)
        .where(entry.c.retired_at.is_not(None))))


def downgrade() -> None:
    op.drop_index("ix_entry_event_at", "entry_event")
    op.drop_index("ix_entry_event_entry_id", "entry_event")
    op.drop_table("entry_event")
    op.drop_table("entry_lifecycle")
    with op.batch_alter_table("probe") as batch:
        for column in ("failure_class", "confirmation", "cert_expires_at", "tls_version",
                       "cors_allow_credentials", "cors_allow_origin"):
            batch.drop_column(column)
