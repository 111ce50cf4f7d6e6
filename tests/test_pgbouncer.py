"""The store behind a real PgBouncer, as the README tells operators to set it up: session
pooling and `ignore_startup_parameters = options`. Migrations, an ingest and the store lock
work through it; the lock's own connection still sets the server's keepalives, the others'
`options` are dropped; without that setting every command says the fix in one line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, make_url
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from pipeline.store.keepalive import keepalive_settings
from pipeline.store.locks import WORK_KEY, StoreLockTimeout, StoreWork, store_lock
from pipeline.store.migrate import head_revision, store_revision
from pipeline.store.tables import EntryRow, make_engine, open_engine
from tests.conftest import REPO, WriteEntry, ingested_session
from tests.pgbouncer_server import running_pgbouncer
from tests.test_cli_errors import apidir, one_line
from tests.test_store_lock import (
    IDS,
    KEEPALIVE,
    TCP_SETTINGS,
    new_runs_on,
    tcp_options,
    write_catalogue,
)

pytestmark = pytest.mark.backends("postgres")

BOUNCERS = REPO / "var"  # each in a folder of its own there, as the server
WAIT_SECONDS = 60.0


@pytest.fixture
def bounced_url(database_url: str) -> Iterator[str]:
    """The test's database reached through PgBouncer, set up as the README says."""
    with running_pgbouncer(BOUNCERS, database_url) as url:
        yield url


@contextmanager
def engines(*urls: str) -> Iterator[list[Engine]]:
    made = [make_engine(url) for url in urls]
    try:
        yield made
    finally:
        for engine in made:
            engine.dispose()


def test_the_store_is_upgraded_and_ingests_through_pgbouncer(
    database_url: str, bounced_url: str, write_entry: WriteEntry, data_dir: Path,
) -> None:
    write_catalogue(write_entry)
    with ingested_session(bounced_url, data_dir / "entries") as session:
        stored = session.exec(select(EntryRow.id).order_by(col(EntryRow.id))).all()
    assert stored == sorted(IDS)
    direct = open_engine(database_url)  # what the server itself holds, not through PgBouncer
    try:
        assert store_revision(direct) == head_revision()
    finally:
        direct.dispose()


def _plain(url: str) -> str:
    """`url` as psycopg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _ingest_locks(database_url: str, granted: bool) -> int:
    """How many sessions of the server hold (`granted`) or wait for the store's ingest lock,
    asked of the server itself, not through PgBouncer."""
    with psycopg.connect(_plain(database_url)) as connection:
        return connection.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted = %s "
            "AND classid = %s AND objid = %s",
            (granted, WORK_KEY, int(StoreWork.ingest))).fetchone()[0]


def _until(seen: Callable[[], bool]) -> None:
    """Wait for what `seen` tells, WAIT_SECONDS at most (the caller asserts it after)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not seen() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_two_holders_of_the_store_lock_take_turns_through_pgbouncer(
    database_url: str, bounced_url: str,
) -> None:
    """The second holder times out in the line naming the first, or waits and then holds it."""
    with engines(bounced_url, bounced_url) as (first, second):
        (holder,) = new_runs_on(first, "nightly")
        taken = threading.Event()
        failed: list[BaseException] = []

        def wait_its_turn() -> None:
            try:
                with store_lock(second, StoreWork.ingest, None, WAIT_SECONDS, KEEPALIVE):
                    taken.set()
            except BaseException as error:  # told to the test's thread
                failed.append(error)

        waiter = threading.Thread(target=wait_its_turn)
        with store_lock(first, StoreWork.ingest, holder, WAIT_SECONDS, KEEPALIVE):
            with pytest.raises(StoreLockTimeout) as refused, \
                    store_lock(second, StoreWork.ingest, None, 1.0, KEEPALIVE):
                pass
            assert f"the store's ingest lock has been held by run {holder} (nightly " in str(
                refused.value)
            waiter.start()
            _until(lambda: _ingest_locks(database_url, granted=False) > 0)
            assert _ingest_locks(database_url, granted=False) == 1
            assert not taken.is_set()
        waiter.join(WAIT_SECONDS)
        assert not failed
        assert taken.is_set()


def test_the_lock_s_connection_sets_the_server_s_keepalives_through_pgbouncer_the_others_not(
    database_url: str, bounced_url: str,
) -> None:
    """Session pooling keeps what the lock's connection sets with set_config; the `options`
    every connection gives at startup are dropped by PgBouncer, so the others' server ends
    keep the server's own settings. The run's end of each connection (to PgBouncer) carries
    its keepalives either way."""
    with psycopg.connect(_plain(database_url)) as plain:
        server = {name: plain.execute(f"SHOW {name}").fetchone()[0] for name in TCP_SETTINGS}
    lock = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "10",
            "tcp_keepalives_count": "3", "tcp_user_timeout": "40000"}
    assert server != lock
    with engines(bounced_url) as (engine,):
        checked_out: list[Any] = []
        event.listen(engine, "checkout", lambda dbapi, _record, _proxy: checked_out.append(dbapi))

        def shown(dbapi: Any) -> dict[str, str]:
            with dbapi.cursor() as cursor:
                return {name: cursor.execute(f"SHOW {name}").fetchone()[0]
                        for name in TCP_SETTINGS}

        with engine.connect() as connection:
            ordinary = connection.connection.dbapi_connection
            assert shown(ordinary) == server
        with store_lock(engine, StoreWork.ingest, None, WAIT_SECONDS, 40):
            held = checked_out[-1]
            assert shown(held) == lock
        assert shown(held) == server
        run_end = keepalive_settings(KEEPALIVE)
        assert tcp_options(ordinary) == {
            "keepalive": 1, "TCP_KEEPIDLE": int(run_end["tcp_keepalives_idle"]),
            "TCP_KEEPINTVL": int(run_end["tcp_keepalives_interval"]),
            "TCP_KEEPCNT": int(run_end["tcp_keepalives_count"]),
            "TCP_USER_TIMEOUT": int(run_end["tcp_user_timeout"])}


def test_a_lock_whose_holder_s_connection_to_pgbouncer_ended_is_let_go(
    database_url: str, bounced_url: str,
) -> None:
    """PgBouncer resets a server connection its client left (`server_reset_query`, DISCARD
    ALL), which lets go of the advisory locks it held: else the pooled server connection
    would keep the lock, and hand it to whichever client it serves next."""
    with psycopg.connect(_plain(bounced_url), autocommit=True) as gone:
        gone.execute("SELECT pg_advisory_lock(%s, %s)", (WORK_KEY, int(StoreWork.ingest)))
        assert _ingest_locks(database_url, granted=True) == 1
    _until(lambda: _ingest_locks(database_url, granted=True) == 0)
    assert _ingest_locks(database_url, granted=True) == 0
    with engines(bounced_url) as (engine,), \
            store_lock(engine, StoreWork.ingest, None, 5.0, KEEPALIVE):
        assert _ingest_locks(database_url, granted=True) == 1


@pytest.mark.parametrize("command", [["db", "current"], ["db", "upgrade"], ["publish"]])
def test_pgbouncer_refusing_options_is_one_line_naming_its_fix(
    database_url: str, settings_env: dict[str, str], command: list[str],
) -> None:
    with running_pgbouncer(BOUNCERS, database_url, ignored="") as url:
        done = apidir(*command, env=settings_env | {"APIDIR_DATABASE_URL": url})
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"apidir: {' '.join(command)} failed on the store {url}: "), line
    assert line.endswith(
        "unsupported startup parameter: options (PgBouncer refuses the `options` startup "
        "parameter, which the pipeline sets on every connection: set "
        "`ignore_startup_parameters = options` in its config, and `pool_mode = session`)"), line
