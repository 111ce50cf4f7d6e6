"""Ingest at scale: the first ingest of N new entry files, then the second night's ingest of
the unchanged catalogue, each the ingest stage the flows run (`stages.ingest_entries`) in a
fresh process on the same store.

    python -m bench.ingest_scale [--entries 100000] [--second 2] [--second-only] [--edit-all]
                                 [--cold]

The synthetic catalogue (`bench.synthetic`) is written once per size and kept for the next
run. Each ingest prints its wall, its CPU (the process and the reading workers it started),
its peak RSS (the stage process's high-water mark, reset once the store is open) and the
largest reading worker's. A SQLite store, made fresh before the first ingest. `--edit-all`
then renames every entry (a catalogue-wide edit: every entry changed at once) and ingests
again; the catalogue is written afresh at the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.catalogue import peak_rss_mb, reset_peak_rss, workers_usage
from bench.synthetic import write_catalogue

REPO = Path(__file__).resolve().parent.parent
GOALS = {"second_ingest_s": 5.0, "peak_rss_mib": 1536.0}


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def ingest_once() -> dict[str, Any]:
    """The ingest stage once, in this process, on the store and catalogue of the environment."""
    from pipeline.operations import stages
    from pipeline.settings import Settings
    from pipeline.store.tables import engine_for, session_scope, start_run

    settings = Settings()
    stages.warm_workers()  # as the flow does first
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "bench").id
    reset_peak_rss()
    wall = time.perf_counter()
    cpu, workers_cpu = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    summary, report = stages.ingest_entries(settings, run_id)
    wall, cpu = time.perf_counter() - wall, cpu_seconds(resource.RUSAGE_SELF) - cpu
    workers = workers_usage()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "workers_cpu_s": workers.user + workers.system - workers_cpu,
        "peak_rss_mib": peak_rss_mb(),
        "workers_peak_rss_mib": workers.peak_rss_mib,
        "files": len(report.files),
        "problems": len(report.problems),
        "counts": {
            name: len(getattr(summary, name))
            for name in ("added", "updated", "unchanged", "retired", "invalid")
        },
    }


def ingest_in_process(env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.ingest_scale", "once"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"the ingest failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def show(name: str, figures: dict[str, Any]) -> None:
    print(
        f"  {name:<14}{figures['wall_s']:8.2f} s wall{figures['cpu_s']:8.2f} s CPU "
        f"(+{figures['workers_cpu_s']:.2f} s in workers)  peak RSS "
        f"{figures['peak_rss_mib']:6.0f} MiB (workers {figures['workers_peak_rss_mib']:.0f})"
        f"  {figures['counts']}"
    )


_NAME = re.compile(rb'^name: "(.*)"$', re.MULTILINE)  # as bench.synthetic writes it, quoted


def edit_every_entry(entries: Path) -> int:
    """Rename every entry of the catalogue (its name gains " 2"): each file's content changes."""
    edited = 0
    for path in entries.rglob("*.yaml"):
        text = path.read_bytes()
        path.write_bytes(_NAME.sub(lambda m: b'name: "' + m.group(1) + b' 2"', text, count=1))
        edited += 1
    return edited


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_caches() -> None:
    """Write back what is dirty, then empty the page cache and the inode and dentry caches."""
    os.sync()
    try:
        DROP_CACHES.write_text("3\n")
    except OSError as exc:
        raise SystemExit(f"--cold: cannot empty the caches ({DROP_CACHES}: {exc.strerror}); "
                         "run as root on Linux") from None


def main() -> None:
    if sys.argv[1:] == ["once"]:
        print(json.dumps(ingest_once()))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--second", type=int, default=2, help="second-night ingests to run")
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "bench-ingest")
    parser.add_argument(
        "--second-only",
        action="store_true",
        help="keep the store of the last run: second-night ingests alone",
    )
    parser.add_argument("--edit-all", action="store_true",
                        help="then edit every entry and ingest the changed catalogue")
    parser.add_argument("--cold", action="store_true",
                        help="empty the system's caches before each second-night ingest")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    catalogue = workdir / f"catalogue-{args.entries}"
    if not (catalogue / "written").is_file():
        started = time.perf_counter()
        write_catalogue(REPO / "data", catalogue, args.entries)
        (catalogue / "written").write_text("")
        print(
            f"catalogue of {args.entries:,} entries written in "
            f"{time.perf_counter() - started:.1f} s"
        )
    database = workdir / "store.db"
    if not args.second_only:
        for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
            path.unlink(missing_ok=True)
    env = os.environ | {
        "PYTHONPATH": str(REPO),
        "APIDIR_DATA_DIR": str(catalogue),
        "APIDIR_DATABASE_URL": f"sqlite:///{database}",
    }
    print(f"ingest of {args.entries:,} entries, SQLite; load average {os.getloadavg()[0]:.2f}")
    if not args.second_only:
        show("first", ingest_in_process(env))
    for _ in range(args.second):
        if args.cold:
            drop_caches()
        show("second night" + (", cold" if args.cold else ""), ingest_in_process(env))
    if args.edit_all:
        edited = edit_every_entry(catalogue / "entries")
        (catalogue / "written").unlink()  # the next run starts from the synthetic catalogue
        print(f"  every entry renamed ({edited:,} files)")
        show("edited all", ingest_in_process(env))
    print(
        f"  peak RSS goal <= {GOALS['peak_rss_mib']:.0f} MiB; second night goal <= "
        f"{GOALS['second_ingest_s']:.0f} s; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
