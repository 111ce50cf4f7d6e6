"""The nightly flow: ingest → probe → score → publish, orchestration only.

Every stage is a plain function in `pipeline/`; this module wires them, records
the run, and gives Prefect its retries and logs.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import datetime
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from pipeline.catalog import load_categories, read_catalog
from pipeline.ingest import IngestSummary, ingest_catalog
from pipeline.publish import Presented, publish_release
from pipeline.settings import Settings
from pipeline.store import PipelineRun, engine_for, finish_run, session_scope, start_run, utcnow


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


@task(name="probe", cache_policy=NO_CACHE)
async def probe(settings: Settings, run_id: int) -> None:
    """Probe every listed endpoint (filled by the prober)."""
    return None


@task(name="score", cache_policy=NO_CACHE)
async def score(settings: Settings, run_id: int, as_of: datetime) -> Presented:
    """Compute the presented values of every entry (status, scores, uptime)."""
    return Presented()


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
