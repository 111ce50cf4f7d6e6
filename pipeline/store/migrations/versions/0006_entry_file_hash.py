"""Incremental ingest: each entry keeps the hash of its file as last parsed, so an unchanged
file is not parsed again. Stored entries start without one: their files are parsed once more
on the next ingest, which fills it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entry") as batch:
        batch.add_column(sa.Column("file_hash", sa.String(), nullable=True))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on): a batch copy of the table would drop the table that
    # every endpoint's and probe's foreign key names, which SQLite refuses while they hold.
    op.drop_column("entry", "file_hash")
