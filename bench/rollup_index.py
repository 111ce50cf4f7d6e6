"""What an index on `entry_id` of the daily tables costs the nightly rollup's writes, and what it
saves the reads of one entry's days (a rename's move of a former id), on SQLite.

    python bench/rollup_index.py [--entries 100000 --days 10 --runs 3]

A store holding `--days` days of rollups of `--entries` entries (some 2.7 URLs each, as the
nightly writes them) is made once; each run copies it, adds the index to the copy or drops it
(untimed), and times what a nightly's rollup of the next day writes (`rollup._store_rows`:
the day's rows deleted, then inserted `ROWS_AT_ONCE` at a time, one commit), then one entry's
days read from both tables. Runs without and with the index take turns. Prints figures only.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import time
from datetime import date, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import text  # noqa: E402
from sqlmodel import Session, col, delete, select  # noqa: E402

from pipeline.judging.rollup import ROWS_AT_ONCE  # noqa: E402
from pipeline.store.tables import (  # noqa: E402
    DailyEndpointRollup,
    DailyEntryRollup,
    EntryRow,
    insert_rows,
    make_engine,
    open_engine,
    utcnow,
)

WORK = REPO / "var" / "bench-rollup-index"
INDEXES = {"ix_daily_entry_entry_id": "daily_entry", "ix_daily_endpoint_entry_id": "daily_endpoint"}
FIRST_DAY = date(2026, 11, 1)


def day_rows(day: date, ids: list[str], seed: int) -> tuple[list[dict], list[dict]]:
    """A day's rollup rows as the nightly writes them: one an entry, 1 to 4 a URL."""
    rng = random.Random(seed)
    entries, urls = [], []
    for entry_id in ids:
        timed = sorted(round(rng.uniform(20, 900), 3) for _ in range(rng.randint(1, 6)))
        figures = {"probes": len(timed), "responses": len(timed), "successes": len(timed),
                   "live": len(timed), "live_share": 1.0, "p50_ms": timed[len(timed) // 2],
                   "p90_ms": timed[-1]}
        entries.append({"day": day, "entry_id": entry_id, **figures, "timed_ms": timed,
                        "state": "live", "pricing": 3, "latency": 4, "depth": 2,
                        "provisional": False, "percent": 72, "grade": "B", "rubric": "1"})
        urls += [{"day": day, "entry_id": entry_id, "url": f"https://{entry_id}.example/{n}",
                  "endpoint_id": None, **figures} for n in range(rng.choice((1, 2, 3, 4)))]
    return entries, urls


def store_day(session: Session, day: date, ids: list[str], seed: int) -> None:
    """A day's rows replaced as `rollup._store_rows` does, `ROWS_AT_ONCE` at a time."""
    entries, urls = day_rows(day, ids, seed)
    for table, rows in ((DailyEntryRollup, entries), (DailyEndpointRollup, urls)):
        session.exec(delete(table).where(col(table.day) == day))
        for start in range(0, len(rows), ROWS_AT_ONCE):
            insert_rows(session, table.__table__, rows[start : start + ROWS_AT_ONCE])
    session.commit()


def make_base(path: Path, entries: int, days: int) -> list[str]:
    ids = [f"entry-{number:06d}" for number in range(entries)]
    engine = open_engine(f"sqlite:///{path}")
    now = utcnow()
    with Session(engine) as session:
        insert_rows(session, EntryRow.__table__, [
            {"id": entry_id, "category": "bench", "name": entry_id, "content": {},
             "content_hash": "-", "source_file": "-", "first_seen_at": now, "updated_at": now,
             "base_url": f"https://{entry_id}.example"} for entry_id in ids])
        session.commit()
        for number in range(days):
            store_day(session, FIRST_DAY + timedelta(days=number), ids, number)
    engine.dispose()
    return ids


def one_run(base: Path, ids: list[str], days: int, indexed: bool) -> tuple[float, float]:
    """(s to store the next day, ms to read one entry's days from both tables)."""
    copy = base.with_name(f"run-{'with' if indexed else 'without'}.sqlite")
    shutil.copyfile(base, copy)
    engine = open_engine(f"sqlite:///{copy}")
    try:
        with Session(engine) as session:
            for name, table in INDEXES.items():  # whether the store's migrations made it or not
                session.execute(text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} (entry_id)"
                                     if indexed else f"DROP INDEX IF EXISTS {name}"))
            session.commit()
            started = time.perf_counter()
            store_day(session, FIRST_DAY + timedelta(days=days), ids, days)
            stored = time.perf_counter() - started
            started = time.perf_counter()
            for table in (DailyEntryRollup, DailyEndpointRollup):
                session.exec(select(table.day).where(table.entry_id == ids[len(ids) // 2])).all()
            read = (time.perf_counter() - started) * 1000
    finally:
        engine.dispose()
        copy.unlink()
    return stored, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    base = WORK / "base.sqlite"
    make_engine(f"sqlite:///{base}").dispose()  # every migration, as a store has them
    started = time.perf_counter()
    ids = make_base(base, arguments.entries, arguments.days)
    print(f"{arguments.entries} entries, {arguments.days} days of rollups stored in "
          f"{time.perf_counter() - started:.1f} s")
    figures: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(arguments.runs):
        for indexed in (False, True):
            figures[indexed].append(one_run(base, ids, arguments.days, indexed))
    for indexed, runs in figures.items():
        stores, reads = [run[0] for run in runs], [run[1] for run in runs]
        print(f"{'with' if indexed else 'without'} the index: a day stored in "
              f"{min(stores):.2f}-{max(stores):.2f} s, one entry's days read in "
              f"{min(reads):.1f}-{max(reads):.1f} ms ({len(runs)} runs)")
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
