"""The nightly flow: ingest → probe → score → publish → daily rollups, orchestration only.

Every stage is a plain function in `pipeline/`; this module wires them, records
the run, retries the stages that touch the network or the disk, publishes the run
summary as artifacts, and sends alerts.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

from prefect import Flow, flow, get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import FlowRun, TaskRun
from prefect.runtime import flow_run as current_flow_run
from prefect.states import State
from prefect.tasks import Task, exponential_backoff
from pydantic import ValidationError
from sqlmodel import select

from flows.probe_shards import probe_sharded
from pipeline.alerts import AlertEvent, alert_payload, send_alert
from pipeline.catalog import load_categories, read_catalog
from pipeline.changes import Change, recent_changes, record_state_changes
from pipeline.history import history_frame, latest_statuses, plan_targets, record_probes
from pipeline.ingest import EmptyCatalogError, IngestSummary, ingest_catalog
from pipeline.probe import probe_all
from pipeline.publish import Presented, ReleaseValidationError, publish_release
from pipeline.report import entry_table, run_report, slowest_probes
from pipeline.rollup import HISTORY_WINDOW, roll_up_days
from pipeline.score import entry_uptimes, score_entries
from pipeline.settings import Settings
from pipeline.store import (
    PipelineRun,
    ReleaseRow,
    active_categories,
    active_entries,
    engine_for,
    finish_run,
    session_scope,
    start_run,
    utcnow,
)

T = TypeVar("T")
# Bad input does not get better by trying again: only other errors are retried.
PERMANENT_ERRORS = (EmptyCatalogError, ReleaseValidationError, ValidationError, ValueError)


class StageFailed(RuntimeError):
    """A stage of a run failed; the message says which stage and what went wrong where."""

    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(f"{stage} stage failed: {type(error).__name__}: {error}")
        self.stage = stage


def transient_failure(_task: Task, _task_run: TaskRun, state: State) -> bool:
    """Prefect's retry condition: retry unless the error is one of bad input."""
    return not isinstance(state.data, PERMANENT_ERRORS)


def with_retries(stage: Task, settings: Settings) -> Task:
    """`stage` retried `settings.stage_retries` times, the delay doubling from `retry_delay`."""
    return stage.with_options(
        retries=settings.stage_retries,
        retry_delay_seconds=exponential_backoff(backoff_factor=settings.retry_delay),
        retry_jitter_factor=0.2 if settings.retry_delay else None,
        retry_condition_fn=transient_failure,
    )


async def run_stage(name: str, call: Awaitable[T]) -> T:
    try:
        return await call
    except Exception as exc:
        raise StageFailed(name, exc) from exc


def logical_date(run_date: date | None) -> date:
    """The run's date: as given, else the scheduled start of the flow run, else today (UTC)."""
    if run_date is not None:
        return run_date
    return current_flow_run.scheduled_start_time.astimezone(UTC).date()


@task(name="ingest", cache_policy=NO_CACHE)
async def ingest(settings: Settings, run_id: int) -> IngestSummary:
    """Read and validate every entry file, then upsert the valid ones into the store."""
    if not settings.entries_dir.is_dir():
        raise EmptyCatalogError(
            f"no entries folder at {settings.entries_dir}; refusing to retire every stored entry"
        )
    report = read_catalog([settings.entries_dir], settings.entries_dir)
    with session_scope(engine_for(settings.database_url)) as session:
        summary = ingest_catalog(session, report)
        run = session.get(PipelineRun, run_id)
        run.entries_seen = len(report.files)
        run.entries_added, run.entries_updated = len(summary.added), len(summary.updated)
        run.entries_retired, run.entries_invalid = len(summary.retired), len(summary.invalid)
        run.errors = summary.errors
        session.add(run)
    logger = get_run_logger()
    for problem in report.problems:
        logger.warning("invalid entry file: %s", problem)
    logger.info(
        "ingest: %d added, %d updated, %d unchanged, %d retired, %d invalid",
        len(summary.added),
        len(summary.updated),
        len(summary.unchanged),
        len(summary.retired),
        len(summary.invalid),
    )
    return summary


@task(name="probe", cache_policy=NO_CACHE)
async def probe(settings: Settings, run_id: int, entry_ids: Collection[str] | None = None) -> int:
    """Probe the published entries' URLs (or only `entry_ids`') as coroutines of this one task."""
    if not settings.probe_enabled:
        get_run_logger().info("probing is off (APIDIR_PROBE_ENABLED=false)")
        return 0
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        entries = [e for e in active_entries(session) if entry_ids is None or e.id in entry_ids]
        targets = plan_targets(session, entries)
    results = await probe_all(targets, settings.probe_settings())
    with session_scope(engine) as session:
        run = session.get(PipelineRun, run_id)
        record_probes(session, run, results)
    logger = get_run_logger()
    outcomes = Counter(result.outcome for result in results)
    logger.info("probed %d URLs: %s", len(results), dict(sorted(outcomes.items())))
    if run.network_suspect:
        logger.warning("most probes failed to connect at once: run flagged network-suspect, "
                       "published statuses keep the last trusted run")
    return len(results)


@task(name="score", cache_policy=NO_CACHE)
async def score(settings: Settings, as_of: datetime) -> Presented:
    """Compute the presented values of every entry (status, scores, uptime) as of `as_of`."""
    with session_scope(engine_for(settings.database_url)) as session:
        contents = {row.id: row.content for row in active_entries(session)}
        history = history_frame(session, since=as_of - HISTORY_WINDOW, until=as_of)
        statuses = latest_statuses(session)
    scores = score_entries(contents, history, as_of)
    return Presented(
        statuses=statuses,
        scores={entry_id: entry_score.contract() for entry_id, entry_score in scores.items()},
        uptimes=entry_uptimes(history, as_of),
    )


def publish_now(
    settings: Settings, presented: Presented, now: datetime, run_id: int | None = None
) -> tuple[ReleaseRow, list[Change]]:
    """Record the state changes, then write a new release of the static files and record it
    (in the run's record too, with a run)."""
    categories = load_categories(settings.categories_file)
    with session_scope(engine_for(settings.database_url)) as session:
        changes = record_state_changes(session, presented.statuses, now, run_id)
        release = publish_release(
            session, settings.output_dir, settings.base_url, categories, now, presented, run_id,
            releases_kept=settings.releases_kept,
            changes=recent_changes(session, now - timedelta(days=settings.changes_days)),
            pages=settings.publish_pages,
        )
        if run_id is not None:
            run = session.get(PipelineRun, run_id)
            run.release_version, run.entries_published = release.version, release.total_apis
            session.add(run)
    return release, changes


@task(name="publish", cache_policy=NO_CACHE)
async def publish(
    settings: Settings, run_id: int, presented: Presented, now: datetime
) -> tuple[str, list[Change]]:
    """Record the state changes, then write a new release of the static files and record it."""
    release, changes = publish_now(settings, presented, now, run_id)
    get_run_logger().info(
        "published %s: %d entries to %s", release.version, release.total_apis, settings.output_dir
    )
    return release.version, changes


@task(name="rollup", cache_policy=NO_CACHE)
async def rollup(
    settings: Settings, days: list[date], entry_ids: Collection[str] | None = None
) -> int:
    """Store the daily rollups of `days` from the probe history; idempotent."""
    with session_scope(engine_for(settings.database_url)) as session:
        rollups = roll_up_days(session, days, entry_ids)
    rows = sum(len(r.entries) + len(r.endpoints) for r in rollups)
    get_run_logger().info("rolled up %d days: %d rows", len(days), rows)
    return rows


async def complete_run(settings: Settings, run_id: int, presented: Presented,
                       changes: list[Change], ingested: IngestSummary | None) -> PipelineRun:
    """Mark the run completed and publish its summary as Prefect artifacts: a markdown
    report and a table of every entry."""
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        finish_run(session, run, "completed")
        categories = active_categories(session)
        report = run_report(run, presented.statuses, changes, ingested,
                            slowest_probes(session, run_id))
    await acreate_markdown_artifact(markdown=report, key=f"{run.flow}-summary",
                                    description=f"{run.flow} run {run_id}")
    await acreate_table_artifact(
        table=entry_table(categories, presented.statuses, presented.scores),
        key=f"{run.flow}-entries", description="Every entry's status and builder score.",
    )
    return run


async def alert(
    settings: Settings,
    event: AlertEvent,
    flow: str,
    run: PipelineRun | None,
    changes: Sequence[Change] = (),
    message: str | None = None,
    flow_run_id: str | None = None,
) -> None:
    """Send one alert to the configured webhook (none configured: nothing is sent)."""
    if settings.alert_webhook_url:
        payload = alert_payload(event, flow, run, changes, message,
                                flow_run_id or current_flow_run.id)
        await send_alert(settings.alert_webhook_url, payload, settings.alert_timeout)


async def alert_state_changes(settings: Settings, flow: str, run: PipelineRun,
                              changes: list[Change]) -> None:
    if changes:
        await alert(settings, "state_changed", flow, run, changes)


async def fail_run(settings: Settings, run_id: int, error: BaseException, flow: str) -> None:
    """Keep the failure in the run's record and tell the webhook."""
    message = str(error) if isinstance(error, StageFailed) else f"{type(error).__name__}: {error}"
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        finish_run(session, run, "failed", message)
    get_run_logger().error("%s run %d failed: %s", flow, run_id, message)
    await alert(settings, "run_failed", flow, run, message=message)


async def alert_crash(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """Prefect's on-crashed hook: the process died or was cancelled under the run."""
    settings = Settings()
    message = state.message or "the flow run crashed"
    with session_scope(engine_for(settings.database_url)) as session:
        statement = select(PipelineRun).where(PipelineRun.flow_run_id == str(flow_run.id))
        run = session.exec(statement).first()
        if run is not None and run.state == "running":
            finish_run(session, run, "crashed", message)
    await alert(settings, "run_crashed", flow.name, run, message=message,
                flow_run_id=str(flow_run.id))


def open_run(settings: Settings, flow: str) -> int:
    with session_scope(engine_for(settings.database_url)) as session:
        run = start_run(session, flow, current_flow_run.id)
        return run.id


@flow(name="nightly", on_crashed=[alert_crash])
async def nightly(run_date: date | None = None) -> dict[str, Any]:
    """Ingest the curated entries, probe, score, publish a new release, and roll up the day.

    `run_date` is the logical date of the run (default: its scheduled start, in UTC); the
    rollups of that day and the day before are (re)computed.
    """
    settings = Settings()
    day = logical_date(run_date)
    run_id = open_run(settings, "nightly")
    try:
        ingested = await run_stage("ingest", with_retries(ingest, settings)(settings, run_id))
        if settings.probe_enabled and settings.probe_shards > 1:
            await run_stage("probe", probe_sharded(run_id))
        else:
            await run_stage("probe", with_retries(probe, settings)(settings, run_id))
        now = utcnow()
        presented = await run_stage("score", score(settings, now))
        version, changes = await run_stage(
            "publish", with_retries(publish, settings)(settings, run_id, presented, now)
        )
        await run_stage(
            "rollup", with_retries(rollup, settings)(settings, [day - timedelta(days=1), day])
        )
    except Exception as exc:
        await fail_run(settings, run_id, exc, "nightly")
        raise
    run = await complete_run(settings, run_id, presented, changes, ingested)
    await alert_state_changes(settings, "nightly", run, changes)
    return {
        "run": run_id,
        "runDate": day.isoformat(),
        "version": version,
        "published": run.entries_published,
        "changes": [change.document() for change in changes],
        "ingest": asdict(ingested),
    }


if __name__ == "__main__":
    result = asyncio.run(nightly())
    print(f"published release {result['version']} with {result['published']} entries")
