"""Each entry's source file is stored relative to the entries folder (`weather/x.yaml`), no
longer as the path the pipeline was given (`/srv/apidir/data/entries/weather/x.yaml`, or
`data/entries/...` from the working directory): a data folder moved, copied to another
machine or named from another directory is the same catalogue, where before every entry
looked moved, was stored again and had its `updated_at` bumped. Stored names are cut after
their last `entries` folder; a name without one is left, and rewritten by the next ingest.
Downgrading keeps the relative names: the older code stores each entry's path again once.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

FOLDER = "entries"
BATCH = 1000


def relative_name(source: str) -> str:
    """`source` after its last `entries` folder, with `/`; as it was without one."""
    parts = source.replace("\\", "/").split("/")
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] == FOLDER:
            return "/".join(parts[index + 1 :])
    return source


def upgrade() -> None:
    entry = sa.table("entry", sa.column("id", sa.String), sa.column("source_file", sa.String))
    connection = op.get_bind()
    renamed = [
        {"entry_id": entry_id, "relative": relative_name(source)}
        for entry_id, source in connection.execute(sa.select(entry.c.id, entry.c.source_file))
        if relative_name(source) != source
    ]
    statement = entry.update().where(entry.c.id == sa.bindparam("entry_id")).values(
        source_file=sa.bindparam("relative"))
    for start in range(0, len(renamed), BATCH):
        connection.execute(statement, renamed[start : start + BATCH])


def downgrade() -> None:
    pass
