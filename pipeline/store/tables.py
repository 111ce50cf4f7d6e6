"""SQLModel tables, the engine, and the upserts and queries the stages share.

SQLite by default; PostgreSQL through a `postgresql+psycopg://` URL works the same
(the tests run against both). Nothing here is dialect-specific: text is ordered in
Python, never by the server's collation, so every backend publishes the same bytes.
Nothing is deleted but raw probes past `APIDIR_PROBES_KEPT_DAYS`, once their day is rolled
up, and the probe shards of ended runs: an entry gone from `data/` is retired with its history
kept.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import socket
import sqlite3
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache, lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Date,
    DateTime,
    Index,
    LargeBinary,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    event,
    func,
    insert,
    or_,
    true,
    update,
)
from sqlalchemy.engine import Connection, Engine, ExceptionContext, make_url
from sqlalchemy.exc import DBAPIError
from sqlmodel import Field, Session, SQLModel, col, create_engine, select
from sqlmodel.sql.expression import Select, SelectOfScalar

from pipeline.processes import (
    LEFT_BEHIND_MARGIN,
    left_behind_before,
    process_gone,
    run_left_behind,
)
from pipeline.settings import Settings, shown
from pipeline.store.keepalive import connection_keepalives
from pipeline.store.migrate import UpgradeMode, prepare_store

UtcDateTime = DateTime(timezone=True)


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(moment: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    if type(moment) is datetime:  # asked of every probe read: a quarter of `replace`'s cost
        return datetime.combine(moment, moment.time(), UTC)
    return moment.replace(tzinfo=UTC)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The first and the last instant of a UTC day (both inclusive)."""
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1) - timedelta(microseconds=1)


def utc_text(moment: datetime) -> str:
    """A UTC moment as RFC 3339 text with `Z`, as the published documents write it."""
    if moment.tzinfo is None:  # as SQLite hands it back: an aware one's text takes twice as long
        return moment.isoformat() + "Z"
    return moment.isoformat().replace("+00:00", "Z")


def json_time(moment: datetime | None) -> str | None:
    """A stored time (or none) as the contract's models write it in JSON (`utc_text`): what the
    JSON forms of presented values hold, written without a model built for each."""
    return None if moment is None else utc_text(moment)


TimeText = Callable[[datetime | None], str | None]  # `json_time`, or a memo of it (`time_texts`)


def time_texts(kept: int = 256) -> TimeText:
    """`json_time` that writes each moment once while it recurs among the last `kept` asked: a
    probe's check time is written into its entry's status, its endpoint's, HTTPS and CORS,
    some 320,000 texts of 130,000 moments a span of 50,000 entries (a text costs some 1 µs, a
    memo's hit a quarter of that). Equal moments share one text: those of one store's read
    share one offset too (none on SQLite, the session's on PostgreSQL)."""
    return lru_cache(maxsize=kept)(json_time)


IN_LIST = 500  # ids in one IN list: bounded for every database's limit on bound values


def in_lists(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    """`ids` an IN list of at most `IN_LIST` at a time, for queries that may be asked of any
    number of entries (PostgreSQL binds at most 65,535 values in a statement)."""
    for start in range(0, len(ids), IN_LIST):
        yield ids[start : start + IN_LIST]

COMPARED_COLUMNS = ("retired_at", "source_file", "file_hash", "file_stat", "successor", "id",
                    "content_hash", "scored_hash", "scored_rubric", "former_ids")


class EntryRow(SQLModel, table=True):
    """The last valid version of one curated entry."""

    __tablename__ = "entry"
    # What each night compares (the file hashes, states and content hashes, the content scores'
    # freshness) read from an index alone, without walking past every entry's content.
    # Every published entry's base address, read from an index alone (`active_base_urls`).
    __table_args__ = (Index("ix_entry_compared", *COMPARED_COLUMNS),
                      Index("ix_entry_base_url", "retired_at", "id", "base_url"))

    id: str = Field(primary_key=True)
    category: str = Field(index=True)
    name: str
    content: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    content_hash: str
    source_file: str  # relative to the entries folder, with `/` (`CatalogReport.stored_name`)
    # The entry file's bytes (with the reader's fingerprint) when last parsed: an unchanged
    # file is not parsed again.
    file_hash: str | None = None
    # The file's stat when its bytes were last read (`catalogue.entries.file_stat`): a file
    # whose stat is unchanged is not even read. None where it is not to be trusted.
    file_stat: str | None = None
    # The successor the curator named (`deprecated.successor`): checked every night to still be
    # an entry of the catalogue, also when the file is not read again.
    successor: str | None = None
    # The ids the curator says the entry had before (`formerIds`, joined by commas): checked
    # every night to be claimed by no other entry, also when the file is not read again.
    former_ids: str | None = None
    # The content's `baseUrl`, kept apart so that what plans and presents the probes reads every
    # published entry's without the database parsing each entry's content.
    base_url: str | None = None
    # When the ingest found `base_url` changed (the provider moved its API), None where it never
    # did since this was kept: the probes checked before are of another address, no evidence of
    # the one listed now. Indexed, so the few entries that moved lately are found by a range.
    base_url_since: datetime | None = Field(default=None, sa_type=UtcDateTime, index=True)
    # Pricing and Depth as the content alone decides them (JSON), with the content hash and
    # the rubric they were judged by: the score stage reads them back while both still hold.
    content_scores: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    scored_hash: str | None = None
    scored_rubric: str | None = None
    first_seen_at: datetime = Field(sa_type=UtcDateTime)
    updated_at: datetime = Field(sa_type=UtcDateTime)
    retired_at: datetime | None = Field(default=None, sa_type=UtcDateTime, index=True)


def endpoint_key(method: str | None, path: str | None) -> tuple[str, str]:
    """An endpoint's row, and so its probe target and status, among its entry's: its (method,
    path), GET and `/` where the entry leaves them out. Operations listed with the same key (one
    POST path taking several queries) are one row, probed once and sharing its status."""
    return method or "GET", path or "/"


class EndpointRow(SQLModel, table=True):
    """One listed endpoint; kept (inactive) when it leaves the entry so its history stays linked.
    One row per `endpoint_key`: its first listed position stands for every operation with it."""

    __tablename__ = "endpoint"
    __table_args__ = (UniqueConstraint("entry_id", "method", "path"),)

    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(foreign_key="entry.id", index=True)
    method: str
    path: str
    description: str | None = None
    position: int = 0
    active: bool = True
    # Why the prober does not call it, e.g. "method is POST", or why its latest planned run
    # did not (its host given up on). A probe's own note is its row's (`history.PROBE_NOTE`).
    probe_note: str | None = None


class PipelineRun(SQLModel, table=True):
    """One run of a flow: when, how it ended, what it counted and which errors it met."""

    __tablename__ = "pipeline_run"

    id: int | None = Field(default=None, primary_key=True)
    flow: str
    flow_run_id: str | None = Field(default=None, index=True)  # the orchestrator's run, if any
    host: str | None = None  # the machine and process that run it, to tell one that died
    pid: int | None = None
    started_at: datetime = Field(sa_type=UtcDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    # The highest run id in the store when the run ended (`run_end_mark`): where its end falls
    # among the runs' starts, which the store's ids order whatever the machines' clocks say.
    last_run_at_end: int | None = None
    state: str = "running"
    entries_seen: int = 0
    entries_published: int = 0
    entries_added: int = 0
    entries_updated: int = 0
    entries_retired: int = 0
    entries_invalid: int = 0
    errors: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON))
    release_version: str | None = None
    message: str | None = None
    probes: int = 0
    probes_failed: int = 0
    # Targets not probed: their host was given up on in the run. They store no row, so a run
    # read back from the store (`history.stored_run_tally`) counts them from here.
    probes_unchecked: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    network_suspect: bool = False  # most probes failed at once: the prober's own network
    # When the run's probes were counted and judged (`history.close_probe_run`). Its probes
    # count only from then, and only if it is not network-suspect: a shard commits its rows
    # before the run is judged, and a run that died before it never is.
    judged_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    # The earliest and latest check time of the run's stored probes (None: none stored), kept
    # as each part of them is stored (`history.add_probes`): whether a read of one day's
    # probes holds all of the run's.
    first_checked_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    last_checked_at: datetime | None = Field(default=None, sa_type=UtcDateTime)


class ProbeRow(SQLModel, table=True):
    """One probe of one URL in one run; rows are only ever added, by `history.add_probes`,
    which keeps their run's first and last check time."""

    __tablename__ = "probe"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="pipeline_run.id", index=True)
    entry_id: str = Field(foreign_key="entry.id", index=True)
    endpoint_id: int | None = Field(default=None, foreign_key="endpoint.id")
    url: str
    checked_at: datetime = Field(sa_type=UtcDateTime, index=True)
    outcome: str  # live | online | unreachable
    reason: str | None = None
    error_class: str | None = None
    http_status: int | None = None
    total_ms: float | None = None
    dns_ms: float | None = None
    connect_ms: float | None = None
    ttfb_ms: float | None = None
    final_url: str | None = None
    attempts: int = 1
    redirects: int = 0
    error: str | None = None
    cors_allow_origin: str | None = None  # Access-Control-Allow-Origin to our Origin
    cors_allow_credentials: bool | None = None
    tls_version: str | None = None  # of the final hop's connection, when HTTPS
    cert_expires_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    # A second look, at the end of the run, at a target that failed: it decides the run.
    confirmation: bool = Field(default=False, sa_column_kwargs={"server_default": "0"})
    failure_class: str | None = None  # dead | blocked | transient | tls: a confirmed failure


class ProbeShardRow(SQLModel, table=True):
    """One shard of a run's probe stage when shards run as flow runs on workers of any
    machine: the targets it must probe (planned once by the run), then where it ran and
    what it counted. A shard's probe rows and its `finished_at` are committed together. The
    shards of a run that has ended are deleted when the next sharded run plans its own."""

    __tablename__ = "probe_shard"

    run_id: int = Field(primary_key=True, foreign_key="pipeline_run.id")
    shard: int = Field(primary_key=True)
    targets: list[Any] = Field(sa_column=Column(JSON, nullable=False))  # [url, entry, endpoint]
    # Hosts without targets of their own that its targets redirected to before: its alone.
    linked_hosts: list[str] | None = Field(default=None, sa_column=Column(JSON))
    flow_run_id: str | None = None  # the orchestrator's run of the shard
    host: str | None = None
    pid: int | None = None
    started_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UtcDateTime)
    seconds: float | None = None  # probing and storing, without the process's start
    cpu_seconds: float | None = None  # the process's CPU in those seconds (every thread)
    peak_rss_mib: float | None = None
    outcomes: dict[str, int] | None = Field(default=None, sa_column=Column(JSON))
    connect_failures: int = 0


class ReleaseRow(SQLModel, table=True):
    """A published release."""

    __tablename__ = "release"

    version: str = Field(primary_key=True)
    generated: datetime = Field(sa_type=UtcDateTime)
    total_apis: int
    run_id: int | None = Field(default=None, foreign_key="pipeline_run.id")


class DailyEntryRollup(SQLModel, table=True):
    """One entry's day: its probes and responses, and the scores it had at the end of that day.

    Derived only from the probe history, so recomputing a day gives the same row.
    """

    __tablename__ = "daily_entry"

    day: date = Field(primary_key=True)
    entry_id: str = Field(primary_key=True, foreign_key="entry.id")
    probes: int = 0
    responses: int = 0  # probes that got an HTTP response (live or online)
    # Successful probes: an HTTP answer that is no failure (`score.succeeded_probes`; a 404,
    # 429 or 5xx is not one). Uptime counts these; on a day rolled up before they were
    # counted apart and already pruned, the responses (migration 0020).
    successes: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    live: int = 0
    live_share: float | None = None  # live ÷ probes; None on a day without probes
    p50_ms: float | None = None  # of the successful probes' times
    p90_ms: float | None = None
    # Every timed successful probe of the day (ms, ascending): the score stage reads past
    # days' Latency evidence from here, never from the raw history.
    timed_ms: list[float] | None = Field(default=None, sa_column=Column(JSON))
    state: str = "unchecked"  # the presented state at the end of the day
    pricing: int | None = None  # None: the sub-score lacked its evidence that day
    latency: int | None = None
    depth: int | None = None
    provisional: bool | None = None
    percent: int = 0
    grade: str = ""
    rubric: str = ""


class DailyEndpointRollup(SQLModel, table=True):
    """One probed URL's day (an endpoint, or the base address standing in for it)."""

    __tablename__ = "daily_endpoint"

    day: date = Field(primary_key=True)
    entry_id: str = Field(primary_key=True, foreign_key="entry.id")
    url: str = Field(primary_key=True)
    endpoint_id: int | None = Field(default=None, foreign_key="endpoint.id")
    probes: int = 0
    responses: int = 0
    successes: int = Field(default=0, sa_column_kwargs={"server_default": "0"})  # as an entry's
    live: int = 0
    live_share: float | None = None
    p50_ms: float | None = None  # of the successful probes' times
    p90_ms: float | None = None


class RolledDay(SQLModel, table=True):
    """When a day's rollups were last computed for every entry, and from which runs: a day
    rolled up after it ended, having read every trusted run with probes that day, is complete,
    and its rows stand in for its raw probes."""

    __tablename__ = "rolled_day"

    day: date = Field(primary_key=True)
    rolled_at: datetime = Field(sa_type=UtcDateTime)
    # The day's rollup evidence in columns, written with its rows (`evidence.day_evidence`):
    # its probed entries' ids (joined by commas, in its rows' order) and their counts of probes
    # and successful probes and the successful probes' times (packed arrays). The score stage
    # reads a past day from here, one row, not from its 100,000 rows; None for a day rolled up
    # before they were kept (or before 0020 counted successes apart).
    evidence_entries: str | None = Field(default=None, sa_column=Column(Text))
    evidence: bytes | None = Field(default=None, sa_column=Column(LargeBinary))
    # Whether the day's raw probes were pruned (`rollup.prune_probes`): its rows stand as they
    # are and cannot be computed again. The probes of a run that is still an entry's latest
    # trusted run may stay on such a day (its published status is read from them).
    probes_pruned: bool = Field(default=False, sa_column_kwargs={"server_default": "0"})
    # The trusted runs with probes that day when its rollup read them (ids joined by commas;
    # `evidence.day_runs`): a trusted run not among them makes the day incomplete, whichever
    # clock judged it (`evidence.complete_days`). None or empty: none.
    runs_read: str | None = Field(default=None, sa_column=Column(Text))


class StateChange(SQLModel, table=True):
    """An entry's presented state moved from one checked state to another."""

    __tablename__ = "state_change"

    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(foreign_key="entry.id", index=True)
    from_state: str
    to_state: str
    at: datetime = Field(sa_type=UtcDateTime, index=True)
    run_id: int | None = Field(default=None, foreign_key="pipeline_run.id", index=True)
    former_id: str | None = None  # as an event's (`EntryEvent.former_id`)


class EntryState(SQLModel, table=True):
    """The state each entry was last published with, to tell what changed in the next run."""

    __tablename__ = "entry_state"

    entry_id: str = Field(primary_key=True, foreign_key="entry.id")
    state: str
    since: datetime = Field(sa_type=UtcDateTime)


class EntryLifecycle(SQLModel, table=True):
    """Where each entry stands in its life, judged once per probe run it took part in."""

    __tablename__ = "entry_lifecycle"

    entry_id: str = Field(primary_key=True, foreign_key="entry.id")
    state: str  # active | degraded | failing | dead | deprecated
    since: datetime = Field(sa_type=UtcDateTime)
    down_runs: int = 0  # consecutive judged runs in which no target of the entry answered
    dead_since: datetime | None = Field(default=None, sa_type=UtcDateTime)  # all targets dead
    judged_run_id: int | None = Field(default=None, foreign_key="pipeline_run.id")


class EntryEvent(SQLModel, table=True):
    """Something that happened to an entry in the catalogue: added, retired, or a lifecycle
    transition. Rows are only ever added."""

    __tablename__ = "entry_event"

    id: int | None = Field(default=None, primary_key=True)
    entry_id: str = Field(foreign_key="entry.id", index=True)
    kind: str  # added | retired | renamed | lifecycle
    from_value: str | None = None  # lifecycle: the state left; renamed: the former id
    to_value: str | None = None  # lifecycle: the state entered; renamed: `rename_news`
    at: datetime = Field(sa_type=UtcDateTime, index=True)
    run_id: int | None = Field(default=None, foreign_key="pipeline_run.id")
    # The id the event was about, where that id's history was taken over since (a rename):
    # published as it was, of that id. NULL: of `entry_id`.
    former_id: str | None = None


# A rename's event (kind `renamed`, under the new id, `from_value` the former id) is published
# as the new id added and the former retired; its `to_value` names those of the two a reader was
# not told before (`rename_news`): a merge of ids published apart for a while tells neither
# again. NULL, as stored before it named them: both.
RENAME_HALVES = ("added", "retired")


def rename_news(added: bool, retired: bool) -> str:
    """A rename event's `to_value`: the halves (`RENAME_HALVES`) that are news, by commas."""
    return ",".join(half for half, news in zip(RENAME_HALVES, (added, retired), strict=True)
                    if news)


def rename_halves(to_value: str | None) -> tuple[str, ...]:
    """The halves of a rename event to publish, from its `to_value` (`rename_news`)."""
    return RENAME_HALVES if to_value is None else tuple(filter(None, to_value.split(",")))


# How long a write to a SQLite store waits for another writer's commit (the driver's default is
# 5 s): probe shards end together and each stores its probes in one commit (some 3 s for
# 140,000 rows), and a day's rollup or a first ingest holds the lock longer; with 5 s, one of
# three shards ending at once failed ("database is locked") and was probed again. A `timeout`
# in the database URL's query is kept as given.
SQLITE_BUSY_SECONDS = 300.0


def open_engine(database_url: str) -> Engine:
    """An engine on the store as it is (schema untouched); a SQLite file's folder is made if
    missing."""
    refuse_what_is_no_file(database_url)
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        _store_folder_made(Path(url.database).parent)
    if url.get_backend_name() == "sqlite":
        waits = {} if "timeout" in url.query else {"timeout": SQLITE_BUSY_SECONDS}
        engine = create_engine(database_url, connect_args=waits)
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "handle_error", _damaged_sqlite_file)
        return engine
    # A server may close idle connections while a long probe stage runs: test each one
    # before use rather than fail the next stage. A server whose machine died or was cut off
    # fails the statement waiting on it within APIDIR_STORE_LOCK_KEEPALIVE seconds, and the
    # server gives up the backend of a run whose machine did (a commit's backend holds the
    # store lock's fence) as soon.
    keepalives = connection_keepalives(Settings().store_lock_keepalive, dict(url.query))
    return create_engine(database_url, pool_pre_ping=True, connect_args=keepalives)


def make_engine(database_url: str, upgrade: UpgradeMode = "auto") -> Engine:
    """An engine on a store of this version's schema: created or upgraded by its migrations,
    or checked, as `upgrade` says."""
    engine = open_engine(database_url)
    prepare_store(engine, upgrade)
    return engine


class StoreUnreadableError(RuntimeError):
    """The store's SQLite file is not a SQLite database, or is damaged: a matter of the file
    APIDIR_DATABASE_URL names, not of the pipeline."""


# What SQLite says of a file that is not one of its databases, or whose pages are damaged.
DAMAGED_SQLITE = ("file is not a database", "database disk image is malformed")


# What a SQLite store's path may name other than a file, as `stat` tells it.
NOT_A_FILE = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
              (stat.S_ISSOCK, "a socket"))


def refuse_what_is_no_file(database_url: str) -> None:
    """StoreUnreadableError, naming the URL and what its path is, when a SQLite store's path
    names something other than a file (a device, a directory, a FIFO): told before anything
    is opened or made beside it. SQLite reads /dev/zero as an empty database and fails at its
    first write, writing its journal beside the device, and a FIFO's first read waits for
    ever. A path that does not exist yet is a store to create."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return
    try:
        mode = os.stat(url.database).st_mode
    except OSError:  # missing, or out of reach: SQLite creates it, or says why it cannot
        return
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in NOT_A_FILE if test(mode)), "a special file")
    raise StoreUnreadableError(
        f"the store {shown(url)} (APIDIR_DATABASE_URL) is {kind}, not a SQLite file: set "
        "APIDIR_DATABASE_URL to a file, as sqlite:///FILE")


def _store_folder_made(folder: Path) -> None:
    """The SQLite store's folder, made if missing; one the system refuses (a file on its
    path, no permission) is told as StoreUnreadableError naming the folder and the setting,
    not as the system's bare error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        in_the_way = next((path for path in (folder, *folder.parents)
                           if path.exists() and not path.is_dir()), None)
        why = (f"{in_the_way} is a file, not a folder" if in_the_way is not None
               else exc.strerror or str(exc))
        raise StoreUnreadableError(
            f"the store's folder {folder} (APIDIR_DATABASE_URL) cannot be made: {why}; set "
            "APIDIR_DATABASE_URL to a file in a folder that can be") from None


def _damaged_sqlite_file(context: ExceptionContext) -> None:
    """A SQLite file that is not a database, or is damaged, told as StoreUnreadableError
    naming the file and the setting, wherever it is first read (connecting, a query, VACUUM)."""
    error = context.original_exception
    said = str(error)
    if not isinstance(error, sqlite3.DatabaseError) or not any(
            damage in said for damage in DAMAGED_SQLITE):
        return
    engine = context.engine
    name = engine.url.database if engine is not None else "the store's file"
    raise StoreUnreadableError(
        f"{name} (APIDIR_DATABASE_URL) is not a SQLite database, or is damaged ({said}): "
        "restore it from a backup, or set APIDIR_DATABASE_URL to another file")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


@cache
def engine_for(database_url: str) -> Engine:
    """One engine per database URL for the life of the process, prepared as the settings say
    (`APIDIR_DATABASE_UPGRADE`)."""
    return make_engine(database_url, Settings().database_upgrade)


@contextmanager
def session_scope(engine: Engine,
                  before_commit: Callable[[Session], None] | None = None) -> Iterator[Session]:
    """A session that commits on success and rolls back on error; `before_commit` runs before
    each of its commits (a held lock's check, `locks.LockCheck`): what it raises rolls back
    what the commit would have written. It runs once the commit's pending writes are sent
    (`_sent_then`), so that the lock is checked last before COMMIT."""
    with Session(engine, expire_on_commit=False) as session:
        if before_commit is not None:
            event.listen(session, "before_commit", _sent_then(before_commit))
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def _sent_then(check: Callable[[Session], None]) -> Callable[[Session], None]:
    """A session's hook before its commits: its pending writes sent (`flush`, which the commit
    would do after the hook, and may take long, as a first ingest's events), then `check` of
    the session, so that no more than the COMMIT's round trip follows it."""

    def hook(session: Session) -> None:
        session.flush()
        check(session)

    return hook


def content_hash(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


ABANDONED = "abandoned: the process running it"
LARGEST_ROW_ID = 2**63 - 1  # the most a SQLite INTEGER holds (a PostgreSQL integer less)


def reap_abandoned_runs(session: Session, run_timeout: float) -> list[PipelineRun]:
    """Runs still `running` that provably run no more (`run_left_behind`): their process on
    this host is gone (killed by the kernel, a signal or a crash), or they started longer ago
    than a run may last (`run_timeout`, APIDIR_RUN_TIMEOUT, and a margin), on a machine that
    is gone. Marked `crashed`, and returned so the new run can tell."""
    here = socket.gethostname()
    before = left_behind_before(utcnow(), run_timeout)
    statement = select(PipelineRun).where(
        PipelineRun.state == "running",
        or_(PipelineRun.host == here, col(PipelineRun.started_at) < before))
    reaped = []
    for run in list(session.exec(statement)):
        if process_gone(run.host, run.pid):
            why = f"{ABANDONED} (pid {run.pid} on {here}) is gone"
        elif as_utc(run.started_at) < before:
            why = left_behind_line(run, run_timeout)
        else:
            continue
        if claim_run_end(session, run, "crashed", why):
            reaped.append(run)
    return reaped


def run_end_mark() -> SelectOfScalar[int | None]:
    """The highest run id in the store, kept as a run ends (`last_run_at_end`): a run that
    ended after another has a mark of at least the other's, as the store, not a clock, says."""
    return select(func.max(PipelineRun.id))


def claim_run_end(session: Session, run: PipelineRun, state: str, message: str) -> bool:
    """Close the record of a run that another process may be closing at the same moment (two
    runs starting together reap the same dead run; the operator closes it as a run reaps it):
    in one statement, and only while it still says `running`, so exactly one of them closes
    it and sends its alert. Whether this one did; `run` is read back either way."""
    closed = session.execute(
        update(PipelineRun)
        .where(col(PipelineRun.id) == run.id, col(PipelineRun.state) == "running")
        .values(state=state, finished_at=utcnow(), message=message,
                last_run_at_end=run_end_mark().scalar_subquery())
        .execution_options(synchronize_session=False))
    session.commit()
    session.refresh(run)
    if closed.rowcount != 1:
        return False
    fold_write_ahead_log(session.get_bind())
    return True


def left_behind_line(run: PipelineRun, run_timeout: float) -> str:
    """Why a run whose process cannot be asked is taken as gone: it started too long ago."""
    margin = LEFT_BEHIND_MARGIN.total_seconds() / 3600
    return (f"{ABANDONED} (pid {run.pid} on {run.host or 'an unnamed host'}) is taken as gone: "
            f"it started at {utc_text(as_utc(run.started_at))}, longer ago than a run may "
            f"last (APIDIR_RUN_TIMEOUT={run_timeout:g} s and {margin:g} h)")


class RunNotClosedError(ValueError):
    """A run `close_run` was asked to close and did not: none of that id, ended already, or
    running here still."""


def close_run(session: Session, run_id: int, run_timeout: float) -> PipelineRun:
    """Close the record of run `run_id`, which the operator says no process runs any more (its
    machine is gone): marked `crashed`, as a reaped run is. A run of this machine whose
    process is alive, and not left behind (`run_left_behind`), is refused."""
    # a row id is a 64-bit integer: a larger number is no run's, which SQLite cannot even bind
    run = session.get(PipelineRun, run_id) if run_id <= LARGEST_ROW_ID else None
    if run is None:
        raise RunNotClosedError(f"no run {run_id} in the store")
    if run.state != "running":
        raise RunNotClosedError(_ended_line(run))
    before = left_behind_before(utcnow(), run_timeout)
    if run.host == socket.gethostname() and not run_left_behind(
            run.host, run.pid, as_utc(run.started_at), before):
        raise RunNotClosedError(f"run {run_id} is running here still, as process {run.pid}: "
                                f"stop it (`kill {run.pid}`), and its record closes itself")
    if not claim_run_end(session, run, "crashed",
                         f"{ABANDONED} (pid {run.pid} on {run.host or 'an unnamed host'}) is "
                         "gone, as the operator said (`apidir db close-run`)"):
        raise RunNotClosedError(_ended_line(run))  # closed by a run reaping it meanwhile
    return run


def _ended_line(run: PipelineRun) -> str:
    """Why a run that ended is not closed again."""
    ended = f" at {utc_text(as_utc(run.finished_at))}" if run.finished_at else ""
    return f"run {run.id} is not running: it ended {run.state}{ended}"


def start_run(session: Session, flow: str, flow_run_id: str | None = None) -> PipelineRun:
    run = PipelineRun(flow=flow, flow_run_id=flow_run_id, started_at=utcnow(),
                      host=socket.gethostname(), pid=os.getpid())
    session.add(run)
    session.commit()
    return run


def finish_run(session: Session, run: PipelineRun, state: str, message: str | None = None) -> None:
    """Close the run's record; a SQLite store's write-ahead log is folded back into its file
    (`fold_write_ahead_log`)."""
    run.state = state
    run.finished_at = utcnow()
    run.last_run_at_end = session.exec(run_end_mark()).one()
    if message is not None:
        run.message = message
    session.add(run)
    session.commit()
    fold_write_ahead_log(session.get_bind())


def fold_write_ahead_log(engine: Engine | Connection) -> None:
    """Copy a SQLite store's write-ahead log (`<file>-wal`, where its latest writes wait) into
    its file and empty it, as far as no other connection's read or write holds it back, never
    waiting for one: the file alone then holds the store as the run left it, and the log
    does not grow over the nights. Nothing on PostgreSQL."""
    if engine.dialect.name != "sqlite":
        return
    opened = engine.connect() if isinstance(engine, Engine) else nullcontext(engine)
    with opened as connection:
        cursor = connection.connection.driver_connection.cursor()
        try:
            waits = cursor.execute("PRAGMA busy_timeout").fetchone()[0]
            cursor.execute("PRAGMA busy_timeout = 0")
            try:
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                cursor.execute(f"PRAGMA busy_timeout = {int(waits)}")
        except sqlite3.OperationalError:  # another connection checkpoints: its fold will do
            pass
        finally:
            cursor.close()


def active_entries(session: Session) -> list[EntryRow]:
    """Entries that are published: not retired, sorted by id (code points, on every backend)."""
    statement = select(EntryRow).where(EntryRow.retired_at.is_(None))
    return sorted(session.exec(statement), key=lambda row: row.id)


@dataclass(frozen=True)
class EntrySpan:
    """The entries whose ids lie from `first` (included) to `past` (excluded), an end of None
    left open: the part of the entries one process of the score stage reads. Its ids are
    compared by the store alone, in its own order: a PostgreSQL collation may sort them
    otherwise than their code points."""

    first: str | None = None
    past: str | None = None

    def holds(self, entry_id: Any, indexed: bool = True) -> Any:
        """The condition that `entry_id` (a column) lies in the span. Not `indexed`: a filter
        that no index of the column serves, for the probes, which are read by their run or
        their check time (by the index of their entries, every night of the span's entries
        would be read)."""
        value = entry_id if indexed else entry_id.concat("")
        return and_(true(), *([] if self.first is None else [value >= self.first]),
                    *([] if self.past is None else [value < self.past]))


EVERY_ENTRY = EntrySpan()


def entry_spans(session: Session, parts: int, smallest: int = 1) -> list[EntrySpan]:
    """The published entries cut into at most `parts` spans of as many entries each, and of
    at least `smallest` entries each (one span of every entry where that leaves one)."""
    statement = select(EntryRow.id).where(EntryRow.retired_at.is_(None)).order_by(EntryRow.id)
    ids = session.connection().execute(statement).scalars().all()
    parts = min(parts, len(ids) // max(smallest, 1))
    if parts <= 1:
        return [EVERY_ENTRY]
    bounds = [None, *(ids[len(ids) * part // parts] for part in range(1, parts)), None]
    return [EntrySpan(first, past) for first, past in pairwise(bounds)]


def active_base_urls(session: Session, span: EntrySpan = EVERY_ENTRY) -> dict[str, str]:
    """The base address of every published entry (in `span`), by id, from its own column: not
    the rest of their content."""
    statement = select(EntryRow.id, EntryRow.base_url).where(
        EntryRow.retired_at.is_(None), span.holds(EntryRow.id))
    return dict(session.connection().execute(statement).all())  # Core rows: no ORM step


def active_entry_ids(session: Session, span: EntrySpan = EVERY_ENTRY) -> list[str]:
    """The ids of the published entries (in `span`), in code-point order on every backend (a
    PostgreSQL collation may sort them otherwise), without loading their rows."""
    statement = select(EntryRow.id).where(EntryRow.retired_at.is_(None), span.holds(EntryRow.id))
    return sorted(session.connection().execute(statement).scalars().all())  # fetched at once


def active_categories(session: Session) -> dict[str, str]:
    """The category of every published entry, by id, without loading their content."""
    statement = select(EntryRow.id, EntryRow.category).where(EntryRow.retired_at.is_(None))
    return dict(session.exec(statement).all())


def holds_entries(session: Session) -> bool:
    """Whether the store holds any published entry (one row read)."""
    return session.exec(select(EntryRow.id).where(EntryRow.retired_at.is_(None)).limit(1)
                        ).first() is not None


def release_versions(session: Session) -> list[str]:
    return list(session.exec(select(ReleaseRow.version)))


def insert_rows(session: Session, table: Table, rows: Iterable[Mapping[str, Any]]) -> None:
    """Insert `rows` (each with the same columns) into `table` at once, in the session's
    transaction. Each row is read once, as it is bound: given one at a time, they are never
    held all together (on PostgreSQL neither are their values).

    SQLAlchemy's executemany builds every row's parameters in Python, some 15 µs a row on
    SQLite: half the time a day's rollup (370,000 rows at 100k) took to store. There the
    statement is compiled once and only the values of columns with a bind processor (dates,
    times, JSON, booleans) go through their column's own, so what is stored is what SQLAlchemy
    stores. On PostgreSQL the values so bound are copied in (`COPY ... FROM STDIN`): psycopg's
    executemany sends an INSERT a row, which the server runs one by one (a day's rollup at
    100k took some 4.5 s more of the client's CPU); the driver's error is raised as SQLAlchemy
    raises any other (an OperationalError when the server is gone: the probes' commit tries
    again on one). Where SQLAlchemy would fill in a default in Python, or on any other
    database, its executemany runs as it is."""
    rows = iter(rows)
    if (first := next(rows, None)) is None:
        return
    keys = list(first)
    rows = _again_from(first, rows)
    del first  # each row read once, then let go
    connection = session.connection()
    dialect = connection.dialect
    compiled = insert(table).compile(dialect=dialect, column_keys=keys)
    if dialect.name == "sqlite" and sorted(order := compiled.positiontup or []) == sorted(keys):
        connection.exec_driver_sql(compiled.string, list(_bound(dialect, table, order, rows)))
    elif dialect.name == "postgresql" and not compiled.insert_prefetch:
        columns = ", ".join(dialect.identifier_preparer.quote(key) for key in keys)
        cursor = connection.connection.driver_connection.cursor()
        copy_in = f"COPY {dialect.identifier_preparer.format_table(table)} ({columns}) FROM STDIN"
        try:
            with cursor, cursor.copy(copy_in) as copy:  # each row bound as it is sent, none kept
                for values in _bound(dialect, table, keys, rows):
                    copy.write_row(values)
        except dialect.loaded_dbapi.Error as error:  # the driver's own, as SQLAlchemy raises it
            raise DBAPIError.instance(copy_in, None, error, dialect.loaded_dbapi.Error,
                                      hide_parameters=True, dialect=dialect) from error
    else:  # a default to fill in, or another database
        connection.execute(insert(table), list(rows))


def driver_columns(connection: Connection, statement: Select[Any]) -> list[list[Any]]:
    """Every row of `statement` at once, a column at a time (one empty list a column where
    there is no row), each value as SQLAlchemy reads it: the rows are the driver's own plain
    tuples, and each column's result processor (SQLite's text times made moments, its
    integers booleans) is applied a column at a time. SQLAlchemy's row objects cost some
    0.3-0.4 µs a row on top of the driver's, and a span's endpoints are 290,000 rows at 100k.
    Fetched unbuffered by SQLAlchemy (no streaming option: a streamed result holds its first
    row back), so for results read whole, as `.all()` would."""
    result = connection.execute(statement)
    try:
        processors = _result_processors(connection, statement, result.cursor)
        rows = result.cursor.fetchall()
    finally:
        result.close()
    return _processed_columns(rows, processors)


def driver_column_parts(connection: Connection, statement: Select[Any],
                        rows_at_once: int) -> Iterator[list[list[Any]]]:
    """The rows of `statement` as `driver_columns` reads them, `rows_at_once` at a time: each
    part a column at a time, for results too large to hold twice (as rows, then as columns).
    SQLite steps through the rows as they are fetched; PostgreSQL's client holds them all in
    its compact form (no server-side cursor: see `driver_columns`)."""
    result = connection.execute(statement)
    try:
        processors = _result_processors(connection, statement, result.cursor)
        while rows := result.cursor.fetchmany(rows_at_once):
            yield _processed_columns(rows, processors)
    finally:
        result.close()


def _processed_columns(rows: Sequence[tuple[Any, ...]],
                       processors: Sequence[Callable[[Any], Any] | None]) -> list[list[Any]]:
    """The driver's `rows` a column at a time (one empty list a column where there is no row),
    each column through its result processor."""
    columns = zip(*rows, strict=True) if rows else ((),) * len(processors)
    return [list(values) if processor is None else list(map(processor, values))
            for values, processor in zip(columns, processors, strict=True)]


def _result_processors(connection: Connection, statement: Select[Any],
                       cursor: Any) -> list[Callable[[Any], Any] | None]:
    """Each selected column's result processor (None where the driver's value is the value)."""
    dialect = connection.dialect
    return [column.type.dialect_impl(dialect).result_processor(dialect, described[1])
            for column, described in zip(statement.selected_columns, cursor.description,
                                         strict=True)]


def _again_from(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    """`first`, then `rest`, holding `first` no longer once it is read (`chain` would)."""
    yield first
    del first
    yield from rest


def _bound(dialect: Any, table: Table, order: Sequence[str],
           rows: Iterable[Mapping[str, Any]]) -> Iterator[tuple[Any, ...]]:
    """Each row's values in `order`, those of a column with a bind processor through it."""
    processors = []
    for n, name in enumerate(order):
        column_type = table.c[name].type
        processor = column_type.dialect_impl(dialect).bind_processor(dialect)
        if processor is not None:  # a day recurs on every row of a day's rollup: drawn once
            processors.append((n, cache(processor) if isinstance(column_type, Date)
                               else processor))
    values = operator.itemgetter(*order) if len(order) > 1 else (lambda row: (row[order[0]],))
    if not processors:
        yield from (tuple(values(row)) for row in rows)
        return
    for row in rows:
        value = list(values(row))
        for n, processor in processors:
            value[n] = processor(value[n])
        yield tuple(value)


def write_rows(session: Session, table: Table, new: Sequence[dict[str, Any]],
               changed: Sequence[dict[str, Any]] = (), key: str = "entry_id") -> None:
    """Insert the `new` rows of `table` and update the `changed` ones (found by their `key`
    column), with one executemany each: the ORM flushed a row at a time, which made the
    lifecycles and states of 100,000 entries cost some 8-13 s a night. Every row of a list
    sets the same columns. Committed by the caller."""
    insert_rows(session, table, new)
    if changed:
        columns = [name for name in changed[0] if name != key]
        statement = (update(table).where(table.c[key] == bindparam("row_key"))
                     .values({name: bindparam(f"new_{name}") for name in columns}))
        session.execute(statement, [{"row_key": row[key], **{f"new_{name}": row[name]
                                                             for name in columns}}
                                    for row in changed])
