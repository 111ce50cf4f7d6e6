"""Probe stage throughput on one machine: the single probe task against N shards in processes.

    python bench/shards.py [--hosts 4000 --paths 5 --shards 2 --postgres]

The loopback server of bench/probe.py (a child process on `--hosts` addresses 127.0.x.y)
answers every probe. The store gets one synthetic entry per host with `--paths` GET
endpoints, written straight into its tables (plain-http loopback URLs, which the
catalogue's own rules refuse). Then the real probe stage runs in a Prefect flow: the
single `probe` task, then the sharded stage with `--shards` shards in as many processes,
each writing its rows into the store; first with politeness off (no per-host cap, no
interval), then with the default per-host limits. Prints walls, probes per second and
the rows stored. SQLite in var/ by default; `--postgres` starts a throwaway PostgreSQL
server (as the tests do) and uses it. Only 127.0.0.0/8 is used; each run is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pipeline.operations.local_mode import patient_startup  # noqa: E402

os.environ.setdefault("PREFECT_HOME", str(REPO / "var" / "prefect"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
patient_startup()

from prefect import flow  # noqa: E402
from probe import addresses, raise_open_file_limit, serve  # noqa: E402  (bench/probe.py)
from sqlalchemy import func  # noqa: E402
from sqlmodel import select  # noqa: E402

from flows.nightly import probe as probe_task  # noqa: E402
from flows.probe_shards import probe_in_shards  # noqa: E402
from pipeline.operations.stages import peak_rss_mib  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.store.tables import (  # noqa: E402
    EndpointRow,
    EntryRow,
    PipelineRun,
    ProbeRow,
    engine_for,
    session_scope,
    start_run,
    utcnow,
)
from tests.postgres_server import running_server  # noqa: E402

WORK = REPO / "var" / "bench-shards"


@flow(name="probe-stage-bench")
async def probe_stage(run_id: int) -> str:
    """The probe stage as the nightly flow runs it; what the shards said of themselves."""
    settings = Settings()
    if settings.probe_shards == 1:
        await probe_task(settings, run_id)
        return ""
    reports = await probe_in_shards(run_id)
    return (f", slowest shard {max(r.seconds for r in reports):.2f} s, "
            f"peak RSS {max(r.peak_rss_mib for r in reports):.0f} MiB")


@flow(name="warm-up")
async def warm_up() -> None:
    """Starts Prefect's temporary server before anything is timed."""


def fill_store(database_url: str, hosts: list[str], port: int, paths: int) -> None:
    """One entry per host, `paths` GET endpoints each, straight into the tables."""
    now = utcnow()
    with session_scope(engine_for(database_url)) as session:
        ids = [f"bench-{number:05d}" for number in range(len(hosts))]
        session.add_all(
            EntryRow(id=entry_id, category="bench", name=entry_id,
                     content={"baseUrl": f"http://{host}:{port}"},
                     base_url=f"http://{host}:{port}", content_hash="-",
                     source_file="-", first_seen_at=now, updated_at=now)
            for entry_id, host in zip(ids, hosts, strict=True))
        session.flush()
        session.add_all(
            EndpointRow(entry_id=entry_id, method="GET", path=f"/p{path}", position=path)
            for entry_id in ids for path in range(paths))


def measure(name: str, env: dict[str, str], expected: int, max_seconds: float) -> None:
    """One run of the probe stage with `env` as its APIDIR_* settings."""
    os.environ.update(env)
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "bench").id
    cpu = cpu_seconds()
    started = time.perf_counter()
    try:
        shards = asyncio.run(asyncio.wait_for(probe_stage(run_id), max_seconds))
    except TimeoutError:
        print(f"{name:>26}: stopped after {max_seconds:.0f} s (--max-seconds)")
        return
    wall = time.perf_counter() - started
    cpu = cpu_seconds() - cpu
    rss = peak_rss_mib()
    with session_scope(engine_for(settings.database_url)) as session:
        stored = session.exec(
            select(func.count()).select_from(ProbeRow).where(ProbeRow.run_id == run_id)
        ).one()
        run = session.get(PipelineRun, run_id)
    print(f"{name:>26}: {stored} rows ({run.probes_failed} failed) in {wall:6.2f} s "
          f"= {stored / wall:5.0f} probes/s, {1000 * cpu / stored:.2f} CPU ms/probe{shards}"
          + (f", flow process peak RSS {rss:.0f} MiB" if not shards else "")
          + ("" if stored == expected else " INCOMPLETE"))


def cpu_seconds() -> float:
    """This process's CPU time plus that of its finished children (the shard processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def store_url(postgres: bool) -> Iterator[str]:
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    try:
        if postgres:
            with running_server(WORK / "postgres") as url:
                if url is None:
                    raise SystemExit("PostgreSQL is not installed (make test installs it)")
                yield url
        else:
            yield f"sqlite:///{WORK / 'apidir.db'}"
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4000)
    parser.add_argument("--paths", type=int, default=5, help="endpoints per host")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64, help="per process")
    parser.add_argument("--postgres", action="store_true", help="store in PostgreSQL")
    parser.add_argument("--max-seconds", type=float, default=600, help="bound per run")
    args = parser.parse_args()

    hosts = addresses(args.hosts)
    raise_open_file_limit(1 << 20)  # up to the hard limit; the server and shards inherit it
    receive, send = mp.Pipe(duplex=False)
    served = mp.Value("q", 0, lock=False)
    server = mp.Process(target=serve, args=(hosts, send, served), daemon=True)
    server.start()
    try:
        if not receive.poll(60):
            raise SystemExit("the server did not start")
        port = receive.recv()
        with store_url(args.postgres) as database_url:
            fill_store(database_url, hosts, port, args.paths)
            expected = args.hosts * args.paths
            print(f"{args.hosts} hosts x {args.paths} paths = {expected} probes, "
                  f"concurrency {args.concurrency} per process, {os.cpu_count()} CPUs, "
                  f"store {database_url.split(':')[0]}")
            asyncio.run(warm_up())
            base = {"APIDIR_DATABASE_URL": database_url, "APIDIR_PROBE_ALLOW_PRIVATE": "true",
                    "APIDIR_PROBE_ATTEMPTS": "1", "APIDIR_PROBE_CONCURRENCY": str(args.concurrency)}
            per_host, interval = (Settings.model_fields[name].default
                                  for name in ("probe_per_host", "probe_interval"))
            for politeness, limits in (
                ("off", {"APIDIR_PROBE_PER_HOST": "0", "APIDIR_PROBE_INTERVAL": "0"}),
                ("on", {"APIDIR_PROBE_PER_HOST": str(per_host),
                        "APIDIR_PROBE_INTERVAL": str(interval)}),
            ):
                for shards in (1, args.shards):
                    label = "single task" if shards == 1 else f"{shards} shards"
                    measure(f"{label}, politeness {politeness}",
                            {**base, **limits, "APIDIR_PROBE_SHARDS": str(shards),
                             "APIDIR_PROBE_WORKERS": str(shards)},
                            expected, args.max_seconds)
            print(f"server answered {served.value} requests; politeness on = "
                  f"{per_host} per host, {interval} s between starts")
    finally:
        server.terminate()
        server.join(10)


if __name__ == "__main__":
    main()
