"""Schema migrations keep history: a store made by the first release, full of probe history,
is upgraded in place on SQLite and PostgreSQL and every row is found again; the migrations
build exactly the models' schema; `check` mode refuses an old store with the command to run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, make_url, text
from sqlmodel import Session, SQLModel, func, select

from pipeline.judging.evidence import complete_days
from pipeline.judging.present import present_entries
from pipeline.judging.rollup import pruned_days
from pipeline.store import compact
from pipeline.store.history import history_frame, latest_statuses
from pipeline.store.migrate import (
    RevisionRefusedError,
    StoreOutOfDateError,
    alembic_config,
    downgrade_store,
    head_revision,
    store_revision,
    upgrade_store,
)
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EndpointRow,
    EntryEvent,
    EntryRow,
    PipelineRun,
    ProbeRow,
    ReleaseRow,
    RolledDay,
    StateChange,
    active_base_urls,
    as_utc,
    make_engine,
    open_engine,
)
from tests.conftest import REPO, WriteEntry, make_entry

FIRST_RELEASE_SCHEMA = REPO / "tests" / "fixtures" / "store-schema-first-release.sql"
T0 = datetime(2026, 11, 15, 3, 0, tzinfo=UTC)
NIGHTS = 5


def first_release_statements(backend: str) -> list[str]:
    """The first release's schema as its SQLite database held it (the committed fixture); the
    same types in PostgreSQL's words for a PostgreSQL store."""
    sql = FIRST_RELEASE_SCHEMA.read_text()
    if backend == "postgresql":
        sql = re.sub(r"\bDATETIME\b", "TIMESTAMP WITH TIME ZONE", sql)
        sql = re.sub(r"\bid INTEGER NOT NULL", "id SERIAL NOT NULL", sql)
    return [statement for statement in sql.split(";") if statement.strip()]


def fill_first_release_store(database_url: str) -> dict[str, int]:
    """A store of the first release's schema with entries, endpoints, runs, probes and
    releases, written with plain SQL as that release wrote them."""
    engine = open_engine(database_url)
    entry = make_entry()
    with engine.begin() as connection:
        for statement in first_release_statements(engine.url.get_backend_name()):
            connection.execute(text(statement))
        for number in range(3):
            connection.execute(
                text("INSERT INTO entry (id, category, name, content, content_hash, source_file,"
                     " first_seen_at, updated_at) VALUES (:id, 'weather', :name, :content, 'h',"
                     " :file, :at, :at)"),
                {"id": f"entry-{number}", "name": f"Entry {number}", "at": T0,
                 "file": f"data/entries/weather/entry-{number}.yaml",
                 "content": __import__("json").dumps(entry | {"id": f"entry-{number}"})},
            )
            connection.execute(
                text("INSERT INTO endpoint (entry_id, method, path, position, active)"
                     " VALUES (:entry, 'GET', '/forecast', 0, true)"),  # ids 1, 2, 3
                {"entry": f"entry-{number}"},
            )
        for night in range(NIGHTS):
            at = T0 + timedelta(days=night)
            connection.execute(
                text("INSERT INTO pipeline_run (flow, started_at, finished_at, state,"
                     " entries_seen, entries_published, entries_added, entries_updated,"
                     " entries_retired, entries_invalid, probes, probes_failed, network_suspect,"
                     " release_version) VALUES ('nightly', :at, :at, 'completed', 3, 3, 0,"
                     " 0, 0, 0, 3, 0, false, :version)"),
                {"at": at, "version": f"2.0.0+202611{15 + night}.1"},  # ids 1 to NIGHTS
            )
            connection.execute(
                text("INSERT INTO release (version, generated, total_apis, run_id)"
                     " VALUES (:version, :at, 3, :run)"),
                {"version": f"2.0.0+202611{15 + night}.1", "at": at, "run": night + 1},
            )
            for number in range(3):
                connection.execute(
                    text("INSERT INTO probe (run_id, entry_id, endpoint_id, url, checked_at,"
                         " outcome, http_status, total_ms, attempts, redirects) VALUES (:run,"
                         " :entry, :endpoint, :url, :at, 'live', 200, :ms, 1, 0)"),
                    {"run": night + 1, "entry": f"entry-{number}", "endpoint": number + 1,
                     "url": "https://api.example.com/v1/forecast", "at": at,
                     "ms": 100.0 + night * 10 + number},
                )
    engine.dispose()
    return {"entries": 3, "runs": NIGHTS, "probes": 3 * NIGHTS, "releases": NIGHTS}


def apidir_call(database_url: str, *args: str, **settings: str) -> dict[str, Any]:
    """The command line, folder and environment of `apidir *args` on the store at
    `database_url`, for a process of its own."""
    env = {**os.environ, "APIDIR_DATABASE_URL": database_url,
           "APIDIR_BASE_URL": "https://directory.test", **settings}
    return {"args": [sys.executable, "-m", "pipeline.cli", *args], "cwd": REPO, "env": env}


def run_apidir(database_url: str, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """`apidir *args` in a process of its own on the store at `database_url`."""
    return subprocess.run(**apidir_call(database_url, *args, **settings), capture_output=True,
                          text=True, timeout=120)


def test_a_first_release_store_is_upgraded_with_every_row_kept(database_url: str) -> None:
    counts = fill_first_release_store(database_url)
    engine = make_engine(database_url)  # the pipeline opens it: upgraded on start
    assert store_revision(engine) == head_revision()
    with Session(engine) as session:
        assert session.exec(select(func.count()).select_from(EntryRow)).one() == counts["entries"]
        assert session.exec(select(func.count()).select_from(EndpointRow)).one() == 3
        assert session.exec(select(func.count()).select_from(PipelineRun)).one() == counts["runs"]
        assert session.exec(select(func.count()).select_from(ReleaseRow)).one() == counts[
            "releases"]
        probes = session.exec(select(ProbeRow).order_by(ProbeRow.id)).all()
        assert len(probes) == counts["probes"]
        assert [p.total_ms for p in probes[:3]] == [100.0, 101.0, 102.0]
        assert all(p.outcome == "live" and p.http_status == 200 for p in probes)
        assert not any(p.confirmation or p.failure_class for p in probes)  # first looks
        added = session.exec(select(EntryEvent).order_by(EntryEvent.entry_id)).all()
        first_seen = {row.id: row.first_seen_at for row in session.exec(select(EntryRow))}
        assert [(e.kind, e.entry_id) for e in added] == [("added", f"entry-{n}")
                                                          for n in range(3)]
        assert all(as_utc(e.at) == as_utc(first_seen[e.entry_id]) for e in added)
        run = session.get(PipelineRun, 1)
        assert run.flow_run_id is None and run.release_version == "2.0.0+20261115.1"
        # the new tables work, and the history is read as evidence again
        session.add(StateChange(entry_id="entry-0", from_state="live", to_state="online",
                                at=T0 + timedelta(days=6)))
        session.commit()
        presented = present_entries(session, T0 + timedelta(days=NIGHTS))
    assert {status["state"] for status in presented.statuses.values()} == {"live"}
    assert presented.uptimes["entry-0"]["last7d"] == 1.0
    engine.dispose()


def test_a_store_full_of_history_goes_back_to_the_first_revision_and_up_keeping_every_row(
    database_url: str,
) -> None:
    """Every migration goes back on a store whose entries and runs are named by endpoints,
    probes and releases, one revision at a time: the columns they added to those tables are
    dropped in place (a batch copy of a table would drop the table their foreign keys name,
    which SQLite refuses while they hold); then the store is upgraded again, every row kept."""
    counts = fill_first_release_store(database_url)
    engine = make_engine(database_url)
    assert store_revision(engine) == head_revision()
    tables = {"entries": EntryRow, "runs": PipelineRun, "probes": ProbeRow, "releases": ReleaseRow}

    def stored() -> dict[str, int]:
        with engine.connect() as connection:
            return {name: connection.execute(select(func.count()).select_from(
                table.__table__)).scalar() for name, table in tables.items()}

    with engine.connect() as connection:
        script = ScriptDirectory.from_config(alembic_config(connection))
    revisions = [revision for revision in script.walk_revisions() if revision.down_revision]
    assert len(revisions) == int(head_revision()) - 1
    for revision in revisions:  # from the head down, one at a time, each in one transaction
        assert downgrade_store(engine, revision.down_revision) == (revision.revision,
                                                                   revision.down_revision)
        assert store_revision(engine) == revision.down_revision
        assert stored() == {name: counts[name] for name in tables}, revision.revision
    with engine.connect() as connection:
        assert "base_url" not in {c["name"] for c in inspect(connection).get_columns("entry")}
        assert connection.execute(text("SELECT count(*) FROM probe")).scalar() == counts["probes"]
    assert upgrade_store(engine) == ("0001", head_revision())
    assert stored() == {name: counts[name] for name in tables}
    with Session(engine) as session:
        assert set(active_base_urls(session).values()) == {"https://api.example.com/v1"}
    engine.dispose()


def test_the_migrations_build_exactly_the_models_schema(database_url: str) -> None:
    """Every schema change ships with its migration: the models and the head revision agree."""
    engine = make_engine(database_url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    assert differences == []
    assert "alembic_version" in inspect(engine).get_table_names()
    engine.dispose()


def test_a_store_made_before_migrations_by_the_last_release_is_recognised(
    database_url: str,
) -> None:
    """The release before migrations made its tables with `create_all`: that schema is
    revision 0002's (built here by the migrations, then stripped of the version table as that
    release had none), and such a store is stamped, not rebuilt."""
    engine = open_engine(database_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), "0002")
        connection.execute(text("DROP TABLE alembic_version"))
        connection.execute(text(
            "INSERT INTO entry (id, category, name, content, content_hash, source_file,"
            " first_seen_at, updated_at) VALUES ('kept', 'ai', 'Kept', '{}', 'h', 'f', :at, :at)"),
            {"at": T0})
    assert store_revision(engine) == "0002"
    assert upgrade_store(engine) == ("0002", head_revision())
    with Session(engine) as session:
        assert session.exec(select(EntryRow.name).where(EntryRow.id == "kept")).one() == "Kept"
    engine.dispose()


def entries_stored_at(database_url: str, revision: str,
                      entries: list[tuple[str, str, str]]) -> Engine:
    """A store migrated up to `revision`, holding `entries` (id, content, source file) as that
    revision's schema stores them; its engine."""
    engine = open_engine(database_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)
        for entry_id, content, source in entries:
            connection.execute(text(
                "INSERT INTO entry (id, category, name, content, content_hash, source_file,"
                " first_seen_at, updated_at) VALUES (:id, 'ai', :id, :content, 'h', :source,"
                " :at, :at)"), {"id": entry_id, "content": content, "source": source, "at": T0})
    return engine


def test_the_successors_named_in_stored_entries_are_kept_in_their_column(
    database_url: str,
) -> None:
    """Revision 0011 fills each stored entry's successor from its content, so the next ingest
    checks it without parsing the entry's unchanged file."""
    engine = entries_stored_at(database_url, "0010", [
        ("old", '{"deprecated": {"on": "2026-10-01", "successor": "new"}}', "old"),
        ("new", '{"name": "New"}', "new"),
        ("bare", '{"deprecated": {"on": "2026-10-01"}}', "bare")])
    assert upgrade_store(engine) == ("0010", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(EntryRow.id, EntryRow.successor)).all()) == {
            "old": "new", "new": None, "bare": None}
    engine.dispose()


def test_each_stored_entry_s_base_address_is_kept_in_its_column(database_url: str) -> None:
    """Revision 0016 fills each stored entry's base address from its content: the probe
    planning and the score stage read that column alone."""
    engine = entries_stored_at(database_url, "0015", [
        ("weather", '{"baseUrl": "https://api.weather.example/v1"}', "weather.yaml"),
        ("maps", '{"baseUrl": "https://maps.example"}', "maps.yaml")])
    assert upgrade_store(engine) == ("0015", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(EntryRow.id, EntryRow.base_url)).all()) == {
            "weather": "https://api.weather.example/v1", "maps": "https://maps.example"}
        assert active_base_urls(session) == {
            "weather": "https://api.weather.example/v1", "maps": "https://maps.example"}
    engine.dispose()


def test_each_stored_run_keeps_the_first_and_last_check_time_of_its_probes(
    database_url: str,
) -> None:
    """Revision 0017 fills each stored run's first and last check time from its probes, so
    the score stage finds which runs a day's probes hold whole; a run without probes has
    none."""
    engine = entries_stored_at(database_url, "0016", [("weather", "{}", "weather.yaml")])
    with engine.begin() as connection:
        for run_id in (1, 2):
            connection.execute(text(
                "INSERT INTO pipeline_run (id, flow, started_at, state, entries_seen,"
                " entries_published, entries_added, entries_updated, entries_retired,"
                " entries_invalid, probes, probes_failed, network_suspect) VALUES (:id,"
                " 'nightly', :at, 'completed', 0, 0, 0, 0, 0, 0, 0, 0, false)"),
                {"id": run_id, "at": T0})
        for hours in (3, 1, 2):
            connection.execute(text(
                "INSERT INTO probe (run_id, entry_id, url, checked_at, outcome, attempts,"
                " redirects) VALUES (1, 'weather', 'https://api.weather.example', :at,"
                " 'live', 1, 0)"), {"at": T0 + timedelta(hours=hours)})
    assert upgrade_store(engine) == ("0016", head_revision())
    with Session(engine) as session:
        bounds = {run.id: (as_utc(run.first_checked_at), as_utc(run.last_checked_at))
                  for run in session.exec(select(PipelineRun))}
    assert bounds == {1: (T0 + timedelta(hours=1), T0 + timedelta(hours=3)), 2: (None, None)}
    with engine.begin() as connection:  # and back, the probes naming their runs kept
        command.downgrade(alembic_config(connection), "0016")
    assert store_revision(engine) == "0016"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM probe")).scalar() == 3
        assert "first_checked_at" not in {
            column["name"] for column in inspect(connection).get_columns("pipeline_run")}
    engine.dispose()


def test_stored_source_files_become_relative_to_the_entries_folder(database_url: str) -> None:
    """Revision 0013 cuts each stored source file after its last `entries` folder, so a data
    folder moved after the upgrade changes no entry; a name without one is left as it was."""
    given = {"absolute": "/srv/apidir/data/entries/weather/absolute.yaml",
             "working": "data/entries/maps/working.yaml",
             "nested": "/home/entries/data/entries/ai/nested.yaml",
             "elsewhere": "/srv/other/elsewhere.yaml"}
    engine = entries_stored_at(database_url, "0012",
                               [(entry_id, "{}", source) for entry_id, source in given.items()])
    assert upgrade_store(engine) == ("0012", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(EntryRow.id, EntryRow.source_file)).all()) == {
            "absolute": "weather/absolute.yaml", "working": "maps/working.yaml",
            "nested": "ai/nested.yaml", "elsewhere": "/srv/other/elsewhere.yaml"}
    engine.dispose()


def test_check_mode_refuses_an_old_store_and_names_the_command(database_url: str) -> None:
    fill_first_release_store(database_url)
    with pytest.raises(StoreOutOfDateError, match="run `apidir db upgrade`"):
        make_engine(database_url, upgrade="check")
    engine = open_engine(database_url)
    assert store_revision(engine) == "0001"  # untouched
    engine.dispose()


def test_an_empty_store_is_created_in_check_mode_too(database_url: str) -> None:
    engine = make_engine(database_url, upgrade="check")
    assert store_revision(engine) == head_revision()
    engine.dispose()


def test_the_db_commands_show_and_upgrade_the_schema(database_url: str) -> None:
    fill_first_release_store(database_url)

    def apidir(*args: str) -> subprocess.CompletedProcess[str]:
        return run_apidir(database_url, *args, APIDIR_DATABASE_UPGRADE="check")

    current = apidir("db", "current")
    assert current.returncode == 1
    assert f"schema revision 0001; this version needs {head_revision()}" in current.stdout
    refused = apidir("publish")
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0 and "Traceback" not in refused.stderr
    assert "run `apidir db upgrade`" in refused.stderr
    assert database_url.rsplit("/", 1)[-1] in refused.stderr  # names the store
    upgraded = apidir("db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"upgraded the store from schema revision 0001 to {head_revision()}" in upgraded.stdout
    assert apidir("db", "current").returncode == 0


def test_the_store_is_taken_back_to_an_older_schema_and_refused_what_it_cannot_be(
    database_url: str, tmp_path,
) -> None:
    """`apidir db downgrade` takes a store full of history back to an older version's schema,
    every row kept; a revision unknown, newer than the store's or the empty schema before the
    first is refused in one line, the store unchanged; an empty store has nothing to take back."""
    counts = fill_first_release_store(database_url)
    make_engine(database_url).dispose()  # upgraded as the pipeline opens it

    def apidir(*args: str) -> subprocess.CompletedProcess[str]:
        return run_apidir(database_url, *args)

    back = apidir("db", "downgrade", "0015")
    assert back.returncode == 0, back.stderr
    assert f"took the store back from schema revision {head_revision()} to 0015" in back.stdout
    assert "schema revision 0015; this version needs" in apidir("db", "current").stdout
    for revision, said in (("0099", "no schema revision '0099': this version knows 0001 to"),
                           ("base", "no schema revision 'base'"),
                           ("0016", "schema revision 0015, older than 0016: run `apidir db")):
        refused = apidir("db", "downgrade", revision)
        assert refused.returncode == 2, refused.stdout
        assert refused.stderr.strip().count("\n") == 0 and "Traceback" not in refused.stderr
        assert said in refused.stderr, refused.stderr
    assert "schema revision 0015: already there" in apidir("db", "downgrade", "0015").stdout
    engine = open_engine(database_url)
    assert store_revision(engine) == "0015"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM probe")).scalar() == counts["probes"]
        assert connection.execute(text("SELECT count(*) FROM entry")).scalar() == counts["entries"]
    assert upgrade_store(engine) == ("0015", head_revision())
    engine.dispose()
    with pytest.raises(RevisionRefusedError, match="the store is empty"):
        downgrade_store(open_engine(f"sqlite:///{tmp_path / 'empty.db'}"), "0015")


def test_a_sqlite_too_old_to_drop_columns_is_refused_before_the_store_is_touched(
        tmp_path) -> None:
    """The downgrades drop columns in place, which SQLite does from 3.35 on: an older library
    (as the engine reports it) is refused in one sentence, the store left at its revision."""
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with engine.connect():
        engine.dialect.server_version_info = (3, 31, 1)
    with pytest.raises(RevisionRefusedError,
                       match=r"needs SQLite 3\.35 or later; this Python has 3\.31\.1$"):
        downgrade_store(engine, "0015")
    assert store_revision(engine) == head_revision()
    engine.dispose()


def test_a_store_a_run_is_still_using_is_not_taken_back(database_url: str) -> None:
    """`apidir db downgrade` refuses in one line while the store marks a run running whose
    process is alive here, or that runs on another machine, naming the run, and leaves the
    store as it was; a run here whose process is gone does not count, and `--ignore-running`
    goes on past one on another machine."""
    make_engine(database_url).dispose()
    engine = open_engine(database_url)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    since = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)  # within its limit
    with engine.begin() as connection:
        for host, pid in ((socket.gethostname(), os.getpid()), ("elsewhere", 4242),
                          (socket.gethostname(), int(gone.stdout))):
            connection.execute(text(
                "INSERT INTO pipeline_run (flow, started_at, state, entries_seen,"
                " entries_published, entries_added, entries_updated, entries_retired,"
                " entries_invalid, probes, probes_failed, network_suspect, host, pid) VALUES"
                " ('nightly', :at, 'running', 0, 0, 0, 0, 0, 0, 0, 0, false, :host, :pid)"),
                {"at": since, "host": host, "pid": pid})

    def refused(*flags: str) -> str:
        answer = run_apidir(database_url, "db", "downgrade", "0015", *flags)
        assert answer.returncode == 2, answer.stdout
        assert answer.stderr.strip().count("\n") == 0 and "Traceback" not in answer.stderr
        assert store_revision(engine) == head_revision()
        return answer.stderr

    shown = since.strftime("%Y-%m-%d %H:%M:%S")
    here = f"run 1 (nightly, since {shown}, on {socket.gethostname()})"
    assert f"{here} is still running (and 1 more): wait for it to end" in refused()
    with engine.begin() as connection:
        connection.execute(text("UPDATE pipeline_run SET state = 'completed' WHERE id = 1"))
    assert f"run 2 (nightly, since {shown}, on elsewhere) is still running: " in (
        refused())  # run 3's process is gone: not counted
    back = run_apidir(database_url, "db", "downgrade", "0015", "--ignore-running")
    assert back.returncode == 0, back.stderr
    assert store_revision(engine) == "0015"
    engine.dispose()


def test_compacting_gives_the_disk_back_the_space_of_deleted_rows(
    database_url: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """Deleted probes leave the store its size; `apidir db compact` gives the space back, in
    one line, every other row kept. A store a run is still using is refused in one line
    unless `--ignore-running`; a SQLite file that is not there is refused, not made."""
    from pipeline.probing.probe import ProbeResult
    from pipeline.store.history import add_probes
    from pipeline.store.tables import ProbeRow, start_run
    from tests.conftest import ingested_session

    write_entry(make_entry())
    at = datetime(2026, 11, 20, 3, 0, tzinfo=UTC)
    with ingested_session(database_url, data_dir / "entries") as session:
        if database_url.startswith("postgresql"):  # its vacuum would give some space back first
            session.execute(text("ALTER TABLE probe SET (autovacuum_enabled = false)"))
        run = start_run(session, "nightly")
        add_probes(session, run.id, [ProbeResult(
            url=f"https://api.example.com/{'x' * 200}/{n}", entry_id="example-weather",
            endpoint_id=None, checked_at=at, outcome="live", reason=None, error_class=None,
            http_status=200, total_ms=12.5, dns_ms=None, connect_ms=None, ttfb_ms=None,
            final_url=None, attempts=1, redirects=0, error="e" * 200) for n in range(20_000)])
        run.state = "completed"
        session.commit()
        session.execute(ProbeRow.__table__.delete())
        session.commit()
    engine = open_engine(database_url)
    with engine.connect() as connection:
        filled = compact.store_size(connection)

    done = run_apidir(database_url, "db", "compact")
    assert done.returncode == 0, done.stderr
    line = re.fullmatch(r"compacted the store from ([\d,]+) to ([\d,]+) bytes\n", done.stdout)
    assert line is not None, done.stdout
    before, after = (int(group.replace(",", "")) for group in line.groups())
    assert before >= filled > after + 4_000_000  # some 8 MB of probes deleted
    with engine.connect() as connection:
        assert compact.store_size(connection) < filled - 4_000_000  # measured apart
        assert connection.execute(text("SELECT id FROM entry")).scalars().all() == [
            "example-weather"]
        assert connection.execute(text("SELECT count(*) FROM pipeline_run")).scalar_one() == 1
        connection.execute(text("UPDATE pipeline_run SET state = 'running', host = :host, "
                                "pid = :pid"), {"host": socket.gethostname(), "pid": os.getpid()})
        connection.commit()
    refused = run_apidir(database_url, "db", "compact")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("apidir: run 1 (nightly, since ") and (
        "is still running: wait for it to end and pause the schedule first" in refused.stderr)
    assert run_apidir(database_url, "db", "compact", "--ignore-running").returncode == 0
    engine.dispose()
    if database_url.startswith("sqlite"):
        missing = Path(make_url(database_url).database).with_name("none.db")
        gone = run_apidir(f"sqlite:///{missing}", "db", "compact")
        assert gone.returncode == 2
        assert gone.stderr == f"apidir: no store at {missing}: nothing to compact\n"
        assert not missing.exists()


def test_compacting_waits_for_a_schema_change_under_way(
    database_url: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """`apidir db compact` started while another process holds the store's migrate lock, as
    `db upgrade` and `db downgrade` do, waits for it to end, then compacts."""
    from pipeline.store.migrate import migrating
    from tests.conftest import ingested_session

    write_entry(make_entry())
    with ingested_session(database_url, data_dir / "entries"):
        pass
    engine = open_engine(database_url)
    with migrating(engine):
        waiting = subprocess.Popen(**apidir_call(database_url, "db", "compact"),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with contextlib.suppress(subprocess.TimeoutExpired):
            waiting.wait(timeout=8)  # the command alone takes some 2 s here
        assert waiting.poll() is None, waiting.communicate()
        if database_url.startswith("postgresql"):
            with engine.connect() as connection:
                assert connection.execute(text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )).scalar_one() == 1
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert out.startswith("compacted the store from ")
    engine.dispose()


def test_the_days_rolled_up_before_keep_no_evidence_and_are_kept_both_ways(
    database_url: str,
) -> None:
    """Revision 0018 gives each rolled-up day two columns for its evidence, empty for the days
    already rolled up (read from their rows until they leave the window); going back drops
    them and keeps the days."""
    engine = entries_stored_at(database_url, "0017", [("weather", "{}", "weather.yaml")])
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO rolled_day (day, rolled_at) VALUES (:day, :at)"),
                           {"day": T0.date(), "at": T0 + timedelta(days=1)})
    assert upgrade_store(engine) == ("0017", head_revision())
    with Session(engine) as session:
        [day] = session.exec(select(RolledDay)).all()
    assert (day.day, day.evidence_entries, day.evidence) == (T0.date(), None, None)
    assert rolled_days_back_at(engine, "0017") == (1, False)  # and back, the day kept
    engine.dispose()


def rolled_days_back_at(engine: Engine, revision: str) -> tuple[int, bool]:
    """Take the store back to `revision`: how many rolled-up days it then holds, and whether
    their table still has the column the revision after it added."""
    added = {"0017": "evidence", "0018": "probes_pruned"}[revision]
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), revision)
    with engine.connect() as connection:
        return (connection.execute(text("SELECT count(*) FROM rolled_day")).scalar_one(),
                added in {column["name"] for column in inspect(connection).get_columns(
                    "rolled_day")})


def test_the_days_already_pruned_are_marked_pruned_and_kept_both_ways(
    database_url: str,
) -> None:
    """Revision 0019 marks pruned the rolled-up days whose rollups counted probes and which
    hold none (pruned before pruning kept an entry's latest probes): a backfill still refuses
    them. A day holding probes, or whose rollups counted none, is not marked; going back drops
    the mark and keeps the days."""
    engine = entries_stored_at(database_url, "0018", [("weather", "{}", "weather.yaml")])
    pruned, held, quiet = (T0.date() + timedelta(days=n) for n in range(3))
    with engine.begin() as connection:
        connection.execute(text(
            "INSERT INTO pipeline_run (id, flow, started_at, state, entries_seen,"
            " entries_published, entries_added, entries_updated, entries_retired,"
            " entries_invalid, probes, probes_failed, network_suspect) VALUES (1,"
            " 'nightly', :at, 'completed', 0, 0, 0, 0, 0, 0, 0, 0, false)"), {"at": T0})
        connection.execute(text(
            "INSERT INTO probe (run_id, entry_id, url, checked_at, outcome, attempts,"
            " redirects) VALUES (1, 'weather', 'https://api.weather.example', :at,"
            " 'live', 1, 0)"), {"at": T0 + timedelta(days=1)})
        for day, probes in ((pruned, 2), (held, 1), (quiet, 0)):
            connection.execute(text("INSERT INTO rolled_day (day, rolled_at) VALUES (:day, :at)"),
                               {"day": day, "at": T0 + timedelta(days=5)})
            connection.execute(text(
                "INSERT INTO daily_entry (day, entry_id, probes, responses, live, state,"
                " percent, grade, rubric) VALUES (:day, 'weather', :probes, 0, 0, 'unchecked',"
                " 0, '', '')"), {"day": day, "probes": probes})
    assert upgrade_store(engine) == ("0018", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(RolledDay.day, RolledDay.probes_pruned)).all()) == {
            pruned: True, held: False, quiet: False}
        assert pruned_days(session, [pruned, held, quiet]) == [pruned]
    assert rolled_days_back_at(engine, "0018") == (3, False)  # and back, the days kept
    engine.dispose()


def store_schema(engine: Engine) -> dict[str, set[str]]:
    """The store's tables and their columns (the version table aside)."""
    with engine.connect() as connection:
        found = inspect(connection)
        return {table: {column["name"] for column in found.get_columns(table)}
                for table in found.get_table_names() if table != "alembic_version"}


def schema_at(revision: str, folder: Path) -> dict[str, set[str]]:
    """The tables and columns the migrations build up to `revision`, in a new store."""
    engine = open_engine(f"sqlite:///{folder / f'schema-{revision}.db'}")
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)
    schema = store_schema(engine)
    engine.dispose()
    return schema


def history_at(database_url: str, revision: str) -> tuple[Engine, dict[str, int]]:
    """A store full of history taken back to `revision`, as `apidir db downgrade` does before
    an older version is installed again; its engine, and how many rows each table holds."""
    fill_first_release_store(database_url)
    engine = open_engine(database_url)
    upgrade_store(engine)
    downgrade_store(engine, revision)
    return engine, stored_rows(engine)


def stored_rows(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in ("entry", "endpoint", "pipeline_run", "probe", "release")}


# `apidir db upgrade`, paused as it is about to fill the runs' check times (revision 0017),
# after the schema changes of 0016 and 0017: it says so, and is killed there.
PAUSED_UPGRADE = """
import sys
import time

from sqlalchemy import Engine, event

from pipeline import cli


@event.listens_for(Engine, "before_cursor_execute")
def pause(connection, cursor, statement, parameters, context, executemany):
    if statement.startswith("UPDATE pipeline_run SET first_checked_at"):
        print("filling the runs' check times", flush=True)
        time.sleep(3600)


sys.argv = ["apidir", "db", "upgrade"]
cli.main()
"""


def test_an_upgrade_killed_midway_leaves_the_store_at_its_revision_and_upgrades_again(
    database_url: str, tmp_path: Path,
) -> None:
    """`apidir db upgrade` killed (SIGKILL) in the middle of a migration, after the schema
    changes of the one before: the store is left at the revision it had, with that revision's
    columns and every row, and the next upgrade reaches the head. (SQLite's driver committed
    each ALTER on its own, while the version table's update was rolled back: every later upgrade
    failed on a column already there.)"""
    engine, rows = history_at(database_url, "0015")
    call = apidir_call(database_url)
    upgrading = subprocess.Popen([sys.executable, "-c", PAUSED_UPGRADE], cwd=call["cwd"],
                                 env=call["env"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    said = iter(upgrading.stdout.readline, "")
    paused = any(line == "filling the runs' check times\n" for line in said)
    upgrading.kill()
    _, err = upgrading.communicate()
    assert paused, err  # killed in the middle, not after it ended
    assert upgrading.returncode == -9
    assert store_revision(engine) == "0015"
    assert store_schema(engine) == schema_at("0015", tmp_path)
    again = run_apidir(database_url, "db", "upgrade")
    assert again.returncode == 0, again.stderr
    assert f"from schema revision 0015 to {head_revision()}" in again.stdout
    assert stored_rows(engine) == rows
    with engine.connect() as connection:
        assert connection.execute(text(
            "SELECT count(*) FROM pipeline_run WHERE first_checked_at IS NOT NULL")
        ).scalar_one() == rows["pipeline_run"]  # the fill ran this time
    engine.dispose()


def assert_one_line(answer: subprocess.CompletedProcess[str]) -> str:
    """A refusal told in one line, without traceback, SQL or link: that line."""
    assert answer.returncode == 2, answer.stdout
    assert answer.stderr.count("\n") == 1 and "Traceback" not in answer.stderr, answer.stderr
    assert "[SQL" not in answer.stderr and "sqlalche.me" not in answer.stderr, answer.stderr
    return answer.stderr


def test_an_upgrade_failing_midway_is_undone_whole_and_told_in_one_line(
    database_url: str, tmp_path: Path,
) -> None:
    """A migration that fails on what the store holds (here a table of the name a later
    revision creates, made by hand) undoes the whole upgrade, the schema changes of the
    revisions before it too: the store keeps its revision, columns and rows, and `apidir db
    upgrade` names the step that failed and why in one line."""
    engine, rows = history_at(database_url, "0005")
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE rolled_day (day DATE PRIMARY KEY)"))
    said = assert_one_line(run_apidir(database_url, "db", "upgrade"))
    assert "from schema revision 0006 to 0007 failed" in said and "rolled_day" in said, said
    assert "it is still at schema revision 0005" in said, said
    assert store_revision(engine) == "0005"
    assert store_schema(engine) == schema_at("0005", tmp_path) | {"rolled_day": {"day"}}
    assert stored_rows(engine) == rows
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE rolled_day"))
    assert upgrade_store(engine) == ("0005", head_revision())
    assert stored_rows(engine) == rows
    engine.dispose()


def test_an_upgrade_failing_at_its_commit_is_told_in_a_sentence(tmp_path: Path) -> None:
    """An upgrade whose every migration went through but whose commit failed (here a row a
    trigger made by hand adds, breaking a deferred foreign key) names no step and reads as a
    sentence: it said "was not upgraded failed (…)"."""
    database = tmp_path / "apidir.db"
    with contextlib.closing(sqlite3.connect(database)) as connection:
        connection.executescript(f"""
            CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY);
            CREATE TABLE parent (id TEXT PRIMARY KEY);
            CREATE TABLE child (parent TEXT REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
            CREATE TRIGGER head_reached AFTER UPDATE ON alembic_version
            WHEN NEW.version_num = '{head_revision()}'
            BEGIN INSERT INTO child VALUES ('none such'); END;""")
    url = f"sqlite:///{database}"
    said = assert_one_line(run_apidir(url, "db", "upgrade"))
    assert said == (f"apidir: the store {url} was not upgraded (FOREIGN KEY constraint failed); "
                    "every change was undone, it is still at schema revision none (empty "
                    "database)\n")
    with contextlib.closing(sqlite3.connect(database)) as connection:
        assert connection.execute("SELECT count(*) FROM alembic_version").fetchone() == (0,)


def test_a_downgrade_failing_midway_is_undone_whole_and_told_in_one_line(
    database_url: str, tmp_path: Path,
) -> None:
    """Taking a store back is undone whole as well: a view made by hand on a column revision
    0017 added stops that revision's downgrade, after 0019's and 0018's went through; the store
    keeps the head revision, its columns and rows."""
    fill_first_release_store(database_url)
    engine = make_engine(database_url)
    rows = stored_rows(engine)
    with engine.begin() as connection:
        connection.execute(text(
            "CREATE VIEW run_bounds AS SELECT id, first_checked_at FROM pipeline_run"))
    said = assert_one_line(run_apidir(database_url, "db", "downgrade", "0016"))
    assert "from schema revision 0017 to 0016 failed" in said, said
    assert f"it is still at schema revision {head_revision()}" in said, said
    assert store_revision(engine) == head_revision()
    assert store_schema(engine) == schema_at(head_revision(), tmp_path)
    assert stored_rows(engine) == rows
    with engine.begin() as connection:
        connection.execute(text("DROP VIEW run_bounds"))
    assert downgrade_store(engine, "0016") == (head_revision(), "0016")
    engine.dispose()


def test_the_pipeline_s_other_connections_keep_the_driver_s_transactions(tmp_path: Path) -> None:
    """Only the connection that migrates a SQLite store begins its transactions itself: the
    pipeline's other connections, from the same pool, keep the driver's (its locking rests on
    them), and a read opens none."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")  # built by its migrations
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert driver.isolation_level == ""
        connection.execute(text("SELECT count(*) FROM entry"))
        assert not driver.in_transaction
    assert engine.pool.checkedin() == 1  # the same connection the migrations ran on
    engine.dispose()


def test_the_days_rollups_count_their_successful_probes_apart_and_are_kept_both_ways(
    database_url: str,
) -> None:
    """Revision 0020 counts each rolled-up day's successful probes apart from its answers: on
    a day whose raw probes are stored, an entry that answered with a failure (a 404) has its
    successes, timed successful probes and percentiles counted again from them (each target's
    last look of a trusted run); a pruned day keeps its old figures, its answers standing for
    its successes. The days' kept evidence is dropped, to be kept again from the rows; going
    back drops the count and keeps every row."""
    engine = entries_stored_at(database_url, "0019", [("gone", "{}", "gone.yaml"),
                                                      ("walled", "{}", "walled.yaml")])
    pruned, held = T0.date(), T0.date() + timedelta(days=1)
    at = T0 + timedelta(days=1)
    entry_rollup = sa.table(
        "daily_entry", *(sa.column(name) for name in (
            "day", "entry_id", "probes", "responses", "live", "p50_ms", "p90_ms", "state",
            "percent", "grade", "rubric")), sa.column("timed_ms", sa.JSON))
    with engine.begin() as connection:
        for run_id, suspect in ((1, False), (2, True)):
            connection.execute(text(
                "INSERT INTO pipeline_run (id, flow, started_at, state, entries_seen,"
                " entries_published, entries_added, entries_updated, entries_retired,"
                " entries_invalid, probes, probes_failed, network_suspect) VALUES (:id,"
                " 'nightly', :at, 'completed', 0, 0, 0, 0, 0, 0, 0, 0, :suspect)"),
                {"id": run_id, "at": at, "suspect": suspect})
        for run_id, entry_id, path, outcome, status, reason, ms in (
                (1, "gone", "a", "online", 404, "not_found", 40.0),
                (1, "gone", "b", "online", 404, "not_found", 35.0),
                (1, "walled", "a", "online", 401, "auth", 30.0),
                (1, "gone", "a", "online", 404, "not_found", 41.0),  # the confirmations
                (1, "gone", "b", "live", 200, None, 90.0),
                (2, "gone", "a", "live", 200, None, 10.0)):  # a run that does not count
            connection.execute(text(
                "INSERT INTO probe (run_id, entry_id, url, checked_at, outcome, http_status,"
                " reason, total_ms, attempts, redirects) VALUES (:run, :entry, :url, :at,"
                " :outcome, :status, :reason, :ms, 1, 0)"),
                {"run": run_id, "entry": entry_id, "url": f"https://{entry_id}.example/{path}",
                 "at": at, "outcome": outcome, "status": status, "reason": reason, "ms": ms})
        for day, was_pruned in ((pruned, True), (held, False)):
            connection.execute(text(
                "INSERT INTO rolled_day (day, rolled_at, evidence_entries, evidence,"
                " probes_pruned) VALUES (:day, :at, 'gone,walled', :evidence, :pruned)"),
                {"day": day, "at": T0 + timedelta(days=5), "evidence": b"answers counted",
                 "pruned": was_pruned})
        figures = {"state": "online", "percent": 50, "grade": "C", "rubric": "2.0.0"}
        connection.execute(entry_rollup.insert(), [
            {"day": pruned, "entry_id": "gone", "probes": 2, "responses": 2, "live": 0,
             "timed_ms": [40.0, 41.0], "p50_ms": 40.5, "p90_ms": 40.9, **figures},
            {"day": held, "entry_id": "gone", "probes": 2, "responses": 2, "live": 1,
             "timed_ms": [41.0, 90.0], "p50_ms": 65.5, "p90_ms": 85.1, **figures},
            {"day": held, "entry_id": "walled", "probes": 1, "responses": 1, "live": 0,
             "timed_ms": [30.0], "p50_ms": 30.0, "p90_ms": 30.0, **figures}])
        for entry_id, path, ms in (("gone", "a", 41.0), ("gone", "b", 90.0),
                                   ("walled", "a", 30.0)):
            connection.execute(text(
                "INSERT INTO daily_endpoint (day, entry_id, url, probes, responses, live,"
                " p50_ms, p90_ms) VALUES (:day, :entry, :url, 1, 1, 0, :ms, :ms)"),
                {"day": held, "entry": entry_id, "url": f"https://{entry_id}.example/{path}",
                 "ms": ms})
    assert upgrade_store(engine) == ("0019", head_revision())
    with Session(engine) as session:
        entries = {(row.day, row.entry_id): (row.responses, row.successes, row.timed_ms,
                                             row.p50_ms, row.p90_ms)
                   for row in session.exec(select(DailyEntryRollup))}
        assert entries == {
            (pruned, "gone"): (2, 2, [40.0, 41.0], 40.5, 40.9),  # pruned: as it was
            (held, "gone"): (2, 1, [90.0], 90.0, 90.0),
            (held, "walled"): (1, 1, [30.0], 30.0, 30.0)}  # no failure: as it was
        endpoints = {row.url: (row.responses, row.successes, row.p50_ms)
                     for row in session.exec(select(DailyEndpointRollup))}
        assert endpoints == {"https://gone.example/a": (1, 0, None),
                             "https://gone.example/b": (1, 1, 90.0),
                             "https://walled.example/a": (1, 1, 30.0)}
        assert [day.evidence for day in session.exec(select(RolledDay))] == [None, None]
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0019")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM daily_entry")).scalar_one() == 3
        for table in ("daily_entry", "daily_endpoint"):
            assert "successes" not in {column["name"] for column in
                                       inspect(connection).get_columns(table)}
    engine.dispose()


def test_every_stored_run_keeps_its_judgement_but_one_that_died_before_it(
    database_url: str,
) -> None:
    """Revision 0021 keeps when each run's probes were judged: every run stored keeps its
    judgement (trusted or network-suspect, also one that failed after it), but a run that
    stored probes and ended before counting any (reaped as crashed), whose probes no longer
    count; going back drops the column and keeps every run and probe."""
    engine = entries_stored_at(database_url, "0020", [("weather", "{}", "weather.yaml")])
    at = T0 + timedelta(days=1)
    with engine.begin() as connection:
        for run_id, state, probes, suspect, checked in (
                (1, "completed", 1, False, T0), (2, "crashed", 0, False, at),
                (3, "completed", 12, True, at), (4, "failed", 1, False, T0),
                (5, "running", 0, False, None)):
            connection.execute(text(
                "INSERT INTO pipeline_run (id, flow, started_at, state, entries_seen,"
                " entries_published, entries_added, entries_updated, entries_retired,"
                " entries_invalid, probes, probes_failed, network_suspect, first_checked_at,"
                " last_checked_at) VALUES (:id, 'nightly', :started, :state, 0, 0, 0, 0, 0,"
                " 0, :probes, 0, :suspect, :checked, :checked)"),
                {"id": run_id, "started": T0 - timedelta(minutes=1), "state": state,
                 "probes": probes, "suspect": suspect, "checked": checked})
        for run_id, outcome, status, checked in ((1, "live", 200, T0),
                                                 (2, "unreachable", None, at),
                                                 (3, "unreachable", None, at),
                                                 (4, "live", 200, T0)):
            connection.execute(text(
                "INSERT INTO probe (run_id, entry_id, url, checked_at, outcome, http_status,"
                " attempts, redirects) VALUES (:run, 'weather', 'https://weather.example/',"
                " :at, :outcome, :status, 1, 0)"),
                {"run": run_id, "at": checked, "outcome": outcome, "status": status})
    assert upgrade_store(engine) == ("0020", head_revision())
    with Session(engine) as session:
        judged = {run.id: run.judged_at and as_utc(run.judged_at)
                  for run in session.exec(select(PipelineRun))}
        assert judged == {1: T0, 2: None, 3: at, 4: T0, 5: None}
        assert latest_statuses(session)["weather"].state == "live"
        assert set(history_frame(session)["run_id"]) == {1, 4}
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0020")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM pipeline_run")).scalar_one() == 5
        assert connection.execute(text("SELECT count(*) FROM probe")).scalar_one() == 4
        assert "judged_at" not in {column["name"] for column in
                                   inspect(connection).get_columns("pipeline_run")}
    engine.dispose()


def test_each_rolled_day_names_the_runs_its_rollup_read_as_the_stamps_told_it(
    database_url: str,
) -> None:
    """Revision 0022 names with each rolled-up day the trusted runs whose probes its rollup
    read: those with probes that day judged before it was rolled up (a run judged after, a
    network-suspect run or one of another day is not named), so each day is as complete as it
    was; going back drops the column and keeps the days."""
    from pipeline.judging.evidence import complete_days

    engine = entries_stored_at(database_url, "0021", [("weather", "{}", "weather.yaml")])
    day, other = T0.date(), T0.date() + timedelta(days=1)
    rolled_at = T0 + timedelta(days=1, hours=1)
    with engine.begin() as connection:
        for run_id, suspect, checked, judged in (
                (1, False, T0, T0), (2, True, T0, T0), (3, False, T0 + timedelta(days=1), T0),
                (4, False, T0 + timedelta(hours=5), rolled_at + timedelta(hours=1))):
            connection.execute(text(
                "INSERT INTO pipeline_run (id, flow, started_at, state, entries_seen,"
                " entries_published, entries_added, entries_updated, entries_retired,"
                " entries_invalid, probes, probes_failed, network_suspect, first_checked_at,"
                " last_checked_at, judged_at) VALUES (:id, 'nightly', :checked, 'completed', 0,"
                " 0, 0, 0, 0, 0, 1, 0, :suspect, :checked, :checked, :judged)"),
                {"id": run_id, "suspect": suspect, "checked": checked, "judged": judged})
        for rolled in (day, other):
            connection.execute(text("INSERT INTO rolled_day (day, rolled_at) VALUES (:day, :at)"),
                               {"day": rolled, "at": rolled_at + (rolled - day)})
    assert upgrade_store(engine) == ("0021", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(RolledDay.day, RolledDay.runs_read)).all()) == {
            day: "1", other: "3"}
        assert complete_days(session, [day, other]) == {other}  # run 4 was judged after
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0021")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM rolled_day")).scalar_one() == 2
        assert "runs_read" not in {column["name"] for column in
                                   inspect(connection).get_columns("rolled_day")}
    engine.dispose()


def test_each_stored_run_that_ended_is_placed_among_the_runs_started_by_its_end(
    database_url: str,
) -> None:
    """Revision 0025 keeps with each run the highest run id in the store when it ended: the
    runs already ended take the highest id of those started by their stamped end, never below
    their own (an end stamped before its own start, by a clock behind); one still running has
    none. Going back drops the column and keeps every run."""
    engine = entries_stored_at(database_url, "0024", [("weather", "{}", "weather.yaml")])
    with engine.begin() as connection:
        for run_id, state, started, finished in (
                (1, "failed", 0, 10), (2, "completed", 5, 60), (3, "crashed", 20, 15),
                (4, "running", 30, None)):
            connection.execute(text(
                "INSERT INTO pipeline_run (id, flow, started_at, finished_at, state,"
                " entries_seen, entries_published, entries_added, entries_updated,"
                " entries_retired, entries_invalid, probes, probes_failed, network_suspect)"
                " VALUES (:id, 'nightly', :started, :finished, :state, 0, 0, 0, 0, 0, 0, 0, 0,"
                " false)"),
                {"id": run_id, "state": state, "started": T0 + timedelta(minutes=started),
                 "finished": None if finished is None else T0 + timedelta(minutes=finished)})
    assert upgrade_store(engine) == ("0024", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(PipelineRun.id, PipelineRun.last_run_at_end)).all()) \
            == {1: 2, 2: 4, 3: 3, 4: None}
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0024")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM pipeline_run")).scalar_one() == 4
        assert "last_run_at_end" not in {column["name"] for column in
                                         inspect(connection).get_columns("pipeline_run")}
    engine.dispose()


def test_each_stored_entry_s_base_address_holds_from_no_known_move(database_url: str) -> None:
    """Revision 0027 keeps when each entry's base address last changed: no stored entry is
    known to have moved before it, so every entry is kept with none (none of its probes left
    out), published or retired. Going back drops the column and its index and keeps every
    entry."""
    engine = entries_stored_at(database_url, "0026", [("weather", "{}", "weather.yaml"),
                                                     ("maps", "{}", "maps.yaml")])
    with engine.begin() as connection:
        connection.execute(text("UPDATE entry SET base_url = 'https://api.maps.example',"
                                " retired_at = :at WHERE id = 'maps'"), {"at": T0})
    assert upgrade_store(engine) == ("0026", head_revision())
    with Session(engine) as session:
        assert dict(session.exec(select(EntryRow.id, EntryRow.base_url_since)).all()) == {
            "weather": None, "maps": None}
        assert dict(session.exec(select(EntryRow.id, EntryRow.base_url)).all()) == {
            "weather": None, "maps": "https://api.maps.example"}
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0026")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM entry")).scalar_one() == 2
        assert "base_url_since" not in {column["name"] for column in
                                        inspect(connection).get_columns("entry")}
        assert "ix_entry_base_url_since" not in {index["name"] for index in
                                                 inspect(connection).get_indexes("entry")}
    engine.dispose()


# --- a store of each revision, full of a few nights' history, upgraded and run ---------------

# The revisions a deployed store may still hold: each release from the one that moved every
# entry's base address into a column; the head's own store is the reference they are held to.
DEPLOYED_REVISIONS = ("0016", "0017", "0018", "0019", "0020", "0021", "0022", "0023")
HISTORY_NIGHTS = 3
# Values a revision after the store's computes again by design: 0020 counts the successful
# probes of days whose raw probes are stored again, and drops the days' kept evidence.
RECOUNTED = {"daily_entry": {"timed_ms", "p50_ms", "p90_ms"},
             "daily_endpoint": {"p50_ms", "p90_ms"},
             "rolled_day": {"evidence", "evidence_entries"}}
SERIAL_TABLES = ("endpoint", "pipeline_run", "probe", "state_change", "entry_event")


def history_entries() -> dict[str, dict[str, Any]]:
    """The two entries of the history: one that stays live, one whose API stops answering on
    the last night."""
    return {"steady-weather": make_entry(id="steady-weather", name="Steady Weather"),
            "fading-maps": make_entry(id="fading-maps", name="Fading Maps", category="maps",
                                      baseUrl="https://api.maps.example/v2",
                                      sampleRequest='curl -H "X-Api-Key: YOUR_API_KEY" '
                                                    '"https://api.maps.example/v2/forecast"')}


def history_rows(first_night: datetime) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows after HISTORY_NIGHTS nightly runs from `first_night`, as the head's
    schema holds them: runs with their probes (a failure confirmed on the last night), the
    releases, the days rolled up before the last night, states, lifecycles, state changes,
    events and a probe shard. A store of an older revision holds the columns it has."""
    entries = history_entries()
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in (
        "entry", "endpoint", "pipeline_run", "probe", "probe_shard", "release", "daily_entry",
        "daily_endpoint", "rolled_day", "state_change", "entry_state", "entry_lifecycle",
        "entry_event")}
    for number, (entry_id, entry) in enumerate(entries.items()):
        rows["entry"].append({
            "id": entry_id, "category": entry["category"], "name": entry["name"],
            "content": entry, "content_hash": f"content-{number}",
            "source_file": f"{entry['category']}/{entry_id}.yaml", "first_seen_at": first_night,
            "updated_at": first_night, "retired_at": None, "file_hash": f"file-{number}",
            "file_stat": f"{number}:1:2:3", "successor": None, "former_ids": None,
            "base_url": entry["baseUrl"], "content_scores": {"pricing": 80, "depth": 60},
            "scored_hash": f"content-{number}", "scored_rubric": "2.2.0"})
    targets = [("steady-weather", 1, "https://api.example.com/v1/forecast"),
               ("steady-weather", 2, "https://api.example.com/v1/current"),
               ("fading-maps", 3, "https://api.maps.example/v2/forecast")]
    for endpoint_id, (entry_id, _, url) in enumerate(targets, start=1):
        rows["endpoint"].append({
            "id": endpoint_id, "entry_id": entry_id, "method": "GET",
            "path": "/" + url.rsplit("/", 1)[1], "description": "A listed endpoint.",
            "position": endpoint_id - 1 if entry_id == "steady-weather" else 0, "active": True,
            "probe_note": None})
    probe_id = 0
    for night in range(HISTORY_NIGHTS):
        run_id, started = night + 1, first_night + timedelta(days=night)
        last = night == HISTORY_NIGHTS - 1
        checked = [started + timedelta(seconds=10 + n) for n in range(len(targets) + last)]
        rows["pipeline_run"].append({
            "id": run_id, "flow": "nightly", "flow_run_id": f"flow-run-{run_id}",
            "host": "night-host", "pid": 4000 + run_id, "started_at": started,
            "finished_at": started + timedelta(minutes=5), "state": "completed",
            "entries_seen": 2, "entries_published": 2, "entries_added": 2 if night == 0 else 0,
            "entries_updated": 0, "entries_retired": 0, "entries_invalid": 0, "errors": [],
            "release_version": f"2.0.0+{started:%Y%m%d}.1", "message": None,
            "probes": len(checked), "probes_failed": 2 if last else 0, "network_suspect": False,
            "judged_at": checked[-1] + timedelta(seconds=1), "first_checked_at": checked[0],
            "last_checked_at": checked[-1]})
        rows["release"].append({"version": f"2.0.0+{started:%Y%m%d}.1",
                                "generated": started + timedelta(minutes=4), "total_apis": 2,
                                "run_id": run_id})
        looks = [*targets, targets[-1]] if last else targets
        for look, ((entry_id, endpoint_id, url), at) in enumerate(zip(looks, checked,
                                                                     strict=True)):
            probe_id += 1
            down = last and entry_id == "fading-maps"
            rows["probe"].append({
                "id": probe_id, "run_id": run_id, "entry_id": entry_id,
                "endpoint_id": endpoint_id, "url": url, "checked_at": at,
                "outcome": "unreachable" if down else "live", "reason": None,
                "error_class": "refused" if down else None,
                "http_status": None if down else 200,
                "total_ms": None if down else 100.0 + 10 * night + look,
                "dns_ms": None if down else 5.0, "connect_ms": None if down else 12.0,
                "ttfb_ms": None if down else 90.0 + night, "final_url": None,
                "attempts": 3 if down else 1, "redirects": 0,
                "error": "Connection refused" if down else None,
                "cors_allow_origin": None if down else "*",
                "cors_allow_credentials": None if down else False,
                "tls_version": None if down else "TLSv1.3",
                "cert_expires_at": None if down else first_night + timedelta(days=80),
                "confirmation": down and look == len(targets),
                "failure_class": "dead" if down and look == len(targets) else None})
        if last:
            rows["probe_shard"].append({
                "run_id": run_id, "shard": 0, "targets": [[url, entry_id, endpoint_id] for
                                                          entry_id, endpoint_id, url in targets],
                "linked_hosts": ["api.example.com"], "flow_run_id": f"shard-run-{run_id}",
                "host": "night-host", "pid": 5000, "started_at": started,
                "finished_at": started + timedelta(minutes=1), "seconds": 4.5,
                "cpu_seconds": 1.5, "peak_rss_mib": 180.0,
                "outcomes": {"live": 2, "unreachable": 2}, "connect_failures": 2})
            continue
        day = started.date()  # rolled up by the next night
        rows["rolled_day"].append({
            "day": day, "rolled_at": started + timedelta(days=1, minutes=1),
            "evidence_entries": None, "evidence": None, "probes_pruned": False,
            "runs_read": str(run_id)})
        for entry_id in entries:
            timed = sorted(100.0 + 10 * night + look for look, (owner, _, _) in
                           enumerate(targets) if owner == entry_id)
            rows["daily_entry"].append({
                "day": day, "entry_id": entry_id, "probes": len(timed),
                "responses": len(timed), "successes": len(timed), "live": len(timed),
                "live_share": 1.0, "timed_ms": timed, "p50_ms": timed[len(timed) // 2],
                "p90_ms": timed[-1], "state": "live", "pricing": 80, "latency": 95,
                "depth": 60, "provisional": True, "percent": 78, "grade": "B",
                "rubric": "2.2.0"})
        for look, (entry_id, endpoint_id, url) in enumerate(targets):
            ms = 100.0 + 10 * night + look
            rows["daily_endpoint"].append({
                "day": day, "entry_id": entry_id, "url": url, "endpoint_id": endpoint_id,
                "probes": 1, "responses": 1, "successes": 1, "live": 1, "live_share": 1.0,
                "p50_ms": ms, "p90_ms": ms})
    fell = first_night + timedelta(days=HISTORY_NIGHTS - 1, minutes=4)
    rows["state_change"].append({"id": 1, "entry_id": "fading-maps", "from_state": "live",
                                 "to_state": "unreachable", "at": fell,
                                 "run_id": HISTORY_NIGHTS})
    for entry_id in entries:
        down = entry_id == "fading-maps"
        rows["entry_state"].append({"entry_id": entry_id,
                                    "state": "unreachable" if down else "live",
                                    "since": fell if down else first_night})
        rows["entry_lifecycle"].append({
            "entry_id": entry_id, "state": "degraded" if down else "active",
            "since": fell if down else first_night, "down_runs": 1 if down else 0,
            "dead_since": None, "judged_run_id": HISTORY_NIGHTS})
    for event_id, (entry_id, kind, before, after, at, run_id) in enumerate((
            ("steady-weather", "added", None, None, first_night, 1),
            ("fading-maps", "added", None, None, first_night, 1),
            ("fading-maps", "lifecycle", "active", "degraded", fell, HISTORY_NIGHTS)), start=1):
        rows["entry_event"].append({"id": event_id, "entry_id": entry_id, "kind": kind,
                                    "from_value": before, "to_value": after, "at": at,
                                    "run_id": run_id})
    return rows


def history_stored_at(database_url: str, revision: str,
                      first_night: datetime) -> tuple[Engine, dict[str, list[dict[str, Any]]]]:
    """A store built by the migrations up to `revision` (each revision's schema is the one its
    release built: the migrations' upgrades are not changed once released), holding the
    history's rows in the columns it has, its counters where its rows leave them; its engine,
    and the rows it holds, read back."""
    engine = open_engine(database_url)
    with engine.begin() as connection:
        command.upgrade(alembic_config(connection), revision)
        schema = inspect(connection)
        for name, rows in history_rows(first_night).items():
            columns = {column["name"] for column in schema.get_columns(name)}
            model = SQLModel.metadata.tables[name]
            table = sa.table(name, *(sa.column(column.name, column.type)
                                     for column in model.columns if column.name in columns))
            connection.execute(table.insert(), [{key: value for key, value in row.items()
                                                 if key in columns} for row in rows])
        if engine.dialect.name == "postgresql":  # as its rows, inserted one by one, left them
            for name in SERIAL_TABLES:
                connection.execute(text(f"SELECT setval(pg_get_serial_sequence('{name}', 'id'),"
                                        f" (SELECT max(id) FROM {name}))"))
    return engine, stored_values(engine)


def stored_values(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table (the version table aside), each as its columns' values, in
    the order of its key."""
    tables = sa.MetaData()
    tables.reflect(engine)
    with engine.connect() as connection:
        return {name: [dict(row) for row in connection.execute(
                    sa.select(table).order_by(*table.primary_key.columns)).mappings()]
                for name, table in tables.tables.items() if name != "alembic_version"}


def kept_values(before: dict[str, list[dict[str, Any]]], after: dict[str, list[dict[str, Any]]],
                revision: str) -> dict[str, list[dict[str, Any]]]:
    """`after`'s rows in `before`'s columns, but those a later revision computes again."""
    again = RECOUNTED if revision < "0020" else {}
    return {name: [{key: row[key] for key in rows[0] if key not in again.get(name, ())}
                   for row in after[name]] if rows else after[name]
            for name, rows in before.items()}


def recounted_left_out(values: dict[str, list[dict[str, Any]]],
                       revision: str) -> dict[str, list[dict[str, Any]]]:
    again = RECOUNTED if revision < "0020" else {}
    return {name: [{key: value for key, value in row.items() if key not in again.get(name, ())}
                   for row in rows] for name, rows in values.items()}


def presented_history(first_night: datetime) -> dict[str, tuple[str, Any, Any]]:
    """What the release of the night after the history presents of each entry: its state,
    uptime over the three nights (the confirmation of the last night's failure standing for
    its first look) and lifecycle."""

    def uptime(probes: int, succeeded: int) -> dict[str, Any]:
        share = {"days": HISTORY_NIGHTS, "probes": probes, "succeeded": succeeded}
        return {"evidence": {"last1d": {"days": 0, "probes": 0, "succeeded": 0},
                             "last7d": share, "last30d": share},
                "last1d": None, "last7d": succeeded / probes, "last30d": succeeded / probes}

    fell = first_night + timedelta(days=HISTORY_NIGHTS - 1, minutes=4)
    return {"steady-weather": ("live", uptime(6, 6), {
                "reason": "2 of 2 targets passed", "since": f"{first_night:%Y-%m-%d}T03:00:00Z",
                "state": "active"}),
            "fading-maps": ("unreachable", uptime(3, 2), {
                "reason": "1 of 1 targets failed twice in the last run",
                "since": f"{fell:%Y-%m-%d}T03:04:00Z", "state": "degraded"})}


def first_night_of_history(now: datetime) -> datetime:
    """The first night (at 03:00 UTC) of a history whose last night's probes (03:00 and the
    confirmation at 03:04) lie more than a day before `now`, outside the last day's uptime, as
    `presented_history` has them: it ended last night, or the night before when `now` is
    before 03:05 UTC (a last night at 03:04 would still be inside the last 24 hours)."""
    last_night = (now - timedelta(days=1, hours=3, minutes=5)).date()
    return datetime.combine(last_night - timedelta(days=HISTORY_NIGHTS - 1),
                            datetime.min.time(), tzinfo=UTC).replace(hour=3)


def night_after_history(now: datetime, new_entry: dict[str, Any] | None = None,
                        ) -> tuple[int, dict[str, tuple[str, Any, Any]]]:
    """The night after the history on the store the settings name: a run, the ingest of the
    entry files (`new_entry` among them, added this night), the score and the publish; the
    run's id, and what the release presents of each entry of the history."""
    from pipeline.operations import stages
    from pipeline.settings import Settings
    from pipeline.store.tables import engine_for, session_scope, start_run

    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    summary, _ = stages.ingest_entries(settings, run_id)
    assert summary.invalid == [] and summary.retired == []
    assert summary.added == ([new_entry["id"]] if new_entry else [])
    _, changes = stages.publish_now(settings, stages.score_entries_now(settings, now), now,
                                    run_id)
    assert changes == []  # the stored states are this night's: nothing moved
    document = json.loads((settings.output_dir / "api" / "apis.json").read_text())
    return run_id, {entry["id"]: (entry["status"]["state"], entry["uptime"], entry["lifecycle"])
                    for entry in document["apis"] if entry["id"] in history_entries()}


def history_written(
    settings_env: dict[str, str], write_entry: WriteEntry, revision: str
) -> tuple[datetime, datetime, Engine, dict[str, list[dict[str, Any]]]]:
    """The history entries' files written, and the store built at `revision` holding their
    three nights: now, the first night, the store's engine and every table's rows."""
    now = datetime.now(UTC)
    first_night = first_night_of_history(now)
    for entry in history_entries().values():
        write_entry(entry)
    engine, before = history_stored_at(settings_env["APIDIR_DATABASE_URL"], revision,
                                       first_night)
    return now, first_night, engine, before


@pytest.mark.parametrize("revision", DEPLOYED_REVISIONS)
def test_a_store_of_each_release_keeps_its_history_and_runs_when_upgraded(
    revision: str, settings_env: dict[str, str], write_entry: WriteEntry,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store built by the release of each revision, holding three nights of history in
    every table it has (runs, probes with a confirmed failure, releases, rolled-up days,
    states, lifecycles, state changes, events, a probe shard), is upgraded keeping every row
    and value, then a night's ingest, score and publish run on it: new rows take new ids, and
    the release presents the history as a store built at the head does."""
    now, first_night, engine, before = history_written(settings_env, write_entry, revision)
    assert upgrade_store(engine) == (revision, head_revision())
    after = stored_values(engine)
    assert {name: len(rows) for name, rows in after.items() if name in before} == {
        name: len(rows) for name, rows in before.items()}
    assert kept_values(before, after, revision) == recounted_left_out(before, revision)
    rolled = [row["day"] for row in history_rows(first_night)["rolled_day"]]
    with Session(engine) as session:  # read whole from their rollups, as before the upgrade
        assert complete_days(session, rolled) == set(rolled)
    engine.dispose()
    monkeypatch.setenv("APIDIR_PUBLISH_PAGES", "false")  # the documents tell what is presented
    run_id, presented = night_after_history(now)
    assert run_id == HISTORY_NIGHTS + 1
    assert presented == presented_history(first_night), presented


def pg_tool(program: str, *args: str) -> None:
    """Run PostgreSQL's `program` (of the server's installed version) with `args`."""
    from tests.postgres_server import postgres_bin_dir

    bin_dir = postgres_bin_dir()
    assert bin_dir is not None
    done = subprocess.run([str(bin_dir / program), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def libpq_address(database_url: str) -> str:
    """The store's URL as PostgreSQL's own tools take it (without SQLAlchemy's driver)."""
    return make_url(database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("revision", ("0016", head_revision()))
def test_a_postgresql_store_restored_from_its_backup_is_upgraded_and_runs_on(
    revision: str, settings_env: dict[str, str], write_entry: WriteEntry,
    postgres_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A PostgreSQL store backed up as the README says (`pg_dump --format=custom`) and restored
    with `pg_restore` into a new database, as an operator moving or recovering it does, opens
    at the revision it had, upgrades keeping every row, and a night runs on it: the rows it
    adds (a run, its probes' and events' ids) take ids after the restored ones, never one of
    theirs."""
    from tests.postgres_server import scratch_database

    now, first_night, engine, before = history_written(settings_env, write_entry, revision)
    engine.dispose()
    dump = tmp_path / "apidir.dump"
    pg_tool("pg_dump", "--format=custom", "--file", str(dump),
            libpq_address(settings_env["APIDIR_DATABASE_URL"]))
    with scratch_database(postgres_server) as restored_url:
        pg_tool("pg_restore", "--no-owner", "--dbname", libpq_address(restored_url), str(dump))
        restored = open_engine(restored_url)
        assert store_revision(restored) == revision
        assert stored_values(restored) == before
        assert upgrade_store(restored) == (revision, head_revision())
        restored.dispose()
        monkeypatch.setenv("APIDIR_DATABASE_URL", restored_url)
        monkeypatch.setenv("APIDIR_PUBLISH_PAGES", "false")
        new = write_entry(make_entry(id="new-weather", name="New Weather"))
        run_id, presented = night_after_history(now, yaml.safe_load(new.read_text()))
        assert run_id == HISTORY_NIGHTS + 1
        assert presented == presented_history(first_night), presented
        restored = open_engine(restored_url)
        with Session(restored) as session:
            added = session.exec(select(EntryEvent).where(EntryEvent.run_id == run_id)).all()
        assert [(event.id, event.entry_id, event.kind) for event in added] == [
            (len(before["entry_event"]) + 1, "new-weather", "added")]
        restored.dispose()
