"""Content scores: each entry keeps its Pricing and Depth sub-scores (which its curated content
alone decides) with the content hash and the rubric they were judged by, so the score stage
reads them back rather than judging every entry's content each night.

Stored entries start without them: the next ingest stage fills them (as it does whenever an
entry's content or the rubric changes), and until then the score stage judges the content
itself. The migration cannot fill them: the rubric belongs to the judging code, which the
store's history must not depend on.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("entry") as batch:
        batch.add_column(sa.Column("content_scores", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("scored_hash", sa.String(), nullable=True))
        batch.add_column(sa.Column("scored_rubric", sa.String(), nullable=True))


def downgrade() -> None:
    # Dropped in place (SQLite 3.35 on): a batch copy of the table would drop the table that
    # every endpoint's and probe's foreign key names, which SQLite refuses while they hold.
    for column in ("scored_rubric", "scored_hash", "content_scores"):
        op.drop_column("entry", column)
