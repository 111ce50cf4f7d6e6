"""Each entry keeps its file's stat (inode, size, modification and change times) beside the
file's hash, so a second night reads only the files whose stat changed: an unchanged catalogue
of 100,000 files a day after the last night is no longer read from a cold disk to be hashed.
The compared columns' index takes it in. Stored entries start without one: their files are
read once more on the next ingest, which fills it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BEFORE = ["retired_at", "source_file", "file_hash", "id", "content_hash", "scored_hash",
          "scored_rubric"]
AFTER = ["retired_at", "source_file", "file_hash", "file_stat", "id", "content_hash",
         "scored_hash", "scored_rubric"]


def upgrade() -> None:
    op.drop_index("ix_entry_compared", table_name="entry")
    with op.batch_alter_table("entry") as batch:
        batch.add_column(sa.Column("file_stat", sa.String(), nullable=True))
    op.create_index("ix_entry_compared", "entry", AFTER)


def downgrade() -> None:
    op.drop_index("ix_entry_compared", table_name="entry")
    with op.batch_alter_table("entry") as batch:
        batch.drop_column("file_stat")
    op.create_index("ix_entry_compared", "entry", BEFORE)
