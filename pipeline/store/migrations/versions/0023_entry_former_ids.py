"""Each entry keeps the ids it was published under before a rename (`formerIds`, joined by
commas) in a column of the compared index: each night checks that no two entries claim one former id
without parsing their unchanged files, as it does for the successors. No stored entry holds
one before this revision (the field is new), so the column starts empty.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

BEFORE = ["retired_at", "source_file", "file_hash", "file_stat", "successor", "id",
          "content_hash", "scored_hash", "scored_rubric"]
AFTER = [*BEFORE, "former_ids"]


def upgrade() -> None:
    op.drop_index("ix_entry_compared", table_name="entry")
    with op.batch_alter_table("entry") as batch:
        batch.add_column(sa.Column("former_ids", sa.String(), nullable=True))
    op.create_index("ix_entry_compared", "entry", AFTER)


def downgrade() -> None:
    op.drop_index("ix_entry_compared", table_name="entry")
    # Dropped in place (SQLite 3.35 on): a batch copy of the table would drop the table that
    # every endpoint's and probe's foreign key names, which SQLite refuses while they hold.
    op.drop_column("entry", "former_ids")
    op.create_index("ix_entry_compared", "entry", BEFORE)
