"""End to end: the real nightly flow on a synthetic catalogue whose hosts live on a loopback
fake internet, night after night, with each stage's wall and CPU and every process's memory.

    python -m bench.nightly --entries 10000 --store sqlite|postgres --nights 2
    python -m bench.nightly --entries 100000 --nights 1 --resume   # one more night

A synthetic catalogue (`bench.synthetic`) of `--entries` entries, one API host each
(api-NNNNNN.example.net), is served over HTTPS by one loopback server (`bench.probe`) with a
wildcard certificate the prober is told to trust. A fake DNS (`tests.fake_internet`) sends
every name to it, or to an address where nothing listens for the refusing hosts. Each host
answers after its own latency, log-uniform from 20 to 800 ms, with 200 or a share of
401/403/404/429; a few hang (answer after the probe timeout) and a few refuse. The limits
are the product's defaults (`APIDIR_PROBE_*` in the environment changes them).

Each night runs `flows.nightly.nightly` for real in a fresh process, in Prefect's local
ephemeral mode (its own PREFECT_HOME), with the settings pointing at the catalogue, the
bench store (a SQLite file, or a throwaway PostgreSQL server as the tests start) and the
fake internet (the network guard off for loopback, as the tests do; stage retries off so a
failure shows). The probing runs in the flow's process, or with `--shards N` in N processes
side by side, the machine's probes in flight divided among them (the fake DNS put in their
processes by a `sitecustomize`). In the flow's process the stage functions are timed where the
flow calls them (`bench.stage_clock`); /proc is sampled for the peak RSS and CPU of every
process (`bench.processes`): the flow's, Prefect's server's, PostgreSQL's and the fake
internet's. Waiting on the network is the probing's wall minus its CPU; everything else is
work the machine does; with shards, the probing's wall is its slowest shard's and its CPU its
busiest shard's (each shard has a core of its own while the rest of the night waits). The
probing's wall is printed against the lower bound the limits
allow (`bench.makespan.phased_bound`: the first looks' floor, then the floor of the second
looks the run took of its failures), and the figures beside the goals of a 100,000-entry nightly.
The nights run back to back, so before each night after the first the store's every time and
day is moved a day back (`age_store`): each night then has a day of its own, as nights do.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from bench.fake_dns import DNS_CONFIG, install_fake_dns, shard_site
from bench.makespan import HANG_SECONDS, Host, draw_hosts, phased_bound
from bench.probe import loopback_server, raise_open_file_limit
from bench.processes import ProcessWatch, Watched
from bench.synthetic import api_host, write_catalogue
from pipeline.operations.local_mode import patient_startup

if TYPE_CHECKING:
    from bench.stage_clock import StageClock

REPO = Path(__file__).resolve().parent.parent
SERVER_ADDRESS = "127.1.0.1"  # every host that answers or hangs (outside bench.probe's range)
REFUSING_ADDRESS = "127.1.0.2"  # nothing listens here: connections are refused
STATUS_SHARES = {401: 0.06, 403: 0.03, 404: 0.03, 429: 0.01}  # of hosts; the rest answer 200
GOAL_ENTRIES = 100_000
GOALS = {"work_s": 300.0, "peak_rss_mib": 1536.0, "second_ingest_s": 5.0, "makespan": 1.2}
STAGES = ("ingest", "probe", "score", "publish")  # each gets its own memory peak
# Stages the flow runs beside the probe stage, each in a process of its own: their wall is within
# the probing's, their CPU and memory are their processes' (among the flow's workers).
BESIDE_PROBING = ("rollup",)
HARNESS = ("bench", "fake internet")  # processes of the benchmark, not of the product


# --- one night, in the process that runs the flow ---------------------------------------------


# Every call timed in the flow's process, in the order printed: (module, attribute, name). The
# stages as `flows/nightly.py` calls them, their main steps ("stage: step"), the bookkeeping.
STAGES_MODULE, FLOW_MODULE = "pipeline.operations.stages", "flows.nightly"
TIMED = (
    (STAGES_MODULE, "ingest_entries", "ingest"),
    (STAGES_MODULE, "read_catalog", "ingest: reading files"),
    (STAGES_MODULE, "ingest_catalog", "ingest: storing"),
    (STAGES_MODULE, "roll_up", "rollup"),
    (STAGES_MODULE, "roll_up_night_aside", "rollup"),  # the nightly's, beside the probe stage
    (STAGES_MODULE, "probe_entries", "probe"),
    (STAGES_MODULE, "plan_targets", "probe: planning"),
    (STAGES_MODULE, "probe_all", "probe: probing"),
    (STAGES_MODULE, "record_probes", "probe: recording"),
    (STAGES_MODULE, "hand_over_scores", "score"),
    (STAGES_MODULE, "publish_handed_over", "publish"),
    (STAGES_MODULE, "record_state_changes", "publish: state changes"),
    (STAGES_MODULE, "record_lifecycles", "publish: lifecycles"),
    (STAGES_MODULE, "publish_release", "publish: release and pages"),
    (FLOW_MODULE, "open_run", "run record"),
    (FLOW_MODULE, "report_network_suspect", "run record"),
    (FLOW_MODULE, "complete_run", "run record"),
    (FLOW_MODULE, "alert_state_changes", "state-change events"),
)
# With --shards, the probe stage is `flows.probe_shards`: its planning and counting are timed
# in the flow's process; each shard's probing, in its own process, is stored with the shard.
SHARDS_MODULE = "flows.probe_shards"
SHARDED = (
    (STAGES_MODULE, "store_shard_plan", "probe: planning, stored by shard"),
    (STAGES_MODULE, "close_shards", "probe: recording"),
)


def run_night(config_file: Path, figures_file: Path) -> None:
    """Run the nightly flow once with the fake DNS and the stage clock in place; write the
    figures as JSON."""
    import resource

    from prefect import flow

    from bench.stage_clock import StageClock

    config = install_fake_dns(config_file)
    clock = StageClock(peaks=frozenset(STAGES))
    for module, attribute, name in TIMED + (SHARDED if config["shards"] > 1 else ()):
        clock.wrap(importlib.import_module(module), attribute, name)
    nightly = importlib.import_module(FLOW_MODULE)
    if config["shards"] > 1:
        time_sharded_probe_stage(nightly, clock, config_file)

    @flow(name="warm-up")
    async def warm_up() -> None:
        """Starts Prefect's temporary server before the night is timed."""

    started = time.perf_counter()
    asyncio.run(warm_up())
    prefect_start = time.perf_counter() - started
    with clock.timing("flow"):
        result = asyncio.run(nightly.nightly())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    figures_file.write_text(json.dumps({
        "run": result["run"],
        "version": result["version"],
        "published": result["published"],
        "ingest": result["ingest"]["counts"],
        "prefect_start_s": prefect_start,
        "timings": {name: vars(timing) for name, timing in clock.timings.items()},
        "process_cpu_s": usage.ru_utime + usage.ru_stime,
        "process_peak_rss_mib": clock.peak(),
    }))


def time_sharded_probe_stage(nightly: ModuleType, clock: StageClock,
                             config_file: Path) -> None:
    """Time the sharded probe stage as a whole: it is a subflow, so the flow's `run_stage`
    call that awaits it is what is timed, under the stage's name. While it runs, the shards'
    processes it starts are told where the fake DNS is (only they: not Prefect's server, nor
    the page workers)."""
    run_stage = nightly.run_stage

    async def timed(name: str, call: Any) -> Any:
        if name != "probe":
            return await run_stage(name, call)
        os.environ[DNS_CONFIG] = str(config_file)
        try:
            with clock.timing("probe"):
                return await run_stage(name, call)
        finally:
            del os.environ[DNS_CONFIG]

    nightly.run_stage = timed


# --- the benchmark, in its own process ----------------------------------------------------------


def fake_hosts(entries: int, hang_share: float, refuse_share: float, seed: int) -> list[Host]:
    """Every synthetic entry's API host, with its behaviour on the fake internet."""
    names = [api_host(serial) for serial in range(1, entries + 1)]
    return draw_hosts(names, hang_share, refuse_share, seed, STATUS_SHARES)


@contextmanager
def bench_store(kind: str, workdir: Path, kept: bool = False) -> Iterator[tuple[str, int | None]]:
    """(database URL, PostgreSQL's main process or None) of a fresh bench store, or of the
    one the work folder holds (`kept`)."""
    if kind == "sqlite":
        database = workdir / "store.db"
        for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
            if not kept:
                path.unlink(missing_ok=True)
        yield f"sqlite:///{database}", None
        return
    from tests.postgres_server import running_server

    folder = workdir / "postgres"
    with running_server(folder) as url:
        if url is None:
            raise SystemExit("PostgreSQL is not installed (make test installs it)")
        postmaster = int((folder / "data" / "postmaster.pid").read_text().split()[0])
        yield url, postmaster


def age_store(database_url: str, days: int = 1) -> int:
    """Move every time and day the store holds `days` back, as if the nights so far had run
    that much earlier: nights run back to back on one date would otherwise all be "today",
    and each night's score and rollup would read every earlier night's probes as today's,
    where a real night reads one run's. The number of values moved."""
    from sqlalchemy import Date, DateTime, MetaData, create_engine, text

    engine = create_engine(database_url)
    sqlite = engine.dialect.name == "sqlite"
    tables = MetaData()
    tables.reflect(engine)
    moved = 0
    with engine.begin() as connection:
        for table in tables.sorted_tables:
            for column in table.columns:
                name = f'"{column.name}"'
                if isinstance(column.type, DateTime):
                    # whole seconds moved, the fraction kept as written: datetime() would
                    # round a fraction past .9995 up into the next second
                    steps = [f"datetime(substr({name}, 1, 19), '-{days} day') || substr({name}, 20)"
                             if sqlite
                             else f"{name} - interval '{days} day'"]
                elif isinstance(column.type, Date):  # a key: moved out of the way and back
                    steps = ([f"date({name}, '+5000 years')",
                              f"date({name}, '-5000 years', '-{days} day')"] if sqlite
                             else [f"{name} + 36500", f"{name} - {36500 + days}"])
                else:
                    continue
                for step in steps:
                    rows = connection.execute(text(
                        f'UPDATE "{table.name}" SET {name} = {step} '
                        f"WHERE {name} IS NOT NULL")).rowcount
                moved += rows
    engine.dispose()
    return moved


def role(watched: Watched, flow_pid: int, postmaster: int | None) -> str:
    """Which part of the run a process is."""
    if watched.pid == flow_pid:
        return "flow"
    if flow_pid in watched.ancestors:
        return "prefect server" if "prefect" in watched.command else "flow workers"
    if postmaster is not None and postmaster in (watched.pid, *watched.ancestors):
        return "postgres"
    if watched.pid == os.getpid():
        return "bench"
    return "fake internet"


def night_in_process(night: int, workdir: Path, env: dict[str, str], postmaster: int | None,
                     max_seconds: float) -> dict[str, Any]:
    """Run one night in a fresh process while /proc is watched; its figures and processes."""
    config, figures_file = workdir / "night-config.json", workdir / f"night-{night}.json"
    log = workdir / f"night-{night}.log"
    figures_file.unlink(missing_ok=True)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.nightly", "night", str(config), str(figures_file)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        watch = ProcessWatch([os.getpid(), *([postmaster] if postmaster else [])]).start()
        try:
            code = child.wait(timeout=max_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the flow's process and its Prefect server
            child.wait()
            code = None
        processes = watch.stop()
    if code != 0:
        why = f"stopped after {max_seconds:.0f} s" if code is None else f"exit status {code}"
        raise SystemExit(f"night {night} failed ({why}); its log: {log}")
    figures = json.loads(figures_file.read_text())
    figures["process_wall_s"] = time.perf_counter() - started
    figures["load"] = {"before": load_before, "after": os.getloadavg()}
    figures["processes"] = [
        {"role": role(watched, child.pid, postmaster), "pid": watched.pid,
         "peak_rss_mib": watched.peak_rss_mib, "cpu_s": watched.cpu_used,
         "command": watched.command}
        for watched in processes]
    for process in figures["processes"]:
        if process["role"] == "flow":  # its own final figures miss nothing between samples
            process["peak_rss_mib"] = max(process["peak_rss_mib"],
                                          figures["process_peak_rss_mib"])
            process["cpu_s"] = max(process["cpu_s"], figures["process_cpu_s"])
    return figures


def probing_figures(database_url: str, run_id: int, hosts: dict[str, Host],
                    concurrency: int) -> dict[str, Any]:
    """The run's probe outcomes, each shard's wall and CPU, and the lower bound of its
    probing from the URLs it had, with `concurrency` probes in flight on the machine."""
    from dataclasses import replace

    from sqlmodel import select

    from pipeline.probing.probe import target_host
    from pipeline.settings import Settings
    from pipeline.store.shards import finished_shards
    from pipeline.store.tables import ProbeRow, engine_for, session_scope

    with session_scope(engine_for(database_url)) as session:
        rows = session.exec(select(ProbeRow.url, ProbeRow.outcome, ProbeRow.reason,
                                   ProbeRow.error_class, ProbeRow.confirmation)
                            .where(ProbeRow.run_id == run_id)).all()
        shards = [{"shard": shard.shard, "wall": shard.seconds, "cpu": shard.cpu_seconds,
                   "peak_rss_mib": shard.peak_rss_mib, "outcomes": shard.outcomes}
                  for _index, shard in sorted(finished_shards(session, run_id).items())]
    looks = {again: Counter(target_host(row.url) for row in rows if row.confirmation == again)
             for again in (False, True)}
    per_host = looks[False] + looks[True]
    settings = replace(Settings().probe_settings(), global_concurrency=concurrency)
    bound, floor = phased_bound(*([(hosts[name], count) for name, count in looks[again].items()]
                                  for again in (False, True)), settings)
    outcomes = Counter(f"{outcome} {reason or error_class or ''}".strip()
                       for _url, outcome, reason, error_class, _again in rows)
    return {"probes": len(rows), "hosts": len(per_host), "bound": bound, "floor": floor,
            "shards": shards,
            "outcomes": dict(outcomes.most_common()),
            "limits": {"global": settings.global_concurrency, "shards": len(shards) or 1,
                       "per_host": settings.per_host_concurrency,
                       "interval_s": settings.per_host_interval,
                       "timeout_s": settings.total_timeout, "attempts": settings.max_attempts}}


# --- the report ---------------------------------------------------------------------------------


def verdict(value: float, goal: float, entries: int) -> str:
    said = "met" if value <= goal else "NOT met"
    return said if entries == GOAL_ENTRIES else f"{said} (the goal is for {GOAL_ENTRIES:,})"


def probing_span(figures: dict[str, Any]) -> dict[str, float]:
    """The probing's wall and the CPU on its critical path. In one process, the process's
    CPU while probing. Shards probe in processes of their own, side by side: the probing took
    as long as its slowest shard, and the machine, one core a shard, was busy for as long as
    its busiest shard's CPU (the others' ran beside it)."""
    shards = figures["probing"]["shards"]
    if not shards:
        return figures["timings"].get("probe: probing", {"wall": 0.0, "cpu": 0.0})
    return {"wall": max(shard["wall"] for shard in shards),
            "cpu": max(shard["cpu"] for shard in shards)}


def network_wait(figures: dict[str, Any]) -> float:
    probing = probing_span(figures)
    return max(0.0, probing["wall"] - probing["cpu"])


def print_night(night: int, figures: dict[str, Any], entries: int) -> None:
    timings, probing = figures["timings"], figures["probing"]
    flow = timings["flow"]
    print(f"\nnight {night}: release {figures['version']}, {figures['published']:,} entries "
          f"published; flow {flow['wall']:.1f} s wall, {flow['cpu']:.1f} s CPU "
          f"(Prefect's temporary server started in {figures['prefect_start_s']:.1f} s before "
          f"it; load average {figures['load']['before'][0]:.2f} before, "
          f"{figures['load']['after'][0]:.2f} after)")
    print(f"  ingest: {figures['ingest']}")
    print(f"  {'stage':<30}{'wall s':>9}{'CPU s':>9}{'peak RSS':>11}")
    listed = 0.0
    names = [name for _module, _attribute, name in TIMED]
    at = names.index("probe: probing")  # the sharded stage's steps in the probe stage's place
    names[at:at] = [name for _module, _attribute, name in SHARDED]
    for name in dict.fromkeys(names):
        if name not in timings:
            continue
        timing = timings[name]
        nested, beside = ": " in name, name in BESIDE_PROBING
        listed += 0.0 if nested or beside else timing["wall"]
        peak = f"{timing['peak_rss_mib']:7.0f} MiB" if timing.get("peak_rss_mib") else ""
        label = ("  " + name.split(": ", 1)[1]) if nested else name
        calls = f"  ({timing['calls']} calls)" if timing["calls"] > 1 else ""
        if beside:  # the flow's process only waits for it: its CPU is its own process's
            print(f"  {label:<30}{timing['wall']:9.1f}{'':>9}{'':>11}  (a process of its own, "
                  f"beside the probe: within its wall){calls}")
            continue
        print(f"  {label:<30}{timing['wall']:9.1f}{timing['cpu']:9.1f}{peak:>11}{calls}")
    print(f"  {'Prefect and the rest':<30}{flow['wall'] - listed:9.1f}")
    for shard in probing["shards"]:
        print(f"  {'probe shard ' + str(shard['shard']):<30}{shard['wall']:9.1f}"
              f"{shard['cpu']:9.1f}{shard['peak_rss_mib']:7.0f} MiB  (a process of its own: "
              f"probing and storing; within probe)")
    waiting = network_wait(figures)
    work = flow["wall"] - waiting
    print(f"  waiting on the network (probing wall - CPU): {waiting:.1f} s")
    print(f"  everything else: {work:.1f} s; goal <= {GOALS['work_s']:.0f} s: "
          f"{verdict(work, GOALS['work_s'], entries)}")
    if night > 1:
        ingest = timings["ingest"]["wall"]
        print(f"  ingest of the unchanged catalogue: {ingest:.1f} s; goal <= "
              f"{GOALS['second_ingest_s']:.0f} s: "
              f"{verdict(ingest, GOALS['second_ingest_s'], entries)}")
    print_processes(figures["processes"], entries)
    bound, floor = probing["bound"], probing["floor"]
    wall = probing_span(figures)["wall"]
    print(f"  probing: {probing['probes']:,} URLs of {probing['hosts']:,} hosts; limits "
          f"{probing['limits']}")
    print(f"  outcomes: {probing['outcomes']}")
    print("  lower bound: " + ", ".join(f"{name} {value:.1f} s" for name, value in bound.items()))
    print(f"  probe makespan {wall:.1f} s vs bound {floor:.1f} s = {wall / floor:.2f}x; goal <= "
          f"{GOALS['makespan']}x: {verdict(wall / floor, GOALS['makespan'], entries)}")


def print_processes(processes: list[dict[str, Any]], entries: int) -> None:
    by_role: dict[str, list[dict[str, Any]]] = {}
    for process in processes:
        by_role.setdefault(process["role"], []).append(process)
    print(f"  {'process':<30}{'count':>6}{'peak RSS (largest)':>20}{'CPU s (all)':>13}")
    for name, group in by_role.items():
        note = " (harness)" if name in HARNESS else ""
        print(f"  {name + note:<30}{len(group):6}"
              f"{max(p['peak_rss_mib'] for p in group):16.0f} MiB"
              f"{sum(p['cpu_s'] for p in group):13.1f}")
    product = [p for p in processes if p["role"] not in HARNESS]
    largest = max(product, key=lambda p: p["peak_rss_mib"])
    print(f"  peak RSS of any process: {largest['peak_rss_mib']:.0f} MiB ({largest['role']}); "
          f"goal <= {GOALS['peak_rss_mib']:.0f} MiB: "
          f"{verdict(largest['peak_rss_mib'], GOALS['peak_rss_mib'], entries)}")


def machine() -> str:
    memory = next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    return (f"{os.cpu_count()} cores, {int(memory) / 2**20:.0f} GiB, Python "
            f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}, "
            f"{datetime.now(UTC):%Y-%m-%d}")


def shard_limits(shards: int) -> dict[str, str]:
    """The probe settings of `shards` shards side by side on this machine: one process each,
    and the machine's probes in flight (APIDIR_PROBE_CONCURRENCY, else the default) divided
    among them, so the run is as polite as one process and its bound the same."""
    from pipeline.settings import Settings

    total = int(os.environ.get("APIDIR_PROBE_CONCURRENCY",
                               Settings.model_fields["probe_concurrency"].default))
    if total % shards:
        raise SystemExit(f"--shards {shards} does not divide the {total} probes in flight")
    return {"APIDIR_PROBE_SHARDS": str(shards), "APIDIR_PROBE_WORKERS": str(shards),
            "APIDIR_PROBE_CONCURRENCY": str(total // shards)}


def child_env(workdir: Path, catalogue: Path, database_url: str, tls: Path,
              shards: int) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name != "PREFECT_API_URL"}
    patient_startup(env)
    return env | shard_limits(shards) | {
        "PYTHONPATH": os.pathsep.join(map(str, (REPO, shard_site(workdir)))),
        "PREFECT_HOME": str(workdir / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "SSL_CERT_FILE": str(tls / "cert.pem"),  # trusted by the flow's prober
        "APIDIR_DATA_DIR": str(catalogue),
        "APIDIR_DATABASE_URL": database_url,
        "APIDIR_OUTPUT_DIR": str(workdir / "public"),
        "APIDIR_BASE_URL": "https://directory.example",
        "APIDIR_PROBE_ALLOW_PRIVATE": "true",  # the fake internet is on loopback
        "APIDIR_STAGE_RETRIES": "0",
    }


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "night":
        run_night(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    sys.stdout.reconfigure(line_buffering=True)  # figures show as they come, also in a log
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--nights", type=int, default=2)
    parser.add_argument("--hang-share", type=float, default=0.005, help="of hosts")
    parser.add_argument("--refuse-share", type=float, default=0.005, help="of hosts")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "bench-nightly")
    parser.add_argument("--max-seconds", type=float, default=4 * 3600, help="bound per night")
    parser.add_argument("--shards", type=int, default=1,
                        help="probe shards, each a process; the probes in flight divided")
    parser.add_argument("--resume", action="store_true",
                        help="go on after the work folder's last night, with its store and "
                             "live release (SQLite), the same catalogue and hosts")
    args = parser.parse_args()
    if args.shards < 1:
        parser.error("--shards must be at least 1")
    if args.resume and args.store != "sqlite":
        parser.error("--resume goes on with a SQLite store (a PostgreSQL one is thrown away)")
    from tests.fake_internet import self_signed_context

    workdir = (args.workdir / f"{args.store}-{args.entries}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"nightly end to end: {args.entries:,} entries, {args.store}, {args.nights} nights, "
          f"{args.shards} probe shard{'s' if args.shards > 1 else ''}; {machine()}")
    started = time.perf_counter()
    catalogue = workdir / "catalogue"
    # Resumed, the catalogue is kept as it is: written again, every file would be new to the
    # next ingest's stats (read and hashed once more), as a fresh copy of the data folder is.
    kept = args.resume and (catalogue / "entries").is_dir()
    if not kept:
        write_catalogue(REPO / "data", catalogue, args.entries)
    hosts = fake_hosts(args.entries, args.hang_share, args.refuse_share, args.seed)
    kinds = Counter(host.kind if host.kind != "answers" else str(host.status) for host in hosts)
    print(f"catalogue {'kept' if kept else 'written'} and hosts drawn in "
          f"{time.perf_counter() - started:.1f} s; hosts: "
          f"{dict(kinds.most_common())}; latency 20-800 ms log-uniform")
    tls = workdir / "tls"
    tls.mkdir(exist_ok=True)
    self_signed_context(tls, "*.example.net", lifetime=timedelta(days=2))
    answers = {host.address: (HANG_SECONDS if host.kind == "hangs" else host.latency,
                              host.status) for host in hosts if host.kind != "refuses"}
    raise_open_file_limit(16384)  # the server and the flow's process inherit it
    with loopback_server([SERVER_ADDRESS], answers=answers, tls_folder=tls) as (port, served):
        (workdir / "night-config.json").write_text(json.dumps({
            "port": port, "shards": args.shards, "dns": {
            SERVER_ADDRESS: list(answers),
            REFUSING_ADDRESS: [host.address for host in hosts if host.kind == "refuses"]}}))
        earlier = json.loads((workdir / "figures.json").read_text())["nights"] \
            if args.resume else []
        for path in ("prefect",) if args.resume else ("public", "prefect"):
            shutil.rmtree(workdir / path, ignore_errors=True)
        nights = earlier[:]
        with bench_store(args.store, workdir, args.resume) as (database_url, postmaster):
            env = child_env(workdir, catalogue, database_url, tls, args.shards)
            concurrency = args.shards * int(env["APIDIR_PROBE_CONCURRENCY"])
            by_name = {host.address: host for host in hosts}
            for night in range(len(earlier) + 1, len(earlier) + args.nights + 1):
                if night > 1:
                    moment = time.perf_counter()
                    moved = age_store(database_url)
                    print(f"\nthe store's times moved a day back ({moved:,} values, "
                          f"{time.perf_counter() - moment:.1f} s): each night is a day of "
                          f"its own")
                figures = night_in_process(night, workdir, env, postmaster, args.max_seconds)
                figures["probing"] = probing_figures(database_url, figures["run"], by_name,
                                                     concurrency)
                print_night(night, figures, args.entries)
                nights.append(figures)
        print(f"\nthe fake internet answered {served.value:,} requests")
    (workdir / "figures.json").write_text(json.dumps(
        {"entries": args.entries, "store": args.store, "machine": machine(), "nights": nights},
        indent=1))
    print(f"figures in {workdir / 'figures.json'}")


if __name__ == "__main__":
    main()
