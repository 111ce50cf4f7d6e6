"""Prefect-native operations on real flow runs: the webhook from a Prefect Secret block, domain
events a user can hang automations on, a network-suspect run that alerts, and a run over its
time limit that is failed and alerted instead of holding back the nights behind it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
import typer
from prefect import flow, task
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from sqlmodel import Session, select

from flows.nightly import RUN_TIMEOUT, nightly
from pipeline.operations.events import (
    ENTRY_STATE_CHANGED,
    RUN_ENTRIES_LEFT_OUT,
    RUN_FAILED,
    RUN_NETWORK_SUSPECT,
)
from pipeline.operations.runs import StageFailed, with_retries
from pipeline.release.publish import ReleaseNotRecorded
from pipeline.release.swap import PublishLockTimeout
from pipeline.settings import Settings
from pipeline.store.tables import PipelineRun, engine_for
from tests.conftest import REPO, WriteEntry, make_entry
from tests.webhook import WebhookReceiver

pytestmark = pytest.mark.prefect


@pytest.fixture
def quiet_env(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "false")
    monkeypatch.setenv("APIDIR_STAGE_RETRIES", "0")
    monkeypatch.delenv("APIDIR_ALERT_WEBHOOK_URL", raising=False)
    return settings_env


@pytest_asyncio.fixture(loop_scope="function")
async def receiver() -> AsyncIterator[WebhookReceiver]:
    hook = await WebhookReceiver().start()
    yield hook
    await hook.close()


async def events_named(prefix: str, since: datetime, timeout: float = 30) -> list[dict]:
    """The events the Prefect server stored whose name starts with `prefix`, that occurred
    from `since` on: the server is the session's, and run ids restart with each test's store
    (events are stored a moment after they are emitted)."""
    deadline = asyncio.get_running_loop().time() + timeout
    async with get_client() as client:
        while True:
            response = await client.request(
                "POST", "/events/filter",
                json={"filter": {"event": {"prefix": [prefix]}, "any_resource": None,
                                 "occurred": {"since": since.isoformat()}},
                      "limit": 50})
            found = response.json()["events"]
            if found or asyncio.get_running_loop().time() > deadline:
                return found
            await asyncio.sleep(0.5)


async def latest_summary() -> str:
    """The markdown of the last nightly run's summary artifact."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    async with get_client() as client:
        [summary] = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["nightly-summary"])),
            sort=ArtifactSort.CREATED_DESC, limit=1)
    return summary.data


async def test_the_webhook_comes_from_a_prefect_secret_block(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str], data_dir: Path,
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "apidir-test-webhook"
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_SECRET", name)
    await Secret(value=receiver.url).save(name, overwrite=True)
    try:
        write_entry()
        (data_dir / "entries").rename(data_dir / "gone")
        started = datetime.now(UTC)
        with pytest.raises(StageFailed, match="ingest stage failed"):
            await nightly()
    finally:
        async with get_client() as client:
            block = await client.read_block_document_by_name(name, "secret")
            await client.delete_block_document(block.id)
    assert receiver.events() == ["run_failed"]
    failed = await events_named(RUN_FAILED, started)
    assert failed and failed[0]["payload"]["flow"] == "nightly"
    assert "ingest stage failed" in failed[0]["payload"]["message"]


@pytest.mark.parametrize(("address", "said"), [
    ("ftp://hooks.example/T0KEN", "must be an http:// or https:// address, not ftp://"),
    ("https://hooks.example/T0KEN and more", "must be one address, without spaces"),
])
async def test_a_webhook_in_the_secret_block_is_checked_as_the_setting_is(
    prefect_backend: None, quiet_env: dict[str, str], data_dir: Path,
    monkeypatch: pytest.MonkeyPatch, address: str, said: str,
) -> None:
    """An address in the Secret block that no alert can be POSTed to is told as the setting's
    is, naming the block and never the address (its token): the failed run's line says its
    alert was not delivered, nothing tried, and the automations are not applied with it."""
    from pipeline.cli import _user_errors, one_line
    from pipeline.operations.automations import apply_automations
    from pipeline.operations.runs import UnusableWebhook

    name = "apidir-test-bad-webhook"
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_SECRET", name)
    await Secret(value=address).save(name, overwrite=True)
    told = (f"the alert webhook in the Prefect Secret block {name!r} "
            f"(APIDIR_ALERT_WEBHOOK_SECRET): {said}")
    try:
        (data_dir / "entries").rename(data_dir / "gone")
        with pytest.raises(StageFailed) as failed:
            await nightly()
        with pytest.raises(UnusableWebhook) as refused:
            await apply_automations(REPO / "deploy/prefect/automations.yaml", Settings())
    finally:
        async with get_client() as client:
            block = await client.read_block_document_by_name(name, "secret")
            await client.delete_block_document(block.id)
    line = one_line(failed.value, "run")
    assert line.endswith(f"; the alert was not delivered: {told}") and "T0KEN" not in line
    assert isinstance(refused.value, _user_errors())
    assert one_line(refused.value, "automations apply") == told


async def test_a_network_suspect_run_alerts_and_emits_an_event(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as closed:  # a port nobody listens on: every connection refused
        closed.bind(("127.0.0.1", 0))
        base = f"https://127.0.0.1:{closed.getsockname()[1]}"
    for number in range(6):  # 12 probes, all refused: the prober's own network looks down
        write_entry(make_entry(id=f"entry-{number}", baseUrl=base,
                               sampleRequest=f'curl "{base}/forecast"'))
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "true")
    monkeypatch.setenv("APIDIR_PROBE_ALLOW_PRIVATE", "true")
    monkeypatch.setenv("APIDIR_PROBE_ATTEMPTS", "1")
    monkeypatch.setenv("APIDIR_PROBE_INTERVAL", "0")
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    started = datetime.now(UTC)
    outcome = await nightly()
    assert receiver.events() == ["run_network_suspect"]
    alert = receiver.received[0]
    assert alert["run"]["id"] == outcome["run"]
    assert "12 of 12 probes failed to connect" in alert["run"]["message"]
    suspect = await events_named(RUN_NETWORK_SUSPECT, started)
    assert any(e["resource"]["prefect.resource.id"] == f"apidir.run.{outcome['run']}"
               for e in suspect)


async def test_state_changes_are_prefect_events(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
) -> None:
    from tests.test_orchestration import record_day

    write_entry()
    url = quiet_env["APIDIR_DATABASE_URL"]
    started = datetime.now(UTC)  # run ids restart with each test's store: events of this test
    today = started.date()
    await nightly()  # ingests the entry
    record_day(url, today - timedelta(days=2), {"example-weather": ("live", 200, 100.0)})
    await nightly()
    record_day(url, today - timedelta(days=1), {"example-weather": ("unreachable", None, 0.0)})
    outcome = await nightly()
    changed: list[dict] = []
    for _ in range(60):  # stored a moment after they are emitted, among earlier tests' events
        changed = [e for e in await events_named(ENTRY_STATE_CHANGED, started)
                   if e["related"][0]["prefect.resource.id"] == f"apidir.run.{outcome['run']}"]
        if changed:
            break
        await asyncio.sleep(0.5)
    assert [(e["resource"]["prefect.resource.id"], e["payload"]["from"], e["payload"]["to"])
            for e in changed] == [("apidir.entry.example-weather", "live", "unreachable")]


# A store that refuses every new entry with a reason of its own, on either backend.
FROZEN_CATALOGUE = {
    "sqlite": ["CREATE TRIGGER frozen BEFORE INSERT ON entry "
               "BEGIN SELECT RAISE(ABORT, 'the catalogue is frozen'); END"],
    "postgresql": ["CREATE FUNCTION frozen() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN RAISE EXCEPTION 'the catalogue is frozen'; END $$",
                   "CREATE TRIGGER frozen BEFORE INSERT ON entry FOR EACH ROW "
                   "EXECUTE FUNCTION frozen()"],
}


async def test_a_stage_the_store_refuses_is_one_line_in_the_record_the_alert_and_the_command(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A database error in a stage is told as the stage, the store (its password hidden) and
    the database's reason, alike in the run's record, its alert and the command's line: never
    SQLAlchemy's text with the statement and its parameters."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from pipeline.cli import one_line

    url = quiet_env["APIDIR_DATABASE_URL"]
    engine = engine_for(url)
    with engine.begin() as connection:
        for statement in FROZEN_CATALOGUE[engine.dialect.name]:
            connection.execute(text(statement))
    write_entry()
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    with pytest.raises(StageFailed) as failed:
        await nightly()
    told = (f"ingest stage failed on the store "
            f"{make_url(url).render_as_string(hide_password=True)}: the catalogue is frozen")
    with Session(engine) as session:
        run = session.exec(select(PipelineRun)).one()
    assert (run.state, run.message) == ("failed", told)
    assert receiver.events() == ["run_failed"]
    assert receiver.received[0]["run"]["message"] == told
    assert one_line(failed.value, "run") == told


async def test_a_store_set_up_so_no_retry_mends_it_fails_the_stage_at_its_first_attempt(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table the operator took away does not come back between attempts: the ingest stage
    fails at its first, not after APIDIR_STAGE_RETRIES retries and their waits, and the run
    ends in its one line (as for a user without rights or a database taking no writes)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    url = quiet_env["APIDIR_DATABASE_URL"]
    with engine_for(url).begin() as connection:
        connection.execute(text("DROP TABLE entry_event"))
    write_entry()
    monkeypatch.setenv("APIDIR_STAGE_RETRIES", "2")
    monkeypatch.setenv("APIDIR_RETRY_DELAY", "0")
    state = await nightly(return_state=True)
    assert state.is_failed()
    async with get_client() as client:
        task_runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    assert [(run.task_key.split("-")[0], run.run_count) for run in task_runs] == [
        ("ingest", 1)]
    with Session(engine_for(url)) as session:
        run = session.exec(select(PipelineRun)).one()
    assert run.state == "failed" and run.message.startswith(
        f"ingest stage failed on the store {make_url(url).render_as_string(hide_password=True)}"
        ": "), run.message
    assert "entry_event" in run.message and "INSERT" not in run.message


async def test_the_days_to_roll_up_the_store_cannot_read_are_the_rollup_stage_s_one_line(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
) -> None:
    """The nightly's read of the days to roll up failing on the store (here its probe table
    gone) is told as the rollup stage, one line alike in the run's record and the command's:
    not as the nightly run in one and the command in the other."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from pipeline.cli import one_line

    url = quiet_env["APIDIR_DATABASE_URL"]
    with engine_for(url).begin() as connection:
        connection.execute(text("DROP TABLE probe CASCADE" if url.startswith("postgresql")
                                else "DROP TABLE probe"))
    write_entry()
    with pytest.raises(StageFailed) as failed:
        await nightly()
    with Session(engine_for(url)) as session:
        run = session.exec(select(PipelineRun)).one()
    assert run.state == "failed"
    assert run.message.startswith(
        f"rollup stage failed on the store {make_url(url).render_as_string(hide_password=True)}"
        ": ")
    assert "probe" in run.message and "SELECT" not in run.message
    assert one_line(failed.value, "run") == run.message


@pytest.mark.parametrize("answer", [204, 410], ids=["alert-delivered", "alert-refused"])
async def test_a_run_over_its_time_limit_is_failed_and_alerted_in_the_command_s_line(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], answer: int,
) -> None:
    """The run's record, its alert and the command's line are one line naming the setting and
    whether a release went live, not Prefect's words; an alert the webhook refused is told by
    the command, as for any failed run."""
    from pipeline.cli import time_limit_told
    from pipeline.operations.runs import time_limit_line

    assert RUN_TIMEOUT == Settings().run_timeout == 6 * 3600  # what the deployments run with
    silent = socket.socket()  # accepts connections and never answers: the probe stage hangs
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    base = f"https://127.0.0.1:{silent.getsockname()[1]}"
    write_entry(make_entry(baseUrl=base, sampleRequest=f'curl "{base}/forecast"'))
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "true")
    monkeypatch.setenv("APIDIR_PROBE_ALLOW_PRIVATE", "true")
    monkeypatch.setenv("APIDIR_PROBE_TIMEOUT", "300")
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    receiver.statuses = [answer]
    capsys.readouterr()
    try:
        with pytest.raises(typer.Exit), time_limit_told(Path(quiet_env["APIDIR_OUTPUT_DIR"])):
            await nightly.with_options(timeout_seconds=4)()
    finally:
        silent.close()
    told = time_limit_line(4, unchanged=True)
    with Session(engine_for(quiet_env["APIDIR_DATABASE_URL"])) as session:
        run = session.exec(select(PipelineRun)).one()
    assert run.state == "failed" and run.finished_at is not None
    assert run.message == told
    assert receiver.events() == ["run_failed"]
    assert receiver.received[0]["run"]["id"] == run.id
    assert receiver.received[0]["run"]["message"] == told
    undelivered = "" if answer < 300 else f"; the alert was not delivered: HTTP {answer}"
    assert capsys.readouterr().err.splitlines()[-1] == f"apidir: {told}{undelivered}"


async def test_a_run_killed_outright_is_marked_crashed_by_the_next_run(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGKILL leaves no hook to run: the run's record says `running` until the next run
    finds its process gone, marks it crashed, alerts and says so in its summary."""
    import os
    import signal
    import subprocess
    import sys
    from time import monotonic

    from prefect.settings import PREFECT_API_URL

    from tests.conftest import REPO

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    base = f"https://127.0.0.1:{silent.getsockname()[1]}"
    write_entry(make_entry(baseUrl=base, sampleRequest=f'curl "{base}/forecast"'))
    env = {**os.environ, "APIDIR_PROBE_ENABLED": "true", "APIDIR_PROBE_ALLOW_PRIVATE": "true",
           "APIDIR_PROBE_TIMEOUT": "120", "PREFECT_API_URL": PREFECT_API_URL.value()}
    process = subprocess.Popen([sys.executable, "-m", "flows.nightly"], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    engine = engine_for(quiet_env["APIDIR_DATABASE_URL"])
    try:
        deadline = monotonic() + 90
        while monotonic() < deadline and process.poll() is None:
            with Session(engine) as session:
                run = session.exec(select(PipelineRun)).first()
            if run is not None and run.entries_seen:  # probing now
                break
            await asyncio.sleep(0.3)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
        silent.close()
    with Session(engine) as session:
        killed = session.exec(select(PipelineRun)).one()
    assert killed.state == "running" and killed.pid == process.pid

    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    outcome = await nightly()
    with Session(engine) as session:
        killed = session.get(PipelineRun, killed.id)
    assert killed.state == "crashed" and killed.finished_at is not None
    assert f"pid {process.pid}" in killed.message and "is gone" in killed.message
    assert receiver.events()[0] == "run_crashed"
    assert receiver.received[0]["run"]["id"] == killed.id
    summary = await latest_summary()
    assert f"# nightly run {outcome['run']}: completed" in summary
    assert f"nightly run {killed.id}" in summary and "was left running" in summary
    assert "## Runs ended unjudged since the previous completed run (1)" in summary
    assert f"| {killed.id} | nightly | crashed |" in summary
    async with get_client() as client:  # Prefect had it running still
        flow_run = await client.read_flow_run(killed.flow_run_id)
    assert flow_run.state.type.value == "CRASHED" and flow_run.state.message == killed.message


async def test_a_run_left_running_by_a_machine_that_is_gone_is_closed_by_the_next_run(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run record another machine left `running` (a container replaced, a store restored on
    another server) whose start is longer ago than a run may last: the next night marks it
    crashed, alerts and says so in its summary, as for a run killed here. One of another
    machine within its time limit is left running."""
    from pipeline.processes import LEFT_BEHIND_MARGIN

    write_entry(make_entry())
    engine = engine_for(quiet_env["APIDIR_DATABASE_URL"])
    now = datetime.now(UTC)
    with Session(engine, expire_on_commit=False) as session:
        gone = PipelineRun(flow="nightly", host="3f2a9c1e7b44", pid=4242, started_at=(
            now - timedelta(seconds=RUN_TIMEOUT) - LEFT_BEHIND_MARGIN - timedelta(minutes=1)))
        lately = PipelineRun(flow="nightly", host="elsewhere", pid=4242,
                             started_at=now - timedelta(minutes=1))
        session.add_all([gone, lately])
        session.commit()
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    outcome = await nightly()
    with Session(engine) as session:
        gone, lately = session.get(PipelineRun, gone.id), session.get(PipelineRun, lately.id)
    assert (gone.state, lately.state) == ("crashed", "running")
    assert "(pid 4242 on 3f2a9c1e7b44) is taken as gone" in gone.message
    assert receiver.events().count("run_crashed") == 1
    assert receiver.received[0]["run"]["id"] == gone.id
    summary = await latest_summary()
    assert f"# nightly run {outcome['run']}: completed" in summary
    assert f"nightly run {gone.id}" in summary and "was left running" in summary


async def test_a_nightly_among_hostile_files_publishes_the_rest_within_its_memory_bound(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str], data_dir: Path,
    tmp_path: Path,
) -> None:
    """A whole nightly run, in a process of its own, facing a merge-key bomb, an alias bomb,
    deep nesting, a huge file, a non-UTF-8 file and a symlink to a file outside `data/`: it
    completes under 1 GiB of peak memory, publishes the good entry, names each bad file, and
    the outside file's text appears nowhere (output, store, release)."""
    import os
    import resource
    import subprocess
    import sys

    from prefect.settings import PREFECT_API_URL

    from tests.conftest import REPO
    from tests.test_hostile_files import BILLION_LAUGHS, MERGE_BOMB

    marker = "TEXT-FROM-OUTSIDE-THE-DATA-FOLDER"
    outside = tmp_path / "outside.yaml"
    outside.write_text(f"id: leak\ndescription: {marker}\n")
    write_entry(make_entry(id="fine"), name="fine")
    write_entry(text=MERGE_BOMB, name="merge")
    write_entry(text=BILLION_LAUGHS, name="lol")
    write_entry(text="id: deep\nx: " + "[" * 40_000 + "]" * 40_000 + "\n", name="deep")
    folder = data_dir / "entries" / "weather"
    (folder / "huge.yaml").write_bytes(b"# " + b"x" * (50 * 1024 * 1024))
    (folder / "latin.yaml").write_bytes(b"id: caf\xe9\n")
    (folder / "leak.yaml").symlink_to(outside)
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "flows.nightly"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=300)
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert done.returncode == 0, done.stderr[-3000:]
    assert peak_mib < 1024, f"peak RSS {peak_mib:.0f} MiB"
    output = done.stdout + done.stderr
    for name in ("merge", "lol", "deep", "huge", "latin", "leak"):
        assert f"{name}.yaml" in output, name
    release = Path(quiet_env["APIDIR_OUTPUT_DIR"])
    published = json.loads((release / "api" / "apis.json").read_text())
    assert [api["id"] for api in published["apis"]] == ["fine"]
    with Session(engine_for(quiet_env["APIDIR_DATABASE_URL"])) as session:
        run = session.exec(select(PipelineRun)).one()
    assert run.state == "completed" and run.entries_invalid == 6
    stored = json.dumps(run.errors)
    released = "".join(p.read_text(errors="replace") for p in release.rglob("*") if p.is_file())
    assert marker not in output and marker not in stored and marker not in released


async def test_a_wait_for_the_publish_lock_given_up_is_not_retried(prefect_backend: None) -> None:
    """A stage that gave up waiting for the publish lock fails at once, its wait having been
    the retry (APIDIR_PUBLISH_LOCK_TIMEOUT bounds the whole of it); another failure of the
    same stage is retried."""
    tried: list[str] = []

    @task
    async def publishing(error: type[Exception]) -> None:
        tried.append(error.__name__)
        raise error("held")

    @flow
    async def stage_with_retries(error: type[Exception]) -> None:
        with pytest.raises(error):
            await with_retries(publishing, Settings(stage_retries=2, retry_delay=0))(error)

    await stage_with_retries(PublishLockTimeout)
    assert tried == ["PublishLockTimeout"]
    tried.clear()
    await stage_with_retries(OSError)
    assert tried == ["OSError"] * 3


async def test_a_release_live_but_not_recorded_is_not_published_again(
    prefect_backend: None,
) -> None:
    """A publish whose record the store refused after its swap fails at once: its release is
    live, and a retry would publish a second release that night."""
    tried: list[str] = []

    @task
    async def publishing() -> None:
        tried.append("publish")
        raise ReleaseNotRecorded("2.0.0+20261129.10", OSError("No space left on device"))

    @flow
    async def stage_with_retries() -> None:
        with pytest.raises(ReleaseNotRecorded, match=(
                r"^release 2\.0\.0\+20261129\.10 is live but the store could not record it "
                r"\(No space left on device\); the next publish records it$")):
            await with_retries(publishing, Settings(stage_retries=2, retry_delay=0))()

    await stage_with_retries()
    assert tried == ["publish"]


def test_a_wait_for_the_prefect_publish_slot_is_bounded_too(prefect_backend: None) -> None:
    """With a Prefect server in use, a publisher waiting for the `apidir-publish` slot that
    another holds gives up after its wait (APIDIR_PUBLISH_LOCK_TIMEOUT), in one clear line, as
    it does for the output folder's lock; the slot is free again once let go."""
    from pipeline.operations.stages import publisher_slot

    with publisher_slot(timeout=10):
        started = time.monotonic()
        with pytest.raises(PublishLockTimeout, match=(
                r"^another publisher has held the Prefect concurrency limit apidir-publish for "
                r"more than 0.5 s; try again when it has finished$")), publisher_slot(0.5):
            pass
        assert time.monotonic() - started >= 0.5
    with publisher_slot(timeout=10):
        pass


def test_first_publishers_at_once_on_a_prefect_server_all_take_their_turn(
    prefect_backend: None,
) -> None:
    """Publishers starting together where the `apidir-publish` limit does not exist yet (a new
    Prefect server) each make it or find it, and take the one slot in turn: Prefect's upsert
    reads before it creates, so one of two found the name missing, then failed creating it."""
    from pipeline.operations.stages import PUBLISH_LIMIT, publisher_slot

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectNotFound):
        client.delete_global_concurrency_limit_by_name(PUBLISH_LIMIT)
    publishers = 8
    ready = threading.Barrier(publishers)
    failures: list[BaseException] = []
    held = 0

    def publish() -> None:
        nonlocal held
        ready.wait()
        try:
            with publisher_slot(timeout=60):
                held += 1
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=publish) for _ in range(publishers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == [] and held == publishers
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(PUBLISH_LIMIT).limit == 1


async def test_a_night_that_leaves_an_entry_out_publishes_the_others_and_alerts(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    receiver: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An entry's stored version holds a base address the release's check refuses, and its
    file has turned invalid, so the night keeps that version: the night publishes the other
    entry, completes, and alerts naming the entry, its file and the field."""
    from pipeline.operations import stages
    from pipeline.store.tables import session_scope, start_run
    from tests.test_publish import store_refused_value

    write_entry(make_entry(id="good-weather"))
    path = write_entry(make_entry(id="bad-weather"))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    store_refused_value(settings, "bad-weather", baseUrl="https://api.example.com/%zz")
    path.write_text(path.read_text().replace("authType:", "authKind:"))  # now invalid
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    started = datetime.now(UTC)
    outcome = await nightly()
    assert outcome["published"] == 1
    published = json.loads((settings.output_dir / "api" / "apis.json").read_text())
    assert [api["id"] for api in published["apis"]] == ["good-weather"]
    assert receiver.events() == ["entries_left_out"]
    alert = receiver.received[0]
    assert alert["run"]["state"] == "completed" and alert["run"]["id"] == outcome["run"]
    assert f"entry bad-weather ({path}): field baseUrl: holds a '%'" in alert["run"]["message"]
    left_out = await events_named(RUN_ENTRIES_LEFT_OUT, started)
    assert any(e["resource"]["prefect.resource.id"] == f"apidir.run.{outcome['run']}"
               for e in left_out)


async def test_the_failure_hook_of_a_run_refused_a_store_a_newer_version_wrote_reads_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run refused a store of a schema this version does not know never had a record: its
    failure hook leaves the store alone, where it read the run table by this version's
    columns (a newer schema had renamed one) and Prefect logged the hook's error under the
    command's one line."""
    import sqlite3
    import uuid

    from prefect import Flow
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Failed

    from pipeline.operations.runs import close_failed_run
    from pipeline.store.migrate import StoreTooNewError, upgrade_store

    database = tmp_path / "newer.db"
    url = f"sqlite:///{database}"
    upgrade_store(engine_for(url))
    with sqlite3.connect(database) as connection:  # as a newer version might leave it
        connection.execute("ALTER TABLE pipeline_run RENAME COLUMN flow_run_id TO prefect_run")
        connection.execute("UPDATE alembic_version SET version_num = '0099'")
    connection.close()
    monkeypatch.setenv("APIDIR_DATABASE_URL", url)
    refused = StoreTooNewError("the store has schema revision 0099, which this version does "
                               "not know")
    await close_failed_run(Flow(fn=lambda: None, name="nightly"),
                           FlowRun(id=uuid.uuid4(), flow_id=uuid.uuid4(), name="refused"),
                           Failed(data=refused))
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("0099",)]
    connection.close()


async def test_a_run_found_left_running_is_marked_crashed_in_prefect_too(
    prefect_backend: None, quiet_env: dict[str, str], receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run whose process was killed outright leaves its Prefect flow run Running: the run
    that closes its record marks that flow run Crashed with the record's line. A flow run
    Prefect has ended keeps its state, and one Prefect does not know (a temporary local
    server's) is passed over; each run is closed and alerted all the same."""
    import logging
    import subprocess
    import sys
    import uuid

    from prefect.states import Completed, Running

    from pipeline.operations.runs import close_left_running

    @flow(name="nightly")
    def killed_nightly() -> None: ...

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    async with get_client() as client:
        running = await client.create_flow_run(killed_nightly, state=Running())
        finished = await client.create_flow_run(killed_nightly, state=Completed())
    engine = engine_for(quiet_env["APIDIR_DATABASE_URL"])
    with Session(engine, expire_on_commit=False) as session:
        dead = [PipelineRun(flow="nightly", flow_run_id=str(flow_run_id),
                            host=socket.gethostname(), pid=ended.pid,
                            started_at=datetime.now(UTC) - timedelta(minutes=5))
                for flow_run_id in (running.id, finished.id, uuid.uuid4())]
        session.add_all(dead)
        session.commit()
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    closed = await close_left_running(Settings(), logging.getLogger("nightly"))
    assert sorted(run.id for run in closed) == [run.id for run in dead]
    assert receiver.events() == ["run_crashed"] * 3
    async with get_client() as client:
        crashed = await client.read_flow_run(running.id)
        kept = await client.read_flow_run(finished.id)
    with Session(engine) as session:
        record = session.get(PipelineRun, dead[0].id)
    assert crashed.state.type.value == "CRASHED" and crashed.state.message == record.message
    assert record.message.startswith("abandoned: the process running it")
    assert kept.state.type.value == "COMPLETED"


@pytest.mark.backends("sqlite")
async def test_the_nightly_upkeep_prunes_the_run_reports_past_their_days_alone(
    prefect_backend: None, quiet_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each run leaves two artifacts on the Prefect server, kept there for ever: the nightly's
    upkeep deletes the runs' reports created longer ago than APIDIR_REPORTS_KEPT_DAYS, at most
    so many a night (the next nights go on), past the newer ones however many pages they
    fill, and no artifact of another key; none with the setting 0."""
    from prefect.client.schemas.actions import ArtifactCreate
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from pipeline.operations import runs
    from pipeline.operations.runs import REPORT_KEYS, prune_run_reports

    async def made(keys: tuple[str, ...]) -> list[datetime]:
        async with get_client() as client:
            return [(await client.create_artifact(ArtifactCreate(
                key=key, type="markdown", data=f"# {key}"))).created for key in keys]

    async def kept() -> list[tuple[str, datetime]]:
        async with get_client() as client:
            found = await client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[*REPORT_KEYS, "someone-elses-report"])))
        return sorted((artifact.key, artifact.created) for artifact in found)

    cut = max(await made((*REPORT_KEYS, *REPORT_KEYS, "someone-elses-report")))
    newer = await made(REPORT_KEYS)
    assert min(newer) > cut
    before = await kept()
    old = [key for key, created in before if created <= cut and key != "someone-elses-report"]
    days = Settings().reports_kept_days
    due = cut + timedelta(days=days, microseconds=1)  # the first reports are `days` old

    assert (await prune_run_reports(Settings(), datetime.now(UTC))).deleted == 0
    monkeypatch.setenv("APIDIR_REPORTS_KEPT_DAYS", "0")
    assert await prune_run_reports(Settings(), due) is None
    monkeypatch.delenv("APIDIR_REPORTS_KEPT_DAYS")
    assert await kept() == before

    monkeypatch.setattr(runs, "REPORT_PAGE", 3)  # the newer reports fill more than a page
    monkeypatch.setattr(runs, "REPORTS_PRUNED_A_NIGHT", 5)
    nights = []
    while not nights or nights[-1] == 5:
        pruned = await prune_run_reports(Settings(), due)
        assert pruned is not None and pruned.problem is None
        nights.append(pruned.deleted)
    assert sum(nights) == len(old) and len(nights) == len(old) // 5 + 1
    assert await kept() == sorted(
        [*zip(REPORT_KEYS, newer, strict=True),
         *[(key, created) for key, created in before if key == "someone-elses-report"]])
