"""Probe history at scale in the store: rows written per second and the reads of the score
stage, SQLite against PostgreSQL.

    python bench/history_scale.py [--entries 20000 --runs 5]

Synthetic entries (one endpoint each) go straight into the tables; then `--runs` nightly
runs each add one probe row per entry (`record_probes`: one commit per run, the run judged in
it, as a run of one probe task stores them) and the reads the score stage makes are timed
over the whole history: each entry's status from its latest trusted run, as the stage reads
it (`latest_probes`, then `status_form`, no model per entry), and `history_frame`.
PostgreSQL is a throwaway server started as the tests start it. Prints figures only.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Engine, text  # noqa: E402
from sqlmodel import select  # noqa: E402

from bench.catalogue import peak_rss_mb, reset_peak_rss  # noqa: E402
from pipeline.probing.probe import ProbeResult  # noqa: E402
from pipeline.store.history import (  # noqa: E402
    history_frame,
    latest_probes,
    record_probes,
    status_form,
)
from pipeline.store.tables import (  # noqa: E402
    EndpointRow,
    EntryRow,
    engine_for,
    session_scope,
    start_run,
    utcnow,
)
from tests.postgres_server import running_server  # noqa: E402

WORK = REPO / "var" / "bench-history"


def fill(database_url: str, entries: int, runs: int) -> None:
    now = utcnow()
    engine = engine_for(database_url)
    with session_scope(engine) as session:
        ids = [f"entry-{number:06d}" for number in range(entries)]
        session.add_all(
            EntryRow(id=entry_id, category="bench", name=entry_id,
                     content={"baseUrl": f"https://{entry_id}.example"},
                     base_url=f"https://{entry_id}.example", content_hash="-",
                     source_file="-", first_seen_at=now, updated_at=now)
            for entry_id in ids)
        session.flush()
        session.add_all(EndpointRow(entry_id=entry_id, method="GET", path="/") for entry_id in ids)
    with session_scope(engine) as session:
        endpoint_of = dict(session.exec(select(EndpointRow.entry_id, EndpointRow.id)).all())
    written, growth = 0.0, 0.0
    for night in range(runs):
        checked = now - timedelta(days=runs - night)
        results = [
            ProbeResult(url=f"https://{entry_id}.example/", entry_id=entry_id,
                        endpoint_id=endpoint_of[entry_id], checked_at=checked,
                        outcome="live", reason=None, error_class=None, http_status=200,
                        total_ms=120.0, dns_ms=1.0, connect_ms=10.0, ttfb_ms=100.0,
                        final_url=None, attempts=1, redirects=0, error=None)
            for entry_id in ids
        ]
        reset_peak_rss()
        before = peak_rss_mb()
        started = time.perf_counter()
        with session_scope(engine) as session:
            record_probes(session, start_run(session, "bench"), results)
        written += time.perf_counter() - started
        growth = max(growth, peak_rss_mb() - before)
        del results
    rows = entries * runs
    print(f"  write: {rows} probe rows in {written:6.2f} s = {rows / written:7.0f} rows/s "
          f"({entries} per run, one commit each); peak RSS while writing a run's rows "
          f"+{growth:.0f} MiB over the rows' results")
    for name, read in (("statuses", lambda s: {entry_id: status_form(probes) for
                                                entry_id, probes in latest_probes(s).items()}),
                       ("history_frame", lambda s: history_frame(s, since=now - timedelta(30)))):
        started = time.perf_counter()
        with session_scope(engine) as session:
            size = len(read(session))
        print(f"  {name:>15}: {size} rows back in {time.perf_counter() - started:6.2f} s")
    print(f"  storage: {stored_bytes(engine) / rows:.0f} bytes per probe row, indexes included")
    engine.dispose()


def stored_bytes(engine: Engine) -> int:
    """The probe table with its indexes (PostgreSQL), or the whole database file (SQLite)."""
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            return connection.execute(text("SELECT pg_total_relation_size('probe')")).scalar_one()
        connection.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    return Path(engine.url.database).stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        print(f"sqlite ({args.entries} entries x {args.runs} runs):")
        fill(f"sqlite:///{WORK / 'apidir.db'}", args.entries, args.runs)
        with running_server(WORK / "postgres") as url:
            if url is None:
                print("postgresql: not installed (make test installs it)")
                return
            print(f"postgresql ({args.entries} entries x {args.runs} runs):")
            fill(url, args.entries, args.runs)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
