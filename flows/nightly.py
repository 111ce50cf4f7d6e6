"""The nightly flow: ingest → probe → score → publish, orchestration only.

Every stage is a plain function in `pipeline/`; this module wires them, records
the run, and gives Prefect its retries and logs.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows.probe_shards import probe_sharded
from pipeline.catalog import load_categories, read_catalog
from pipeline.history import history_frame, latest_statuses, plan_targets, record_probes
from pipeline.ingest import IngestSummary, ingest_catalog
from pipeline.probe import probe_all
from pipeline.publish import Presented, publish_release
from pipeline.score import entry_uptimes, score_entries
from pipeline.settings import Settings
from pipeline.store import (
    PipelineRun,
    active_entries,
    engine_for,
    finish_run,
    session_scope,
    start_run,
    utcnow,
)

HISTORY_WINDOW = timedelta(days=30)  # the longest window any score or uptime reads


@task(name="ingest", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
async def ingest(settings: Settings, run_id: int) -> IngestSummary:
    """Read and validate every entry file, then upsert the valid ones into the store."""
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


@task(name="probe", cache_policy=NO_CACHE, retries=1, retry_delay_seconds=10)
async def probe(settings: Settings, run_id: int) -> int:
    """Probe every published entry's URLs as coroutines of this one task, then record them."""
    if not settings.probe_enabled:
        get_run_logger().info("probing is off (APIDIR_PROBE_ENABLED=false)")
        return 0
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        targets = plan_targets(session, active_entries(session))
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
async def score(settings: Settings, run_id: int, as_of: datetime) -> Presented:
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


@task(name="publish", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
async def publish(settings: Settings, run_id: int, presented: Presented, now: datetime) -> str:
    """Write a new release of the static files and record it."""
    categories = load_categories(settings.categories_file)
    with session_scope(engine_for(settings.database_url)) as session:
        release = publish_release(
            session, settings.output_dir, settings.base_url, categories, now, presented, run_id
        )
        run = session.get(PipelineRun, run_id)
        run.release_version, run.entries_published = release.version, release.total_apis
        session.add(run)
    get_run_logger().info(
        "published %s: %d entries to %s", release.version, release.total_apis, settings.output_dir
    )
    return release.version


@flow(name="nightly", log_prints=True)
async def nightly() -> dict[str, Any]:
    """Ingest the curated entries, probe, score, and publish a new release."""
    settings = Settings()
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        run_id = start_run(session, "nightly").id
    try:
        summary = await ingest(settings, run_id)
        if settings.probe_enabled and settings.probe_shards > 1:
            await probe_sharded(run_id)
        else:
            await probe(settings, run_id)
        now = utcnow()
        presented = await score(settings, run_id, now)
        version = await publish(settings, run_id, presented, now)
    except BaseException as exc:
        with session_scope(engine) as session:
            finish_run(
                session, session.get(PipelineRun, run_id), "failed", f"{type(exc).__name__}: {exc}"
            )
        raise
    with session_scope(engine) as session:
        run = session.get(PipelineRun, run_id)
        finish_run(session, run, "completed")
        return {
            "run": run_id,
            "version": version,
            "published": run.entries_published,
            "ingest": asdict(summary),
        }


if __name__ == "__main__":
    result = asyncio.run(nightly())
    print(f"published release {result['version']} with {result['published']} entries")
