"""Catalogue scale: ingest, score and publish times and peak memory at 10k and 100k entries.

    python -m bench.catalogue [--sizes 10000 100000] [--runs 7] [--workdir var/bench]

For each size: a synthetic catalogue (`bench.synthetic`) is written, then each
stage runs in a fresh process against a SQLite file, as the nightly flow runs it:
ingest (first time: every entry new; then again: every entry unchanged), a
synthetic probe history of `--runs` nightly runs (not timed as a goal), score
(the score stage the flows run) and publish (`publish_release`, in a process
that first loads the scores the score stage computed, so they count in its peak).
Peak RSS is the stage process's high-water mark (VmHWM, reset as the stage starts).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import re
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.synthetic import write_catalogue

REPO = Path(__file__).resolve().parent.parent
GOALS = {"publish_s": 10.0, "publish_rss_mb": 1536.0, "ingest_s": 60.0, "category_share": 0.10}


# --- measuring inside a stage process ----------------------------------------------------------


def peak_rss_mb() -> float:
    """The process's resident-set high-water mark (Linux VmHWM), in MiB."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024


def rss_mb() -> float:
    """The process's resident set now (Linux VmRSS), in MiB."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024


def reset_peak_rss() -> None:
    """Start a new high-water mark (Linux: writing 5 to clear_refs resets VmHWM)."""
    Path("/proc/self/clear_refs").write_text("5")


@dataclass(frozen=True)
class WorkersUsage:
    """What this process's pool workers used, their server's own imports left out."""

    user: float
    system: float
    peak_rss_mib: float  # of the largest worker (or the server, were it larger)


def warmed_workers() -> None:
    """The workers' server started and ready, as a night has it by its score stage (the flow
    starts it first, `stages.warm_workers`): one worker forked from it and ended."""
    from pipeline.operations.stages import warm_workers
    from pipeline.processes import worker_pool

    warm_workers()
    with worker_pool(1) as pool:
        pool.submit(os.getpid).result()


def _server_ticks(first: int) -> list[float]:
    """Two CPU figures of the workers' server from /proc (`first`: 11 its own user and system,
    13 its reaped workers'), in seconds; zeros when no server runs."""
    from multiprocessing import forkserver

    if (pid := forkserver._forkserver._forkserver_pid) is None:
        return [0.0, 0.0]
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return [int(ticks) / os.sysconf("SC_CLK_TCK") for ticks in fields[first:first + 2]]


def children_cpu() -> float:
    """User and system CPU of this process's ended children so far, the pools' workers among
    them while their server runs (it reaps them: its /proc counts them)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + sum(_server_ticks(13))


def workers_usage() -> WorkersUsage:
    """The resources of this process's ended children, the pools' workers: those are forked by
    the workers' server (`pipeline.processes.warm_workers`), so they count here once the server
    is stopped and waited for (it reaps each worker as it ends). The server's own CPU, read
    from /proc first, is taken out. Stops the server: call it once, at the end."""
    from multiprocessing import forkserver

    user, system = _server_ticks(11)
    forkserver._forkserver._stop()  # the standard library's own tests stop it so
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return WorkersUsage(max(usage.ru_utime - user, 0.0), max(usage.ru_stime - system, 0.0),
                        usage.ru_maxrss / 1024)


def measured(work: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    reset_peak_rss()
    started = time.perf_counter()
    value = work()
    return value, {"seconds": time.perf_counter() - started, "peak_rss_mb": peak_rss_mb()}


# --- the stages, each run as `python -m bench.catalogue stage NAME ...` ------------------------


def stage_ingest(root: Path, database_url: str) -> dict[str, Any]:
    """Read and validate every file, then upsert into the store (as the flow's ingest task)."""
    from sqlmodel import Session

    from pipeline.catalogue.entries import read_catalog
    from pipeline.catalogue.ingest import ingest_catalog
    from pipeline.store.tables import engine_for

    engine = engine_for(database_url)
    entries = root / "entries"

    def ingest() -> tuple[int, Any]:
        started = time.perf_counter()
        report = read_catalog([entries], entries)
        read_seconds = time.perf_counter() - started
        with Session(engine) as session:
            summary = ingest_catalog(session, report)
        if report.problems:
            raise SystemExit(f"synthetic catalogue has problems: {report.problems[:3]}")
        return read_seconds, summary

    (read_seconds, summary), figures = measured(ingest)
    return figures | {
        "read_seconds": read_seconds,
        "added": len(summary.added),
        "unchanged": len(summary.unchanged),
    }


def stage_history(database_url: str, runs: int) -> dict[str, Any]:
    """Probe rows for every planned target in each of `runs` past nightly runs (bulk insert)."""
    from sqlalchemy import insert
    from sqlmodel import Session

    from pipeline.store.history import plan_targets
    from pipeline.store.tables import PipelineRun, ProbeRow, engine_for, utcnow

    engine = engine_for(database_url)
    rng = random.Random(7)
    started = time.perf_counter()
    rows = 0
    with Session(engine) as session:
        targets = plan_targets(session)
        now = utcnow()
        for night in range(runs, 0, -1):
            moment = now - timedelta(days=night - 1, hours=1)
            run = PipelineRun(flow="bench", started_at=moment, finished_at=moment,
                              state="completed", probes=len(targets), judged_at=moment,
                              first_checked_at=moment, last_checked_at=moment)
            session.add(run)
            session.commit()
            batch = []
            for target in targets:
                draw = rng.random()
                outcome = "live" if draw < 0.8 else "online" if draw < 0.95 else "unreachable"
                answered = outcome != "unreachable"
                batch.append({
                    "run_id": run.id, "entry_id": target.entry_id,
                    "endpoint_id": target.endpoint_id, "url": target.url,
                    "checked_at": moment, "outcome": outcome,
                    "reason": "auth" if outcome == "online" else None,
                    "error_class": None if answered else "connect_timeout",
                    "http_status": (200 if outcome == "live" else 401) if answered else None,
                    "total_ms": rng.lognormvariate(5.5, 0.7) if answered else None,
                    "attempts": 1, "redirects": 0,
                })
            session.execute(insert(ProbeRow), batch)
            session.commit()
            rows += len(batch)
    return {"seconds": time.perf_counter() - started, "rows": rows, "targets": len(targets)}


def stage_score(root: Path, database_url: str, presented_file: Path) -> dict[str, Any]:
    """The score stage the flows run; its result is kept for the publish stage."""
    from pipeline.operations.stages import score_entries_now
    from pipeline.settings import Settings
    from pipeline.store.tables import utcnow

    settings = Settings(data_dir=root, database_url=database_url)
    presented, figures = measured(lambda: score_entries_now(settings, utcnow()))
    presented_file.write_bytes(pickle.dumps(presented))
    return figures | {"scored": len(presented.scores)}


def stage_publish(root: Path, database_url: str, output: Path,
                  presented_file: Path, pages: bool) -> dict[str, Any]:
    """publish_release with the scores in memory (loaded first, so counted in the peak);
    the JSON release alone, or with the reader pages."""
    from sqlmodel import Session

    from pipeline.catalogue.entries import load_categories
    from pipeline.release.layout import CATEGORY_INDEX, FULL_DATASET, category_file
    from pipeline.release.publish import publish_release
    from pipeline.settings import Settings
    from pipeline.store.tables import engine_for, utcnow

    settings = Settings(data_dir=root, database_url=database_url, output_dir=output)
    categories = load_categories(settings.categories_file)
    presented = pickle.loads(presented_file.read_bytes())
    holding = rss_mb()  # the process with the scores loaded, before publishing

    def publish() -> int:
        with Session(engine_for(database_url)) as session:  # the count, read in its session
            return publish_release(session, output, settings.base_url, categories, utcnow(),
                                   presented, pages=pages).release.total_apis

    published, figures = measured(publish)
    full = (output / FULL_DATASET).stat().st_size
    shares = {c.id: (output / category_file(c.id)).stat().st_size / full for c in categories}
    largest = max(shares, key=shares.get)
    return figures | {
        "rss_before_mb": holding,
        "published": published,
        "full_mb": full / 2**20,
        "index_kb": (output / CATEGORY_INDEX).stat().st_size / 1024,
        "largest_category": largest,
        "largest_share": shares[largest],
        "smallest_share": min(shares.values()),
    }


def run_stage(*args: str) -> dict[str, Any]:
    """Run one stage in a fresh interpreter; its last output line is its figures as JSON."""
    completed = subprocess.run(
        [sys.executable, "-m", "bench.catalogue", "stage", *args],
        cwd=REPO, check=True, capture_output=True, text=True,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


# --- the report -------------------------------------------------------------------------------


def verdict(value: float, goal: float) -> str:
    return "met" if value < goal else "NOT met"


def bench_size(size: int, workdir: Path, runs: int) -> dict[str, Any]:
    root = workdir / f"catalogue-{size}"
    database = workdir / f"store-{size}.db"
    output = workdir / f"public-{size}"
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        path.unlink(missing_ok=True)
    url = f"sqlite:///{database}"
    started = time.perf_counter()
    write_catalogue(REPO / "data", root, size)
    generated = time.perf_counter() - started
    first = run_stage("ingest", str(root), url)
    again = run_stage("ingest", str(root), url)
    history = run_stage("history", url, str(runs))
    presented = workdir / f"presented-{size}.pickle"
    scored = run_stage("score", str(root), url, str(presented))
    published = run_stage("publish", str(root), url, str(output), str(presented), "json")
    with_pages = run_stage("publish", str(root), url, str(output), str(presented), "pages")
    return {"size": size, "generate_s": generated, "ingest": first, "reingest": again,
            "history": history, "score": scored, "publish": published, "pages": with_pages}


def print_figures(figures: dict[str, Any]) -> None:
    size, ingest, again = figures["size"], figures["ingest"], figures["reingest"]
    score, publish, history = figures["score"], figures["publish"], figures["history"]
    print(f"\n{size:,} entries (generated in {figures['generate_s']:.1f} s)")
    print(f"  ingest, first     {ingest['seconds']:7.1f} s  peak RSS "
          f"{ingest['peak_rss_mb']:6.0f} MiB"
          f"  (reading files {ingest['read_seconds']:.1f} s; {ingest['added']:,} added)"
          f"  goal < {GOALS['ingest_s']:.0f} s: {verdict(ingest['seconds'], GOALS['ingest_s'])}")
    print(f"  ingest, unchanged {again['seconds']:7.1f} s  peak RSS {again['peak_rss_mb']:6.0f} MiB"
          f"  ({again['unchanged']:,} unchanged)")
    print(f"  history           {history['seconds']:7.1f} s  ({history['rows']:,} probe rows: "
          f"{history['targets']:,} targets x {history['rows'] // max(1, history['targets'])} runs;"
          " set-up, not a goal)")
    print(f"  score             {score['seconds']:7.1f} s  peak RSS {score['peak_rss_mb']:6.0f} MiB"
          f"  ({score['scored']:,} scored)")
    print(f"  publish           {publish['seconds']:7.1f} s  peak RSS "
          f"{publish['peak_rss_mb']:6.0f} MiB"
          f"  ({publish['rss_before_mb']:.0f} MiB with the scores loaded, before publishing)"
          f"\n{'':30}goal < {GOALS['publish_s']:.0f} s and "
          f"< {GOALS['publish_rss_mb']:.0f} MiB: "
          f"{verdict(publish['seconds'], GOALS['publish_s'])}, "
          f"{verdict(publish['peak_rss_mb'], GOALS['publish_rss_mb'])}")
    pages = figures["pages"]
    print(f"  publish + pages   {pages['seconds']:7.1f} s  peak RSS {pages['peak_rss_mb']:6.0f} MiB"
          "  (the JSON release and one reader page per entry and category; no goal)")
    print(f"  apis.json {publish['full_mb']:.1f} MiB; largest category file "
          f"{publish['largest_category']} = {publish['largest_share']:.1%} of it, smallest "
          f"{publish['smallest_share']:.1%}; goal < {GOALS['category_share']:.0%}: "
          f"{verdict(publish['largest_share'], GOALS['category_share'])}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "stage":
        name, args = sys.argv[2], sys.argv[3:]
        if name == "ingest":
            figures = stage_ingest(Path(args[0]), args[1])
        elif name == "history":
            figures = stage_history(args[0], int(args[1]))
        elif name == "score":
            figures = stage_score(Path(args[0]), args[1], Path(args[2]))
        else:
            figures = stage_publish(Path(args[0]), args[1], Path(args[2]), Path(args[3]),
                                    pages=args[4] == "pages")
        print(json.dumps(figures))
        return
    sys.stdout.reconfigure(line_buffering=True)  # figures show as they come, also in a log
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--runs", type=int, default=7, help="nightly runs of probe history")
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "bench")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"catalogue scale: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    for size in args.sizes:
        print_figures(bench_size(size, args.workdir.resolve(), args.runs))


if __name__ == "__main__":
    main()
