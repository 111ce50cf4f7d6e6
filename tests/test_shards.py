"""Sharded probing: targets split by host, shards probed in other processes as Prefect tasks,
every shard writing into the same store (SQLite and PostgreSQL), politeness held per host."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort
from prefect.settings import PREFECT_API_URL, temporary_settings
from sqlalchemy import Connection, event
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, select

from flows.nightly import nightly
from flows.probe_shards import probe_in_shards
from pipeline.catalogue.entries import read_catalog
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.operations.runs import StageFailed
from pipeline.operations.shard_runs import ShardDeploymentError, start_shard_runs
from pipeline.operations.stages import (
    ShardReport,
    ShardRunFailed,
    ShardsFailedError,
    close_shards,
    probe_entries,
    probe_stored_shard,
    store_shard_plan,
    stored_shard_outcomes,
)
from pipeline.probing.probe import ProbeSettings, ProbeTarget, host_politeness, target_host
from pipeline.probing.shards import Shard, host_groups, split_by_host
from pipeline.processes import process_alive
from pipeline.settings import Settings
from pipeline.store.history import redirect_links
from pipeline.store.shards import ShardPlanError, load_shard, save_shards
from pipeline.store.tables import (
    PipelineRun,
    ProbeRow,
    ProbeShardRow,
    engine_for,
    make_engine,
    session_scope,
    start_run,
)
from tests.conftest import REPO, WriteEntry, hold_the_write_lock, make_entry
from tests.fake_internet import FakeServer, self_signed_context, serving_in_thread

HOSTS = [f"127.0.0.{number}" for number in range(11, 19)]
PATHS = ("/ok", "/", "/slow")  # three targets per host; /slow answers after 0.3 s
INTERVAL = 0.3


def targets(spec: dict[str, int]) -> list[ProbeTarget]:
    """`count` targets on each host, interleaved across hosts as a catalogue would list them."""
    rows = [[ProbeTarget(f"https://{host}/p{n}") for n in range(count)]
            for host, count in spec.items()]
    return [t for group in itertools.zip_longest(*rows) for t in group if t is not None]


def test_every_target_lands_in_exactly_one_shard_with_all_of_its_host() -> None:
    given = targets({"a.example": 7, "b.example": 5, "c.example": 4, "d.example": 3,
                     "e.example": 1, "f.example": 1})
    shards = split_by_host(given, 3)
    assert [shard.index for shard in shards] == [0, 1, 2]
    assert Counter(t for shard in shards for t in shard.targets) == Counter(given)
    for first, second in itertools.combinations(shards, 2):
        assert not first.hosts & second.hosts
    # within a shard, targets keep the order they were given in
    for shard in shards:
        assert list(shard.targets) == [t for t in given if t in set(shard.targets)]


def test_hosts_are_dealt_largest_first_to_the_lightest_shard() -> None:
    shards = split_by_host(targets({"a.example": 7, "b.example": 5, "c.example": 4,
                                    "d.example": 3, "e.example": 1, "f.example": 1}), 3)
    assert [sorted(shard.hosts) for shard in shards] == [
        ["a.example"], ["b.example", "e.example", "f.example"], ["c.example", "d.example"]]
    assert [len(shard.targets) for shard in shards] == [7, 7, 7]


def test_host_names_are_compared_without_case_and_credentials() -> None:
    given = [ProbeTarget("https://API.example.com/a"), ProbeTarget("https://u:p@api.example.com/b"),
             ProbeTarget("https://other.example/c"), ProbeTarget("not a url at all")]
    shards = split_by_host(given, 4)
    assert [sorted(shard.hosts) for shard in shards] == [["api.example.com"], [""],
                                                         ["other.example"]]
    assert len(shards[0].targets) == 2


def test_fewer_hosts_than_shards_gives_one_shard_per_host_and_the_split_is_stable() -> None:
    given = targets({"a.example": 2, "b.example": 2})
    assert len(split_by_host(given, 8)) == 2
    assert [shard.hosts for shard in split_by_host(given, 8)] == [
        shard.hosts for shard in split_by_host(list(reversed(given)), 8)]
    assert split_by_host([], 3) == []
    assert split_by_host(given, 1)[0].targets == tuple(given)
    with pytest.raises(ValueError, match="at least 1"):
        split_by_host(given, 0)


def test_hosts_a_redirect_linked_are_dealt_to_one_shard() -> None:
    """A redirect seen before joins its two hosts: a source's shard is dealt the host it was
    sent to, also when that host has no targets, and hosts sent to one host are joined."""
    given = targets({"a.example": 3, "b.example": 3, "c.example": 3, "d.example": 3})
    links = [("a.example", "b.example"), ("c.example", "login.example"),
             ("d.example", "login.example"), ("elsewhere.example", "a.example"),
             ("b.example", "b.example")]
    shards = split_by_host(given, 4, links)
    assert [sorted(shard.hosts) for shard in shards] == [
        ["a.example", "b.example"], ["c.example", "d.example", "login.example"]]
    assert [shard.linked for shard in shards] == [frozenset(), {"login.example"}]
    assert [shard.of for shard in shards] == [2, 2]
    assert Counter(t for shard in shards for t in shard.targets) == Counter(given)
    unlinked = split_by_host(given, 4)
    assert [len(shard.hosts) for shard in unlinked] == [1, 1, 1, 1]
    assert {shard.of for shard in unlinked} == {4} and not any(s.linked for s in unlinked)
    assert host_groups(["a", "b", "c"], [("c", "z"), ("b", "z"), ("z", "a"), ("q", "a")]) == {
        "a": "a", "b": "b", "c": "b", "z": "b"}
    assert host_groups(["a", "b"], [("z", "a"), ("a", "z"), ("z", "b")]) == {
        "a": "a", "b": "b", "z": "a"}


def test_a_host_other_shards_may_probe_gets_a_share_of_its_politeness() -> None:
    """A host the shard was not dealt (a new redirect's) may be probed by every shard: each
    keeps `sharing` times the interval and a `sharing`th of the concurrency, at least one."""
    own = ProbeSettings(per_host_concurrency=2, per_host_interval=0.5)
    shared = replace(own, own_hosts=frozenset({"a.example"}), sharing=3)
    assert host_politeness(own, "x.example") == (2, 0.5)
    assert host_politeness(replace(own, sharing=3), "x.example") == (2, 0.5)  # all its own
    assert host_politeness(shared, "a.example") == (2, 0.5)
    assert host_politeness(shared, "x.example") == (1, 1.5)
    assert host_politeness(replace(shared, per_host_concurrency=8), "x.example") == (2, 1.5)
    assert host_politeness(replace(shared, per_host_concurrency=0), "x.example") == (0, 1.5)
    assert host_politeness(replace(shared, sharing=1), "x.example") == (2, 0.5)


def test_the_host_key_is_the_one_the_prober_spaces_requests_by() -> None:
    assert target_host("https://Api.Example.COM:8443/v1?q=1") == "api.example.com"
    assert target_host("https://[::1]:9/x") == "::1"


@pytest_asyncio.fixture(loop_scope="function")
async def hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeServer]:
    """One HTTPS server on eight loopback addresses; probing processes trust its certificate."""
    folder = tmp_path / "tls"
    folder.mkdir()
    context = self_signed_context(folder, HOSTS)
    monkeypatch.setenv("SSL_CERT_FILE", str(folder / "cert.pem"))  # read by spawned processes
    server = await FakeServer(hosts=HOSTS, ssl_context=context).start()
    yield server
    await server.close()


def write_entries(write_entry: WriteEntry, server: FakeServer) -> None:
    for index, host in enumerate(HOSTS):
        base = f"https://{host}:{server.port}"
        write_entry(make_entry(
            id=f"sharded-{index}", baseUrl=base, sampleRequest=f'curl "{base}/ok"',
            endpoints=[{"method": "GET", "path": path, "description": "Probed."}
                       for path in PATHS]))


def shard_env(monkeypatch: pytest.MonkeyPatch, shards: int) -> None:
    for name, value in {"PROBE_SHARDS": shards, "PROBE_WORKERS": shards,
                        "PROBE_ALLOW_PRIVATE": "true", "PROBE_PER_HOST": 1,
                        "PROBE_INTERVAL": INTERVAL, "PROBE_ATTEMPTS": 1}.items():
        monkeypatch.setenv(f"APIDIR_{name}", str(value))


def assert_polite(server: FakeServer) -> None:
    """Every host got its three requests one at a time, spaced by about the interval (starts
    are spaced exactly; arrivals move by each connection's handshake on a loaded machine)."""
    for host in HOSTS:
        arrivals = sorted(server.arrivals(local=host))
        assert len(arrivals) == len(PATHS), host
        gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        assert min(gaps) >= INTERVAL / 2, (host, gaps)
        assert server.max_active[host] == 1, host


@pytest.mark.prefect
async def test_shards_run_as_prefect_tasks_in_other_processes_into_one_store(
    prefect_backend: None, hosts: FakeServer, write_entry: WriteEntry, data_dir: Path,
    settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_entries(write_entry, hosts)
    shard_env(monkeypatch, 3)
    settings = Settings()
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        ingest_catalog(session, read_catalog([settings.entries_dir], settings.entries_dir))
        run_id = start_run(session, "nightly").id

    reports: list[ShardReport] = await probe_in_shards(run_id)

    assert sorted(report.index for report in reports) == [0, 1, 2]
    assert all(report.process_id != os.getpid() for report in reports)
    assert len({report.process_id for report in reports}) >= 2  # spread over processes
    for first, second in itertools.combinations(reports, 2):
        assert not first.hosts & second.hosts
    assert set().union(*(report.hosts for report in reports)) == set(HOSTS)
    assert_polite(hosts)
    with Session(engine) as session:
        run = session.get(PipelineRun, run_id)
        rows = session.exec(select(ProbeRow).where(ProbeRow.run_id == run_id)).all()
    assert run.probes == len(rows) == len(HOSTS) * len(PATHS)
    assert run.probes_failed == 0 and not run.network_suspect
    assert {(row.outcome, row.http_status) for row in rows} == {("live", 200)}
    assert Counter(row.entry_id for row in rows) == {
        f"sharded-{index}": len(PATHS) for index in range(len(HOSTS))}


@pytest.mark.prefect
async def test_nightly_with_shards_publishes_every_entry_live(
    prefect_backend: None, hosts: FakeServer, write_entry: WriteEntry,
    settings_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    write_entries(write_entry, hosts)
    shard_env(monkeypatch, 2)
    state = await nightly(return_state=True)
    result = await state.aresult()
    published = json.loads((tmp_path / "public" / "api" / "apis.json").read_text())
    assert {api["id"]: api["status"]["state"] for api in published["apis"]} == {
        f"sharded-{index}": "live" for index in range(len(HOSTS))}
    assert_polite(hosts)
    with Session(engine_for(settings_env["APIDIR_DATABASE_URL"])) as session:
        run = session.get(PipelineRun, result["run"])
    assert run.state == "completed" and run.probes == len(HOSTS) * len(PATHS)
    async with get_client() as client:
        children = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(
                any_=[state.state_details.flow_run_id])), sort=FlowRunSort.ID_DESC, limit=10)
        # the probe stage ran as the probe-shards subflow, with one task run per shard
        assert len(children) == 1
        task_runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[children[0].id])),
            sort=TaskRunSort.NAME_ASC, limit=10)
    assert [run.name for run in task_runs] == ["probe-shard-0", "probe-shard-1"]
    assert {run.state.type.value for run in task_runs} == {"COMPLETED"}


class ShardKiller:
    """Kills with SIGKILL, as the kernel's out-of-memory killer would, the process of the
    latest run's shard that probes `host`, once its request has reached the host (`reached`
    counts them) and every other shard has stored its probes; at most `times` processes, each
    once. Until then the host's requests hang (its route waits on `hanging`), so the shard is
    caught in the middle of probing."""

    def __init__(self, database_url: str, host: str, times: int,
                 reached: Callable[[], int]) -> None:
        self.engine, self.host, self.times = engine_for(database_url), host, times
        self.reached, self.before = reached, reached()
        self.killed: list[int] = []
        self.hanging, self.stop = threading.Event(), threading.Event()
        self.hanging.set()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ShardKiller:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.hanging.clear()
        self.thread.join()

    def _watch(self) -> None:
        while not self.stop.wait(0.1) and len(self.killed) < self.times:
            with Session(self.engine) as session:
                rows = session.exec(select(ProbeShardRow)).all()
            latest = [row for row in rows if row.run_id == max(r.run_id for r in rows)]
            doomed = [row for row in latest if any(f"//{self.host}:" in url
                                                   for url, *_ in row.targets)]
            if not doomed or not all(row.finished_at for row in latest if row not in doomed):
                continue
            if self.reached() - self.before <= len(self.killed):  # its request not there yet
                continue
            pid = doomed[0].pid
            if pid and pid != os.getpid() and doomed[0].finished_at is None \
                    and pid not in self.killed:
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
        if len(self.killed) == self.times:
            self.hanging.clear()


@pytest.mark.prefect
async def test_a_shard_whose_process_is_killed_is_run_again_and_the_others_kept(
    prefect_backend: None, hosts: FakeServer, write_entry: WriteEntry,
    settings_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard's process killed outright breaks Prefect's process pool under every shard: the
    shard is run once more in a fresh process; one that stored its probes keeps them."""
    doomed, healthy = HOSTS[:2]
    for name, host, path in (("doomed", doomed, "/hang"), ("healthy", healthy, "/ok")):
        base = f"https://{host}:{hosts.port}"
        write_entry(make_entry(id=name, baseUrl=base, sampleRequest=f'curl "{base}{path}"',
                               endpoints=[{"method": "GET", "path": path,
                                           "description": "Probed."}]))
    shard_env(monkeypatch, 2)
    monkeypatch.setenv("APIDIR_PROBE_TIMEOUT", "300")
    database = settings_env["APIDIR_DATABASE_URL"]

    def requests_to(host: str) -> int:
        return sum(1 for request in hosts.requests if request.local == host)

    # the doomed shard's process is killed once: its second process probes it, and the night
    # goes on with the other shard's probes as it stored them
    with ShardKiller(database, doomed, times=1, reached=lambda: requests_to(doomed)) as killer:
        async def hang(_request: object) -> web.StreamResponse:
            while killer.hanging.is_set():
                await asyncio.sleep(0.05)
            return web.Response(text="ok")

        hosts.routes["/hang"] = hang
        result = await nightly()
    assert len(killer.killed) == 1
    published = json.loads((tmp_path / "public" / "api" / "apis.json").read_text())
    assert {api["id"]: api["status"]["state"] for api in published["apis"]} == {
        "doomed": "live", "healthy": "live"}
    assert (requests_to(doomed), requests_to(healthy)) == (2, 1)  # the healthy one probed once
    with Session(engine_for(database)) as session:
        run = session.get(PipelineRun, result["run"])
    assert run.state == "completed" and run.probes == 2

    # killed on both attempts: the night fails naming that shard, the other's probes kept
    before = (tmp_path / "public" / "api" / "apis.json").read_bytes()
    with ShardKiller(database, doomed, times=2, reached=lambda: requests_to(doomed)) as killer, \
            pytest.raises(StageFailed) as failed:
        await nightly()  # the host's route waits on this killer's `hanging` now
    assert len(killer.killed) == 2
    with Session(engine_for(database)) as session:
        run = session.exec(select(PipelineRun).order_by(PipelineRun.id.desc())).first()
        shard = next(row.shard for row in session.exec(select(ProbeShardRow).where(
            ProbeShardRow.run_id == run.id)) if f"//{doomed}:" in row.targets[0][0])
    message = str(failed.value)
    assert message == (
        f"probe stage failed: ShardsFailedError: probe shards [{shard}] of 2 failed; shard "
        f"{shard}: ShardProcessDied: its process ended abruptly (killed, or out of memory) on "
        "each of its 2 attempts"), message
    assert run.state == "failed" and run.message == message and run.probes == 1
    assert requests_to(healthy) == 2  # once a night
    assert (tmp_path / "public" / "api" / "apis.json").read_bytes() == before


async def test_a_stored_shard_stores_its_probes_once(
    hosts: FakeServer, write_entry: WriteEntry, settings_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shards that run on workers read their targets from the store and write their probes
    and counts back once: run again after it stored (a retry, a second run of it) a shard
    neither probes nor stores again, and two runs of it at once store one set of rows."""
    write_entries(write_entry, hosts)
    shard_env(monkeypatch, 3)
    settings = Settings()
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        ingest_catalog(session, read_catalog([settings.entries_dir], settings.entries_dir))
        run_id = start_run(session, "nightly").id
    shards = store_shard_plan(settings, run_id)
    assert [shard.index for shard in shards] == [0, 1, 2]

    first = await probe_stored_shard(settings, run_id, 0)
    probed = len(hosts.requests)
    again = await probe_stored_shard(settings, run_id, 0)
    assert len(hosts.requests) == probed == len(shards[0].targets)
    assert again == first and first.hosts == shards[0].hosts
    both = await asyncio.gather(*(probe_stored_shard(settings, run_id, 1) for _ in range(2)))
    assert both[0] == both[1]
    assert len(hosts.requests) == probed + 2 * len(shards[1].targets)  # both probed; one stored

    with Session(engine) as session:
        urls = session.exec(select(ProbeRow.url).where(ProbeRow.run_id == run_id)).all()
        row = session.get(ProbeShardRow, (run_id, 1))
    assert Counter(urls) == {t.url: 1 for shard in shards[:2] for t in shard.targets}
    assert row.finished_at and row.pid == os.getpid()
    assert row.cpu_seconds == both[0].cpu_seconds and row.cpu_seconds > 0  # the process's own
    assert first.summary().startswith(
        f"{len(shards[0].targets)} URLs of {len(shards[0].hosts)} hosts in ")
    assert f" s ({first.cpu_seconds:.1f} s of CPU): {{'live': " in first.summary()
    assert row.outcomes == {"live": len(shards[1].targets)}

    outcomes = stored_shard_outcomes(settings, run_id, shards,
                                     {2: "flow run probe-shard-2 ended Crashed after 1 attempt"})
    assert outcomes[:2] == [first, both[0]] and isinstance(outcomes[2], ShardRunFailed)
    with pytest.raises(ShardsFailedError, match=r"^probe shards \[2\] of 3 failed; shard 2: "
                       r"ShardRunFailed: flow run probe-shard-2 ended Crashed after 1 attempt$"):
        close_shards(settings, run_id, shards, outcomes)
    with Session(engine) as session:
        assert session.get(PipelineRun, run_id).probes == len(urls)  # counted all the same



def store_with_a_short_wait(
    hosts: FakeServer, write_entry: WriteEntry, data_dir: Path, database: Path,
    monkeypatch: pytest.MonkeyPatch, shards: int, wait: float, retries: int, delay: float,
) -> tuple[Settings, int]:
    """Settings on a SQLite store at `database` whose writes wait `wait` seconds for another
    writer, with the stage's `retries` and `delay`; the store ingested an entry a host of
    `hosts`, and a run opened (its id)."""
    for name, value in {"DATA_DIR": data_dir, "DATABASE_URL": f"sqlite:///{database}?timeout={wait}",
                        "OUTPUT_DIR": database.parent.parent / "public",
                        "STAGE_RETRIES": retries, "RETRY_DELAY": delay}.items():
        monkeypatch.setenv(f"APIDIR_{name}", str(value))
    write_entries(write_entry, hosts)
    shard_env(monkeypatch, shards)
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        ingest_catalog(session, read_catalog([settings.entries_dir], settings.entries_dir))
        return settings, start_run(session, "nightly").id


async def probed_with_the_store_held(probing: Awaitable[object], database: Path,
                                     hosts: FakeServer, requests: int) -> None:
    """Await `probing` while another writer holds the store's write lock from the first
    request `hosts` gets until 3 s after its `requests`-th."""
    holder = threading.Thread(target=hold_the_write_lock, args=(database, 3.0), kwargs={
        "start": lambda: bool(hosts.requests), "end": lambda: len(hosts.requests) >= requests})
    holder.start()
    try:
        await probing
    finally:
        holder.join()


@pytest.mark.parametrize("prober", ["shard", "run"])
async def test_probes_the_store_refuses_at_first_are_stored_again_not_probed_again(
    prober: str, hosts: FakeServer, write_entry: WriteEntry, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The store is busy past its wait (another writer's long commit) when a shard, or the
    run probing in one process, has its probes: their commit is tried again after the stage's
    retry delay, and no host is asked again (a failed stage would probe them all again)."""
    database = tmp_path / "var" / "apidir.db"
    settings, run_id = store_with_a_short_wait(
        hosts, write_entry, data_dir, database, monkeypatch,
        shards=3 if prober == "shard" else 1, wait=0.2, retries=4, delay=0.5)
    if prober == "shard":
        requests = len(store_shard_plan(settings, run_id)[0].targets)
        probing = probe_stored_shard(settings, run_id, 0)
    else:
        requests = len(HOSTS) * len(PATHS)
        probing = probe_entries(settings, run_id)
    with caplog.at_level(logging.WARNING, logger="pipeline.operations.stages"):
        await probed_with_the_store_held(probing, database, hosts, requests)

    assert len(hosts.requests) == requests
    with session_scope(engine_for(settings.database_url)) as session:
        urls = session.exec(select(ProbeRow.url).where(ProbeRow.run_id == run_id)).all()
    assert len(urls) == len(set(urls)) == requests
    refused = [record.getMessage() for record in caplog.records
               if "storing them again in" in record.getMessage()]
    assert refused and all("without probing again" in message for message in refused)


async def test_probes_whose_commit_answer_is_lost_are_stored_once_and_not_probed_again(
    hosts: FakeServer, write_entry: WriteEntry, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The run probing in one process commits its probes, but the commit's answer is lost
    (the connection drops once the server committed): storing them again finds them stored
    and adds none. Run again whole (the stage's retry), the stage neither probes nor stores
    again, and says what the stored probes came to."""
    database = tmp_path / "var" / "apidir.db"
    settings, run_id = store_with_a_short_wait(hosts, write_entry, data_dir, database,
                                               monkeypatch, shards=1, wait=5, retries=2,
                                               delay=0.1)
    requests = len(HOSTS) * len(PATHS)
    engine = engine_for(settings.database_url)
    lost: list[int] = []

    def answer_lost(connection: Connection) -> None:
        """The database commits, and the answer never reaches the client."""
        if len(hosts.requests) >= requests and not lost:  # the commit of the probes
            connection.connection.dbapi_connection.commit()
            lost.append(len(hosts.requests))
            raise OperationalError("COMMIT", {}, ConnectionResetError(
                "server closed the connection unexpectedly"))

    event.listen(engine, "commit", answer_lost)
    try:
        with caplog.at_level(logging.WARNING, logger="pipeline.operations.stages"):
            first = await probe_entries(settings, run_id)
    finally:
        event.remove(engine, "commit", answer_lost)
    again = await probe_entries(settings, run_id)

    assert lost == [requests] and len(hosts.requests) == requests
    with session_scope(engine) as session:
        urls = session.exec(select(ProbeRow.url).where(ProbeRow.run_id == run_id)).all()
        run = session.get(PipelineRun, run_id)
    assert len(urls) == len(set(urls)) == requests == run.probes
    assert first == again and first.probes == requests and first.outcomes == {"live": requests}
    assert any("storing them again in" in record.getMessage() for record in caplog.records)


async def test_a_shard_whose_probes_the_store_keeps_refusing_fails_after_the_stage_retries(
    hosts: FakeServer, write_entry: WriteEntry, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """A store that refuses the commit past every retry fails the shard with the store's own
    error (for Prefect to retry it whole), having asked each host once and stored nothing."""
    database = tmp_path / "var" / "apidir.db"
    settings, run_id = store_with_a_short_wait(hosts, write_entry, data_dir, database,
                                               monkeypatch, shards=3, wait=0.1, retries=1,
                                               delay=0.1)
    requests = len(store_shard_plan(settings, run_id)[0].targets)
    with (caplog.at_level(logging.WARNING, logger="pipeline.operations.stages"),
          pytest.raises(OperationalError, match="database is locked")):
        await probed_with_the_store_held(probe_stored_shard(settings, run_id, 0), database,
                                         hosts, requests)

    assert len(hosts.requests) == requests
    refused = [record for record in caplog.records
               if "storing them again in" in record.getMessage()]
    assert len(refused) == 1  # one retry, then the store's error
    with session_scope(engine_for(settings.database_url)) as session:
        assert not session.exec(select(ProbeRow.url).where(ProbeRow.run_id == run_id)).all()

@pytest.mark.parametrize("wait", [30.0, 0.3])
async def test_a_shard_probes_at_once_while_another_writer_holds_the_store(
    wait: float, hosts: FakeServer, write_entry: WriteEntry, data_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Another writer (the night's rollup, storing a day's rows beside the probe stage) holds
    the store's write lock as a shard starts: the shard asks every host while the lock is held,
    rather than wait to note where it runs. The note follows once the lock is let go; a store
    still busy past its wait (`wait` 0.3 s) is told in one line, and the probes' commit records
    where and since when the shard ran all the same."""
    database = tmp_path / "var" / "apidir.db"
    settings, run_id = store_with_a_short_wait(hosts, write_entry, data_dir, database,
                                               monkeypatch, shards=3, wait=wait, retries=4,
                                               delay=0.5)
    requests = len(store_shard_plan(settings, run_id)[0].targets)
    taken, asked_while_held = threading.Event(), []
    gives_up = time.monotonic() + 15  # the code before waited for the lock before probing

    def held() -> None:
        hold_the_write_lock(database, 1.0, taken=taken, end=lambda: (
            len(hosts.requests) >= requests or time.monotonic() > gives_up))
        asked_while_held.append(len(hosts.requests))

    holder = threading.Thread(target=held)
    holder.start()
    assert taken.wait(10)
    try:
        with caplog.at_level(logging.WARNING, logger="pipeline.operations.stages"):
            report = await probe_stored_shard(settings, run_id, 0, "flow-run-of-shard-0")
    finally:
        holder.join()

    assert asked_while_held == [requests] and len(hosts.requests) == requests
    with session_scope(engine_for(settings.database_url)) as session:
        urls = session.exec(select(ProbeRow.url).where(ProbeRow.run_id == run_id)).all()
        row = session.get(ProbeShardRow, (run_id, 0))
        first_probe = min(session.exec(select(ProbeRow.checked_at)
                                       .where(ProbeRow.run_id == run_id)).all())
    assert len(urls) == len(set(urls)) == requests == report.tally.probes
    assert (row.pid, row.flow_run_id) == (os.getpid(), "flow-run-of-shard-0")
    assert row.started_at <= first_probe <= row.finished_at  # the shard's start, not the note's
    not_noted = [record.getMessage() for record in caplog.records
                 if "where it runs is not noted" in record.getMessage()]
    if wait > 1:
        assert not not_noted
    else:
        assert not_noted == [f"shard 0 of run {run_id}: where it runs is not noted until its "
                             "probes are stored (database is locked)"]


def test_the_plan_deals_hosts_the_latest_probes_were_redirected_between_together(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shards are planned with the redirects of the latest day of probes (an older one
    no longer counts), and a shard read back from the store keeps the hosts it was dealt
    beyond its targets' and how many shards the run has."""
    for index, host in enumerate(HOSTS):
        base = f"https://{host}"
        write_entry(make_entry(id=f"sharded-{index}", baseUrl=base,
                               sampleRequest=f'curl "{base}/ok"', endpoints=[]))
    shard_env(monkeypatch, 8)
    settings = Settings()
    engine = engine_for(settings.database_url)
    latest = datetime(2026, 11, 20, 3, 0, tzinfo=UTC)
    seen = [(0, f"https://{HOSTS[1]}/moved", latest, 1),  # .11 to .12
            (2, "https://login.example/", latest - timedelta(hours=20), 2),  # .13 and .14 to
            (3, "https://LOGIN.example:8443/x", latest, 1),  # one host of no entry
            (4, f"https://{HOSTS[5]}/", latest - timedelta(days=2), 1),  # before the latest day
            (6, f"https://{HOSTS[7]}/", latest, 0)]  # no redirect
    with session_scope(engine) as session:
        ingest_catalog(session, read_catalog([settings.entries_dir], settings.entries_dir))
        run_id = start_run(session, "nightly").id
        for index, final_url, at, redirects in seen:
            session.add(ProbeRow(run_id=run_id, entry_id=f"sharded-{index}", outcome="live",
                                 url=f"https://{HOSTS[index]}", checked_at=at,
                                 final_url=final_url, redirects=redirects))
    with session_scope(engine) as session:
        assert redirect_links(session) == [(HOSTS[0], HOSTS[1]), (HOSTS[2], "login.example"),
                                           (HOSTS[3], "login.example")]
    shards = store_shard_plan(settings, run_id)
    assert sorted(sorted(shard.hosts) for shard in shards) == sorted(
        [[HOSTS[0], HOSTS[1]], [HOSTS[2], HOSTS[3], "login.example"],
         *([host] for host in HOSTS[4:])])
    with session_scope(engine) as session:
        stored = [load_shard(session, run_id, shard.index)[0] for shard in shards]
    assert stored == shards and {shard.of for shard in stored} == {6}
    assert [shard.linked for shard in stored if shard.linked] == [{"login.example"}]


def test_a_missing_or_unreadable_stored_shard_is_named(database_url: str) -> None:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        run_id = start_run(session, "nightly").id
        save_shards(session, run_id, [Shard(0, (ProbeTarget("https://a.example/", "a", 1),))])
    with session_scope(engine) as session:
        assert load_shard(session, run_id, 0)[0].targets == (
            ProbeTarget("https://a.example/", "a", 1),)
        with pytest.raises(ShardPlanError, match=f"run {run_id} stored no probe shard 1$"):
            load_shard(session, run_id, 1)
        row = session.get(ProbeShardRow, (run_id, 0))
        row.targets = [["https://a.example/", "a"]]
        session.add(row)
    with session_scope(engine) as session, pytest.raises(
            ShardPlanError, match=f"probe shard 0 of run {run_id} has unreadable targets"):
        load_shard(session, run_id, 0)
    with session_scope(engine) as session:
        row = session.get(ProbeShardRow, (run_id, 0))
        row.targets, row.linked_hosts = [["https://a.example/", "a", 1]], [3]
        session.add(row)
    with session_scope(engine) as session, pytest.raises(
            ShardPlanError, match=f"probe shard 0 of run {run_id} has unreadable targets: not a "
                                  "host: 3$"):
        load_shard(session, run_id, 0)
    engine.dispose()


@pytest.mark.prefect
async def test_shards_on_workers_need_a_server_and_the_deployment(prefect_backend: None) -> None:
    with pytest.raises(ShardDeploymentError, match="no deployment probe-shard/probe-shard on "
                       r"the Prefect server at .*: run `prefect deploy --name probe-shard`"):
        await start_shard_runs("probe-shard/probe-shard", 1, "night", 2)
    with temporary_settings(restore_defaults={PREFECT_API_URL}), pytest.raises(
            ShardDeploymentError, match="needs a Prefect server whose workers run the shards"):
        await start_shard_runs("probe-shard/probe-shard", 1, "night", 2)


def test_a_sharded_night_over_its_time_limit_stops_its_shards_and_says_so(
    write_entry: WriteEntry, settings_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`apidir run` with shards in processes, stopped by APIDIR_RUN_TIMEOUT while its shards
    wait on hosts that answer after 100 s: the shards' processes are killed, so they store
    nothing under the failed run, and the command's one line names the setting."""
    (tmp_path / "tls").mkdir()
    context = self_signed_context(tmp_path / "tls", HOSTS[:2])
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "tls" / "cert.pem"))
    with serving_in_thread(FakeServer(hosts=HOSTS[:2], ssl_context=context)) as internet:
        for index, host in enumerate(HOSTS[:2]):
            base = f"https://{host}:{internet.port}"
            write_entry(make_entry(id=f"slow-{index}", baseUrl=base,
                                   sampleRequest=f'curl "{base}/slow?d=100"',
                                   endpoints=[{"method": "GET", "path": "/slow?d=100",
                                               "description": "Answers after 100 s."}]))
        shard_env(monkeypatch, 2)
        monkeypatch.setenv("APIDIR_PROBE_TIMEOUT", "300")
        monkeypatch.setenv("APIDIR_RUN_TIMEOUT", "30")
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run"], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
    told = [line for line in done.stderr.splitlines() if line.startswith("apidir:")]
    assert done.returncode == 2 and told == [
        "apidir: the run passed its time limit (APIDIR_RUN_TIMEOUT=30 s) and was stopped; "
        "nothing was published: the live release is unchanged"], done.stderr
    assert not (tmp_path / "public").exists()
    with Session(engine_for(settings_env["APIDIR_DATABASE_URL"])) as session:
        run = session.exec(select(PipelineRun)).one()
        shards = session.exec(select(ProbeShardRow)).all()
        probes = session.exec(select(ProbeRow)).all()
    assert run.state == "failed" and probes == [] and run.probes == 0
    assert len(shards) == 2 and not any(shard.finished_at for shard in shards)
    assert not any(shard.pid and process_alive(shard.pid) for shard in shards)
