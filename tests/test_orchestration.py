"""Real flow runs: logical dates, backfill over recorded history, failures, alerts, artifacts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from time import monotonic

import pytest
import pytest_asyncio
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.sorting import ArtifactSort
from sqlmodel import Session, col, select

from flows.backfill import backfill
from flows.nightly import nightly
from pipeline.operations.runs import StageFailed
from pipeline.store.history import plan_targets, record_probes
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    PipelineRun,
    ProbeRow,
    as_utc,
    engine_for,
    start_run,
)
from tests.conftest import REPO, WriteEntry, make_entry
from tests.test_history import result
from tests.webhook import WebhookReceiver

pytestmark = pytest.mark.prefect

DAYS = [date(2026, 11, 16) + timedelta(days=n) for n in range(3)]


@pytest.fixture
def quiet_env(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Probing off (history is recorded by the test), no retry delays."""
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "false")
    monkeypatch.setenv("APIDIR_STAGE_RETRIES", "0")
    return settings_env


@pytest_asyncio.fixture(loop_scope="function")
async def hook(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[WebhookReceiver]:
    receiver = await WebhookReceiver().start()
    monkeypatch.setenv("APIDIR_ALERT_WEBHOOK_URL", receiver.url)
    yield receiver
    await receiver.close()


def record_day(database_url: str, day: date, outcomes: dict[str, tuple[str, int | None, float]]):
    """One trusted probe run at 03:00 of `day`: each entry's first target gets its outcome."""
    with Session(engine_for(database_url), expire_on_commit=False) as session:
        targets = {}
        for target in plan_targets(session):
            targets.setdefault(target.entry_id, target)
        run = start_run(session, "nightly")
        moment = datetime.combine(day, time(3), tzinfo=UTC)
        record_probes(session, run, [
            result(targets[entry].url, outcome, status, ms, entry=entry,
                   endpoint=targets[entry].endpoint_id, at=moment,
                   error_class=None if status else "timeout")
            for entry, (outcome, status, ms) in outcomes.items()
        ])


def rollup_rows(database_url: str) -> tuple[list[dict], list[dict]]:
    with Session(engine_for(database_url)) as session:
        entries = session.exec(select(DailyEntryRollup).order_by(
            DailyEntryRollup.day, DailyEntryRollup.entry_id)).all()
        endpoints = session.exec(select(DailyEndpointRollup).order_by(
            DailyEndpointRollup.day, DailyEndpointRollup.url)).all()
        return [r.model_dump() for r in entries], [r.model_dump() for r in endpoints]


async def test_nightly_rolls_up_its_logical_date(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str]
) -> None:
    write_entry()
    url = quiet_env["APIDIR_DATABASE_URL"]
    await nightly()  # ingest first, so the entry has endpoints to probe
    record_day(url, DAYS[1], {"example-weather": ("live", 200, 120.0)})
    outcome = await nightly(run_date=DAYS[1])
    assert outcome["runDate"] == DAYS[1].isoformat()
    entries, endpoints = rollup_rows(url)
    by_day = {row["day"]: row for row in entries if row["day"] in DAYS}
    assert sorted(by_day) == [DAYS[1]]  # the day before had no probes and no entry yet
    assert (by_day[DAYS[1]]["probes"], by_day[DAYS[1]]["state"]) == (1, "live")
    assert by_day[DAYS[1]]["p50_ms"] == 120.0
    assert [row["day"] for row in endpoints] == [DAYS[1]]
    today = datetime.now(UTC).date()
    assert not any(row["day"] == today for row in entries)  # rolled once it has ended


async def test_backfill_recomputes_every_day_idempotently(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str], tmp_path: Path
) -> None:
    write_entry()
    write_entry(make_entry(id="second-api", category="ai"))
    url = quiet_env["APIDIR_DATABASE_URL"]
    first = await nightly()
    record_day(url, DAYS[0], {"example-weather": ("live", 200, 100.0),
                              "second-api": ("online", 401, 300.0)})
    record_day(url, DAYS[1], {"example-weather": ("unreachable", None, None),
                              "second-api": ("live", 200, 80.0)})
    record_day(url, DAYS[2], {"example-weather": ("live", 200, 60.0)})

    outcome = await backfill(DAYS[0], DAYS[2])
    rows = rollup_rows(url)
    again = await backfill(DAYS[0], DAYS[2])
    assert rollup_rows(url) == rows
    assert outcome["rows"] == again["rows"] == 6 + 5  # 6 entry-days, 5 probed URL-days
    assert outcome["version"] != first["version"] != again["version"]

    figures = {(row["day"], row["entry_id"]): row for row in rows[0]}
    weather = [figures[(day, "example-weather")] for day in DAYS]
    assert [row["state"] for row in weather] == ["live", "unreachable", "live"]
    assert [row["live_share"] for row in weather] == [1.0, 0.0, 1.0]
    assert [row["p50_ms"] for row in weather] == [100.0, None, 60.0]
    second = [figures[(day, "second-api")] for day in DAYS]
    assert [row["probes"] for row in second] == [1, 1, 0]
    assert [row["state"] for row in second] == ["online", "live", "live"]
    # scores as of the end of each day: one probe a day is too little for Latency (5 needed),
    # so each day's grade is provisional, from Pricing and Depth
    assert [(row["latency"], row["provisional"]) for row in second] == [(None, True)] * 3

    published = json.loads((tmp_path / "public" / "api" / "apis.json").read_text())
    assert published["meta"]["version"] == again["version"]
    status = {api["id"]: api["status"]["state"] for api in published["apis"]}
    assert status == {"example-weather": "live", "second-api": "live"}


async def test_backfill_of_chosen_entries_leaves_the_others_alone(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str]
) -> None:
    write_entry()
    write_entry(make_entry(id="second-api", category="ai"))
    url = quiet_env["APIDIR_DATABASE_URL"]
    await nightly()
    record_day(url, DAYS[0], {"example-weather": ("live", 200, 100.0),
                              "second-api": ("live", 200, 90.0)})
    before = rollup_rows(url)[0]
    outcome = await backfill(DAYS[0], DAYS[0], categories=["ai"])
    assert outcome["entries"] == ["second-api"] and outcome["chosen"] == 1
    after = rollup_rows(url)[0]
    assert {row["entry_id"] for row in after if row["day"] == DAYS[0]} == {"second-api"}
    assert [row for row in after if row["day"] != DAYS[0]] == before
    with pytest.raises(StageFailed, match="UnknownSelectionError: no active entries for: no-such"):
        await backfill(DAYS[0], DAYS[0], entries=["no-such-api"])


async def test_a_nightly_prunes_old_rolled_up_days_and_a_backfill_of_them_is_refused(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With APIDIR_PROBES_KEPT_DAYS, the nightly deletes the raw probes of the days rolled up
    that ended longer ago (their rollups kept), and a backfill of such a day is refused before
    it writes anything, naming the day."""
    write_entry()
    url = quiet_env["APIDIR_DATABASE_URL"]
    await nightly()
    today = datetime.now(UTC).date()
    old, recent = today - timedelta(days=40), today - timedelta(days=20)
    for day in (old, recent):
        record_day(url, day, {"example-weather": ("live", 200, 100.0)})
    await backfill(old, old)
    rolled = rollup_rows(url)
    monkeypatch.setenv("APIDIR_PROBES_KEPT_DAYS", "31")
    await nightly()
    with Session(engine_for(url)) as session:
        days = {moment.date() for moment in session.exec(select(ProbeRow.checked_at))}
    assert old not in days and recent in days
    assert [row for row in rollup_rows(url)[0] if row["day"] == old] == [
        row for row in rolled[0] if row["day"] == old]
    with pytest.raises(StageFailed, match=f"select stage failed: ProbesPrunedError: the raw "
                                          f"probes of {old.isoformat()} were pruned"):
        await backfill(old, recent)
    assert [row for row in rollup_rows(url)[0] if row["day"] <= old] == [
        row for row in rolled[0] if row["day"] <= old]


async def test_a_failed_stage_keeps_the_release_records_the_run_and_alerts(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str], tmp_path: Path,
    hook: WebhookReceiver, data_dir: Path,
) -> None:
    write_entry()
    await nightly()
    public = tmp_path / "public"
    before = {p.relative_to(public): p.read_bytes() for p in public.rglob("*") if p.is_file()}
    entries = data_dir / "entries"
    entries.rename(data_dir / "entries.moved")  # the curated folder is gone (a failed mount)

    with pytest.raises(StageFailed, match="ingest stage failed") as failure:
        await nightly()
    assert str(entries) in str(failure.value)
    after = {p.relative_to(public): p.read_bytes() for p in public.rglob("*") if p.is_file()}
    assert after == before
    with Session(engine_for(quiet_env["APIDIR_DATABASE_URL"])) as session:
        run = session.exec(select(PipelineRun).order_by(PipelineRun.id.desc())).first()
    assert run.state == "failed" and run.finished_at is not None
    assert run.message.startswith("ingest stage failed: EmptyCatalogError")
    assert hook.events() == ["run_failed"]
    assert hook.received[0]["run"]["message"] == run.message
    assert hook.received[0]["run"]["id"] == run.id


async def test_state_changes_alert_and_fill_the_run_summary(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str], tmp_path: Path,
    hook: WebhookReceiver,
) -> None:
    write_entry()
    write_entry(make_entry(id="second-api", category="ai"))
    url = quiet_env["APIDIR_DATABASE_URL"]
    await nightly()
    today = datetime.now(UTC).date()
    record_day(url, today - timedelta(days=2), {"example-weather": ("live", 200, 100.0),
                                                "second-api": ("live", 200, 100.0)})
    await nightly()
    assert hook.received == []  # first checks are not changes
    record_day(url, today - timedelta(days=1), {"example-weather": ("unreachable", None, 0.0),
                                                "second-api": ("live", 200, 100.0)})
    outcome = await nightly()

    assert [(c["entry"], c["from"], c["to"]) for c in outcome["changes"]] == [
        ("example-weather", "live", "unreachable")]
    assert outcome["changed"] == 1
    assert hook.events() == ["state_changed"]
    assert hook.received[0]["changes"][0]["direction"] == "down"
    changes = json.loads((tmp_path / "public" / "api" / "changes.json").read_text())
    assert [(c["entry"], c["to"]) for c in changes["changes"]] == [
        ("example-weather", "unreachable")]
    releases = json.loads((tmp_path / "public" / "api" / "releases.json").read_text())
    assert len(releases["releases"]) == 3

    async with get_client() as client:
        summary, table = [
            (await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
                sort=ArtifactSort.CREATED_DESC, limit=1))[0]
            for key in ("nightly-summary", "nightly-entries")
        ]
    assert f"# nightly run {outcome['run']}: completed" in summary.data
    assert "## State changes since the previous run (1)" in summary.data
    assert "| example-weather | live | unreachable |" in summary.data
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert {(row["entry"], row["state"]) for row in rows} == {
        ("example-weather", "unreachable"), ("second-api", "live")}


async def test_a_crashed_run_is_recorded_and_alerted(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str], tmp_path: Path,
    hook: WebhookReceiver, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process running the flow is interrupted mid-probe: Prefect's crash hook tells."""
    from prefect.settings import PREFECT_API_URL

    silent = socket.socket()  # accepts connections (kernel backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    base = f"https://127.0.0.1:{silent.getsockname()[1]}"
    write_entry(make_entry(baseUrl=base, sampleRequest=f'curl "{base}/forecast"'))
    env = {**os.environ, "APIDIR_PROBE_ENABLED": "true", "APIDIR_PROBE_ALLOW_PRIVATE": "true",
           "APIDIR_PROBE_ATTEMPTS": "1", "APIDIR_PROBE_TIMEOUT": "120",
           "PREFECT_API_URL": PREFECT_API_URL.value()}
    process = subprocess.Popen([sys.executable, "-m", "flows.nightly"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        engine = engine_for(quiet_env["APIDIR_DATABASE_URL"])
        deadline = monotonic() + 90
        while monotonic() < deadline and process.poll() is None:
            with Session(engine) as session:
                run = session.exec(select(PipelineRun)).first()
            if run is not None and run.entries_seen:  # ingest is done: probing now
                break
            await asyncio.sleep(0.3)
        await asyncio.sleep(1.5)
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(process.communicate, timeout=60)
    finally:
        process.kill()
        silent.close()
    assert process.returncode != 0, output.decode()
    with Session(engine) as session:
        run = session.exec(select(PipelineRun)).one()
    assert run.state == "crashed", output.decode()[-3000:]
    assert run.finished_at is not None and run.message
    assert hook.events() == ["run_crashed"]
    assert hook.received[0]["run"]["id"] == run.id
    assert hook.received[0]["run"]["state"] == "crashed"


async def test_backfill_reprobes_only_the_chosen_entries(
    prefect_backend: None, write_entry: WriteEntry, quiet_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("chosen", "other"):  # .invalid never resolves: probes fail at DNS, locally
        base = f"https://{name}.example.invalid"
        write_entry(make_entry(id=f"{name}-api", baseUrl=base,
                               sampleRequest=f'curl "{base}/forecast"'))
    await nightly()  # probing off: ingest only
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "true")
    monkeypatch.setenv("APIDIR_PROBE_ATTEMPTS", "1")
    today = datetime.now(UTC).date()
    # the reprobe's day is rolled up: today's, or tomorrow's where midnight passes before it
    days = [today, today + timedelta(days=1)]
    outcome = await backfill(*days, entries=["chosen-api"], reprobe=True)
    with Session(engine_for(quiet_env["APIDIR_DATABASE_URL"])) as session:
        probes = session.exec(select(ProbeRow)).all()
        rollups = {row.day: row for row in session.exec(select(DailyEntryRollup).where(
            col(DailyEntryRollup.day).in_(days), DailyEntryRollup.entry_id == "chosen-api"))}
    assert {p.entry_id for p in probes} == {"chosen-api"}
    assert outcome["entries"] == ["chosen-api"]
    last = rollups[as_utc(max(p.checked_at for p in probes)).date()]  # the confirmation's day
    assert (sum(row.probes for row in rollups.values()), last.state) == (2, "unreachable")
