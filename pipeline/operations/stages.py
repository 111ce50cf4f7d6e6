"""The stages of a run as plain functions over the settings and the run's record: each opens
the store, calls its room's functions, and keeps its counts in the run's record. The flows wrap
them as Prefect tasks (retries, logs); the CLI and the benchmarks call them directly."""

from __future__ import annotations

import os
import resource
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path

from prefect import get_client
from prefect.concurrency.sync import concurrency
from prefect.settings import PREFECT_API_URL

from pipeline.catalogue.entries import CatalogReport, load_categories, read_catalog
from pipeline.catalogue.ingest import (
    EmptyCatalogError,
    IngestSummary,
    ingest_catalog,
    stored_file_hashes,
)
from pipeline.judging.changes import (
    Change,
    curated_deprecations,
    recent_changes,
    recent_events,
    record_lifecycles,
    record_state_changes,
)
from pipeline.judging.health import LifecycleRules
from pipeline.judging.present import Presented, present_entries
from pipeline.judging.rollup import DayRollup, roll_up_days
from pipeline.probing.probe import probe_all
from pipeline.probing.shards import Shard, split_by_host
from pipeline.release.publish import publish_release
from pipeline.release.swap import publish_lock
from pipeline.settings import Settings
from pipeline.store.history import (
    ProbeTally,
    add_probes,
    close_probe_run,
    plan_targets,
    record_probes,
)
from pipeline.store.tables import (
    PipelineRun,
    ReleaseRow,
    active_categories,
    active_entries,
    engine_for,
    session_scope,
    utcnow,
)


def ingest_entries(settings: Settings, run_id: int) -> tuple[IngestSummary, CatalogReport]:
    """Read and validate every entry file, then upsert the valid ones into the store."""
    if not settings.entries_dir.is_dir():
        raise EmptyCatalogError(
            f"no entries folder at {settings.entries_dir}; refusing to retire every stored entry"
        )
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        known = stored_file_hashes(session)
    report = read_catalog([settings.entries_dir], settings.entries_dir,
                          max_bytes=settings.entry_max_bytes, known=known)
    with session_scope(engine) as session:
        summary = ingest_catalog(session, report, run_id=run_id)
        run = session.get(PipelineRun, run_id)
        run.entries_seen = len(report.files)
        run.entries_added, run.entries_updated = len(summary.added), len(summary.updated)
        run.entries_retired, run.entries_invalid = len(summary.retired), len(summary.invalid)
        run.errors = summary.errors
        session.add(run)
    return summary, report


@dataclass(frozen=True)
class ProbeOutcome:
    """What a probe stage did: URLs probed, outcomes counted, and whether the run is suspect."""

    probes: int
    outcomes: dict[str, int]
    network_suspect: bool


async def probe_entries(
    settings: Settings, run_id: int, entry_ids: Collection[str] | None = None
) -> ProbeOutcome:
    """Probe the published entries' URLs (or only `entry_ids`') as coroutines, then record
    every probe in the history."""
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        entries = [e for e in active_entries(session) if entry_ids is None or e.id in entry_ids]
        targets = plan_targets(session, entries)
    results = await probe_all(targets, settings.probe_settings())
    with session_scope(engine) as session:
        run = session.get(PipelineRun, run_id)
        record_probes(session, run, results)
    outcomes = Counter(result.outcome for result in results)
    return ProbeOutcome(len(results), dict(sorted(outcomes.items())), bool(run.network_suspect))


class ShardsFailedError(RuntimeError):
    """Some shards failed after their retries; the others' probes are stored and counted."""


@dataclass(frozen=True)
class ShardReport:
    """What one shard did, and in which process."""

    index: int
    hosts: frozenset[str]
    process_id: int
    seconds: float  # probing and storing, without the process's start
    peak_rss_mib: float  # of the process, so far
    tally: ProbeTally


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM, since getrusage's maximum survives the
    fork and exec that start a pool process, and would report the parent's."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return int(kib) / 1024


def plan_shards(settings: Settings) -> list[Shard]:
    """Every published entry's targets, split by host into `probe_shards` shards."""
    with session_scope(engine_for(settings.database_url)) as session:
        targets = plan_targets(session, active_entries(session))
    return split_by_host(targets, settings.probe_shards)


def shard_workers(settings: Settings) -> int:
    """Processes probing shards at once: `probe_workers` (0: one per CPU), at most one a shard."""
    return min(settings.probe_workers or os.cpu_count() or 1, settings.probe_shards)


async def probe_shard(settings: Settings, run_id: int, shard: Shard) -> ShardReport:
    """Probe one shard's targets as coroutines, then store its rows in one commit (so a
    retried shard never leaves half its rows behind)."""
    started = time.perf_counter()
    results = await probe_all(shard.targets, settings.probe_settings())
    with session_scope(engine_for(settings.database_url)) as session:
        tally = add_probes(session, run_id, results)
    seconds = time.perf_counter() - started
    return ShardReport(shard.index, shard.hosts, os.getpid(), seconds, peak_rss_mib(), tally)


def close_shards(
    settings: Settings, run_id: int, shards: Sequence[Shard], outcomes: Sequence[object]
) -> tuple[list[ShardReport], ProbeOutcome]:
    """Count the run over every shard that reported; raise ShardsFailedError naming the
    shards that did not (after their probes are counted)."""
    reports = [outcome for outcome in outcomes if isinstance(outcome, ShardReport)]
    tally = sum((report.tally for report in reports), ProbeTally())
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        close_probe_run(session, run, tally)
    failed = [shard.index for shard, outcome in zip(shards, outcomes, strict=True)
              if not isinstance(outcome, ShardReport)]
    if failed:
        raise ShardsFailedError(f"probe shards {failed} of {len(shards)} failed: "
                                f"{outcomes[failed[0]]!r}")
    probed = ProbeOutcome(tally.probes, dict(sorted(tally.outcomes.items())),
                          bool(run.network_suspect))
    return reports, probed


def score_entries_now(settings: Settings, as_of: datetime) -> Presented:
    """Compute the presented values of every entry (status, scores, uptime) as of `as_of`."""
    with session_scope(engine_for(settings.database_url)) as session:
        return present_entries(session, as_of, settings.probe_origin)


PUBLISH_LIMIT = "apidir-publish"


@contextmanager
def publisher_slot() -> Iterator[None]:
    """The one slot of the Prefect global concurrency limit `apidir-publish` (made with limit 1
    when missing), where a Prefect server is in use: publishers on other machines wait too.
    Prefect's local mode serves one process alone, where the file lock is what counts."""
    if not PREFECT_API_URL.value():
        yield
        return
    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(PUBLISH_LIMIT, 1)
    with concurrency(PUBLISH_LIMIT, occupy=1, strict=True):
        yield


def publish_now(
    settings: Settings, presented: Presented, now: datetime, run_id: int | None = None
) -> tuple[ReleaseRow, list[Change]]:
    """Record the state changes, then write a new release of the static files and record it
    (in the run's record too, with a run); one publisher at a time, here and elsewhere."""
    categories = load_categories(settings.categories_file)
    with (
        publisher_slot(),
        publish_lock(settings.output_dir, settings.publish_lock_timeout),
        session_scope(engine_for(settings.database_url)) as session,
    ):
        now = max(now, utcnow())  # a release waits its turn: it is generated when it gets it
        changes = record_state_changes(session, presented.statuses, now, run_id)
        rules = LifecycleRules(settings.failing_runs, settings.dead_days)
        presented.lifecycles, _ = record_lifecycles(
            session, sorted(active_categories(session)), presented.verdicts,
            curated_deprecations(session), now, rules, run_id)
        since = now - timedelta(days=settings.changes_days)
        release = publish_release(
            session, settings.output_dir, settings.base_url, categories, now, presented, run_id,
            releases_kept=settings.releases_kept, changes=recent_changes(session, since),
            pages=settings.publish_pages, stale_days=settings.stale_days,
            events=recent_events(session, since),
        )
        if run_id is not None:
            run = session.get(PipelineRun, run_id)
            run.release_version, run.entries_published = release.version, release.total_apis
            session.add(run)
    return release, changes


def roll_up(
    settings: Settings, days: list[date], entry_ids: Collection[str] | None = None
) -> list[DayRollup]:
    """Store the daily rollups of `days` from the probe history; idempotent."""
    with session_scope(engine_for(settings.database_url)) as session:
        return roll_up_days(session, days, entry_ids)


class UnknownSelectionError(ValueError):
    """The backfill named entries or categories the store does not have."""


def chosen_entries(
    settings: Settings, entries: list[str] | None, categories: list[str] | None
) -> list[str] | None:
    """Ids of the active entries chosen by id or category; None when nothing narrows the choice."""
    if not entries and not categories:
        return None
    with session_scope(engine_for(settings.database_url)) as session:
        active = active_categories(session)
    unknown = sorted(set(entries or ()) - set(active))
    unknown += sorted(f"category {c}" for c in set(categories or ()) - set(active.values()))
    if unknown:
        raise UnknownSelectionError(f"no active entries for: {', '.join(unknown)}")
    return sorted(
        entry_id
        for entry_id, category in active.items()
        if entry_id in (entries or ()) or category in (categories or ())
    )
