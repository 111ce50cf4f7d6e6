"""State changes found by the run that recorded them: a run's summary and alerts read its
changes back from the store, and the table grows every night an entry changes state.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_state_change_run_id", "state_change", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_state_change_run_id", table_name="state_change")
