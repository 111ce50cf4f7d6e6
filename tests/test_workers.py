"""Probe shards on several machines: the nightly starts one flow run of the `probe-shard`
deployment per shard, Prefect workers on any machine of the work pool run them against one
PostgreSQL store, and the nightly waits for all of them, counts the run, and fails naming a
shard that failed after its retries.

Real parts, on loopback: `prefect server start`, two `prefect worker start` processes, each in
a working folder and Prefect home of its own (standing in for two machines), PostgreSQL, and
the fake internet in a thread of the test's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from prefect.logging.handlers import APILogHandler
from prefect.settings import PREFECT_API_URL, temporary_settings
from sqlalchemy import text
from sqlmodel import Session, select

from flows.nightly import nightly
from pipeline.operations.automations import apply_automations
from pipeline.operations.runs import StageFailed
from pipeline.settings import Settings
from pipeline.store.tables import PipelineRun, ProbeRow, ProbeShardRow, make_engine
from tests.conftest import REPO, WriteEntry, make_entry
from tests.fake_internet import FakeServer, self_signed_context, serving_in_thread
from tests.postgres_server import scratch_database
from tests.prefect_server import (
    PREFECT,
    get_json,
    post_json,
    prefect,
    running_prefect_server,
    stop,
)

pytestmark = pytest.mark.prefect

HOSTS = [f"127.0.0.{number}" for number in range(41, 49)]
PATHS = ("/ok", "/", "/slow")  # three targets per host
SHARDS = 4
MACHINES = ("machine-a", "machine-b")
DEPLOYMENT = "probe-shard/probe-shard"
AUTOMATIONS = REPO / "deploy" / "prefect" / "automations.yaml"
UNUSED_HOOK = "http://127.0.0.1:9/hook"  # the missed-night alert fires too; nobody listens


@contextmanager
def worker(env: dict[str, str], folder: Path, name: str) -> Iterator[subprocess.Popen[bytes]]:
    """`prefect worker start` in a folder and Prefect home of its own (its log there too),
    taking at most two flow runs at once; in a process group of its own with the flow runs it
    starts, so a test can make its whole machine vanish."""
    folder.mkdir()
    log_path = folder / "worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "apidir", "--name", name, "--limit", "2"],
            cwd=folder, env={**env, "PREFECT_HOME": str(folder / "prefect")},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield process
        finally:
            stop(process)


def wait_online(api: str, machines: dict[str, subprocess.Popen[bytes]], folder: Path) -> None:
    """Wait until every worker has told the pool it is online: a worker that starts late
    (Prefect's cold import on a busy machine) would otherwise leave every shard to the other
    one. A worker that dies on the way fails the test with its log's end."""
    deadline = time.monotonic() + 120
    while True:
        online = {worker["name"] for worker in
                  post_json(f"{api}/work_pools/apidir/workers/filter", {})
                  if worker["status"] == "ONLINE"}
        if online >= machines.keys():
            return
        for name, process in machines.items():
            if process.poll() is not None:
                log = (folder / name / "worker.log").read_text(errors="replace")
                raise RuntimeError(f"worker {name} ended: {log[-2000:]}")
        assert time.monotonic() < deadline, f"workers online after 120 s: {sorted(online)}"
        time.sleep(0.5)


def vanish(process: subprocess.Popen[bytes], folder: Path) -> None:
    """Kill a stand-in machine at once: its worker and every process started from its Prefect
    home (the worker runs each flow run in a process group of its own), none of them told."""
    home = f"PREFECT_HOME={folder / 'prefect'}".encode()
    doomed = {process.pid}
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and home in (entry / "environ").read_bytes().split(b"\0"):
                doomed.add(int(entry.name))
        except OSError:
            continue  # gone already, or not ours to read
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def workers_of(api: str, flow_run_ids: set[str]) -> dict[str, str]:
    """Which worker took each flow run, from the workers' own events on the server (which
    stores events a moment after they are sent)."""
    found: dict[str, str] = {}
    deadline = time.monotonic() + 60
    while not flow_run_ids <= found.keys() and time.monotonic() < deadline:
        time.sleep(1)
        page = post_json(f"{api}/events/filter", {
            "filter": {"event": {"name": ["prefect.worker.submitted-flow-run"]},
                       "occurred": {"since": "2000-01-01T00:00:00Z"}},
            "limit": 50})
        for event in page["events"]:
            for related in event["related"]:
                if related["prefect.resource.role"] == "flow-run":
                    run = related["prefect.resource.id"].removeprefix("prefect.flow-run.")
                    found[run] = event["resource"]["prefect.resource.name"]
    return found


def flow_runs(api: str, ids: list[str]) -> list[dict]:
    return post_json(f"{api}/flow_runs/filter", {"flow_runs": {"id": {"any_": ids}}})


def snapshot(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def report_figures(api: str, wall: float, runs: list[dict], shards: list[ProbeShardRow],
                   by_worker: Counter[str]) -> None:
    """Print what the run cost (docs/scaling.md quotes it; never asserted): per shard flow
    run, its wait for a worker to take it (scheduled to pending), the start of its process
    (pending to running: a new Python process imports Prefect and the pipeline), its run, and
    within that its own probing and storing."""
    def at(moment: str) -> datetime:
        return datetime.fromisoformat(moment)

    spans: dict[str, list[float]] = {"taken": [], "started": [], "ran": []}
    for run in runs:
        states = {state["type"]: at(state["timestamp"])
                  for state in get_json(f"{api}/flow_run_states/?flow_run_id={run['id']}")}
        spans["taken"].append((states["PENDING"] - at(run["expected_start_time"])).total_seconds())
        spans["started"].append((at(run["start_time"]) - states["PENDING"]).total_seconds())
        spans["ran"].append((at(run["end_time"]) - at(run["start_time"])).total_seconds())
    spans["probed and stored"] = [shard.seconds for shard in shards]
    figures = ", ".join(f"{name} {min(values):.1f}-{max(values):.1f} s"
                        for name, values in spans.items())
    print(f"\nnightly with {SHARDS} shards on workers {dict(by_worker)}: {wall:.1f} s wall; "
          f"per shard flow run: {figures}")


async def test_shards_run_on_two_workers_and_a_failed_shard_fails_the_night(
    postgres_server: str, write_entry: WriteEntry, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with ExitStack() as stack:
        (tmp_path / "tls").mkdir()
        context = self_signed_context(tmp_path / "tls", HOSTS)
        internet = stack.enter_context(serving_in_thread(FakeServer(hosts=HOSTS,
                                                                    ssl_context=context)))
        database_url = stack.enter_context(scratch_database(postgres_server))
        settings = {
            "APIDIR_DATABASE_URL": database_url, "APIDIR_BASE_URL": "https://directory.test",
            "APIDIR_PROBE_ALLOW_PRIVATE": "true", "APIDIR_PROBE_PER_HOST": "1",
            "APIDIR_PROBE_INTERVAL": "0.1", "APIDIR_PROBE_ATTEMPTS": "1",
            "APIDIR_STAGE_RETRIES": "1", "APIDIR_RETRY_DELAY": "0",
            "SSL_CERT_FILE": str(tmp_path / "tls" / "cert.pem"),  # the hosts' certificate
        }
        server = stack.enter_context(running_prefect_server(tmp_path / "prefect-server"))
        api = server["PREFECT_API_URL"]
        prefect(server, "work-pool", "create", "apidir", "--type", "process")
        prefect(server, "--no-prompt", "deploy", "--name", "probe-shard")
        machines = {name: stack.enter_context(worker(
            {**server, **settings, "PREFECT_WORKER_QUERY_SECONDS": "1",
             "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"},  # Prefect's shortest
            tmp_path / name, name)) for name in MACHINES}
        wait_online(api, machines, tmp_path)

        def write_hosts(paths: tuple[str, ...], description: str) -> None:
            """One entry per host, with a GET endpoint per path."""
            for index, host in enumerate(HOSTS):
                base = f"https://{host}:{internet.port}"
                write_entry(make_entry(
                    id=f"worked-{index}", baseUrl=base,
                    sampleRequest=f'curl "{base}{paths[0]}"',
                    endpoints=[{"method": "GET", "path": path, "description": description}
                               for path in paths]))

        write_hosts(PATHS, "Probed.")
        nightly_env = {**settings, "APIDIR_DATA_DIR": str(data_dir),
                       "APIDIR_OUTPUT_DIR": str(tmp_path / "public"),
                       "APIDIR_PROBE_SHARDS": str(SHARDS),
                       "APIDIR_PROBE_DEPLOYMENT": DEPLOYMENT}
        for key, value in nightly_env.items():
            monkeypatch.setenv(key, value)

        with temporary_settings(updates={PREFECT_API_URL: api}):
            started = time.monotonic()
            first = await nightly()
            wall = time.monotonic() - started

        # every target probed once, by four shards that two workers took between them
        engine = make_engine(database_url)
        with Session(engine) as session:
            run = session.get(PipelineRun, first["run"])
            rows = session.exec(select(ProbeRow).where(ProbeRow.run_id == run.id)).all()
            shards = session.exec(select(ProbeShardRow).where(ProbeShardRow.run_id == run.id)
                                  .order_by(ProbeShardRow.shard)).all()
        targets = {(f"worked-{i}", f"https://{host}:{internet.port}{path}"): 1
                   for i, host in enumerate(HOSTS) for path in PATHS}
        assert Counter((row.entry_id, row.url) for row in rows) == targets
        assert Counter((r.local, r.path) for r in internet.requests) == {
            (host, path): 1 for host in HOSTS for path in PATHS}
        assert run.state == "completed" and run.probes == len(targets) == 24
        assert run.probes_failed == 0 and not run.network_suspect
        assert [shard.shard for shard in shards] == list(range(SHARDS))
        assert all(shard.finished_at and shard.outcomes == {"live": 6} for shard in shards)
        assert os.getpid() not in {shard.pid for shard in shards}
        taken_by = workers_of(api, {shard.flow_run_id for shard in shards})
        by_worker = Counter(taken_by[shard.flow_run_id] for shard in shards)
        assert set(by_worker) == set(MACHINES), by_worker
        published = json.loads((tmp_path / "public" / "api" / "apis.json").read_text())
        assert {e["id"]: e["status"]["state"] for e in published["apis"]} == {
            f"worked-{i}": "live" for i in range(len(HOSTS))}
        # the shards' flow runs: of the deployment, subflows of the night, started by workers
        runs = flow_runs(api, [shard.flow_run_id for shard in shards])
        assert sorted(r["name"] for r in runs) == [f"probe-shard-{i}" for i in range(SHARDS)]
        assert all(r["state_type"] == "COMPLETED" and r["parent_task_run_id"] for r in runs)
        assert {r["parameters"]["run_id"] for r in runs} == {run.id}
        report_figures(api, wall, runs, shards, by_worker)

        # the store's runs are gone (a new store, a backup from before them): its run ids start
        # again, and the night's shards are new flow runs, not the first night's of that id.
        # The night is its own process, as an operator's `apidir run` is (Prefect's client
        # keeps its concurrency service for the life of a process).
        with engine.begin() as connection:
            connection.execute(text("TRUNCATE pipeline_run RESTART IDENTITY CASCADE"))
        done = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "pipeline.cli", "run"], cwd=REPO,
            env={**os.environ, "PREFECT_API_URL": api, "PYTHONPATH": str(REPO)},
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        with Session(engine) as session:
            again = {"run": session.exec(select(PipelineRun.id)).one()}
            rerun = session.get(PipelineRun, again["run"])
            rerun_shards = session.exec(select(ProbeShardRow)
                                        .where(ProbeShardRow.run_id == rerun.id)).all()
        assert again["run"] == first["run"] and rerun.state == "completed", rerun.message
        assert rerun.probes == len(targets)
        assert not {s.flow_run_id for s in rerun_shards} & {s.flow_run_id for s in shards}

        # the next night, the store refuses the probes of one host: its shard fails twice
        failing = next(shard.shard for shard in shards
                       if any(url.startswith(f"https://{HOSTS[0]}:") for url, *_ in shard.targets))
        with engine.begin() as connection:
            connection.execute(text(
                "ALTER TABLE probe ADD CONSTRAINT refuse_one_host "
                f"CHECK (url NOT LIKE 'https://{HOSTS[0]}:%') NOT VALID"))  # new rows only
        before = snapshot(tmp_path / "public")
        with temporary_settings(updates={PREFECT_API_URL: api}), \
                pytest.raises(StageFailed) as failure:
            await nightly()
        message = str(failure.value)
        assert "\n" not in message and len(message) < 800, message
        assert message.startswith(f"probe stage failed: ShardsFailedError: probe shards "
                                  f"[{failing}] of {SHARDS} failed; shard {failing}: "), message
        assert f"flow run probe-shard-{failing} ended Failed after 2 attempts" in message
        assert "refuse_one_host" in message
        assert snapshot(tmp_path / "public") == before  # nothing published
        with Session(engine) as session:
            second = session.exec(select(PipelineRun).order_by(PipelineRun.id.desc())).first()
            stored = session.exec(select(ProbeRow).where(ProbeRow.run_id == second.id)).all()
        assert second.state == "failed" and second.message == message
        # the other shards' probes are kept and counted; the failed shard stored none
        assert len(stored) == second.probes == len(targets) - 6
        assert not any(row.url.startswith(f"https://{HOSTS[0]}:") for row in stored)

        # a night stopped by its time limit while the shards probe: it cancels them
        with engine.begin() as connection:
            connection.execute(text("ALTER TABLE probe DROP CONSTRAINT refuse_one_host"))
        write_hosts(tuple(f"/slow?d=120&n={n}" for n in range(4)), "Answers after two minutes.")
        with temporary_settings(updates={PREFECT_API_URL: api}), pytest.raises(TimeoutError):
            await nightly.with_options(timeout_seconds=25)()
        with Session(engine) as session:
            third = session.exec(select(PipelineRun).order_by(PipelineRun.id.desc())).first()
        assert third.id > second.id and third.state == "failed"
        shard_runs = [run for run in post_json(f"{api}/flow_runs/filter", {})
                      if run["name"].startswith("probe-shard-")
                      and run["parameters"].get("run_id") == third.id]
        assert len(shard_runs) == SHARDS
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            states = {run["state_type"] for run in
                      flow_runs(api, [run["id"] for run in shard_runs])}
            if states <= {"CANCELLED"}:
                break
            time.sleep(1)
        assert states == {"CANCELLED"}, states

        # a worker machine dies mid-shard: with the zombie automation applied (its window made
        # short), Prefect marks that machine's shards Crashed and the night fails naming them
        with temporary_settings(updates={PREFECT_API_URL: api}):
            await apply_automations(AUTOMATIONS, Settings(alert_webhook_url=UNUSED_HOOK),
                                    within=90)  # three heartbeats, Prefect's own advice
            night = asyncio.create_task(nightly.with_options(timeout_seconds=400)())
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                await asyncio.sleep(1)
                with Session(engine) as session:
                    fourth = session.exec(select(PipelineRun)
                                          .order_by(PipelineRun.id.desc())).first()
                running = [run for run in post_json(f"{api}/flow_runs/filter", {})
                           if run["name"].startswith("probe-shard-")
                           and run["parameters"].get("run_id") == fourth.id
                           and run["state_type"] == "RUNNING"]
                if len(running) == SHARDS:
                    break
            assert len(running) == SHARDS
            taken = await asyncio.to_thread(workers_of, api, {r["id"] for r in running})
            on_a = {run_id for run_id, name in taken.items() if name == MACHINES[0]}
            vanish(machines[MACHINES[0]], tmp_path / MACHINES[0])
            with pytest.raises(StageFailed) as failure:
                await night
        message = str(failure.value)
        crashed = sorted(int(r["name"].removeprefix("probe-shard-")) for r in running
                         if r["id"] in on_a)
        ended = [(r["name"], taken.get(r["id"]), r["state_type"], r["state"]["message"])
                 for r in flow_runs(api, [r["id"] for r in running])]  # what each shard came to
        assert crashed and message.startswith(
            f"probe stage failed: ShardsFailedError: probe shards {crashed} of {SHARDS} "
            "failed"), (message, ended)
        assert "ended Crashed" in message and "no heartbeat for 90 s" in message, message
        engine.dispose()
        with temporary_settings(updates={PREFECT_API_URL: api}):
            await APILogHandler.aflush()  # the runs' last logs reach the server before it stops
