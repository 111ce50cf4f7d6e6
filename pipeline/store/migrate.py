"""Schema migrations of the store, with Alembic: every schema change ships as a revision under
`migrations/versions/`, and the pipeline upgrades the database when it opens it (or, with
`APIDIR_DATABASE_UPGRADE=check`, refuses with the command that upgrades it).

An upgrade or a downgrade is one transaction, on SQLite as on PostgreSQL: cut short (killed, or
a migration failing on what the store holds), it leaves the store at the revision it had, with
that revision's schema, and the next upgrade starts from there.

A database made before migrations existed has no version table: it is recognised by its
tables, marked with the revision it matches, then upgraded, so its history is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Literal

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from filelock import FileLock
from sqlalchemy import DateTime, event, inspect, text
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from pipeline.processes import left_behind_before, run_left_behind
from pipeline.settings import Settings, shown

MIGRATIONS = Path(__file__).parent / "migrations"
UPGRADE_COMMAND = "apidir db upgrade"
CLOSE_RUN_COMMAND = "apidir db close-run"
UpgradeMode = Literal["auto", "check"]
# A database from before migrations, told by its tables: the newest schema's first.
UNVERSIONED_SCHEMAS = (("0002", "daily_entry"), ("0001", "entry"))
_ADVISORY_LOCK_KEY = 0x61706964  # PostgreSQL: one migrating process at a time


class StoreOutOfDateError(RuntimeError):
    """The store's schema is older than this version's and upgrading on start is off."""


class MigrationFailedError(RuntimeError):
    """A migration failed on what the store holds (or could not take its lock): the upgrade or
    downgrade was undone whole, and the store is at the revision it had."""


class StoreTooNewError(RuntimeError):
    """The store's schema revision is one this version does not know: a newer version wrote
    it, and no upgrade of this version can go forward from it (nor any command read it)."""


def alembic_config(connection: Connection | None = None,
                   on_revision: Callable[[str | None], None] | None = None) -> Config:
    """Alembic's configuration, running on `connection`; `on_revision` is told each revision
    the store reaches, as each migration ends (in the transaction, not yet committed)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    config.attributes["on_revision"] = on_revision
    return config


@cache
def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


@cache
def known_revisions() -> tuple[str, ...]:
    """Every schema revision this version knows, newest first."""
    return tuple(script.revision for script in
                 ScriptDirectory.from_config(alembic_config()).walk_revisions())


def too_new_line(revision: str, store: str = "the store") -> str:
    """Why a store at `revision`, which this version does not know, is refused: the one
    wording of `db current`, `db upgrade`, `db downgrade` and every command opening it."""
    known = known_revisions()
    return (f"{store} has schema revision {revision}, which this version does not know (it "
            f"knows {known[-1]} to {known[0]}): a newer version wrote it; install that version, "
            f"or take the store back to {known[0]} with that version's "
            f"`apidir db downgrade {known[0]}`")


def refuse_too_new(revision: str | None, store: str = "the store") -> None:
    """StoreTooNewError when `revision` is one this version does not know."""
    if revision is not None and revision not in known_revisions():
        raise StoreTooNewError(too_new_line(revision, store))


def store_name(store: Engine | URL) -> str:
    """The store as a line names it: its URL, with any password hidden."""
    return f"the store {shown(store.url if isinstance(store, Engine) else store)}"


# What PgBouncer says of a connection whose startup packet carries libpq's `options`, which
# every one of the store's does (the server's keepalives, `keepalive.connection_keepalives`),
# unless its config lets that parameter through: the fix is in its config, not the pipeline's.
POOLER_REFUSED_OPTIONS = "unsupported startup parameter: options"
POOLER_FIX = (" (PgBouncer refuses the `options` startup parameter, which the pipeline sets on "
              "every connection: set `ignore_startup_parameters = options` in its config, and "
              "`pool_mode = session`)")


def database_said(error: DBAPIError) -> str:
    """The database's own reason for `error` ("database is locked", "Connection refused"), its
    first line: SQLAlchemy's text adds the statement, its parameters and a link to its docs,
    which tell a user nothing to act on and may show the data. PgBouncer's refusal of the
    `options` parameter is told with its fix."""
    said = next(iter(str(error.orig).strip().splitlines()), "").strip()
    if said.endswith(POOLER_REFUSED_OPTIONS):
        said += POOLER_FIX
    return said or type(error.orig).__name__


# What PostgreSQL says, by SQLSTATE, of a store its operator set up so that the pipeline cannot
# use it, beside the connection and resource failures SQLAlchemy counts as OperationalError:
# a user without the rights on its tables, a database that takes no writes (a standby, or
# `default_transaction_read_only`), tables or columns a hand or another program took away.
OPERATOR_SQLSTATES = {
    "42501": "insufficient_privilege",
    "25006": "read_only_sql_transaction",
    "42P01": "undefined_table",
    "42703": "undefined_column",
}


def operator_caused(error: DBAPIError) -> bool:
    """Whether the database refused `error`'s statement for what its operator set up or did
    (out of reach, busy, full, read-only, without rights, tables gone), which the operator
    mends, rather than for a fault of the pipeline. SQLite says each of those as an
    OperationalError; PostgreSQL says some in other classes, told by their SQLSTATE."""
    return isinstance(error, OperationalError) or (
        getattr(error.orig, "sqlstate", None) in OPERATOR_SQLSTATES)


# What SQLite says of a store set up so that no retry mends it: a file (or folder) it may not
# write, a table or column a hand or another program took away.
LASTING_SQLITE_ERRORS = ("SQLITE_READONLY",)
LASTING_SQLITE_WORDS = ("no such table", "no such column")


def lasting_refusal(error: BaseException) -> bool:
    """Whether `error` is the store refusing the pipeline for how its operator set it up, in a
    way that trying again does not mend: a user without the rights on its tables, a database
    taking no writes, a table or column gone. Retrying such an error only puts off its line
    and its alert. A store busy or out of reach (the rest of `operator_caused`) may answer in
    a moment, and is retried."""
    if not isinstance(error, DBAPIError):
        return False
    if getattr(error.orig, "sqlstate", None) in OPERATOR_SQLSTATES:
        return True
    name = getattr(error.orig, "sqlite_errorname", None) or ""
    return name.startswith(LASTING_SQLITE_ERRORS) or str(error.orig).startswith(
        LASTING_SQLITE_WORDS)


def store_failure_line(what: str, error: DBAPIError, store: Engine | URL) -> str:
    """The one line of a database error outside migrations: `what` failed (a command, a stage,
    a run), on which store, and the database's reason."""
    return f"{what} failed on {store_name(store)}: {database_said(error)}"


def stored_revision(connection: Connection) -> str | None:
    """The revision the database is at: its version table's, else the schema its tables
    match (a database from before migrations), else None (an empty database)."""
    revision = MigrationContext.configure(connection).get_current_revision()
    if revision is not None:
        return revision
    tables = set(inspect(connection).get_table_names())
    return next((rev for rev, table in UNVERSIONED_SCHEMAS if table in tables), None)


def store_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return stored_revision(connection)


@contextmanager
def migrating(engine: Engine) -> Iterator[Connection]:
    """A connection held by one process at a time that changes the store's schema or files
    (`db upgrade`, `db downgrade`, `db compact`): a lock file beside a SQLite file, an
    advisory lock on PostgreSQL."""
    database = engine.url.database
    sqlite_file = engine.url.get_backend_name() == "sqlite" and database not in (None, "",
                                                                                 ":memory:")
    with (FileLock(f"{database}.migrate.lock") if sqlite_file else nullcontext()), \
            engine.connect() as connection:
        if engine.url.get_backend_name() == "sqlite":
            _with_transactional_ddl(connection)
        postgres = engine.url.get_backend_name() == "postgresql"
        if postgres:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
            connection.commit()
        try:
            yield connection
        finally:
            if postgres:
                connection.rollback()
                connection.execute(text("SELECT pg_advisory_unlock(:key)"),
                                   {"key": _ADVISORY_LOCK_KEY})
                connection.commit()


def _with_transactional_ddl(connection: Connection) -> None:
    """Make `connection`'s transactions on SQLite hold its schema changes too, as SQLAlchemy's
    recipe for pysqlite does: the driver begins a transaction only before INSERT, UPDATE or
    DELETE, so an ALTER or CREATE before one committed on its own, and a migration cut short
    left columns its revision did not record. The driver's own BEGIN is turned off (its
    autocommit mode, on this connection alone: SQLAlchemy restores it when the connection goes
    back to the pool, so the pipeline's other connections keep theirs) and the transaction is
    begun here. `BEGIN IMMEDIATE` takes the write lock at once, waiting for another writer's
    commit as any write does: begun as a read, the transaction would fail at its first write
    had another process committed meanwhile."""
    connection.execution_options(isolation_level="AUTOCOMMIT")
    event.listen(connection, "begin", _begin_immediate)


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def _undone_if_failed(change: str, store: str) -> Iterator[Callable[[str | None], None]]:
    """Run a change of the store's revision (`change`: "upgraded", "taken back"), told the
    revision the store is at, then each one it reaches. A statement failing (a migration
    meeting what the store holds, the write lock not got) is told as MigrationFailedError:
    which step failed and why, in one line, without the statement. The transaction it was in
    is undone whole when the connection closes."""
    reached: list[str | None] = []
    try:
        yield reached.append
    except DBAPIError as error:
        cause = database_said(error)
        if not reached:
            raise MigrationFailedError(f"{store} was not {change} ({cause}); nothing was "
                                       "changed") from error
        step = _next_step(reached[-1], change == "upgraded")
        where = ("" if step is None
                 else f": going from schema revision {step[0]} to {step[1]} failed")
        raise MigrationFailedError(
            f"{store} was not {change}{where} ({cause}); every change was undone, it is "
            f"still at schema revision {reached[0] or 'none (empty database)'}") from error


def _next_step(reached: str | None, upgrade: bool) -> tuple[str, str] | None:
    """The migration after revision `reached` on the way up or down, as (from, to)."""
    for script in ScriptDirectory.from_config(alembic_config()).walk_revisions():
        if upgrade and script.down_revision == reached:
            return reached or "none", script.revision
        if not upgrade and script.revision == reached:
            return reached, script.down_revision or "none"
    return None


def _stamp_unversioned(connection: Connection, revision: str | None) -> None:
    """Write the version table of a store made before migrations, at `revision`, the one its
    tables match (`stored_revision`)."""
    if revision and MigrationContext.configure(connection).get_current_revision() is None:
        command.stamp(alembic_config(connection), revision)


def upgrade_store(engine: Engine) -> tuple[str | None, str]:
    """Bring the store to the newest schema, keeping every row; (from, to) revisions."""
    store = store_name(engine)
    with migrating(engine) as connection, _undone_if_failed("upgraded", store) as reach:
        before = stored_revision(connection)
        reach(before)
        refuse_too_new(before, store)
        _stamp_unversioned(connection, before)
        command.upgrade(alembic_config(connection, reach), "head")
        connection.commit()
    return before, head_revision()


class RevisionRefusedError(ValueError):
    """A schema revision the store cannot be taken back to."""


def downgrade_store(engine: Engine, revision: str, ignore_running: bool = False,
                    ) -> tuple[str, str]:
    """Take the store back to an older version's schema `revision`, one revision at a time:
    every row that schema holds is kept; what later revisions added (columns, tables, and
    what they held) is dropped. (from, to) revisions; RevisionRefusedError, saying why, for a
    revision this version does not know, newer than the store's, an empty store, or a store
    a run is still using (`running_runs`) unless `ignore_running`."""
    known = list(known_revisions())  # newest first
    if revision not in known:
        raise RevisionRefusedError(f"no schema revision {revision!r}: this version knows "
                                   f"{known[-1]} to {known[0]}")
    store = store_name(engine)
    with migrating(engine) as connection, _undone_if_failed("taken back", store) as reach:
        version = connection.dialect.server_version_info or ()  # known once connected
        if connection.dialect.name == "sqlite" and version < (3, 35):
            raise RevisionRefusedError(  # the downgrades drop columns in place
                f"taking a SQLite store back needs SQLite 3.35 or later; this Python has "
                f"{'.'.join(map(str, version))}")
        before = stored_revision(connection)
        reach(before)
        if before is None:
            raise RevisionRefusedError("the store is empty: there is no schema to take back")
        if before not in known:
            raise RevisionRefusedError(too_new_line(before, store))
        if known.index(revision) < known.index(before):
            raise RevisionRefusedError(f"the store has schema revision {before}, older than "
                                       f"{revision}: run `{UPGRADE_COMMAND}` to go forward")
        if before != revision and not ignore_running and (
                refusal := running_refusal(connection)):
            raise RevisionRefusedError(refusal)
        _stamp_unversioned(connection, before)
        command.downgrade(alembic_config(connection, reach), revision)
        connection.commit()
    return before, revision


def running_refusal(connection: Connection) -> str | None:
    """Why a store a run is still using (`running_runs`) is refused, in one line; None when
    no run is using it."""
    if not (running := running_runs(connection)):
        return None
    run_id, named = running[0]
    more = f" (and {len(running) - 1} more)" if len(running) > 1 else ""
    return (f"{named} is still running{more}: wait for it to end and pause the schedule "
            "first, or, if its process is gone, pass --ignore-running (or close its record: "
            f"`{CLOSE_RUN_COMMAND} {run_id}`)")


def running_runs(connection: Connection) -> list[tuple[int, str]]:
    """The runs the store marks running, each with its id and as "run N (flow, since …, on
    host)": a newer version still writing would fail on the columns a downgrade drops. A run
    that provably runs no more (`run_left_behind`: its process here is gone, or it started
    longer ago than APIDIR_RUN_TIMEOUT allows) is not counted: the next run marks it crashed.
    One on another machine within its time limit cannot be told from a live one."""
    owner = {"host", "pid"} <= {column["name"] for column in
                                inspect(connection).get_columns("pipeline_run")}
    rows = connection.execute(text(
        "SELECT id, flow, started_at" + (", host, pid" if owner else ", NULL AS host, NULL AS pid")
        + " FROM pipeline_run WHERE state = 'running' ORDER BY id").columns(
            started_at=DateTime(timezone=True)))
    before = left_behind_before(datetime.now(UTC), Settings().run_timeout)
    return [(run_id, f"run {run_id} ({flow}, since {str(started)[:19]}"
                     f"{f', on {host}' if host else ''})")
            for run_id, flow, started, host, pid in rows
            if not run_left_behind(host, pid, _utc(started), before)]


def _utc(moment: datetime) -> datetime:
    """A stored time, which SQLite hands back naive, as the UTC time it is."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def prepare_store(engine: Engine, mode: UpgradeMode = "auto") -> None:
    """Make the store ready for this version: upgraded (`auto`), or checked (`check`: an
    older schema is refused with StoreOutOfDateError; an empty database is created). A
    schema newer than this version's is refused either way, with StoreTooNewError."""
    current = store_revision(engine)
    if current == head_revision():
        return
    refuse_too_new(current, store_name(engine))
    if mode == "check" and current is not None:
        raise StoreOutOfDateError(
            f"{store_name(engine)} has schema revision {current}, this version needs "
            f"{head_revision()}: run `{UPGRADE_COMMAND}` (or set APIDIR_DATABASE_UPGRADE=auto)"
        )
    upgrade_store(engine)
