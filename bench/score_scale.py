"""The score stage at scale: bounded (rollups plus four days of raw probes) against reading
the whole 30-day raw window, on a SQLite store holding N entries x M nights of history; and
the nightly's rollup stage (yesterday and today) on the same store.

    python -m bench.score_scale [--entries 100000 --nights 30]

The history is written as nightly runs do (`record_probes`, one row per entry a night, timed
answers of varied latency, some failures); each past day's rollup is then written in one
SQL statement from the probe table (as the nightly's rollup stage would leave it, without
paying its cost here), and each way of scoring runs in a fresh process so its peak RSS is
its own (the rollup last, since it writes). Prints figures only; the goal (issue: score at
100k with 30 nights: <= 10 s and <= 1 GB) is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text
from sqlmodel import col, select

from pipeline.judging.content_scores import content_scores, store_content_scores
from pipeline.judging.evidence import bounded_scores
from pipeline.judging.rollup import roll_up_days
from pipeline.judging.score import entry_uptimes, score_entries
from pipeline.operations.stages import peak_rss_mib
from pipeline.probing.probe import ProbeResult
from pipeline.processes import paused_garbage_collection
from pipeline.store.history import history_frame, record_probes
from pipeline.store.tables import (
    DailyEntryRollup,
    EndpointRow,
    EntryRow,
    active_entries,
    content_hash,
    engine_for,
    session_scope,
    start_run,
    utcnow,
)

WAYS = ("bounded", "whole-window", "rollup")
REPO = Path(__file__).resolve().parent.parent
WORK = REPO / "var" / "bench-score"
CONTENT = {"baseUrl": "https://x.example", "authType": "api-key", "hasFreeTier": True,
           "pricing": {"model": "freemium", "freeQuota": {"amount": 1000, "unit": "requests",
                                                          "period": "day"}},
           "endpoints": [{"method": "GET", "path": "/"}], "docsUrl": "https://x.example/docs"}


def write_history(database_url: str, entries: int, nights: int) -> float:
    """N entries and M nightly runs of one probe each, ending an hour ago; seconds spent."""
    now = utcnow()
    rng = random.Random(1)
    engine = engine_for(database_url)
    ids = [f"entry-{number:06d}" for number in range(entries)]
    with session_scope(engine) as session:
        session.add_all(EntryRow(id=entry_id, category="bench", name=entry_id, content=CONTENT,
                                 base_url=CONTENT["baseUrl"],
                                 content_hash=content_hash(CONTENT), source_file="-",
                                 first_seen_at=now - timedelta(days=nights + 1), updated_at=now)
                        for entry_id in ids)
        session.flush()
        session.add_all(EndpointRow(entry_id=entry_id, method="GET", path="/") for entry_id in ids)
        session.flush()
        store_content_scores(session)  # as the ingest stage leaves them
    with session_scope(engine) as session:
        endpoint_of = dict(session.exec(select(EndpointRow.entry_id, EndpointRow.id)).all())
    started = time.perf_counter()
    for night in range(nights):
        checked = now - timedelta(days=nights - night, hours=-23)
        results = []
        for entry_id in ids:
            answered = rng.random() > 0.05
            results.append(ProbeResult(
                url=f"https://{entry_id}.example/", entry_id=entry_id,
                endpoint_id=endpoint_of[entry_id], checked_at=checked,
                outcome="live" if answered else "unreachable", reason=None,
                error_class=None if answered else "read_timeout",
                http_status=200 if answered else None,
                total_ms=round(rng.lognormvariate(5, 0.7), 1) if answered else None,
                dns_ms=None, connect_ms=None, ttfb_ms=None, final_url=None, attempts=1,
                redirects=0, error=None))
        with session_scope(engine) as session:
            record_probes(session, start_run(session, "bench"), results)
    seconds = time.perf_counter() - started
    with engine.begin() as connection:  # every past day rolled up, as the nightly leaves it
        connection.execute(text(
            "INSERT INTO daily_entry (day, entry_id, probes, responses, successes, live,"
            " live_share, timed_ms, state, percent, grade, rubric)"
            " SELECT date(checked_at), entry_id, count(*), sum(outcome != 'unreachable'),"
            " sum(outcome != 'unreachable'), sum(outcome = 'live'), avg(outcome = 'live'),"
            " json_group_array(total_ms) FILTER (WHERE total_ms IS NOT NULL),"
            " 'live', 0, '', '' FROM probe GROUP BY 1, 2"))
        connection.execute(text(  # each naming the trusted runs of its day, as a rollup does
            "INSERT INTO rolled_day (day, rolled_at, runs_read) SELECT day, :now, (SELECT"
            " group_concat(id) FROM pipeline_run WHERE judged_at IS NOT NULL AND NOT"
            " network_suspect AND date(first_checked_at) <= day AND date(last_checked_at) >= day)"
            " FROM (SELECT DISTINCT day FROM daily_entry)"), {"now": now})
    engine.dispose()
    return seconds


def measure(database_url: str, way: str) -> dict[str, float]:
    """Score every entry one way (or roll up yesterday and today, as the nightly does), in
    this process: wall seconds and peak RSS. Scoring runs with the cycle collector paused,
    as the score stage runs it."""
    engine = engine_for(database_url)
    as_of = utcnow()
    started, cpu = time.perf_counter(), time.process_time()
    if way == "rollup":
        days = [as_of.date() - timedelta(days=1), as_of.date()]
        with session_scope(engine) as session:
            rollups = roll_up_days(session, days)
        figures = {"seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
                   "peak_mib": peak_rss_mib()}
        with session_scope(engine) as session:  # after the clock: what the days' rows hold
            latencies = session.exec(select(DailyEntryRollup.latency)
                                     .where(col(DailyEntryRollup.day).in_(days))).all()
        return {**figures, "entries": sum(r.entries for r in rollups),
                "with_latency": sum(value is not None for value in latencies), "uptimes": 0}
    with paused_garbage_collection(), session_scope(engine) as session:  # as the stage runs it
        if way == "bounded":
            scores, uptimes = bounded_scores(session, content_scores(session), as_of)
        else:
            contents = {row.id: row.content for row in active_entries(session)}
            history = history_frame(session, since=as_of - timedelta(days=30), until=as_of)
            scores = score_entries(contents, history, as_of)
            uptimes = entry_uptimes(history, as_of)
        # Each entry's scores are built when read (`EntryScores`), one at a time as the
        # score stage goes through the entries: inside the clock.
        scored = sum(1 for score in scores.values() if score.latency.value is not None)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"seconds": seconds, "cpu": cpu, "peak_mib": peak_rss_mib(), "entries": len(scores),
            "with_latency": scored, "uptimes": len(uptimes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--measure", choices=WAYS)
    parser.add_argument("--ways", nargs="+", choices=WAYS, default=WAYS,
                        help="the ways to measure (all by default)")
    parser.add_argument("--database-url")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.database_url, args.measure)))
        return
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    url = f"sqlite:///{WORK / 'apidir.db'}"
    try:
        seconds = write_history(url, args.entries, args.nights)
        print(f"{args.entries} entries x {args.nights} nights: history written in "
              f"{seconds:.0f} s, rollups of every past day in place")
        for way in args.ways:
            done = subprocess.run(
                [sys.executable, "-m", "bench.score_scale", "--measure", way,
                 "--database-url", url], cwd=REPO, capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"  {way:>12}: {figures['seconds']:6.1f} s ({figures['cpu']:.1f} s CPU), "
                  f"peak RSS {figures['peak_mib']:6.0f} MiB ({figures['entries']} scored, "
                  f"{figures['with_latency']} with Latency)"
                  + (" over 2 days" if way == "rollup" else ""))
        print("  goal at 100,000 entries x 30 nights: <= 10 s and <= 1024 MiB")
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
