"""Backing up the store: a copy that opens as the store stood at one moment, also while a run
writes.

A SQLite store keeps its latest writes in its write-ahead log (`<file>-wal`) until they are
folded back into the file, so a copy of the file alone may miss them, and a copy made while a
run writes may be torn. SQLite's online backup API copies every page of one read snapshot
instead, which a run's writes meanwhile do not touch. A PostgreSQL store is backed up with
its own tool, `pg_dump`."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from pipeline.store.migrate import store_name, store_revision


class BackupRefusedError(ValueError):
    """A backup not taken: no store to copy, a file already at the target, a folder that
    cannot hold it, or a store SQLite does not hold."""


@dataclass(frozen=True)
class BackedUp:
    """A backup taken: its file, size in bytes, and the schema revision it holds."""

    path: Path
    size: int
    revision: str


def back_up_store(engine: Engine, target: Path) -> BackedUp:
    """Copy the SQLite store of `engine` to the new file `target`, consistent while a run
    writes, as one file (no write-ahead log beside it) that `APIDIR_DATABASE_URL` can name
    as it is. The copy is written beside `target` and renamed to it once whole: `target` is
    never a half-written backup. BackupRefusedError, in one line, for a PostgreSQL store,
    a store that is not there or holds no schema, or a target that exists or whose folder
    cannot be written."""
    if engine.dialect.name != "sqlite":
        raise BackupRefusedError(
            f"{store_name(engine)} is a PostgreSQL database: back it up with PostgreSQL's "
            f"own tool, e.g. `pg_dump --format=custom --file {target} DATABASE`")
    database = engine.url.database or ""
    if database in ("", ":memory:") or not os.path.isfile(database):
        raise BackupRefusedError(f"no store at {database or 'an unnamed file'}: nothing to "
                                 "back up")
    if os.path.lexists(target):
        raise BackupRefusedError(f"{target} exists already: a backup goes to a new file")
    revision = store_revision(engine)  # a damaged file is told here (StoreUnreadableError)
    if revision is None:
        raise BackupRefusedError(f"{database} holds no store (no schema): nothing to back up")
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        raise BackupRefusedError(f"cannot write the backup {target}: "
                                 f"{error.strerror or error}") from error
    try:
        _copy_snapshot(engine, partial)
        os.rename(partial, target)
    except (sqlite3.Error, OSError) as error:  # a full disk, most likely
        raise BackupRefusedError(f"the backup {target} was not written: {error}; the store "
                                 "is unchanged") from error
    finally:
        partial.unlink(missing_ok=True)
    return BackedUp(target, target.stat().st_size, revision)


def _copy_snapshot(engine: Engine, partial: Path) -> None:
    """Every page of one read snapshot of the store into the empty file `partial`, in one step
    of the backup API (its read holds no writer back), then made a file of its own (rollback
    journal) and synced to disk."""
    source = engine.raw_connection()
    try:
        copy = sqlite3.connect(partial)
        try:
            source.driver_connection.backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")
        finally:
            copy.close()
    finally:
        source.close()
    with open(partial, "rb") as written:
        os.fsync(written.fileno())
