"""Compacting the store: the disk given back the space deleted rows left.

Raw probes pruned past `APIDIR_PROBES_KEPT_DAYS` free their pages, which later nights reuse,
but neither database shrinks its files by itself: once the limit is first set on a long
history, or lowered, `apidir db compact` rewrites them without that space."""

from __future__ import annotations

import os
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, inspect, text

from pipeline.store.migrate import (
    migrating,
    refuse_too_new,
    running_refusal,
    store_name,
    stored_revision,
)


class CompactRefusedError(ValueError):
    """A store not compacted: none there, or one a run is still using."""


@dataclass(frozen=True)
class Compacted:
    """The store's size on disk, in bytes, before and after compacting."""

    before: int
    after: int


def compact_store(engine: Engine, ignore_running: bool = False) -> Compacted:
    """Rewrite the store without the space deleted rows left: a SQLite file with VACUUM (which
    needs free disk of the file's size while it runs), then its write-ahead log emptied; a
    PostgreSQL database's tables with VACUUM FULL (each locked while it is rewritten), and
    their statistics renewed. CompactRefusedError for a SQLite file that is not there (none is
    made), or while a run is using the store, unless `ignore_running` (a run whose process is
    gone). One process at a time with schema changes (`migrating`): either waits for the
    other. StoreTooNewError for a store a newer version wrote."""
    database = engine.url.database or ""
    if engine.dialect.name == "sqlite" and not os.path.isfile(database):
        raise CompactRefusedError(f"no store at {database}: nothing to compact")
    # Held throughout, so that a `db upgrade` or `db downgrade` started meanwhile waits for it.
    with migrating(engine) as held:
        # A schema this version does not know is left as its version wrote it, and its run
        # table is not read by what this version takes its columns to be.
        refuse_too_new(stored_revision(held), store_name(engine))
        in_use = running_refusal(held) if inspect(held).has_table("pipeline_run") else None
        if in_use and not ignore_running:
            raise CompactRefusedError(in_use)
        held.rollback()  # no read left open: VACUUM waits for none
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            before = store_size(connection)
            if connection.dialect.name == "sqlite":
                connection.exec_driver_sql("VACUUM")
                connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            else:
                connection.exec_driver_sql("VACUUM (FULL, ANALYZE)")
            return Compacted(before, store_size(connection))


def store_size(connection: Connection) -> int:
    """The store's bytes on disk: a SQLite file with its write-ahead log, or a PostgreSQL
    database."""
    if connection.dialect.name != "sqlite":
        return connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
    database = connection.engine.url.database or ""
    return sum(os.stat(path).st_size for path in (database, f"{database}-wal")
               if os.path.isfile(path))
