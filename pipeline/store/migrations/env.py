"""Alembic's environment for the store: runs on the connection `pipeline.store.migrate` hands
it (or on `sqlalchemy.url` when run by the `alembic` command for a new revision)."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from pipeline.store.tables import SQLModel

config = context.config
target_metadata = SQLModel.metadata


def tell_revision(*, heads: set[str], **_: Any) -> None:
    """Tell the caller (`alembic_config`'s `on_revision`) the revision a migration reached."""
    if (on_revision := config.attributes.get("on_revision")) is not None:
        on_revision(next(iter(heads), None))


def run_migrations(connection: Connection) -> None:
    # Batch mode lets a later revision alter SQLite tables (copy and move), as Alembic advises.
    # Handed a connection already in a transaction (`pipeline.store.migrate` reads the store's
    # revision first), Alembic runs every migration in it: the caller commits them together.
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True, compare_type=True, on_version_apply=[tell_revision])
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_migrations(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as opened:
        run_migrations(opened)
