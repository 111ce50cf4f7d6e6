"""The score stage and the run record as the nightly runs them, on a store of N synthetic
entries (`bench.synthetic`, ingested by the ingest stage) and one night of probes of every
planned target, shaped like the nightly's at 100k (a few targets an entry; most live, some
online, a few failures confirmed by a second look; TLS and CORS seen on some answers).

    python -m bench.score_stage [--entries 100000] [--keep] [--repeat 2]
    python -m bench.score_stage --store var/bench-nightly/sqlite-100000 [--repeat 2]
    python -m bench.score_stage --database postgres [--entries 100000] [--nights 30]

The store is built once (kept with `--keep`, and reused while its entry count matches);
with `--database postgres` it is built in a PostgreSQL server of its own (beside the work
folder), started for the bench run and thrown away after it. The stages run as of a second
after the store's last probe, as a night scores right after its probing (a kept store measured
on a later day too); then each measurement runs in a fresh process, so its CPU and peak RSS
are its own:

- `score`: what the flow's score task does, `stages.hand_over_scores`, which writes the
  hand-over file (a span of the entries in each of its worker processes and its own, from
  20,000 entries on: the workers' CPU and largest peak RSS are printed apart);
- `publish`: what the flow's publish task does with that hand-over file
  (`stages.publish_handed_over`: state changes, lifecycles, the release with its pages);
- `record`: the run record as the flow completes a run (`runs.complete_run`: the run's
  report and its artifacts, sent to Prefect's temporary server, started before the clock);
- `rollup`: what the flow's rollup task does (`stages.roll_up`) for the day of the store's
  last run, as the night after it rolls that day up, once it has ended.

Before the clock, the workers' server is started and ready, as a night has it by then (the
flow starts it first: `stages.warm_workers`); its own imports are not in the figures.

With `--store`, the stages run on a copy of a `bench.nightly` work folder's store (its
catalogue as the data folder), taken afresh for each measurement, as of just after its last
run: `score`, `publish` and `rollup` after a real night of probes (no run record, which needs
the synthetic store's run). That night's states and lifecycles are stored already, so the
publish records next to none: its state changes and lifecycles are a lower bound there.

The first publish of a bench run draws every page; each one after it replaces the release
before it, as a night after the first does, so unchanged entries' pages are spliced (only
their nightly parts drawn again; their count is printed).

Prints figures only: wall, the process's user and system CPU, the page workers' CPU and largest
peak RSS (of the workers' server and the processes it forked), peak RSS,
and for the publish its parts (state changes, lifecycles, the release with its pages).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.catalogue import warmed_workers, workers_usage

REPO = Path(__file__).resolve().parent.parent
WORK = Path(os.environ.get("APIDIR_BENCH_WORK", REPO / "var" / "bench-score-stage"))
MEASURES = ("score", "publish", "record", "rollup")
DATABASE_URL = "APIDIR_BENCH_DATABASE_URL"  # the store's URL, handed to each measurement
ON_A_NIGHT = ("score", "publish", "rollup")  # with --store: after a real night of probes
PUBLISH_PARTS = (("record_state_changes", "state changes"), ("record_lifecycles", "lifecycles"),
                 ("publish_release", "release and pages"))
# Outcomes of a target's first look, by share (the nightly's mix at 100k).
LOOKS = (
    ("live", 200, None, None, 0.82),
    ("online", 401, "auth", None, 0.086),
    ("online", 404, "not_found", None, 0.057),
    ("online", 429, "rate_limited", None, 0.019),
    ("unreachable", None, None, "refused", 0.009),
    ("unreachable", None, None, "read_timeout", 0.009),
)


def _environment(database_url: str, data_dir: Path) -> None:
    from pipeline.operations.local_mode import patient_startup

    patient_startup()
    os.environ.update(
        {
            "APIDIR_DATABASE_URL": database_url,
            "APIDIR_DATA_DIR": str(data_dir),
            "APIDIR_OUTPUT_DIR": str(WORK / "public"),
        }
    )


def _look(rng: random.Random) -> tuple[str, int | None, str | None, str | None]:
    pick = rng.random()
    for outcome, status, reason, error, share in LOOKS:
        if pick < share:
            return outcome, status, reason, error
        pick -= share
    return LOOKS[0][:4]


def build_store(entries: int) -> None:
    """Write the catalogue, ingest it and record one night of probes of every target."""
    from bench.synthetic import write_catalogue
    from pipeline.operations import stages
    from pipeline.probing.probe import ProbeResult
    from pipeline.settings import Settings
    from pipeline.store.history import plan_targets, record_probes
    from pipeline.store.tables import engine_for, session_scope, start_run, utcnow

    settings = Settings()
    write_catalogue(REPO / "data", settings.data_dir, entries)
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        ingest_run = start_run(session, "bench-ingest").id
    stages.ingest_entries(settings, ingest_run)
    with session_scope(engine) as session:
        run = start_run(session, "bench-probe")
        targets = plan_targets(session)
        rng = random.Random(1)
        now = utcnow() - timedelta(minutes=30)
        expires = now + timedelta(days=60)
        results, seen_hosts = [], set()
        for index, target in enumerate(targets):
            outcome, status, reason, error = _look(rng)
            host = target.url.split("/")[2]
            first_on_host = host not in seen_hosts
            seen_hosts.add(host)
            answered = status is not None
            look = dict(
                url=target.url,
                entry_id=target.entry_id,
                endpoint_id=target.endpoint_id,
                checked_at=now + timedelta(milliseconds=index),
                outcome=outcome,
                reason=reason,
                error_class=error,
                http_status=status,
                total_ms=round(rng.lognormvariate(5, 0.7), 1) if answered else None,
                dns_ms=None,
                connect_ms=None,
                ttfb_ms=None,
                final_url=None,
                attempts=1,
                redirects=0,
                error=None,
                cors_allow_origin=("*" if rng.random() < 0.4 else None) if answered else None,
                tls_version="TLSv1.3" if first_on_host and answered else None,
                cert_expires_at=expires if first_on_host and answered else None,
            )
            results.append(ProbeResult(**look))
            if not answered or reason in ("not_found", "rate_limited"):  # a second look
                failure = {"not_found": "dead", "rate_limited": "blocked"}.get(reason, "transient")
                again = look | {
                    "checked_at": now + timedelta(minutes=20, milliseconds=index),
                    "confirmation": True,
                    "failure_class": failure,
                }
                results.append(ProbeResult(**again))
        record_probes(session, run, results)
    print(f"store: {entries} entries, {len(targets)} targets, {len(results)} probe rows")


def add_past_nights(nights: int) -> None:
    """Give the synthetic store `nights` nights of history: the `nights - 1` days before its
    night complete in the rollups, each entry's and endpoint's row that of its night (as the
    rollup stage writes it) dated a day earlier each, so the score stage reads a 30-night
    window's evidence as a store kept that long gives it (past days from their rollups alone;
    the raw probes of those days, which the stage does not read, are left out). Written once,
    kept with the store."""
    from sqlalchemy import delete, func
    from sqlmodel import col, select

    from pipeline.judging.rollup import roll_up_days
    from pipeline.store.tables import (
        DailyEndpointRollup,
        DailyEntryRollup,
        ProbeRow,
        RolledDay,
        engine_for,
        insert_rows,
        session_scope,
    )

    marker = WORK / "nights.txt"
    if marker.exists() and marker.read_text() == str(nights):
        with session_scope(engine_for(os.environ["APIDIR_DATABASE_URL"])) as session:
            _keep_evidence(session)  # a store written before the days kept their evidence
        return
    started = time.perf_counter()
    with session_scope(engine_for(os.environ["APIDIR_DATABASE_URL"])) as session:
        night = session.exec(select(func.max(ProbeRow.checked_at))).one().date()
        for table in (DailyEntryRollup, DailyEndpointRollup, RolledDay):
            session.execute(delete(table))
        session.commit()
        roll_up_days(session, [night])
        for table in (DailyEntryRollup, DailyEndpointRollup):
            rows = [dict(row._mapping) for row in session.connection().execute(
                select(table.__table__).where(col(table.day) == night))]
            for back in range(1, nights):  # copied in on PostgreSQL
                day = night - timedelta(days=back)
                insert_rows(session, table.__table__, [row | {"day": day} for row in rows])
            session.execute(delete(table).where(col(table.day) == night))
        session.execute(delete(RolledDay))
        session.add_all(RolledDay(day=night - timedelta(days=back),
                                  rolled_at=datetime.combine(night - timedelta(days=back - 1),
                                                             datetime.min.time(), UTC))
                        for back in range(1, nights))
        session.commit()
        _keep_evidence(session)
    marker.write_text(str(nights))
    print(f"  {nights - 1} past days of rollups written in {time.perf_counter() - started:.0f} s")


def _keep_evidence(session: Any) -> None:
    """The rollup evidence of the complete days the score stage reads kept with them, as the
    rollup stage keeps it (`keep_missing_evidence`), where it is not kept yet."""
    from pipeline.judging.rollup import keep_missing_evidence

    if days := keep_missing_evidence(session, _as_of().date()):
        print(f"  the evidence of {len(days)} rolled-up days kept with them")


def _as_of() -> datetime:
    """The moment the stages are run as of: just after the store's night (the synthetic
    store's last probe, a copied store's last run), or now where no store set it."""
    from pipeline.store.tables import utcnow

    given = os.environ.get("APIDIR_BENCH_AS_OF")
    return datetime.fromisoformat(given) if given else utcnow()


def _night_end() -> datetime:
    """Just after the synthetic store's night: a second after its last probe."""
    from sqlalchemy import func
    from sqlmodel import select

    from pipeline.store.tables import ProbeRow, as_utc, engine_for, session_scope

    with session_scope(engine_for(os.environ["APIDIR_DATABASE_URL"])) as session:
        last = session.exec(select(func.max(ProbeRow.checked_at))).one()
    return as_utc(last) + timedelta(seconds=1)


def _last_run_end(store: Path) -> datetime:
    with sqlite3.connect(store) as connection:
        (finished,) = connection.execute("SELECT max(finished_at) FROM pipeline_run").fetchone()
    return datetime.fromisoformat(finished).replace(tzinfo=UTC) + timedelta(seconds=1)


def _figures(started: float, usage: resource.struct_rusage) -> dict[str, float]:
    """Wall since `started`, this process's user and system CPU since `usage`, peak RSS."""
    from pipeline.operations.stages import peak_rss_mib

    now = resource.getrusage(resource.RUSAGE_SELF)
    return {"seconds": time.perf_counter() - started, "cpu": now.ru_utime - usage.ru_utime,
            "system": now.ru_stime - usage.ru_stime, "peak_mib": peak_rss_mib()}


def measure(which: str) -> dict[str, Any]:
    """One measurement in this process: wall, CPU, peak RSS."""
    from pipeline.operations import stages
    from pipeline.settings import Settings

    settings = Settings()
    if which == "score":
        from pipeline.operations.handover import discard

        warmed_workers()
        started, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        path = stages.hand_over_scores(settings, _as_of(), 0)
        figures: dict[str, Any] = {**_figures(started, usage), "bytes": path.stat().st_size}
        children = workers_usage()  # the spans' workers, if any
        figures |= {"workers_cpu": children.user, "workers_system": children.system,
                    "workers_peak_mib": children.peak_rss_mib}
        shutil.copy(path, WORK / "presented.json")  # for the publish and the run record
        discard(path)
        return figures
    if which == "rollup":
        day = _as_of().date()
        started, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        stages.roll_up(settings, [day])
        return _figures(started, usage)
    if which == "publish":
        return _measure_publish()
    return asyncio.run(_measure_record())


def _measure_publish() -> dict[str, Any]:
    from bench.stage_clock import StageClock
    from pipeline.operations import stages
    from pipeline.release import publish
    from pipeline.settings import Settings

    settings = Settings()
    clock = StageClock()
    for attribute, name in PUBLISH_PARTS:
        clock.wrap(stages, attribute, name)
    clock.wrap(publish, "write_site", "of it, pages")
    warmed_workers()
    started, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    published, _ = stages.publish_handed_over(settings, WORK / "presented.json", _as_of())
    figures = _figures(started, usage)
    children = workers_usage()
    return {
        **figures,
        "workers_cpu": children.user,
        "workers_system": children.system,
        "workers_peak_mib": children.peak_rss_mib,
        "published": published.release.total_apis,
        "spliced": published.pages.spliced if published.pages is not None else 0,
        "parts": {name: [clock.timings[name].wall, clock.timings[name].cpu]
                  for name in [*(name for _, name in PUBLISH_PARTS), "of it, pages"]
                  if name in clock.timings},
    }


async def _measure_record() -> dict[str, float]:
    from prefect import flow
    from sqlmodel import select

    from pipeline.operations import runs
    from pipeline.settings import Settings
    from pipeline.store.tables import PipelineRun, engine_for, session_scope

    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.exec(select(PipelineRun).where(PipelineRun.flow == "bench-probe")).one()
        run.state, run_id = "running", run.id
        session.add(run)

    @flow(name="warm-up")
    async def warm_up() -> None:
        """Starts Prefect's temporary server before the clock."""

    @flow(name="record")
    async def record() -> dict[str, float]:
        presented = WORK / "presented-for-record.json"
        shutil.copy(WORK / "presented.json", presented)
        started, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        await runs.complete_run(settings, run_id, presented, [], None)
        return _figures(started, usage)

    await warm_up()
    return await record()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--store", type=Path, help="a bench.nightly work folder to measure on")
    parser.add_argument("--keep", action="store_true", help="keep the store for the next run")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--nights", type=int, default=1,
                        help="nights of history: the days before the store's night rolled up")
    parser.add_argument("--measures", nargs="+", choices=MEASURES)
    parser.add_argument("--measure", choices=MEASURES)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite",
                        help="the synthetic store's database")
    args = parser.parse_args()
    data_dir = args.store / "catalogue" if args.store else WORK / "data"
    if args.measure:  # the URL the run chose, handed down
        _environment(_store_url(), data_dir)
        print(json.dumps(measure(args.measure)))
        return
    if args.database == "postgres" and (args.store or args.keep):
        sys.exit("--database postgres builds a synthetic store for the run alone: "
                 "no --store or --keep")
    with contextlib.ExitStack() as stack:
        if args.database == "postgres":
            os.environ[DATABASE_URL] = _postgres_store(stack)
        _environment(_store_url(), data_dir)
        run_measures(args)


def _store_url() -> str:
    """The store's URL: the PostgreSQL server's the run started, or the work folder's SQLite
    file."""
    return os.environ.get(DATABASE_URL, f"sqlite:///{WORK / 'apidir.db'}")


def _postgres_store(stack: contextlib.ExitStack) -> str:
    """A fresh PostgreSQL server's URL for the run, its folder beside the work folder (which
    the run empties)."""
    from tests.postgres_server import running_server

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    url = stack.enter_context(running_server(WORK.with_name(f"{WORK.name}-postgres")))
    if url is None:
        sys.exit("PostgreSQL is not installed (make test installs it)")
    return url


def run_measures(args: argparse.Namespace) -> None:
    """Build or copy the store, then each measurement in a fresh process."""
    measures = args.measures or (ON_A_NIGHT if args.store else MEASURES)
    if args.store:
        if "record" in measures:
            sys.exit("the run record is measured on the synthetic store only (without --store)")
        source = args.store / "store.db"
        if not source.is_file():
            sys.exit(f"{source}: no bench.nightly store there")
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        os.environ["APIDIR_BENCH_AS_OF"] = _last_run_end(source).isoformat()
        print(f"  on a copy of {source}, as of {os.environ['APIDIR_BENCH_AS_OF']}")
    else:
        built = WORK / "entries.txt"
        if not (built.exists() and built.read_text() == str(args.entries)):
            if args.database == "sqlite":  # a PostgreSQL store's folder is fresh
                shutil.rmtree(WORK, ignore_errors=True)
                WORK.mkdir(parents=True)
            started = time.perf_counter()
            build_store(args.entries)
            built.write_text(str(args.entries))
            print(f"  built in {time.perf_counter() - started:.0f} s")
        # As the nightly scores it: just after its probing, on the day of the night's probes.
        # A kept store measured on a later day would read that day's probes as none, and its
        # night as yesterday's: another case (some 1-2 s more a run at 100k).
        os.environ.setdefault("APIDIR_BENCH_AS_OF", _night_end().isoformat())
        print(f"  as of {os.environ['APIDIR_BENCH_AS_OF']}")
        add_past_nights(args.nights)
    # The first publish draws every page, into a new staging folder: no spare is left beside.
    for folder in [WORK / "public", *WORK.glob(".public.*-*")]:
        shutil.rmtree(folder, ignore_errors=True)
    try:
        for _ in range(args.repeat):
            for which in measures:
                if args.store:  # each measurement on the night's store as it was
                    shutil.copy(source, WORK / "apidir.db")
                done = subprocess.run(
                    [sys.executable, "-m", "bench.score_stage", "--measure", which,
                     *(["--store", str(args.store)] if args.store else [])],
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode:
                    sys.exit(done.stderr[-3000:])
                print_measure(which, json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        if not args.keep:
            shutil.rmtree(WORK, ignore_errors=True)


def print_measure(which: str, figures: dict[str, Any]) -> None:
    more = f", hand-over {figures['bytes'] / 2**20:.0f} MiB" if "bytes" in figures else ""
    if figures.get("workers_cpu") and "bytes" in figures:
        more += (f"; span workers {figures['workers_cpu']:.1f} s user and "
                 f"{figures['workers_system']:.1f} s system CPU, peak RSS "
                 f"{figures['workers_peak_mib']:.0f} MiB")
    elif "workers_cpu" in figures:
        more = (f", page workers {figures['workers_cpu']:.1f} s user and "
                f"{figures['workers_system']:.1f} s system CPU, peak RSS "
                f"{figures['workers_peak_mib']:.0f} MiB, {figures['spliced']:,} entries' "
                "pages spliced")
    print(f"  {which:>7}: {figures['seconds']:6.1f} s ({figures['cpu']:.1f} s user and "
          f"{figures['system']:.1f} s system CPU), peak RSS {figures['peak_mib']:5.0f} MiB{more}")
    for name, (wall, cpu) in figures.get("parts", {}).items():
        print(f"           {name}: {wall:.1f} s ({cpu:.1f} s CPU)")

if __name__ == "__main__":
    main()
