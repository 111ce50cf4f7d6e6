"""The store of the first release: entries, endpoints, runs, probes, releases.

A database made by that release (no version table yet) is recognised by its tables and
marked as this revision before it is upgraded (`pipeline.store.migrate`).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entry",
        sa.Column("id", AutoString(), nullable=False),
        sa.Column("category", AutoString(), nullable=False),
        sa.Column("name", AutoString(), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("content_hash", AutoString(), nullable=False),
        sa.Column("source_file", AutoString(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_entry_category", "entry", ["category"])
    op.create_index("ix_entry_retired_at", "entry", ["retired_at"])
    op.create_table(
        "pipeline_run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("flow", AutoString(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", AutoString(), nullable=False),
        sa.Column("entries_seen", sa.Integer(), nullable=False),
        sa.Column("entries_published", sa.Integer(), nullable=False),
        sa.Column("entries_added", sa.Integer(), nullable=False),
        sa.Column("entries_updated", sa.Integer(), nullable=False),
        sa.Column("entries_retired", sa.Integer(), nullable=False),
        sa.Column("entries_invalid", sa.Integer(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=True),
        sa.Column("release_version", AutoString(), nullable=True),
        sa.Column("message", AutoString(), nullable=True),
        sa.Column("probes", sa.Integer(), nullable=False),
        sa.Column("probes_failed", sa.Integer(), nullable=False),
        sa.Column("network_suspect", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "endpoint",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entry_id", AutoString(), nullable=False),
        sa.Column("method", AutoString(), nullable=False),
        sa.Column("path", AutoString(), nullable=False),
        sa.Column("description", AutoString(), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("probe_note", AutoString(), nullable=True),
        sa.ForeignKeyConstraint(["entry_id"], ["entry.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("entry_id", "method", "path"),
    )
    op.create_index("ix_endpoint_entry_id", "endpoint", ["entry_id"])
    op.create_table(
        "release",
        sa.Column("version", AutoString(), nullable=False),
        sa.Column("generated", sa.DateTime(timezone=True), nullable=False),
        sa.Column("total_apis", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["pipeline_run.id"]),
        sa.PrimaryKeyConstraint("version"),
    )
    op.create_table(
        "probe",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("entry_id", AutoString(), nullable=False),
        sa.Column("endpoint_id", sa.Integer(), nullable=True),
        sa.Column("url", AutoString(), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", AutoString(), nullable=False),
        sa.Column("reason", AutoString(), nullable=True),
        sa.Column("error_class", AutoString(), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("total_ms", sa.Float(), nullable=True),
        sa.Column("dns_ms", sa.Float(), nullable=True),
        sa.Column("connect_ms", sa.Float(), nullable=True),
        sa.Column("ttfb_ms", sa.Float(), nullable=True),
        sa.Column("final_url", AutoString(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("redirects", sa.Integer(), nullable=False),
        sa.Column("error", AutoString(), nullable=True),
        sa.ForeignKeyConstraint(["endpoint_id"], ["endpoint.id"]),
        sa.ForeignKeyConstraint(["entry_id"], ["entry.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["pipeline_run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_probe_checked_at", "probe", ["checked_at"])
    op.create_index("ix_probe_entry_id", "probe", ["entry_id"])
    op.create_index("ix_probe_run_id", "probe", ["run_id"])


def downgrade() -> None:
    for table in ("probe", "release", "endpoint", "pipeline_run", "entry"):
        op.drop_table(table)
