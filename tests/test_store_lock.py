"""Two runs at once on one store (a backfill during the nightly, two schedulers by mistake):
their ingests and rollups take turns on the store's lock, so both succeed and the rows are
stored once; a run that waits too long says in one line which run holds the store."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime
from datetime import time as clock
from typing import Any

import pytest
from sqlmodel import Session, func, select

from pipeline.catalogue import ingest as ingest_module
from pipeline.judging import rollup as rollup_module
from pipeline.operations import stages
from pipeline.settings import Settings
from pipeline.store import locks
from pipeline.store.history import plan_targets, record_probes
from pipeline.store.locks import StoreLockTimeout, StoreWork, store_lock
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EndpointRow,
    EntryEvent,
    EntryRow,
    RolledDay,
    engine_for,
    session_scope,
    start_run,
)
from tests.conftest import WriteEntry, make_entry
from tests.test_history import result

DAY = date(2026, 11, 10)
IDS = [f"api-{number}" for number in range(6)]


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
    with session_scope(engine_for(settings.database_url)) as session:
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
    with store_lock(engine, StoreWork.ingest, holder, 60), \
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
