"""The nightly flow: ingest → daily rollups of the days ended, beside the probing → score →
publish, wiring only.

Every stage is a plain function in `pipeline/operations/stages.py`; this module wraps them as
Prefect tasks with retries and logs, and lets `pipeline/operations/runs.py` keep the run's
record, its summary artifacts and its alerts.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run as current_flow_run

from flows.probe_shards import probe_in_shards, probe_on_workers
from pipeline.operations import stages
from pipeline.operations.handover import discard
from pipeline.operations.report import LISTED, IngestBrief
from pipeline.operations.runs import (
    REPORTS_PRUNED_A_NIGHT,
    alert_crash,
    alert_state_changes,
    close_failed_run,
    complete_run,
    fail_run,
    open_run,
    prune_run_reports,
    report_left_out,
    report_network_suspect,
    run_beside,
    run_stage,
    with_retries,
)
from pipeline.settings import Settings
from pipeline.store.tables import utcnow

# A hung run fails at this bound instead of holding back every night queued behind it.
RUN_TIMEOUT = Settings().run_timeout


@task(name="ingest", cache_policy=NO_CACHE)
async def ingest(settings: Settings, run_id: int) -> IngestBrief:
    """Read and validate every entry file, then upsert the valid ones into the store; the
    result counts what changed and names the first of each kind (every id is in the store)."""
    summary, report = stages.ingest_entries(settings, run_id)
    logger = get_run_logger()
    for problem in report.problems[:LISTED]:
        logger.warning("invalid entry file: %s", problem)
    if len(report.problems) > LISTED:
        logger.warning("… and %d more invalid entry files: `apidir validate` lists every one",
                       len(report.problems) - LISTED)
    brief = IngestBrief.of(summary)
    logger.info("ingest: %s", ", ".join(f"{count} {kind}" for kind, count in brief.counts.items()))
    return brief


@task(name="probe", cache_policy=NO_CACHE)
async def probe(settings: Settings, run_id: int, chosen: stages.Selection | None = None) -> int:
    """Probe the published entries' URLs (or only the `chosen` ones') as coroutines of this
    one task."""
    logger = get_run_logger()
    if not settings.probe_enabled:
        logger.info("probing is off (APIDIR_PROBE_ENABLED=false)")
        return 0
    entry_ids = None if chosen is None else chosen.entry_ids(settings)
    probed = await stages.probe_entries(settings, run_id, entry_ids)
    logger.info("probed %d URLs: %s", probed.probes, probed.outcomes)
    return probed.probes


@task(name="score", cache_policy=NO_CACHE)
async def score(settings: Settings, run_id: int, as_of: datetime) -> Path:
    """Compute the presented values of every entry (status, scores, uptime) as of `as_of`, into
    the run's hand-over file whose path this returns."""
    return stages.hand_over_scores(settings, as_of, run_id)


@task(name="publish", cache_policy=NO_CACHE)
async def publish(settings: Settings, run_id: int, presented: Path, now: datetime) -> str:
    """Record the state changes, then write a new release of the static files and record it,
    from the presented values the score task handed over in the file `presented`; the
    release's version (the changes stay in the store, for the run's summary and alerts)."""
    published, changes = stages.publish_handed_over(settings, presented, now, run_id)
    get_run_logger().info("%s, %d state changes, to %s", published, len(changes),
                          settings.output_dir)
    return published.release.version


@task(name="rollup", cache_policy=NO_CACHE)
async def rollup(settings: Settings, days: list[date] | None,
                 chosen: stages.Selection | None = None, run_id: int | None = None,
                 ended_by: date | None = None, prune_reports: bool = False) -> int:
    """Store the daily rollups of `days` from the probe history (of the `chosen` entries, or
    all), for run `run_id`; idempotent. `days` None: those ended by `ended_by` and not rolled
    up yet, as the store holds them once this run's turn comes (`upkeep.roll_up_ended`).
    `prune_reports`: also delete the runs' old reports from the Prefect server, the nightly's
    upkeep (a backfill leaves them)."""
    if days is None:  # the night's: in a process of its own, so it runs beside the probes
        night = await asyncio.to_thread(stages.roll_up_night_aside, settings,
                                        ended_by or utcnow().date(), run_id)
    else:
        entry_ids = None if chosen is None else chosen.entry_ids(settings)
        night = stages.after_rolling_up(
            settings, stages.roll_up(settings, days, entry_ids, run_id), run_id)
    rollups, kept, pruned = night.rolled, night.kept, night.pruned
    rows = sum(r.entries + r.endpoints for r in rollups)
    named = (", ".join(rolled.day.isoformat() for rolled in rollups) if rollups
             else "no day (none ended since)")
    get_run_logger().info("rolled up %s: %d rows", named, rows)
    if kept:
        get_run_logger().info("kept the rollup evidence of %s, rolled up before it was kept",
                              ", ".join(day.isoformat() for day in kept))
    if pruned:
        most = len(pruned) == stages.PRUNED_DAYS_A_NIGHT
        get_run_logger().info("pruned the raw probes of %s (%d probes), older than %d days%s",
                              ", ".join(day.isoformat() for day, _ in pruned),
                              sum(count for _, count in pruned), settings.probes_kept_days,
                              "; the most a night: the next nights prune any newer days due"
                              if most else "")
    if prune_reports and (reports := await prune_run_reports(settings, utcnow())):
        tell = get_run_logger().warning if reports.problem else get_run_logger().info
        tell("pruned %d run reports older than %d days from the Prefect server%s",
             reports.deleted, settings.reports_kept_days,
             f"; stopped short: {reports.problem}" if reports.problem else
             "; the most a night: the next nights prune the rest"
             if reports.deleted == REPORTS_PRUNED_A_NIGHT else "")
    return rows


@flow(name="nightly", on_crashed=[alert_crash], on_failure=[close_failed_run],
      timeout_seconds=RUN_TIMEOUT)
async def nightly(run_date: date | None = None) -> dict[str, Any]:
    """Ingest the curated entries, roll up the days ended, probe, score and publish a new
    release.

    `run_date` is the logical date of the run (default: its scheduled start, in UTC). Each
    day up to it is rolled up once it has ended (`upkeep.roll_up_ended`): yesterday, on a night
    like any other, and the days of nights that did not run. They are rolled up in a process of
    their own while tonight's probes are taken (`stages.roll_up_night_aside`), mostly waiting
    on the network, and before the score, which reads them whole from their rollups. A failure
    of either fails the night once both have ended.
    """
    settings = Settings()
    stages.warm_workers()
    day = run_date or current_flow_run.scheduled_start_time.astimezone(UTC).date()
    run_id = await open_run(settings, "nightly")
    presented: Path | None = None
    try:  # the hand-over file goes however the run ends
        try:
            ingested = await run_stage("ingest", with_retries(ingest, settings)(settings, run_id))
            if settings.probe_enabled and settings.probe_deployment:
                probing = probe_on_workers(run_id)
            elif settings.probe_enabled and settings.probe_shards > 1:
                probing = probe_in_shards(run_id)
            else:
                probing = with_retries(probe, settings)(settings, run_id)
            await run_beside(run_stage("probe", probing), run_stage(
                "rollup", with_retries(rollup, settings)(
                    settings, None, run_id=run_id, ended_by=day, prune_reports=True)))
            await run_stage("probe", report_network_suspect(settings, "nightly", run_id))
            now = utcnow()
            presented = await run_stage("score", score(settings, run_id, now))
            version = await run_stage(
                "publish", with_retries(publish, settings)(settings, run_id, presented, now)
            )
        except Exception as exc:
            await fail_run(settings, run_id, exc, "nightly")
            raise
        changes = stages.changes_of_run(settings, run_id)
        run = await complete_run(settings, run_id, presented, changes, ingested)
    finally:
        discard(presented)
    await alert_state_changes(settings, "nightly", run, changes)
    await report_left_out(settings, "nightly", run_id)  # told as the completed run it is
    return {
        "run": run_id,
        "runDate": day.isoformat(),
        "version": version,
        "published": run.entries_published,
        "changed": len(changes),
        "changes": [change.document() for change in changes[:LISTED]],
        "ingest": asdict(ingested),
    }


if __name__ == "__main__":
    result = asyncio.run(nightly())
    print(f"published release {result['version']} with {result['published']} entries")
