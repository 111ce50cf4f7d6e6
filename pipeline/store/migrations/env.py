"""Alembic's environment for the store: runs on the connection `pipeline.store.migrate` hands
it (or on `sqlalchemy.url` when run by the `alembic` command for a new revision)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from pipeline.store.tables import SQLModel

config = context.config
target_metadata = SQLModel.metadata


def run_migrations(connection: Connection) -> None:
    # Batch mode lets a later revision alter SQLite tables (copy and move), as Alembic advises.
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as opened:
        run_migrations(opened)
