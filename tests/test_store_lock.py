"""Two runs at once on one store (a backfill during the nightly, two schedulers by mistake):
their ingests and rollups take turns on the store's lock, so both succeed and the rows are
stored once; a run that waits too long says in one line which run holds the store."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

from pipeline.catalogue import ingest as ingest_module
from pipeline.catalogue.entries import read_catalog
from pipeline.catalogue.ingest import stored_files
from pipeline.cli import one_line, user_caused
from pipeline.judging import rollup as rollup_module
from pipeline.judging.rollup import roll_up_days
from pipeline.operations import stages
from pipeline.settings import Settings
from pipeline.store import locks
from pipeline.store.history import plan_targets, record_probes
from pipeline.store.locks import (
    LockCheck,
    LockFileRefused,
    StoreLockLost,
    StoreLockTimeout,
    StoreWork,
    store_lock,
)
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EndpointRow,
    EntryEvent,
    EntryRow,
    PipelineRun,
    ProbeRow,
    RolledDay,
    engine_for,
    make_engine,
    session_scope,
    start_run,
    utcnow,
)
from tests.conftest import WriteEntry, hold_the_write_lock, make_entry, unusable_lock_file
from tests.test_history import result

DAY = date(2026, 11, 10)
IDS = [f"api-{number}" for number in range(6)]
KEEPALIVE = Settings.model_fields["store_lock_keepalive"].default
TCP_SETTINGS = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                "tcp_user_timeout")


class Rendezvous:
    """Holds each of two runs at the point where it writes, until the other run is there too
    or is seen waiting for the store's lock (its warning logged): without a lock both write
    at once, as two runs at once may; with one, the holder goes on alone."""

    def __init__(self) -> None:
        self.count = 0
        self.waiting = threading.Event()
        self.lock = threading.Lock()

    def meet(self) -> None:
        with self.lock:
            self.count += 1
        deadline = time.monotonic() + 60  # bounds a hang, never a figure tested
        while time.monotonic() < deadline:
            with self.lock:
                if self.count >= 2:
                    return
            if self.waiting.is_set():
                return
            time.sleep(0.01)


@pytest.fixture
def rendezvous() -> Iterator[Rendezvous]:
    meeting = Rendezvous()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for it to finish" in record.getMessage():
                meeting.waiting.set()

    handler = Seen()
    logger = logging.getLogger(locks.__name__)
    logger.addHandler(handler)
    yield meeting
    logger.removeHandler(handler)


def side_by_side(*calls: Callable[[], Any]) -> list[Any]:
    """Each call in a thread of its own, all at once; what each returned or raised."""
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            outcomes[index] = call()
        except Exception as error:  # what the run would fail with
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(n, call)) for n, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def new_runs(settings: Settings, *flows: str) -> list[int]:
    return new_runs_on(engine_for(settings.database_url), *flows)


def new_runs_on(engine: Engine, *flows: str) -> list[int]:
    with session_scope(engine) as session:
        return [start_run(session, flow).id for flow in flows]


def write_catalogue(write_entry: WriteEntry) -> None:
    for number, entry_id in enumerate(IDS):
        host = f"api{number}.example.com"
        write_entry(make_entry(id=entry_id, name=f"API {number}", baseUrl=f"https://{host}/v1",
                               sampleRequest=f'curl "https://{host}/v1/forecast"'))


def test_two_runs_ingesting_the_same_new_catalogue_both_succeed_and_store_it_once(
    write_entry: WriteEntry, settings_env: dict[str, str], rendezvous: Rendezvous,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_catalogue(write_entry)
    settings = Settings()
    nightly, backfill = new_runs(settings, "nightly", "backfill")
    insert_new = ingest_module._insert_new

    def met(session: Session, new: list, *args: Any) -> None:
        if new:
            rendezvous.meet()
        insert_new(session, new, *args)

    monkeypatch.setattr(ingest_module, "_insert_new", met)
    first, second = side_by_side(lambda: stages.ingest_entries(settings, nightly),
                                 lambda: stages.ingest_entries(settings, backfill))
    assert not isinstance(first, Exception), first
    assert not isinstance(second, Exception), second
    summaries = sorted((first[0], second[0]), key=lambda summary: len(summary.added))
    assert summaries[0].added == [] and summaries[0].unchanged == IDS  # waited, found them
    assert summaries[1].added == IDS
    with Session(engine_for(settings.database_url)) as session:
        assert sorted(session.exec(select(EntryRow.id))) == IDS
        assert session.exec(select(func.count()).select_from(EndpointRow)).one() == \
            len(IDS) * len(make_entry()["endpoints"])
        added = session.exec(select(EntryEvent.entry_id).where(EntryEvent.kind == "added"))
        assert sorted(added) == IDS  # each entry's arrival told once


def at(hour: int) -> datetime:
    return datetime.combine(DAY, clock(hour), tzinfo=UTC)


def test_two_runs_rolling_up_the_same_day_both_succeed_and_store_its_rows_once(
    write_entry: WriteEntry, settings_env: dict[str, str], rendezvous: Rendezvous,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_catalogue(write_entry)
    settings = Settings()
    (ingest,) = new_runs(settings, "nightly")
    stages.ingest_entries(settings, ingest)
    with session_scope(engine_for(settings.database_url)) as session:
        targets = plan_targets(session)
        run = start_run(session, "nightly")
        record_probes(session, run, [
            result(target.url, "live", 200, 100.0 + n, entry=target.entry_id,
                   endpoint=target.endpoint_id, at=at(3))
            for n, target in enumerate(targets)])
    nightly, backfill = new_runs(settings, "nightly", "backfill")
    store_rows = rollup_module._store_rows

    def met(*args: Any) -> tuple[int, int]:
        rendezvous.meet()
        return store_rows(*args)

    monkeypatch.setattr(rollup_module, "_store_rows", met)
    first, second = side_by_side(lambda: stages.roll_up(settings, [DAY], run_id=nightly),
                                 lambda: stages.roll_up(settings, [DAY], run_id=backfill))
    assert not isinstance(first, Exception), first
    assert not isinstance(second, Exception), second
    assert first == second  # the same rows, rolled up twice in turn
    with Session(engine_for(settings.database_url)) as session:
        rows = session.exec(select(DailyEntryRollup.entry_id).where(
            DailyEntryRollup.day == DAY)).all()
        assert sorted(rows) == IDS
        urls = session.exec(select(func.count()).select_from(DailyEndpointRollup)).one()
        assert urls == len(targets) == first[0].endpoints
        assert session.exec(select(RolledDay.day)).all() == [DAY]


def test_a_run_that_waits_too_long_for_the_store_names_the_run_holding_it(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_catalogue(write_entry)
    monkeypatch.setenv("APIDIR_STORE_LOCK_TIMEOUT", "0.2")
    settings = Settings()
    holder, waiter = new_runs(settings, "backfill", "nightly")
    engine = engine_for(settings.database_url)
    with store_lock(engine, StoreWork.ingest, holder, 60, KEEPALIVE), \
            pytest.raises(StoreLockTimeout) as refused:
        stages.ingest_entries(settings, waiter)
    line = str(refused.value)
    assert "\n" not in line
    assert f"the store's ingest lock has been held by run {holder} (backfill on " in line
    assert "started 20" in line and "APIDIR_STORE_LOCK_TIMEOUT" in line
    with Session(engine) as session:
        assert session.exec(select(EntryRow.id)).all() == []  # nothing ingested meanwhile
    summary, _ = stages.ingest_entries(settings, waiter)  # its turn, once the holder let go
    assert summary.added == IDS


@pytest.fixture
def sqlite_store(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def lock_file(engine: Engine, work: StoreWork) -> Path:
    return Path(f"{engine.url.database}.{work.name}.lock")


@pytest.mark.backends("sqlite")
def test_a_run_killed_holding_the_store_s_lock_leaves_it_to_the_next_run_at_once(
    sqlite_store: Engine,
) -> None:
    """The lock file stays, naming the killed run; the lock went with its process, so the next
    run takes it without waiting (here: with no time to wait at all)."""
    holder = subprocess.run([sys.executable, "-c", (
        "import os, signal, sys\n"
        "from sqlalchemy import create_engine\n"
        "from pipeline.store.locks import StoreWork, store_lock\n"
        "with store_lock(create_engine(sys.argv[1]), StoreWork.ingest, 41, 60, 120):\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"), str(sqlite_store.url)], check=False)
    assert holder.returncode == -signal.SIGKILL
    assert lock_file(sqlite_store, StoreWork.ingest).read_text() == "41"  # left behind
    with store_lock(sqlite_store, StoreWork.ingest, 42, sys.float_info.min, KEEPALIVE):
        assert lock_file(sqlite_store, StoreWork.ingest).read_text() == "42"


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("told", [b"", b"\xff\xfe not a run", b"9" * 40, b"-4", b"\xd9\xa1\xd9\xa2",
                                  b"12" + b"\0" * 100_000], ids=[
    "empty", "garbage", "too-large", "negative", "other-digits", "huge"])
def test_a_lock_file_holding_no_run_id_is_told_as_a_holder_with_no_run_recorded(
    sqlite_store: Engine, told: bytes,
) -> None:
    """What another process left in the lock file (by hand, a crash, a disk error) names no
    run: the wait is told in one line all the same, not as an error of the store's."""
    path = lock_file(sqlite_store, StoreWork.rollup)
    held = os.open(path, os.O_RDWR | os.O_CREAT)  # another holder of the lock
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        os.write(held, told)
        with pytest.raises(StoreLockTimeout) as refused, \
                store_lock(sqlite_store, StoreWork.rollup, 3, sys.float_info.min, KEEPALIVE):
            pass
    finally:
        os.close(held)
    line = str(refused.value)
    assert line.startswith("the store's rollup lock has been held by another process (with "
                           "no run recorded) for all of the "), line
    assert "\n" not in line


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("kind", ["link", "folder", "fifo", "hard-link"])
def test_a_lock_file_that_is_no_plain_file_of_its_own_is_refused_and_left_alone(
    sqlite_store: Engine, tmp_path: Path, kind: str,
) -> None:
    """The holder writes its run id into the lock file: through a link (one pointing out of
    the data folder, say) it would overwrite another file. It is refused in one line naming
    the file, and what it points to is left as it was."""
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("kept\n")
    path = lock_file(sqlite_store, StoreWork.ingest)
    unusable_lock_file(path, kind, elsewhere)
    with pytest.raises(LockFileRefused) as refused, \
            store_lock(sqlite_store, StoreWork.ingest, 5, 1, KEEPALIVE):
        pass
    line = str(refused.value)
    assert line.startswith(f"{path} is not a plain file of the store's ingest lock"), line
    assert "\n" not in line
    assert elsewhere.read_text() == "kept\n"


@pytest.mark.backends("sqlite")
def test_a_lock_file_replaced_while_another_run_waits_is_not_taken_behind_its_new_holder(
    sqlite_store: Engine, rendezvous: Rendezvous,
) -> None:
    """A run waits on the lock file's holder; meanwhile the file is removed and another run
    makes and locks a new one at the path, then the first holder lets go of the old one. The
    waiting run takes the lock of the path's file, after its new holder, never the old file's
    beside it: it writes its run id where the next run reads it."""
    path = lock_file(sqlite_store, StoreWork.ingest)
    old = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(old, fcntl.LOCK_EX)
    seen: dict[str, Any] = {"new_held": True}

    def wait_and_hold() -> None:
        with store_lock(sqlite_store, StoreWork.ingest, 8, 60, KEEPALIVE):
            seen["told"] = path.read_text()
            seen["while_new_held"] = seen["new_held"]

    thread = threading.Thread(target=wait_and_hold)
    thread.start()
    try:
        assert rendezvous.waiting.wait(timeout=60)  # bounds a hang, never a figure tested
        path.unlink()
        new = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        fcntl.flock(new, fcntl.LOCK_EX)
        os.close(old)  # the first holder lets go of the file no longer at the path
        thread.join(timeout=1)  # a waiter on the old file takes it now; never a figure tested
        seen["new_held"] = False
        os.close(new)
    finally:
        thread.join()
    assert seen == {"new_held": False, "told": "8", "while_new_held": False}


def lose_lock_file(path: Path, how: str) -> None:
    """The lock file at `path` taken from under its holder: removed (by hand, a cleaner of old
    files), or replaced by another file of the same name."""
    if how == "removed":
        path.unlink()
    else:
        other = path.with_name(path.name + ".new")
        other.write_text("")
        os.replace(other, path)


# How a holder's lock of a work is lost, and which run holds it now, in a store.
LoseLock = Callable[[Engine, StoreWork], None]
HolderNow = Callable[[Engine, StoreWork], int | None]


def lost_before_writing(engine: Engine, work: StoreWork, next_run: int, lose: LoseLock,
                        next_holds: ExitStack, write: Callable[..., Any]) -> Callable[..., Any]:
    """`write`, called first once the holder's lock of `work` was lost (`lose`) and the next
    run took it at once (with no time to wait), which it holds on in `next_holds`: a lock of
    its own, which the holder never held (a new lock file, a new advisory lock)."""
    taken: list[StoreWork] = []

    def written(*args: Any) -> Any:
        if not taken:  # before the holder's first write
            lose(engine, work)
            next_holds.enter_context(
                store_lock(engine, work, next_run, sys.float_info.min, KEEPALIVE))
            taken.append(work)
        return write(*args)

    return written


def probes_to_roll_up(settings: Settings) -> None:
    """The catalogue stored, and a probe of each of its URLs on DAY."""
    (ingest,) = new_runs(settings, "nightly")
    stages.ingest_entries(settings, ingest)
    with session_scope(engine_for(settings.database_url)) as session:
        record_probes(session, start_run(session, "nightly"), [
            result(target.url, "live", 200, 100.0, entry=target.entry_id,
                   endpoint=target.endpoint_id, at=at(3))
            for target in plan_targets(session)])


# Of each work: where its stage writes first, and the tables it writes.
FIRST_WRITES = {StoreWork.ingest: (ingest_module, "_insert_new", (EntryRow, EntryEvent)),
                StoreWork.rollup: (rollup_module, "_store_rows", (DailyEntryRollup, RolledDay))}


def stopped_by_a_lost_lock(write_entry: WriteEntry, work: StoreWork, lose: LoseLock,
                           holder_now: HolderNow, monkeypatch: pytest.MonkeyPatch
                           ) -> tuple[StoreLockLost, Engine]:
    """The stage of `work`, whose lock is lost (`lose`) before its first write and taken by
    the next run at once, which would write the store at the same time: it stops before its
    commit, told in one line, its writes rolled back, and the next run's lock stands (as
    `holder_now` sees it). What it raised, and its store."""
    write_catalogue(write_entry)
    settings = Settings()
    if work is StoreWork.rollup:
        probes_to_roll_up(settings)
    holder, next_run = new_runs(settings, "nightly", "backfill")
    engine = engine_for(settings.database_url)
    module, first_write, tables = FIRST_WRITES[work]
    stage = {StoreWork.ingest: lambda: stages.ingest_entries(settings, holder),
             StoreWork.rollup: lambda: stages.roll_up(settings, [DAY], run_id=holder)}[work]
    with ExitStack() as next_holds:
        monkeypatch.setattr(module, first_write, lost_before_writing(
            engine, work, next_run, lose, next_holds, getattr(module, first_write)))
        with pytest.raises(StoreLockLost) as lost:
            stage()
        assert holder_now(engine, work) == next_run
    assert "\n" not in one_line(lost.value)
    assert user_caused(lost.value)  # told in one line, never a traceback
    with Session(engine) as session:
        for table in tables:
            assert session.exec(select(func.count()).select_from(table)).one() == 0
    return lost.value, engine


@pytest.mark.backends("sqlite")
@pytest.mark.parametrize("how", ["removed", "replaced"])
@pytest.mark.parametrize("work", list(StoreWork), ids=lambda work: work.name)
def test_a_stage_whose_store_lock_file_left_its_path_stops_before_committing_its_writes(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    work: StoreWork, how: str,
) -> None:
    """The lock file removed or replaced while a run ingests or rolls up: the next run makes
    and locks the path's new file at once. The first run stops before its commit, in one line
    naming the file."""
    lost, engine = stopped_by_a_lost_lock(
        write_entry, work, lambda engine, work: lose_lock_file(lock_file(engine, work), how),
        lambda engine, work: int(lock_file(engine, work).read_text()), monkeypatch)
    line = one_line(lost)
    assert line.startswith(f"the store's {work.name} lock file {lock_file(engine, work)} was "
                           "removed or replaced while this run held it"), line
    assert "leave the lock file in place and run again" in line


@pytest.mark.backends("postgres")
def test_a_wait_on_postgresql_is_bounded_by_the_setting_alone_and_the_timeouts_set_back(
    database_url: str,
) -> None:
    """A statement_timeout the database sets does not cut the wait short (which would fail the
    stage with the server's words, naming no holder), and the connection goes back to the pool
    with the database's lock_timeout and statement_timeout, not the wait's."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            name = connection.execute(text("SELECT current_database()")).scalar()
            connection.execute(text(f'ALTER DATABASE "{name}" SET lock_timeout = \'7s\''))
            connection.execute(text(f'ALTER DATABASE "{name}" SET statement_timeout = \'300ms\''))
            connection.commit()
        engine.dispose()  # the connections made from now on have the database's settings
        (holder,) = new_runs_on(engine, "backfill")
        with store_lock(engine, StoreWork.rollup, holder, 60, KEEPALIVE), \
                pytest.raises(StoreLockTimeout) as refused, \
                store_lock(engine, StoreWork.rollup, None, 1.5, KEEPALIVE):
            pass
        assert f"the store's rollup lock has been held by run {holder} " in str(refused.value)
        pooled = [engine.connect() for _ in range(engine.pool.checkedin())]
        assert pooled
        for connection in pooled:
            assert connection.execute(text("SHOW lock_timeout")).scalar() == "7s"
            assert connection.execute(text("SHOW statement_timeout")).scalar() == "300ms"
            connection.close()
    finally:
        engine.dispose()



@pytest.mark.backends("postgres")
def test_a_postgresql_lock_s_connection_is_let_go_soon_after_its_holder_stops_answering(
    database_url: str,
) -> None:
    """The server drops the lock's connection, and so lets go of the lock, once the holder's
    machine has not answered its TCP keepalive probes for the seconds the setting gives
    (APIDIR_STORE_LOCK_KEEPALIVE), not the system's two hours: the lock's own connection
    carries them while it is held, and goes back to the pool with the session's."""
    engine = make_engine(database_url)
    checked_out: list[Any] = []
    event.listen(engine, "checkout", lambda dbapi, _record, _proxy: checked_out.append(dbapi))

    def shown(dbapi: Any) -> dict[str, str]:
        cursor = dbapi.cursor()
        try:
            return {name: cursor.execute(f"SHOW {name}").fetchone()[0]
                    for name in TCP_SETTINGS}
        finally:
            cursor.close()

    try:
        with engine.connect() as connection:
            server = {name: connection.execute(text(f"SHOW {name}")).scalar()
                      for name in TCP_SETTINGS}
        checked_out.clear()
        with store_lock(engine, StoreWork.ingest, None, 60, 40):
            (held,) = checked_out
            assert shown(held) == {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "10",
                                   "tcp_keepalives_count": "3", "tcp_user_timeout": "40000"}
        assert shown(held) == server
    finally:
        engine.dispose()


@pytest.mark.backends("postgres")
@pytest.mark.parametrize(("query", "pgoptions"),
                         [("", None), ("?options=-c%20tcp_keepalives_idle%3D7", None),
                          ("", "--tcp-keepalives-idle=7")],
                         ids=["set", "url-given", "pgoptions-given"])
def test_every_postgresql_connection_carries_the_server_s_keepalives(
    database_url: str, monkeypatch: pytest.MonkeyPatch, query: str, pgoptions: str | None,
) -> None:
    """A commit's connection, any of the pool's, holds the store lock's fence until its COMMIT
    ends: the server gives up its backend once the run's machine stopped answering for
    APIDIR_STORE_LOCK_KEEPALIVE seconds, as it does the lock's, so the next holder does not
    wait its whole APIDIR_STORE_LOCK_TIMEOUT for it; also once the connection held the lock
    at another figure and went back to the pool. A setting the database URL's `options`, or
    else PGOPTIONS, gives is kept."""
    monkeypatch.setenv("APIDIR_STORE_LOCK_KEEPALIVE", "40")
    if pgoptions is not None:
        monkeypatch.setenv("PGOPTIONS", pgoptions)
    engine = make_engine(database_url + query)
    checked_out: list[Any] = []
    event.listen(engine, "checkout", lambda dbapi, _record, _proxy: checked_out.append(dbapi))
    wanted = {"tcp_keepalives_idle": "7" if query or pgoptions else "10",
              "tcp_keepalives_interval": "10",
              "tcp_keepalives_count": "3", "tcp_user_timeout": "40000"}

    def shown() -> tuple[str | None, dict[str, str]]:
        with engine.connect() as connection:
            peer = connection.execute(text("SELECT host(inet_client_addr())")).scalar()
            return peer, {name: connection.execute(text(f"SHOW {name}")).scalar()
                          for name in TCP_SETTINGS}

    try:
        assert shown() == ("127.0.0.1", wanted)  # over TCP: a Unix socket's show 0
        with store_lock(engine, StoreWork.ingest, None, 60, 60):
            held = checked_out[-1]
        assert shown() == ("127.0.0.1", wanted)
        assert checked_out[-1] is held  # the lock's own connection, back from the pool
    finally:
        engine.dispose()


def tcp_options(dbapi: Any) -> dict[str, int]:
    """The TCP options of a psycopg connection's own socket, as the kernel holds them."""
    with socket.fromfd(dbapi.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM) as own:
        return {"keepalive": own.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                **{name: own.getsockopt(socket.IPPROTO_TCP, getattr(socket, name))
                   for name in ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT",
                                "TCP_USER_TIMEOUT")}}


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("query", ["", "?keepalives_idle=7"], ids=["set", "url-given"])
def test_a_run_s_end_of_a_postgresql_lock_s_connection_gives_up_a_server_gone_as_soon(
    database_url: str, monkeypatch: pytest.MonkeyPatch, query: str,
) -> None:
    """The run's own socket of the lock's connection is probed as the server's end is
    (APIDIR_STORE_LOCK_KEEPALIVE): a run holding the lock of a server whose machine died or
    was cut off fails within those seconds, rather than wait on it for the system's two hours
    and more. A setting the database URL gives is kept."""
    monkeypatch.setenv("APIDIR_STORE_LOCK_KEEPALIVE", "40")
    engine = make_engine(database_url + query)
    checked_out: list[Any] = []
    event.listen(engine, "checkout", lambda dbapi, _record, _proxy: checked_out.append(dbapi))
    try:
        with store_lock(engine, StoreWork.ingest, None, 60, 40):
            (held,) = checked_out
            options = tcp_options(held)
    finally:
        engine.dispose()
    assert options["keepalive"] != 0
    assert options == {"keepalive": options["keepalive"],
                       "TCP_KEEPIDLE": 7 if query else 10, "TCP_KEEPINTVL": 10,
                       "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 40000}


def terminate_lock_connection(engine: Engine, work: StoreWork) -> None:
    """The server ends the backend holding the advisory lock of `work` (as an operator's
    pg_terminate_backend, a restart or unanswered keepalives do), which lets go of the lock;
    from a connection of its own, once the backend is gone."""
    with engine.connect() as connection:
        pid = connection.execute(text(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
            "objsubid = 2 AND classid = :key AND objid = :work AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"key": locks.WORK_KEY, "work": int(work)}).scalar_one()
        assert connection.execute(text("SELECT pg_terminate_backend(:pid, 60000)"),
                                  {"pid": pid}).scalar()


def assert_told_lost(error: StoreLockLost, work: StoreWork) -> None:
    line = one_line(error)
    assert line.startswith(f"the store's {work.name} lock on PostgreSQL was let go (its "
                           "connection to the server ended"), line
    assert "stopped before committing its writes; run again" in line and "\n" not in line
    assert user_caused(error)  # told in one line, never a traceback


@pytest.mark.backends("postgres")
def test_a_rollup_whose_postgresql_lock_connection_was_terminated_commits_nothing_more(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lock's connection ended while the run rolls up two days, after the first day's
    commit: the run stops before the second day's, which is rolled back, and lets go of what
    is left of the lock, so the next run takes it at once."""
    write_catalogue(write_entry)
    settings = Settings()
    probes_to_roll_up(settings)
    (holder,) = new_runs(settings, "nightly")
    engine = engine_for(settings.database_url)
    store_rows = rollup_module._store_rows
    stored: list[date] = []

    def store(session: Session, rows: Any, *args: Any) -> tuple[int, int]:
        if stored:  # the first day committed: the second day's rows
            terminate_lock_connection(engine, StoreWork.rollup)
        stored.append(DAY)
        return store_rows(session, rows, *args)

    monkeypatch.setattr(rollup_module, "_store_rows", store)
    with pytest.raises(StoreLockLost) as lost:
        stages.roll_up(settings, [DAY, DAY + timedelta(days=1)], run_id=holder)
    assert len(stored) == 2
    assert_told_lost(lost.value, StoreWork.rollup)
    with Session(engine) as session:
        assert session.exec(select(RolledDay.day)).all() == [DAY]
        assert set(session.exec(select(DailyEntryRollup.day))) == {DAY}
    with store_lock(engine, StoreWork.rollup, None, sys.float_info.min, KEEPALIVE):
        pass


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("work", list(StoreWork), ids=lambda work: work.name)
def test_a_stage_whose_postgresql_lock_another_run_took_stops_before_committing_its_writes(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    work: StoreWork,
) -> None:
    """The lock's connection ended while a run ingests or rolls up, and the next run took the
    lock at once: the first run stops before its commit, in one line."""

    def holder_now(engine: Engine, work: StoreWork) -> int | None:
        with engine.connect() as connection:
            return locks._advisory_holder(connection, work)

    lost, _ = stopped_by_a_lost_lock(write_entry, work, terminate_lock_connection, holder_now,
                                     monkeypatch)
    assert_told_lost(lost, work)


def test_a_lock_lost_while_a_commit_s_writes_are_sent_stops_that_commit(
    write_entry: WriteEntry, settings_env: dict[str, str],
) -> None:
    """The lock is checked once the commit's pending writes are sent (a day's record of its
    rollup; a first ingest's events), not before: a lock lost meanwhile (its file removed, its
    connection ended) stops that commit, rather than the next one."""
    write_catalogue(write_entry)
    settings = Settings()
    probes_to_roll_up(settings)
    (holder,) = new_runs(settings, "nightly")
    engine = engine_for(settings.database_url)
    lose: LoseLock = terminate_lock_connection if engine.dialect.name == "postgresql" else (
        lambda engine, work: lose_lock_file(lock_file(engine, work), "removed"))
    lost: list[StoreWork] = []

    def sending(session: Session, _context: Any, _instances: Any) -> None:
        if not lost and any(isinstance(row, RolledDay) for row in session.new):
            lose(engine, StoreWork.rollup)
            lost.append(StoreWork.rollup)

    event.listen(Session, "before_flush", sending)
    try:
        with pytest.raises(StoreLockLost):
            stages.roll_up(settings, [DAY], run_id=holder)
    finally:
        event.remove(Session, "before_flush", sending)
    assert lost
    with Session(engine) as session:
        for table in (RolledDay, DailyEntryRollup):
            assert session.exec(select(func.count()).select_from(table)).one() == 0


def night_beside_another_run(write_entry: WriteEntry, monkeypatch: pytest.MonkeyPatch
                             ) -> tuple[Settings, Engine, int]:
    """A nightly's settings (one look a probe, no stage retried), store and another run's id,
    on the catalogue of `write_catalogue` with hosts under .invalid, which never resolve: the
    night's probes of them fail at DNS without leaving the machine."""
    monkeypatch.setenv("APIDIR_PROBE_ATTEMPTS", "1")
    monkeypatch.setenv("APIDIR_STAGE_RETRIES", "0")
    for number, entry_id in enumerate(IDS):
        host = f"api{number}.example.invalid"
        write_entry(make_entry(id=entry_id, name=f"API {number}", baseUrl=f"https://{host}/v1",
                               sampleRequest=f'curl "https://{host}/v1/forecast"'))
    settings = Settings()
    (other,) = new_runs(settings, "backfill")
    return settings, engine_for(settings.database_url), other


def ended_days_probed(settings: Settings, days: list[date]) -> None:
    """Probes of every target of the stored catalogue on each of `days`, by runs of their own."""
    with session_scope(engine_for(settings.database_url)) as session:
        targets = plan_targets(session)
        for day in days:
            record_probes(session, start_run(session, "nightly"), [
                result(target.url, "live", 200, 100.0, entry=target.entry_id,
                       endpoint=target.endpoint_id,
                       at=datetime.combine(day, clock(3), tzinfo=UTC))
                for target in targets])


def probes_of_run(engine: Engine, run_id: int) -> int:
    with Session(engine) as session:
        return session.exec(select(func.count()).select_from(ProbeRow)
                            .where(ProbeRow.run_id == run_id)).one()


def latest_run_id(engine: Engine) -> int:
    with Session(engine) as session:
        return session.exec(select(func.max(PipelineRun.id))).one() or 0


def nightly_run_id(engine: Engine, before: int) -> int | None:
    """The id of the nightly run opened after run `before`, once it is."""
    with Session(engine) as session:
        return session.exec(select(PipelineRun.id).where(PipelineRun.id > before,
                                                         PipelineRun.flow == "nightly")).first()


@pytest.mark.prefect
@pytest.mark.backends("sqlite")
def test_a_nightly_probes_while_its_rollup_waits_and_finds_the_days_another_run_rolled_up(
    prefect_backend: None, write_entry: WriteEntry, settings_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The night's rollup runs beside its probing, in a process of its own: while another run
    holds the rollup lock, the night's probes are taken and stored all the same. The other run
    rolls up the ended days only once they are stored, so the night's rollup is by then
    waiting: it chooses its days once it holds the lock, and finds them done rather than
    rolling them up again."""
    from prefect import get_client

    from flows.nightly import nightly

    settings, engine, other = night_beside_another_run(write_entry, monkeypatch)
    stages.ingest_entries(settings, other)
    today = datetime.now(UTC).date()
    ended = [today - timedelta(days=2), today - timedelta(days=1)]
    ended_days_probed(settings, ended)
    with get_client(sync_client=True) as client:  # as the first publish leaves it
        client.upsert_global_concurrency_limit_by_name(stages.PUBLISH_LIMIT, 1)
    probed_meanwhile, outcome, before = False, [], latest_run_id(engine)
    night = threading.Thread(target=lambda: outcome.extend(
        side_by_side(lambda: asyncio.run(nightly(run_date=ended[-1])))))
    with store_lock(engine, StoreWork.rollup, other, 60, KEEPALIVE) as check:
        night.start()
        deadline = time.monotonic() + 60  # bounds a hang, never a figure tested
        while time.monotonic() < deadline and not probed_meanwhile:
            run_id = nightly_run_id(engine, before)
            probed_meanwhile = run_id is not None and probes_of_run(engine, run_id) > 0
            time.sleep(0.1)
        with session_scope(engine, check) as session:  # the other run's rollup, under its lock
            roll_up_days(session, ended)
            rolled_at = {row.day: row.rolled_at for row in session.exec(select(RolledDay))}
    night.join()
    assert not isinstance(outcome[0], Exception), outcome[0]
    assert probed_meanwhile  # the night probed while its rollup waited for the lock
    with Session(engine) as session:
        rows = session.exec(select(RolledDay)).all()
    assert sorted(rolled_at) == ended
    assert {row.day: row.rolled_at for row in rows} == rolled_at  # each rolled up once


@pytest.mark.prefect
@pytest.mark.backends("sqlite")
async def test_a_nightly_whose_rollup_fails_stores_its_probes_then_fails_naming_the_rollup(
    prefect_backend: None, write_entry: WriteEntry, settings_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rollup's failure, raised in its own process, fails the night once the probing
    beside it has ended: the night's probes are stored for the nights after it, and nothing is
    scored or published from a history whose days were not rolled up."""
    from flows.nightly import nightly
    from pipeline.operations.runs import StageFailed

    monkeypatch.setenv("APIDIR_STORE_LOCK_TIMEOUT", "1")
    settings, engine, other = night_beside_another_run(write_entry, monkeypatch)
    with (store_lock(engine, StoreWork.rollup, other, 60, KEEPALIVE),
          pytest.raises(StageFailed, match="rollup stage failed") as failed):
        await nightly()
    assert isinstance(failed.value.__cause__, StoreLockTimeout)
    assert f"run {other}" in str(failed.value)  # the holder named, across the process
    run_id = nightly_run_id(engine, other)
    with Session(engine) as session:
        targets = len(plan_targets(session))
    # every target probed, its failure at DNS confirmed by a second look
    assert targets >= len(IDS) and probes_of_run(engine, run_id) == 2 * targets
    with Session(engine) as session:
        run = session.get(PipelineRun, run_id)
        assert run.state == "failed" and run.release_version is None
    assert not (Path(settings.output_dir) / "api" / "apis.json").exists()


def ingest_waiting_for(settings: Settings, run_id: int, rendezvous: Rendezvous
                       ) -> tuple[threading.Thread, list[Any]]:
    """The ingest of run `run_id` started in a thread while another run holds the ingest lock,
    once it is seen waiting for it; the thread and what the ingest returned or raised."""
    outcome: list[Any] = []

    def ingest() -> None:
        outcome.extend(side_by_side(lambda: stages.ingest_entries(settings, run_id)))

    thread = threading.Thread(target=ingest)
    thread.start()
    assert rendezvous.waiting.wait(timeout=60)  # bounds a hang, never a figure tested
    return thread, outcome


def test_an_ingest_reads_the_entry_files_before_waiting_for_its_turn(
    write_entry: WriteEntry, settings_env: dict[str, str], rendezvous: Rendezvous,
) -> None:
    """Reading and parsing every file (minutes at 100,000) is done while another run ingests:
    the run holds the lock for its writes alone, and stores the files as it read them."""
    path = write_entry(make_entry(id="api-0", name="As Read"))
    settings = Settings()
    holder, waiter = new_runs(settings, "backfill", "nightly")
    engine = engine_for(settings.database_url)
    with store_lock(engine, StoreWork.ingest, holder, 60, KEEPALIVE):
        thread, outcome = ingest_waiting_for(settings, waiter, rendezvous)
        path.write_text(yaml.safe_dump(make_entry(id="api-0", name="Edited Since")))
    thread.join()
    assert not isinstance(outcome[0], Exception), outcome[0]
    with Session(engine) as session:
        assert session.exec(select(EntryRow.name)).all() == ["As Read"]


def test_an_ingest_reads_again_a_file_another_run_changed_in_the_store_while_it_waited(
    write_entry: WriteEntry, settings_env: dict[str, str], rendezvous: Rendezvous,
    tmp_path: Path,
) -> None:
    """A file the waiting run did not parse again (its hash was the one stored) whose entry the
    other run retired meanwhile (from a checkout without it): the waiting run reads the files
    again under the lock and restores the entry, rather than leaving it retired with its file
    in place."""
    write_entry(make_entry(id="api-0"))
    settings = Settings()
    first, holder, waiter = new_runs(settings, "nightly", "backfill", "nightly")
    stages.ingest_entries(settings, first)
    other_checkout = tmp_path / "other-checkout"
    (other_checkout / "weather").mkdir(parents=True)
    (other_checkout / "weather" / "api-1.yaml").write_text(
        yaml.safe_dump(make_entry(id="api-1")))
    engine = engine_for(settings.database_url)
    with store_lock(engine, StoreWork.ingest, holder, 60, KEEPALIVE):
        thread, outcome = ingest_waiting_for(settings, waiter, rendezvous)
        with session_scope(engine) as session:  # the holder's ingest, of its own checkout
            report = read_catalog([other_checkout], other_checkout,
                                  known=stored_files(session))
            assert ingest_module.ingest_catalog(session, report).retired == ["api-0"]
    thread.join()
    summary, _ = outcome[0]
    assert summary.restored == ["api-0"] and summary.retired == ["api-1"]
    with Session(engine) as session:
        active = select(EntryRow.id).where(col(EntryRow.retired_at).is_(None))
        assert session.exec(active).all() == ["api-0"]


class PausedCommit:
    """Holder A's commit of a run's record under the store's lock, held for run `run_id`,
    paused once its check of the lock has passed (inside its commit transaction) until
    `resume` is set; what it raised, if anything."""

    def __init__(self, engine: Engine, work: StoreWork, run_id: int | None = None) -> None:
        self.checked = threading.Event()
        self.resume = threading.Event()
        self.raised: list[Exception] = []
        self.run_id = run_id
        self.held: LockCheck | None = None  # A's check, for another of its commits
        self.let_go = threading.Event()  # A holds the lock after its commit until this is set
        self.let_go.set()
        self.thread = threading.Thread(target=self.commit, args=(engine, work))

    def commit(self, engine: Engine, work: StoreWork) -> None:
        def paused(_session: Session) -> None:  # after the lock's own hook: its check passed
            self.checked.set()
            self.resume.wait(timeout=60)  # bounds a hang, never a figure tested

        try:
            with store_lock(engine, work, self.run_id, 60, KEEPALIVE) as held:
                self.held = held
                with session_scope(engine, held) as session:
                    event.listen(session, "before_commit", paused)
                    session.add(PipelineRun(flow="holder-a", started_at=utcnow()))
                self.let_go.wait(timeout=60)  # bounds a hang, never a figure tested
        except Exception as error:  # what the holder stops with
            self.raised.append(error)


def fenced_turn(engine: Engine, work: StoreWork, lose: LoseLock, timeout: float,
                run_id: int | None = None,
                meanwhile: Callable[[PausedCommit], None] | None = None,
                ) -> tuple[PausedCommit, list[Any]]:
    """A (of run `run_id`) paused inside its commit transaction, its check passed; then its
    lock lost (`lose`)
    and run B taking the lock (waiting at most `timeout` s), which counts A's runs it sees
    once it holds the lock. A goes on once B is seen waiting (and `meanwhile` has run), or
    holds the lock (when nothing makes it wait). A, and what B counted or raised."""
    holder = PausedCommit(engine, work, run_id)
    waits = threading.Event()

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for that commit to end" in record.getMessage():
                waits.set()

    def take() -> int:
        try:
            with store_lock(engine, work, None, timeout, KEEPALIVE), Session(engine) as session:
                return session.exec(select(func.count()).select_from(PipelineRun).where(
                    PipelineRun.flow == "holder-a")).one()
        finally:
            waits.set()

    handler = Waiting()
    logging.getLogger(locks.__name__).addHandler(handler)
    holder.thread.start()
    try:
        assert holder.checked.wait(timeout=60)  # bounds a hang, never a figure tested
        lose(engine, work)
        taker: list[Any] = []
        thread = threading.Thread(target=lambda: taker.extend(side_by_side(take)))
        thread.start()
        assert waits.wait(timeout=60)  # bounds a hang, never a figure tested
        if meanwhile is not None:
            meanwhile(holder)
        if timeout < 60:  # B's wait ran out first
            thread.join()
    finally:
        holder.resume.set()
        holder.thread.join()
        logging.getLogger(locks.__name__).removeHandler(handler)
    thread.join()
    return holder, taker


def test_the_next_holder_waits_for_a_commit_that_passed_its_check_to_end(
    database_url: str,
) -> None:
    """Holder A passed its check and is inside its commit transaction when its lock is lost
    (its connection ended; its lock file removed) and run B takes the lock: B reads and writes
    nothing before A's commit ends (the check and the COMMIT are two steps, on PostgreSQL on
    two connections), so A's commit has landed by the time B reads the store, never while B
    writes."""
    engine = make_engine(database_url)
    lose: LoseLock = terminate_lock_connection if engine.dialect.name == "postgresql" else (
        lambda engine, work: lose_lock_file(lock_file(engine, work), "removed"))
    try:
        holder, taker = fenced_turn(engine, StoreWork.rollup, lose, 60)
        assert holder.raised == [] and taker == [1]
    finally:
        engine.dispose()


@pytest.mark.backends("postgres")
def test_a_commit_fenced_behind_the_next_holder_is_told_lost_whatever_the_lock_timeout(
    database_url: str,
) -> None:
    """A's lock was lost and run B waits for A's commit under way; another commit of A's asks
    for the fence behind B's wait. A lock_timeout the database sets (1 ms) does not fail that
    commit in the server's words: it waits its turn, then finds the lock lost, in one line,
    and commits nothing; A's commit under way lands, and B reads it."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            name = connection.execute(text("SELECT current_database()")).scalar()
            connection.execute(text(f'ALTER DATABASE "{name}" SET lock_timeout = \'1ms\''))
            connection.commit()
        engine.dispose()  # the connections made from now on have the database's settings
        second: list[Exception] = []

        def another_commit(holder: PausedCommit) -> None:
            assert holder.held is not None
            held = holder.held
            holder.let_go.clear()  # A holds its lock until its second commit has ended

            def commit() -> None:
                try:
                    with session_scope(engine, held) as session:
                        session.add(PipelineRun(flow="holder-a", started_at=utcnow()))
                except Exception as error:  # what the second commit stops with
                    second.append(error)
                finally:
                    holder.let_go.set()

            thread = threading.Thread(target=commit)
            thread.start()
            deadline = time.monotonic() + 60  # bounds a hang, never a figure tested
            while thread.is_alive() and not fence_asked_for(engine, StoreWork.rollup):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            threads.append(thread)

        threads: list[threading.Thread] = []
        holder, taker = fenced_turn(engine, StoreWork.rollup, terminate_lock_connection, 60,
                                    meanwhile=another_commit)
        for thread in threads:
            thread.join()
    finally:
        engine.dispose()
    assert holder.raised == [] and taker == [1]
    (lost,) = second
    assert isinstance(lost, StoreLockLost), lost
    assert_told_lost(lost, StoreWork.rollup)


def fence_asked_for(engine: Engine, work: StoreWork) -> bool:
    """Whether a commit waits for the fence of `work` (asked for shared, not granted)."""
    with engine.connect() as connection:
        return bool(connection.execute(text(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND mode = 'ShareLock' AND objsubid = 2 AND classid = :key AND objid = :work)"),
            {"key": locks.FENCE_KEY, "work": int(work)}).scalar())


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("recorded", [True, False], ids=["run-recorded", "no-run-recorded"])
def test_a_postgresql_holder_s_wait_for_a_former_holder_s_commit_is_bounded(
    database_url: str, recorded: bool,
) -> None:
    """A former holder's commit that does not end holds up the next holder (which took the
    lock at once) no longer than APIDIR_STORE_LOCK_TIMEOUT, which then stops in one line, as
    any wait for the lock, naming that commit's run when the store records it."""
    engine = make_engine(database_url)
    try:
        run_id = new_runs_on(engine, "backfill")[0] if recorded else None
        _, (timed_out,) = fenced_turn(engine, StoreWork.ingest, terminate_lock_connection, 0.2,
                                      run_id)
    finally:
        engine.dispose()
    assert isinstance(timed_out, StoreLockTimeout), timed_out
    line = one_line(timed_out)
    held_by = f"the commit of run {run_id} (backfill on " if recorded else (
        "the previous holder's commit for ")
    assert line.startswith(f"the store's ingest lock has been held by {held_by}"), line
    assert "\n" not in line and "with no run recorded" not in line
    assert line.endswith("for all of the 0.2 s waited (APIDIR_STORE_LOCK_TIMEOUT); try again "
                         "when it has finished")


@pytest.mark.backends("sqlite")
def test_a_sqlite_holder_s_wait_for_a_commit_under_way_is_bounded_by_the_setting(
    database_url: str,
) -> None:
    """Another connection holds the store's write lock (a former holder's commit under way) as
    a run takes the lock file: the run waits for it what is left of APIDIR_STORE_LOCK_TIMEOUT,
    not the store's busy timeout (the URL's 30 s here), then stops in the lock's own line, and
    the busy timeout is set back."""
    engine = make_engine(f"{database_url}?timeout=30")
    taken, done = threading.Event(), threading.Event()
    other = threading.Thread(target=hold_the_write_lock, args=(engine.url.database, 0),
                             kwargs={"taken": taken, "end": done.is_set})
    other.start()
    try:
        assert taken.wait(timeout=60)  # bounds a hang, never a figure tested
        with pytest.raises(StoreLockTimeout) as refused, \
                store_lock(engine, StoreWork.rollup, None, 0.2, KEEPALIVE):
            pass
        done.set()
        other.join()
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        done.set()
        other.join()
        engine.dispose()
    assert one_line(refused.value) == (
        "the store's rollup lock has been held by the previous holder's commit (or another "
        "writer's) for all of the 0.2 s waited (APIDIR_STORE_LOCK_TIMEOUT); try again when it "
        "has finished")
