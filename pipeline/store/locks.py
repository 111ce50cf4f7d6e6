"""One writer of a kind at a time: the stages that rewrite shared rows of the store (the
catalogue's ingest; the daily rollups, their evidence and the pruning of probes) hold the
store's lock of their work for as long as they run, so two runs at once (a backfill during the
nightly, two schedulers by mistake) take turns instead of both inserting the same new entry or
the same day's rows, the second failing on a duplicate key.

On PostgreSQL an advisory lock (every run on any machine sees it; the server lets go when the
holder's connection ends, so the holder checks before each commit that its connection still
holds it, as the next run takes the lock and writes too). The check and the COMMIT run on two
connections, so each commit is fenced too: its transaction holds the fence shared from before
its check to its COMMIT's end, and the next holder takes the fence exclusively before it reads
or writes. So a commit either stops (its check finds the lock lost) or ends before the next
holder reads or writes a row, never while it does: the next holder waits for it, at most
`APIDIR_STORE_LOCK_TIMEOUT` seconds in all. Beside a SQLite file an exclusive
lock on a file of its own (the kernel lets go when the holder dies: a file a killed run left
behind is taken at once). A run waits its turn at most `APIDIR_STORE_LOCK_TIMEOUT` seconds,
then StoreLockTimeout names the run holding the lock. The lock file is trusted for nothing:
never followed through a link (its holder writes its run id into it), and read for a run id
from its first bytes alone. A lock is held on the file at its path alone: one removed or
replaced before its lock was taken is let go and the path's file taken instead
(`take_lock_file`); one removed or replaced while its lock is held fails its holder before its
next commit (`check_held`), as the next run locks the new file at the path and writes too. A
commit that passed that check (made after its writes were sent, so inside SQLite's write
transaction) before the file left the path ends before the next holder reads or writes: that
holder takes and lets go of SQLite's write lock first, waiting for that COMMIT for what is left
of its `APIDIR_STORE_LOCK_TIMEOUT`, then StoreLockTimeout as on PostgreSQL. A commit that wrote
nothing holds no write lock, and writes nothing either. The publish lock's file is taken and
checked by the same rules.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session

from pipeline.store.keepalive import SERVER_SETTINGS, keepalive_settings
from pipeline.store.tables import PipelineRun, as_utc, utc_text

log = logging.getLogger(__name__)

# PostgreSQL advisory locks of two int4 keys (`objsubid` 2 in pg_locks): the work's lock is
# (WORK_KEY, work); its holder shows which run it is by a shared lock on (HOLDER_KEY + work,
# run id). The migrations' lock is a single bigint key, which never meets these.
WORK_KEY = 0x61706965
HOLDER_KEY = 0x61707000
# Its commits' fence is (FENCE_KEY, work): each commit of the lock's holder takes it shared,
# on the committing connection, until the COMMIT ends, and tells its run there as the holder
# does; the next holder takes and lets go of it exclusively before it reads or writes
# (`_advisory_check`), and names the run whose commit it waits for (`_fence_holder`).
FENCE_KEY = 0x61706665
LOCK_POLL_SECONDS = 0.05
_KEYS = "CAST(:key AS integer), CAST(:work AS integer)"  # the two int4 keys, never a bigint
NO_RUN = 0  # a stage called without a run's record (a benchmark, a test)
PREVIOUS_COMMIT = "the previous holder's commit"  # whose run no lock or row tells
# Beside a SQLite file, whose write lock any process may hold, not only a run's commit.
SQLITE_COMMIT = f"{PREVIOUS_COMMIT} (or another writer's)"


class StoreWork(IntEnum):
    """The kinds of work that take turns: each writes rows the other kind never does."""

    ingest = 1  # the catalogue's entries and endpoints
    rollup = 2  # the daily rollups, the days rolled up, the pruning of raw probes


class StoreLockTimeout(RuntimeError):
    """Another run held the store's lock of a work for longer than the wait allowed."""


class LockFileLost(RuntimeError):
    """A lock file left its path (removed or replaced) while its holder held it: the next
    run makes a new file at the path and locks it, so the holder stops before it writes."""


class StoreLockLost(LockFileLost):
    """The store's lock of a work was lost while this run held it: its lock file left its
    path, or the connection holding its advisory lock ended."""


# What a holder of the store's lock calls before each of its commits, with the committing
# session (`session_scope`): raises StoreLockLost once the lock is no longer held (on the file
# at its path, or by the advisory lock's connection).
LockCheck = Callable[[Session], None]


def _nothing_to_check(_session: Session) -> None:
    """The check of no lock at all: an in-memory store, which no other process opens."""


def _lost_line(lost: str, remedy: str) -> str:
    """StoreLockLost's line: how the lock was `lost`, what was done, the operator's `remedy`."""
    return (f"{lost} while this run held it, so another run may be writing the store at once: "
            f"this run stopped before committing its writes; {remedy}")


@contextmanager
def store_lock(engine: Engine, work: StoreWork, run_id: int | None,
               timeout: float, keepalive: int) -> Iterator[LockCheck]:
    """Hold the store's lock of `work` for run `run_id`, waiting at most `timeout` seconds for
    the run that holds it (then StoreLockTimeout naming that run); on PostgreSQL the server
    lets go of it `keepalive` seconds after the holder's machine stopped answering. Nothing to
    hold on an in-memory SQLite store, which no other process opens. Yields the check the
    holder runs before each commit (`LockCheck`)."""
    if engine.dialect.name == "postgresql":
        with _advisory_lock(engine, work, run_id or NO_RUN, timeout, keepalive) as check:
            yield check
        return
    database = engine.url.database
    if database in (None, "", ":memory:"):
        yield _nothing_to_check
        return
    with _file_lock(engine, Path(f"{database}.{work.name}.lock"), work, run_id or NO_RUN,
                    timeout) as check:
        yield check


@contextmanager
def _advisory_lock(engine: Engine, work: StoreWork, run_id: int, timeout: float,
                   keepalive: int) -> Iterator[LockCheck]:
    """The advisory lock of `work`, on a connection of its own held open while it is held
    (outside any transaction: none stays open for hours), waited for in the server's queue for
    at most `timeout` seconds (`lock_timeout`), so a waiter is seen in pg_locks. The server
    probes the connection's peer (`keepalive_settings`) while it waits and holds. Yields its
    check (`_advisory_check`) once the commits fenced under the former holder have ended."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        try:  # every path lets go: a lock granted before a statement failed is not pooled
            probes = keepalive_settings(keepalive)
            connection.execute(text("SELECT " + ", ".join(
                f"set_config('{name}', :{name}, false)" for name in probes)), probes)
            key = {"key": WORK_KEY, "work": int(work)}
            deadline = time.monotonic() + timeout
            taken = connection.execute(text(f"SELECT pg_try_advisory_lock({_KEYS})"), key).scalar()
            seen = None  # the run whose turn this one waited for, which may still be committing
            if not taken:
                seen = _advisory_holder(connection, work)
                _log_waiting(engine, work, seen)
                _bounded_wait(connection, f"SELECT pg_advisory_lock({_KEYS})", key, timeout,
                              lambda: _timeout_line(work, holder_named(
                                  engine, _advisory_holder(connection, work)), timeout))
            # Then the fence, taken and let go at once (in a transaction of its own: the
            # connection commits each statement), tried as the run tells it holds the lock:
            # granted once every commit that passed its check under the lock's former holder
            # has ended (`_advisory_check`), before this run reads or writes a row.
            fence = {"key": FENCE_KEY, "work": int(work)}
            fenced = connection.execute(text(
                "SELECT pg_advisory_lock_shared(CAST(:holder AS integer), CAST(:run AS integer)), "
                f"pg_try_advisory_xact_lock({_KEYS})"),
                {"holder": HOLDER_KEY + int(work), "run": run_id, **fence}).one()[1]
            if not fenced:
                commit = commit_named(engine, _fence_holder(connection, work) or seen)
                log.warning("the store's %s lock was let go while %s was under way: waiting "
                            "for that commit to end", work.name, commit)
                _bounded_wait(connection, f"SELECT pg_advisory_xact_lock({_KEYS})", fence,
                              max(deadline - time.monotonic(), 0.0),
                              lambda: _timeout_line(work, commit, timeout))
            yield _advisory_check(connection, work, run_id)
        finally:
            _let_go(connection)


def _bounded_wait(connection: Connection, statement: str, keys: dict[str, int], timeout: float,
                  timed_out: Callable[[], str]) -> None:
    """Run `statement`, which waits for an advisory lock in the server's queue, for at most
    `timeout` seconds (`lock_timeout`), then StoreLockTimeout in the line `timed_out()` says.
    The wait is bounded by `timeout` alone: not cut short by a statement_timeout the role or
    database sets, and both set back to theirs after it (the connection goes back to the
    pool)."""
    connection.execute(text("SELECT set_config('lock_timeout', :ms, false), "
                            "set_config('statement_timeout', '0', false)"),
                       {"ms": f"{max(1, round(timeout * 1000))}ms"})
    try:
        connection.execute(text(statement), keys)
    except OperationalError as error:
        if getattr(error.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        raise StoreLockTimeout(timed_out()) from None
    finally:
        connection.execute(text("RESET lock_timeout"))
        connection.execute(text("RESET statement_timeout"))


def _let_go(connection: Connection) -> None:
    """Let go of every advisory lock of the connection, and set its TCP settings back to the
    session's (`connection_keepalives`), before it goes back to the pool (a session's locks
    and settings outlive its transactions); a connection that cannot is thrown away, which
    lets go as well, and one already thrown away (its check failed) holds nothing more."""
    if connection.invalidated:
        return
    try:
        connection.execute(text("SELECT pg_advisory_unlock_all()"))
        for name in SERVER_SETTINGS:
            connection.execute(text(f"RESET {name}"))
    except DBAPIError:
        connection.invalidate()


# Whether this session holds the work's advisory lock: a connection that ended (the server
# restarted, the backend was terminated, the keepalives went unanswered) took it along, and one
# opened again in its place (by the pool, after the error) is another backend, holding none.
_HELD = text("SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
             "mode = 'ExclusiveLock' AND pid = pg_backend_pid() AND objsubid = 2 AND "
             "classid = :key AND objid = :work)")


# A commit's fence, with its run told beside it until the COMMIT ends (`_fence_holder`). Its
# wait (behind a next holder's, once the lock was lost) is not cut short by a lock_timeout the
# role or database sets, which would fail the commit in the server's words: the next holder's
# wait bounds it, and the check after it tells the lock lost in one line. Set for the
# transaction alone, before the fence is asked for.
_FENCED = text("SELECT set_config('lock_timeout', '0', true), "
               f"pg_advisory_xact_lock_shared({_KEYS}), pg_advisory_xact_lock_shared("
               "CAST(:holder AS integer), CAST(:run AS integer))")


def _advisory_check(connection: Connection, work: StoreWork, run_id: int) -> LockCheck:
    """The check of the advisory lock of `work` held by `connection`: one query on it, which
    fails once the connection ended, or finds the lock no longer this session's. First the
    committing transaction takes the fence of `work` shared, which its COMMIT lets go of: the
    check and the COMMIT run on two connections, and the lock may be lost between them, but
    the next holder takes the fence exclusively before it reads or writes (`_advisory_lock`),
    so it waits for a commit that passed its check to end, and a commit that fences after it
    finds the lock lost. One statement more a commit, which tells run `run_id` as the
    commit's."""
    key = {"key": WORK_KEY, "work": int(work)}
    fence = {"key": FENCE_KEY, "work": int(work), "holder": HOLDER_KEY + int(work),
             "run": run_id}

    def check(session: Session) -> None:
        session.connection().execute(_FENCED, fence)
        try:
            held = connection.execute(_HELD, key).scalar()
        except DBAPIError:  # closed, so that whatever the server still holds of it ends
            connection.invalidate()
            held = False
        if not held:
            raise StoreLockLost(_lost_line(
                f"the store's {work.name} lock on PostgreSQL was let go (its connection to the "
                "server ended: the server restarted, the connection was terminated, or it "
                "stopped answering)", "run again"))

    return check


def _advisory_holder(connection: Connection, work: StoreWork) -> int | None:
    """The run holding the advisory lock of `work` in this database, as its holder told
    (None: it has not told yet, or let go meanwhile)."""
    return _told_run(connection, work, WORK_KEY, "ExclusiveLock")


def _fence_holder(connection: Connection, work: StoreWork) -> int | None:
    """The run whose commit holds the fence of `work` in this database, as that commit told
    (None: it ended meanwhile, or its run has no record)."""
    return _told_run(connection, work, FENCE_KEY, "ShareLock")


# The run a session told (HOLDER_KEY + work, run id) whose backend holds (key, work) in a mode.
_TOLD_RUN = text(
    "SELECT told.objid::bigint FROM pg_locks AS held JOIN pg_locks AS told "
    "ON told.pid = held.pid AND told.database = held.database "
    "WHERE held.locktype = 'advisory' AND held.granted AND held.objsubid = 2 "
    "AND held.classid = :key AND held.objid = :work AND held.mode = :mode "
    "AND told.locktype = 'advisory' AND told.granted AND told.objsubid = 2 "
    "AND told.classid = :holder AND held.database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) LIMIT 1")


def _told_run(connection: Connection, work: StoreWork, key: int, mode: str) -> int | None:
    """The run told by a session of this database that holds the advisory lock (`key`, `work`)
    in `mode`: the lock's holder and its commits each tell theirs (`HOLDER_KEY`)."""
    return connection.execute(_TOLD_RUN, {"key": key, "work": int(work), "mode": mode,
                                          "holder": HOLDER_KEY + int(work)}).scalar()


@contextmanager
def _file_lock(engine: Engine, path: Path, work: StoreWork, run_id: int,
               timeout: float) -> Iterator[LockCheck]:
    """An exclusive lock on the file `path` beside the SQLite store, which then holds its
    holder's run id; waited for at most `timeout` seconds. Yields its check (`check_held`)
    once the store's write lock was free (`_write_turn`)."""
    lock = f"the store's {work.name} lock"
    deadline, told = time.monotonic() + timeout, False
    while (fd := take_lock_file(path, lock)) is None:
        if not told:
            _log_waiting(engine, work, _file_holder(path, lock))
            told = True
        if time.monotonic() >= deadline:
            raise StoreLockTimeout(_timeout_line(
                work, holder_named(engine, _file_holder(path, lock)), timeout))
        time.sleep(LOCK_POLL_SECONDS)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(run_id).encode(), 0)
        _write_turn(engine, work, deadline, timeout)
        yield lambda _session: check_held(fd, path, lambda: StoreLockLost(_lost_line(
            f"the store's {work.name} lock file {path} was removed or replaced",
            "leave the lock file in place and run again")))
    finally:
        os.close(fd)  # lets go of the lock


def _write_turn(engine: Engine, work: StoreWork, deadline: float, timeout: float) -> None:
    """SQLite's own write lock taken and let go at once, as the file's lock is taken: a former
    holder checks its lock file after its commit's writes are sent, so inside the write
    transaction, whose write lock SQLite holds until the COMMIT ends; the next holder locks a
    new file only after that check, and waits here for that COMMIT (or another writer's) to
    end before it reads or writes, until the `deadline` of its wait for the lock (the store's
    busy timeout set on this connection meanwhile), then StoreLockTimeout as any wait for it."""
    with engine.connect() as connection:
        waits = connection.exec_driver_sql("PRAGMA busy_timeout").scalar()
        connection.exec_driver_sql("PRAGMA busy_timeout = 0")
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except OperationalError:  # busy: told, then waited for what is left of the wait
            log.warning("a commit to the store is under way as this run takes the store's %s "
                        "lock: waiting for that commit to end", work.name)
            left = max(1, round((deadline - time.monotonic()) * 1000))
            connection.exec_driver_sql(f"PRAGMA busy_timeout = {left}")
            try:
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            except OperationalError as error:
                if getattr(error.orig, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                    raise
                raise StoreLockTimeout(_timeout_line(work, SQLITE_COMMIT, timeout)) from None
        finally:
            connection.exec_driver_sql(f"PRAGMA busy_timeout = {int(waits)}")
        connection.exec_driver_sql("ROLLBACK")


class LockFileRefused(OSError):
    """A lock file is not a plain file of its own (a link, a folder, a device), or its file
    system cannot lock it: the lock is neither taken nor written through it."""


def open_lock_file(path: Path, lock: str) -> int:
    """The lock file of `lock` ("the publish lock") at `path`, opened (made if missing) without
    following a link, and refused unless it is a plain file of no other name: through a link
    it would be made, locked (and, for the store's, written) elsewhere, and two names of one
    file would be two locks sharing one file. Every lock file of the pipeline opens here."""
    refused = (f"{path} is not a plain file of {lock} (a link, a folder or a device, or a "
               "file linked elsewhere): remove it and run again")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.EISDIR):
            raise LockFileRefused(refused) from None
        raise
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        os.close(fd)
        raise LockFileRefused(refused)
    return fd


def lock_taken(fd: int, path: Path) -> bool:
    """Whether the exclusive lock of the lock file open as `fd` is now taken (False: another
    holds it); LockFileRefused when its file system cannot lock it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise LockFileRefused(f"{path} cannot be locked on its file system "
                              f"({os.strerror(error.errno or 0)}): keep {path.parent} on a "
                              "local disk") from None
    return True


def same_file(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path`: a lock file removed or replaced
    meanwhile leaves its holder locking a file the next run never opens."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


def check_held(fd: int | None, path: Path, lost: Callable[[], LockFileLost]) -> None:
    """Raise `lost()` unless the lock file open as `fd` (None: none held) is still the file at
    `path`: once it was removed (by hand, a cleaner of old files) or replaced, the next run
    locks the path's new file and goes on, and what the holder writes now would be written at
    once with it. Every lock file's holder checks here before the writes it guards."""
    if fd is None or not same_file(fd, path):
        raise lost()


def take_lock_file(path: Path, lock: str) -> int | None:
    """The lock file of `lock` at `path`, opened as every lock file is (`open_lock_file`) and
    locked exclusively; None while another holds it. A file that left the path before its
    lock was taken (removed or replaced while another held it, whose next taker locks the
    path's new file) is let go and the path's file tried again: a run never holds a file
    other runs no longer open. Every lock file of the pipeline is taken here."""
    while True:
        fd, held = open_lock_file(path, lock), False
        try:
            if not lock_taken(fd, path):
                return None
            held = same_file(fd, path)
            if held:
                return fd
        finally:
            if not held:
                os.close(fd)


HOLDER_DIGITS = 18  # a run id as its holder writes it: a positive integer the store can hold
_HOLDER = re.compile(rb"\s*([1-9][0-9]{0,%d})\s*" % (HOLDER_DIGITS - 1))


def _file_holder(path: Path, lock: str) -> int | None:
    """The run id the holder wrote in the lock file of `lock` at `path`, read from its first
    bytes alone (the file may have been left empty, huge or garbled by hand); None when it
    names none (not written yet, or garbled)."""
    fd = open_lock_file(path, lock)
    try:
        told = os.pread(fd, HOLDER_DIGITS + 8, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    named = _HOLDER.fullmatch(told)
    return int(named[1]) if named else None


def holder_named(engine: Engine, run_id: int | None) -> str:
    """The run holding a lock, as an operator finds it: its id, flow, host and start."""
    if not run_id:
        return "another process (with no run recorded)"
    with Session(engine) as session:
        run = session.get(PipelineRun, run_id)
    if run is None:
        return f"run {run_id}"
    where = f" on {run.host}" if run.host else ""
    pid = f" as process {run.pid}" if run.pid else ""
    return (f"run {run.id} ({run.flow}{where}{pid}, started "
            f"{utc_text(as_utc(run.started_at))})")


def commit_named(engine: Engine, run_id: int | None) -> str:
    """The commit under way a next holder waits for, as an operator finds it: its run's
    (`holder_named`) where the commit or the lock's former holder told it."""
    return f"the commit of {holder_named(engine, run_id)}" if run_id else PREVIOUS_COMMIT


def _log_waiting(engine: Engine, work: StoreWork, holder: int | None) -> None:
    log.warning("the store's %s lock is held by %s: waiting for it to finish", work.name,
                holder_named(engine, holder))


def _timeout_line(work: StoreWork, holder: str, timeout: float) -> str:
    """StoreLockTimeout's line: what held up the wait for the lock of `work` (`holder`, as
    named to an operator) for all of its `timeout` seconds."""
    return (f"the store's {work.name} lock has been held by {holder} for all of the "
            f"{timeout:g} s waited (APIDIR_STORE_LOCK_TIMEOUT); try again when it has finished")
