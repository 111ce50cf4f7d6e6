"""The store after weeks of nights: a backup opens as the store it copied, the store's file
alone holds every ended run, and a night's shard plan goes once a later night plans."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import make_url, text
from sqlmodel import Session, func, select

from pipeline.settings import Settings
from pipeline.store.migrate import head_revision
from pipeline.store.tables import (
    ProbeShardRow,
    finish_run,
    make_engine,
    open_engine,
    start_run,
)
from tests.conftest import REPO, WriteEntry, make_entry
from tests.test_migrations import run_apidir


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
        write_entry(make_entry(id=f"hosted-{n}", baseUrl=base, sampleRequest=f'curl "{base}/x"'))


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


