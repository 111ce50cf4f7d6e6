"""Each entry keeps when its base address last changed (`base_url_since`), set by the ingest
when a curator writes a new `baseUrl` (the provider moved its API): the probes checked before
are of the old address, and no evidence of the one the entry lists now. Indexed, so the score
stage finds the few entries that moved within its windows by a range. No stored entry is known
to have moved before this revision, so the column starts empty and nothing is left out.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entry") as batch:
        batch.add_column(sa.Column("base_url_since", sa.DateTime(timezone=True),
                                   nullable=True))
    op.create_index("ix_entry_base_url_since", "entry", ["base_url_since"])


def downgrade() -> None:
    op.drop_index("ix_entry_base_url_since", table_name="entry")
    op.drop_column("entry", "base_url_since")  # dropped in place (SQLite 3.35 on), as 0023's
