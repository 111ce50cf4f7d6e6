"""Each entry keeps its file's stat (inode, size, modification and change times) beside the
file's hash, so a second night reads only the files whose stat changed: an unchanged catalogue
of 100,000 files a day after the last night is no longer read from a cold disk to be hashed.
Stored entries start without one: their files are read once more on the next ingest, which
fills it. Each entry also keeps the successor its curator named (from its content, filled
here), so a successor whose file is gone is reported every night although the deprecated
entry's file is not parsed again. The compared columns' index takes both in.

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
AFTER = ["retired_at", "source_file", "file_hash", "file_stat", "successor", "id",
         "content_hash", "scored_hash", "scored_rubric"]


def upgrade() -> None:
    op.drop_index("ix_entry_compared", table_name="entry")
    with op.batch_alter_table("entry") as batch:
        batch.add_column(sa.Column("file_stat", sa.String(), nullable=True))
        batch.add_column(sa.Column("successor", sa.String(), nullable=True))
    entry = sa.table("entry", sa.column("content", sa.JSON), sa.column("successor", sa.String))
    op.execute(entry.update().values(
        successor=entry.c.content[("deprecated", "successor")].as_string()))
    op.create_index("ix_entry_compared", "entry", AFTER)


def downgrade() -> None:
    op.drop_index("ix_entry_compared", table_name="entry")
    # Dropped in place (SQLite 3.35 on): a batch copy of the table would drop the table that
    # every endpoint's and probe's foreign key names, which SQLite refuses while they hold.
    op.drop_column("entry", "successor")
    op.drop_column("entry", "file_stat")
    op.create_index("ix_entry_compared", "entry", BEFORE)
