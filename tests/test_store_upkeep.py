"""The store after weeks of nights: a backup opens as the store it copied, the store's file
alone holds every ended run, a night's shard plan goes once a later night plans, and a run
left running on a machine that is gone is closed, by the next run past its time limit or by
the operator at once."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import make_url, text
from sqlmodel import Session, func, select

from pipeline.judging.evidence import complete_days
from pipeline.judging.rollup import roll_up_days
from pipeline.processes import LEFT_BEHIND_MARGIN
from pipeline.settings import Settings
from pipeline.store.migrate import head_revision
from pipeline.store.tables import (
    ABANDONED,
    PipelineRun,
    ProbeShardRow,
    finish_run,
    make_engine,
    open_engine,
    reap_abandoned_runs,
    start_run,
)
from tests.conftest import REPO, WriteEntry, make_entry
from tests.test_migrations import run_apidir

RUN_TIMEOUT = 6 * 3600.0


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """A refused command's whole answer: one line on standard error, nothing else."""
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.rstrip("\n")


def ended_runs(database_url: str, count: int) -> None:
    """`count` runs of the nightly, each recorded and closed by the pipeline's own functions."""
    engine = make_engine(database_url)
    with Session(engine) as session:
        for _ in range(count):
            finish_run(session, start_run(session, "nightly"), "completed")
    engine.dispose()


def run_count(database_url: str) -> int:
    engine = open_engine(database_url)
    with engine.connect() as connection:
        counted = connection.execute(text("SELECT count(*) FROM pipeline_run")).scalar_one()
    engine.dispose()
    return counted


def test_a_backup_taken_while_a_run_writes_opens_as_the_store_with_its_runs(
    database_url: str, tmp_path: Path,
) -> None:
    """`apidir db backup FILE` copies the store as its runs committed it, while another writer
    holds a write open (the copy neither waits for it nor holds its rows); the copy opens as
    a store of this version with the same runs. An existing file, or a folder that cannot be
    written, is refused in one line, nothing written. A PostgreSQL store is told, in one
    line, to use pg_dump."""
    ended_runs(database_url, 3)
    backups = tmp_path / "backups"
    backups.mkdir()
    target = backups / "apidir.db.bak"
    if database_url.startswith("postgresql"):
        told = one_line(run_apidir(database_url, "db", "backup", str(target)))
        assert "pg_dump" in told, told
        assert (make_url(database_url).password or "never shown") not in told
        assert list(backups.iterdir()) == []
        return

    engine = open_engine(database_url)
    with engine.connect() as writing:  # a run writing: its row not committed yet
        writing.execute(text("INSERT INTO pipeline_run (flow, started_at, state, entries_seen,"
                             " entries_published, entries_added, entries_updated,"
                             " entries_retired, entries_invalid, probes, probes_failed,"
                             " network_suspect) VALUES ('nightly', :at, 'running', 0, 0, 0, 0,"
                             " 0, 0, 0, 0, false)"), {"at": datetime.now(UTC)})
        done = run_apidir(database_url, "db", "backup", str(target))
        writing.rollback()
    engine.dispose()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"backed up the store (schema revision {head_revision()}) "
                                  f"to {target}: "), done.stdout
    assert sorted(path.name for path in backups.iterdir()) == ["apidir.db.bak"]  # one file
    copy = f"sqlite:///{target}"
    current = run_apidir(copy, "db", "current")
    assert (current.returncode, current.stdout) == (
        0, f"schema revision {head_revision()} (up to date)\n"), current.stderr
    assert run_count(copy) == 3

    kept = target.read_bytes()
    assert one_line(run_apidir(database_url, "db", "backup", str(target))) == (
        f"apidir: {target} exists already: a backup goes to a new file")
    assert target.read_bytes() == kept
    afile = tmp_path / "afile"
    afile.write_text("")
    assert one_line(run_apidir(database_url, "db", "backup", str(afile / "b.db"))) == (
        f"apidir: cannot write the backup {afile / 'b.db'}: Not a directory")
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        return  # root writes in any folder; setpriv, which would drop that, is missing
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o500)
    call = [sys.executable, "-m", "pipeline.cli", "db", "backup", str(closed / "b.db")]
    if os.geteuid() == 0:
        call = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *call]
    refused = subprocess.run(call, cwd=REPO, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "APIDIR_DATABASE_URL": database_url})
    assert one_line(refused) == (
        f"apidir: cannot write the backup {closed / 'b.db'}: Permission denied")
    assert list(closed.iterdir()) == []


@pytest.mark.backends("sqlite")
def test_the_store_file_alone_holds_every_ended_run(database_url: str, tmp_path: Path) -> None:
    """A run's end folds the write-ahead log back into the store's file: a copy of the file
    alone, made while the pipeline still has the store open, holds every ended run."""
    engine = make_engine(database_url)
    with Session(engine) as session:
        for _ in range(3):
            finish_run(session, start_run(session, "nightly"), "completed")
        file_alone = tmp_path / "copied" / "apidir.db"
        file_alone.parent.mkdir()
        shutil.copyfile(make_url(database_url).database, file_alone)
        assert run_count(f"sqlite:///{file_alone}") == 3
    engine.dispose()


def several_hosts(write_entry: WriteEntry, count: int) -> None:
    for n in range(count):
        base = f"https://api{n}.example.com"
        write_entry(make_entry(id=f"hosted-{n}", baseUrl=base,
                               sampleRequest=f'curl "{base}/forecast"'))


def test_a_nights_shard_plan_goes_once_a_later_night_plans(
    database_url: str, write_entry: WriteEntry, settings_env: dict[str, str],
    ingested_store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each sharded night stores its targets by shard; once the night has ended they are read
    no more, and the next night's plan deletes them: after many nights the table holds the
    running night's shards alone. A night still running keeps its own."""
    from pipeline.operations import stages
    from pipeline.store.shards import load_shard

    several_hosts(write_entry, 6)
    monkeypatch.setenv("APIDIR_PROBE_SHARDS", "3")
    session = ingested_store()
    settings = Settings()

    def stored() -> dict[int, int]:
        rows = session.exec(select(ProbeShardRow.run_id, func.count()).group_by(
            ProbeShardRow.run_id)).all()
        session.commit()
        return dict(rows)

    for night in range(8):
        run = start_run(session, "nightly")
        shards = stages.store_shard_plan(settings, run.id)
        assert len(shards) == 3 and stored() == {run.id: 3}
        assert load_shard(session, run.id, 2)[0].targets == shards[2].targets
        finish_run(session, run, "failed" if night % 3 else "completed")

    still = start_run(session, "nightly")  # a night that goes on while the next one plans
    stages.store_shard_plan(settings, still.id)
    after = start_run(session, "backfill")
    stages.store_shard_plan(settings, after.id)
    assert stored() == {still.id: 3, after.id: 3}
    finish_run(session, still, "completed")
    finish_run(session, after, "completed")
    last = start_run(session, "nightly")
    stages.store_shard_plan(settings, last.id)
    assert stored() == {last.id: 3}


def running_row(session: Session, host: str, pid: int, started_at: datetime) -> PipelineRun:
    """A run record still `running`, as a process of `host` left it."""
    run = PipelineRun(flow="nightly", host=host, pid=pid, started_at=started_at)
    session.add(run)
    session.commit()
    return run


def test_a_run_left_running_on_a_machine_that_is_gone_is_reaped_past_its_time_limit(
    database_url: str, write_entry: WriteEntry, ingested_store,
) -> None:
    """A run recorded as running on another machine (a container replaced, a store restored on
    another server) cannot be asked whether its process lives: once it started longer ago
    than APIDIR_RUN_TIMEOUT and a margin allow, the next run marks it crashed, and the day it
    probed is complete at last (rolled up once, then prunable). A run of another machine
    within its limit is left running, as is a run here whose process lives; one here under a
    process number that has lived past any run's limit is left behind too."""
    write_entry(make_entry())
    session = ingested_store()
    now = datetime.now(UTC)
    limit = timedelta(seconds=RUN_TIMEOUT) + LEFT_BEHIND_MARGIN
    long_ago = now - limit - timedelta(minutes=5)
    gone = running_row(session, "3f2a9c1e7b44", 4242, now - timedelta(days=10))
    lately = running_row(session, "elsewhere", 4242, now - limit + timedelta(minutes=5))
    alive_here = running_row(session, socket.gethostname(), os.getpid(), now)
    reused = running_row(session, socket.gethostname(), os.getpid(), long_ago)
    day = (now - timedelta(days=10)).date()
    session.execute(PipelineRun.__table__.update().where(PipelineRun.id == gone.id).values(
        first_checked_at=now - timedelta(days=10), last_checked_at=now - timedelta(days=10)))
    roll_up_days(session, [day])
    session.commit()
    assert complete_days(session, [day]) == set()  # its run may still be judged

    reaped = reap_abandoned_runs(session, RUN_TIMEOUT)
    assert sorted(run.id for run in reaped) == [gone.id, reused.id]
    for run in (gone, lately, alive_here, reused):
        session.refresh(run)
    assert (gone.state, reused.state, lately.state, alive_here.state) == (
        "crashed", "crashed", "running", "running")
    assert gone.finished_at is not None and gone.message.startswith(ABANDONED)
    assert gone.message == (
        f"{ABANDONED} (pid 4242 on 3f2a9c1e7b44) is taken as gone: it started at "
        f"{(now - timedelta(days=10)).isoformat().replace('+00:00', 'Z')}, longer ago than a "
        "run may last (APIDIR_RUN_TIMEOUT=21600 s and 1 h)")
    assert complete_days(session, [day]) == {day}
    assert reap_abandoned_runs(session, RUN_TIMEOUT) == []


def test_a_stuck_run_is_closed_in_one_command_and_no_longer_holds_the_store(
    database_url: str, tmp_path: Path,
) -> None:
    """`db compact` and `db downgrade` refuse a store marking a run of another machine running
    within its time limit, naming the command that closes it; `apidir db close-run N` records
    it as crashed, after which they go on. A run past its limit holds nothing back. A run
    that is no more, or not running, or running here still, is refused in one line."""
    make_engine(database_url).dispose()
    engine = make_engine(database_url)
    now = datetime.now(UTC)
    with Session(engine, expire_on_commit=False) as session:
        gone = running_row(session, "3f2a9c1e7b44", 4242, now - timedelta(days=3))
        stuck = running_row(session, "elsewhere", 77, now - timedelta(minutes=10))
    refused = one_line(run_apidir(database_url, "db", "compact"))
    assert refused.startswith(f"apidir: run {stuck.id} (nightly, since ") and refused.endswith(
        f", on elsewhere) is still running: wait for it to end and pause the schedule first, "
        f"or, if its process is gone, pass --ignore-running (or close its record: "
        f"`apidir db close-run {stuck.id}`)"), refused  # the run past its limit is not named

    closed = run_apidir(database_url, "db", "close-run", str(stuck.id),
                        APIDIR_ALERT_WEBHOOK_URL="", APIDIR_ALERT_WEBHOOK_SECRET="")
    assert (closed.returncode, closed.stdout) == (
        0, f"run {stuck.id} (nightly, on elsewhere) is recorded as crashed; no alert was sent: "
        "APIDIR_ALERT_WEBHOOK_URL is not set\n"), closed.stderr
    with Session(engine) as session:
        record = session.get(PipelineRun, stuck.id)
        assert record.state == "crashed" and record.finished_at is not None
        assert record.message.startswith(f"{ABANDONED} (pid 77 on elsewhere) is gone")
        assert session.get(PipelineRun, gone.id).state == "running"  # the next run reaps it
    assert run_apidir(database_url, "db", "compact").returncode == 0

    assert one_line(run_apidir(database_url, "db", "close-run", str(stuck.id))).startswith(
        f"apidir: run {stuck.id} is not running: it ended crashed at ")
    assert one_line(run_apidir(database_url, "db", "close-run", "999")) == (
        "apidir: no run 999 in the store")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with Session(engine, expire_on_commit=False) as session:
            live = running_row(session, socket.gethostname(), alive.pid, now)
        assert one_line(run_apidir(database_url, "db", "close-run", str(live.id))) == (
            f"apidir: run {live.id} is running here still, as process {alive.pid}: stop it "
            f"(`kill {alive.pid}`), and its record closes itself")
    finally:
        alive.kill()
        alive.wait()
    engine.dispose()


@pytest.mark.backends("sqlite")
async def test_a_run_closed_by_hand_is_alerted_as_the_next_run_would_have(
    database_url: str,
) -> None:
    """`apidir db close-run` sends the webhook the `run_crashed` alert a run reaping the run
    would send, with its record's line, and says so; an alert the webhook refused is said in
    the command's line, the record closed all the same. Without a webhook setting or a
    Prefect server keeping its Secret block, the line says none was sent."""
    from tests.webhook import WebhookReceiver

    make_engine(database_url).dispose()
    engine = make_engine(database_url)
    now = datetime.now(UTC)
    with Session(engine, expire_on_commit=False) as session:
        stuck = running_row(session, "elsewhere", 77, now - timedelta(minutes=10))
        refused = running_row(session, "elsewhere", 78, now - timedelta(minutes=10))
    hook = await WebhookReceiver().start()
    try:
        closed = await asyncio.to_thread(run_apidir, database_url, "db", "close-run",
                                         str(stuck.id), APIDIR_ALERT_WEBHOOK_URL=hook.url)
        assert (closed.returncode, closed.stdout, closed.stderr) == (
            0, f"run {stuck.id} (nightly, on elsewhere) is recorded as crashed; the "
            "run_crashed alert was sent\n", "")
        with Session(engine) as session:
            record = session.get(PipelineRun, stuck.id)
        assert hook.events() == ["run_crashed"]
        sent = hook.received[0]["run"]
        assert (sent["id"], sent["state"], sent["message"]) == (stuck.id, "crashed",
                                                                 record.message)
        assert record.message.startswith(f"{ABANDONED} (pid 77 on elsewhere) is gone")

        hook.statuses = [500, 500, 500]
        closed = await asyncio.to_thread(run_apidir, database_url, "db", "close-run",
                                         str(refused.id), APIDIR_ALERT_WEBHOOK_URL=hook.url)
        assert (closed.returncode, closed.stdout.splitlines()) == (0, [
            f"run {refused.id} (nightly, on elsewhere) is recorded as crashed; the alert was "
            "not delivered: HTTP 500"]), closed.stderr
        assert "Traceback" not in closed.stderr
        with Session(engine, expire_on_commit=False) as session:
            assert session.get(PipelineRun, refused.id).state == "crashed"
            unwatched = running_row(session, "elsewhere", 79, now)
    finally:
        await hook.close()
        engine.dispose()
    no_server = run_apidir(database_url, "db", "close-run", str(unwatched.id),
                           APIDIR_ALERT_WEBHOOK_URL="", PREFECT_API_URL="")
    assert no_server.stdout.endswith(
        "is recorded as crashed; no alert was sent: APIDIR_ALERT_WEBHOOK_URL is not set, nor "
        "PREFECT_API_URL naming the Prefect server that keeps the Secret block "
        "'apidir-alert-webhook'\n"), no_server.stderr


@pytest.mark.prefect
@pytest.mark.backends("sqlite")
async def test_a_run_closed_by_hand_is_marked_crashed_in_prefect_too(
    database_url: str, prefect_backend: None,
) -> None:
    """`apidir db close-run` marks the run's Prefect flow run Crashed with the record's line,
    as a run reaping it does, where PREFECT_API_URL names the server, and its line says so. A
    flow run Prefect ended keeps its state, one the server does not know is passed over, and
    without PREFECT_API_URL nothing is asked: each line says which, the record closed all the
    same."""
    import uuid

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Completed, Running

    @flow(name="nightly")
    def stuck_nightly() -> None: ...

    async with get_client() as client:
        running = await client.create_flow_run(stuck_nightly, state=Running())
        finished = await client.create_flow_run(stuck_nightly, state=Completed())
        unwatched = await client.create_flow_run(stuck_nightly, state=Running())
    make_engine(database_url).dispose()
    engine = make_engine(database_url)
    now = datetime.now(UTC) - timedelta(minutes=10)
    with Session(engine, expire_on_commit=False) as session:
        rows = {}
        for name, flow_run_id in (("running", running.id), ("finished", finished.id),
                                  ("unknown", uuid.uuid4()), ("unwatched", unwatched.id)):
            row = running_row(session, "elsewhere", 77, now)
            row.flow_run_id = str(flow_run_id)
            session.add(row)
            session.commit()
            rows[name] = row
    server = PREFECT_API_URL.value()

    def close(name: str, api: str = server) -> str:
        done = run_apidir(database_url, "db", "close-run", str(rows[name].id),
                          APIDIR_ALERT_WEBHOOK_URL="", APIDIR_ALERT_WEBHOOK_SECRET="",
                          PREFECT_API_URL=api)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout.startswith(
            f"run {rows[name].id} (nightly, on elsewhere) is recorded as crashed; no alert was "
            "sent: APIDIR_ALERT_WEBHOOK_URL is not set; "), done.stdout
        return done.stdout.rstrip("\n").rsplit("; ", 1)[1]

    said = {name: await asyncio.to_thread(close, name) for name in ("running", "finished",
                                                                     "unknown")}
    said["unwatched"] = await asyncio.to_thread(close, "unwatched", "")
    assert said == {
        "running": f"its Prefect flow run {running.id} was marked Crashed",
        "finished": f"its Prefect flow run {finished.id} was not marked Crashed: Prefect had "
                    "ended it (Completed)",
        "unknown": f"its Prefect flow run {rows['unknown'].flow_run_id} was not marked "
                   f"Crashed: the Prefect server at {server} does not know it",
        "unwatched": f"its Prefect flow run {unwatched.id} was not marked Crashed: "
                     "PREFECT_API_URL is not set",
    }
    async with get_client() as client:
        states = {name: (await client.read_flow_run(flow_run.id)).state
                  for name, flow_run in (("running", running), ("finished", finished),
                                         ("unwatched", unwatched))}
    with Session(engine) as session:
        records = {name: session.get(PipelineRun, row.id) for name, row in rows.items()}
    engine.dispose()
    assert {name: record.state for name, record in records.items()} == dict.fromkeys(
        rows, "crashed")
    assert (states["running"].type.value, states["running"].message) == (
        "CRASHED", records["running"].message)
    assert states["finished"].type.value == "COMPLETED"
    assert states["unwatched"].type.value == "RUNNING"


def dead_pid() -> int:
    """The number of a process of this machine that has ended."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


@pytest.mark.parametrize("other", ["a run", "the operator"])
async def test_a_dead_run_two_reapers_close_together_is_closed_and_alerted_once(
    database_url: str, monkeypatch: pytest.MonkeyPatch, other: str,
) -> None:
    """Two runs start at the same moment (or a run starts as the operator runs `apidir db
    close-run`) and both find a run here whose process is gone: each has read it as running
    before either closes it (their closing statements are held until both are there). One
    closes it and sends its `run_crashed` alert; the other finds it closed already and sends
    none (the operator's command is refused in its one line)."""
    import logging
    import threading
    from contextlib import suppress

    import typer
    from sqlalchemy import event

    from pipeline.cli import app
    from pipeline.operations.runs import close_left_running
    from pipeline.store.tables import engine_for
    from tests.webhook import WebhookReceiver

    make_engine(database_url).dispose()
    with Session(make_engine(database_url), expire_on_commit=False) as session:
        dead = running_row(session, socket.gethostname(), dead_pid(),
                           datetime.now(UTC) - timedelta(minutes=5))
    hook = await WebhookReceiver().start()
    monkeypatch.setenv("APIDIR_DATABASE_URL", database_url)
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", hook.url)
    settings = Settings()
    engine = engine_for(database_url)
    both_there = threading.Barrier(2)

    def held_until_both_read(_connection, _cursor, statement: str, *_args) -> None:
        if statement.lstrip().upper().startswith("UPDATE PIPELINE_RUN"):
            # gone on without a reaper that did not get there in a minute
            with suppress(threading.BrokenBarrierError):
                both_there.wait(timeout=60)

    def a_run() -> bool:
        closed = asyncio.run(close_left_running(settings, logging.getLogger("reaper")))
        assert [run.id for run in closed] in ([], [dead.id])
        return bool(closed)

    def the_operator() -> bool:
        command = typer.main.get_command(app)
        return command.main(["db", "close-run", str(dead.id)], standalone_mode=False) in (None, 0)

    event.listen(engine, "before_cursor_execute", held_until_both_read)
    try:
        closed = await asyncio.gather(asyncio.to_thread(a_run), asyncio.to_thread(
            a_run if other == "a run" else the_operator))
    finally:
        event.remove(engine, "before_cursor_execute", held_until_both_read)
        await hook.close()
    assert hook.events() == ["run_crashed"]
    assert sorted(closed) == [False, True]
    assert hook.received[0]["run"]["id"] == dead.id
    with Session(engine) as session:
        record = session.get(PipelineRun, dead.id)
    assert record.state == "crashed" and record.message.startswith(ABANDONED)


@pytest.mark.backends("sqlite")
async def test_a_commit_of_probes_a_store_set_up_wrong_refuses_is_not_tried_again(
    database_url: str,
) -> None:
    """The probe stage's one commit is tried again while the store is busy or out of reach; a
    table taken away does not come back between tries, so that refusal ends the commit at
    once, not after APIDIR_STAGE_RETRIES tries and their waits."""
    from sqlalchemy.exc import OperationalError

    from pipeline.operations.stages import stored_again_if_refused

    engine = make_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE probe"))
    tries: list[int] = []

    def store() -> None:
        tries.append(len(tries) + 1)
        with Session(engine) as session:
            finish_run(session, start_run(session, "nightly"), "completed")
            session.execute(text("INSERT INTO probe (run_id, url) VALUES (1, 'https://a.test/')"))

    with pytest.raises(OperationalError, match="no such table: probe"):
        await stored_again_if_refused(Settings(stage_retries=2, retry_delay=0), "probe", 1,
                                      store)
    engine.dispose()
    assert tries == [1]
