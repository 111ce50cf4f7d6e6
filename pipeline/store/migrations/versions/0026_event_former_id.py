"""Each catalogue event and state change keeps the id it was about when a rename moves it to
the entry taking that id's history over (`former_id`), so it is published as it was, of that
id, and never as the new id's: an id retired long ago and merged into a live entry is not told
the live one's retirement. Rows moved by renames before this revision cannot be told apart
from the new id's own: the columns start empty, and those stay told as the new id's.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

TABLES = ("entry_event", "state_change")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("former_id", sa.String(), nullable=True))


def downgrade() -> None:
    for table in TABLES:  # dropped in place (SQLite 3.35 on), as 0021's column is
        op.drop_column(table, "former_id")
