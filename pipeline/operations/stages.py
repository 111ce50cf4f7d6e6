"""The stages of a run as plain functions over the settings and the run's record: each opens
the store, calls its room's functions, and keeps its counts in the run's record. The flows wrap
them as Prefect tasks (retries, logs); the CLI and the benchmarks call them directly."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from prefect import get_client
from prefect.client.orchestration import SyncPrefectClient
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectAlreadyExists
from prefect.settings import PREFECT_API_URL
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from pipeline import processes
from pipeline.catalogue.entries import (
    CatalogReport,
    KnownFile,
    load_categories,
    paused_garbage_collection,
    read_catalog,
)
from pipeline.catalogue.ingest import (
    EmptyCatalogError,
    IngestSummary,
    ingest_catalog,
    still_stored_as_read,
    stored_files,
)
from pipeline.catalogue.spool import EntrySpool, entry_spool
from pipeline.judging import rollup
from pipeline.judging.changes import (
    Change,
    curated_deprecations,
    recent_changes,
    recent_events,
    record_lifecycles,
    record_state_changes,
    run_changes,
)
from pipeline.judging.content_scores import store_content_scores
from pipeline.judging.health import LifecycleRules
from pipeline.judging.present import Presented, PresentedValues, present_entries
from pipeline.judging.rollup import RolledUp, roll_up_days
from pipeline.operations.handover import handed_over
from pipeline.operations.score_parts import hand_over_presented
from pipeline.operations.upkeep import (  # noqa: F401 (the first three: the flows' stages)
    PRUNED_DAYS_A_NIGHT,
    after_rolling_up,
    roll_up_night_aside,
    rolling_up,
)
from pipeline.probing.probe import probe_all
from pipeline.probing.shards import Shard, split_by_host
from pipeline.processes import usable_cores
from pipeline.release.publish import (
    Published,
    earliest_stamp,
    publish_release,
    record_live_release,
)
from pipeline.release.swap import PublishLockTimeout, publish_lock, write_failures_told
from pipeline.settings import Settings
from pipeline.store.history import (
    ProbeTally,
    add_probes,
    close_probe_run,
    plan_targets,
    record_probes,
    redirect_links,
    stored_run_tally,
    witness_targets,
)
from pipeline.store.locks import StoreWork, store_lock
from pipeline.store.migrate import lasting_refusal, store_name
from pipeline.store.shards import (
    finish_shard,
    finished_shards,
    load_shard,
    save_shards,
    start_shard,
    stored_tally,
)
from pipeline.store.tables import (
    PipelineRun,
    active_categories,
    engine_for,
    holds_entries,
    session_scope,
    utcnow,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


# What the stages' worker processes run: the entry files' reader, the score stage's spans, the
# release's pages and its check of the datasets.
WORKER_MODULES = ("pipeline.catalogue.entries", "pipeline.operations.score_parts",
                  "pipeline.operations.upkeep",
                  "pipeline.release.entry_site", "pipeline.release.validate")


def warm_workers() -> None:
    """Start the server the stages' worker processes are forked from, in the background, with
    what they run imported once (`processes.warm_workers`): a run calls it first, so that its
    score stage's and publish's workers start at once rather than after 1-2 s of imports."""
    processes.warm_workers(WORKER_MODULES)


def ingest_entries(settings: Settings, run_id: int) -> tuple[IngestSummary, CatalogReport]:
    """Read and validate every entry file, then upsert the valid ones into the store, with the
    Pricing and Depth of every new or changed content (read back by the score stage)."""
    if not settings.entries_dir.is_dir():
        raise EmptyCatalogError(
            f"no entries folder at {settings.entries_dir}; refusing to retire every stored entry"
        )
    engine = engine_for(settings.database_url)
    with ExitStack() as spools:
        # The files are read and parsed before the run's turn (minutes at 100,000 entries),
        # against the store as it was then; one ingest at a time writes (`store_lock`), from
        # what is stored as read under the lock, so a run that waited for another's finds its
        # entries stored, rather than inserting them again. Should the other run have changed
        # a file this one did not parse again, the files are read again under the lock.
        read_with, report, spool = _read_entries(settings, engine, spools)
        # Each commit under the lock checks it is still held (`store_lock`'s check).
        with store_lock(engine, StoreWork.ingest, run_id, settings.store_lock_timeout,
                        settings.store_lock_keepalive) as held:
            with session_scope(engine) as session:
                known = stored_files(session)
            if not still_stored_as_read(report, read_with, known):
                log.info("another run changed stored entries while this one read the entry "
                         "files: reading them again")
                _, report, spool = _read_entries(settings, engine, spools, known)
            with session_scope(engine, held) as session:
                summary = ingest_catalog(session, report, run_id=run_id, spool=spool)
            with session_scope(engine, held) as session:
                store_content_scores(session)
    with session_scope(engine) as session:
        run = session.get(PipelineRun, run_id)
        run.entries_seen = len(report.files)
        run.entries_added, run.entries_updated = len(summary.added), len(summary.updated)
        run.entries_retired, run.entries_invalid = len(summary.retired), len(summary.invalid)
        run.errors = summary.errors
        session.add(run)
    return summary, report


def _read_entries(
    settings: Settings, engine: Engine, spools: ExitStack,
    known: Mapping[str, KnownFile] | None = None,
) -> tuple[Mapping[str, KnownFile], CatalogReport, EntrySpool]:
    """Every entry file read against `known` (default: the store as it is now), the parsed
    entries kept in a spool of `spools` (on disk, not in memory); what was stored as read
    with, the report, and the spool."""
    if known is None:
        with session_scope(engine) as session:
            known = stored_files(session)
    spool = spools.enter_context(entry_spool())
    report = read_catalog([settings.entries_dir], settings.entries_dir,
                          max_bytes=settings.entry_max_bytes, known=known, keep=spool.keep)
    return known, report, spool


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
    every probe in the history (`stored_again_if_refused`), once: a run whose probes an
    earlier attempt stored (its commit's answer lost on the way, or the stage run again
    after it) is neither probed nor stored again, as a shard is not. A run too small to judge
    the network by its own probes is topped up with witnesses (`witness_targets`)."""
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        if (stored := _stored_outcome(session, run_id)) is not None:
            return stored
        targets = plan_targets(session, entry_ids)
        targets += witness_targets(session, targets)
    results = await probe_all(targets, settings.probe_settings())

    def store() -> ProbeOutcome:
        with session_scope(engine) as session:
            if (stored := _stored_outcome(session, run_id)) is not None:
                return stored
            run = session.get(PipelineRun, run_id)
            record_probes(session, run, results)
            return _outcome(ProbeTally.of(results), run)

    return await stored_again_if_refused(settings, f"run {run_id}", len(results), store)


def _outcome(tally: ProbeTally, run: PipelineRun) -> ProbeOutcome:
    """Each target by its conclusion, not by both looks."""
    return ProbeOutcome(tally.probes, dict(sorted(tally.outcomes.items())),
                        bool(run.network_suspect))


def _stored_outcome(session: Session, run_id: int) -> ProbeOutcome | None:
    """What the run's stored probes came to, if it stored any (None: not yet)."""
    run = session.get(PipelineRun, run_id)
    tally = stored_run_tally(session, run)
    return None if tally is None else _outcome(tally, run)


class ShardsFailedError(RuntimeError):
    """Some shards failed after their retries; the others' probes are stored and counted."""


class ShardRunFailed(RuntimeError):
    """A shard's flow run on a worker ended without storing its probes; says how it ended."""


REASON_LENGTH = 400  # of a failed shard's error in the run's one-line message


@dataclass(frozen=True)
class ShardReport:
    """What one shard did, and in which process."""

    index: int
    hosts: frozenset[str]
    process_id: int
    seconds: float  # probing and storing, without the process's start
    cpu_seconds: float | None  # the process's CPU in those seconds (None: stored before kept)
    peak_rss_mib: float  # of the process, so far
    tally: ProbeTally

    def summary(self) -> str:
        """One line for the run's log: how much, how long, how busy, and what came of it."""
        cpu = "" if self.cpu_seconds is None else f" ({self.cpu_seconds:.1f} s of CPU)"
        return (f"{self.tally.probes} URLs of {len(self.hosts)} hosts in {self.seconds:.1f} s"
                f"{cpu}: {dict(sorted(self.tally.outcomes.items()))}")


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
    """Every published entry's targets, split by host into `probe_shards` shards, the hosts
    the latest probes were redirected between kept in one shard."""
    with session_scope(engine_for(settings.database_url)) as session:
        targets = plan_targets(session)
        links = redirect_links(session)
    return split_by_host(targets, settings.probe_shards, links)


def shard_workers(settings: Settings) -> int:
    """Processes probing shards at once: `probe_workers` (0: one per usable core), at most one a
    shard."""
    return min(settings.probe_workers or usable_cores(), settings.probe_shards)


async def probe_shard(
    settings: Settings,
    run_id: int,
    shard: Shard,
    keep: Callable[[Session, ShardReport], bool] | None = None,
) -> ShardReport:
    """Probe one shard's targets as coroutines, then store its rows in one commit (so a
    retried shard never leaves half its rows behind; `stored_again_if_refused`); `keep`, in
    that commit, may refuse the rows (it returns False), which are then rolled back."""
    started, cpu = time.perf_counter(), time.process_time()
    probe_settings = replace(settings.probe_settings(), own_hosts=shard.hosts, sharing=shard.of)
    results = await probe_all(shard.targets, probe_settings)

    def store() -> ShardReport:
        with session_scope(engine_for(settings.database_url)) as session:
            tally = add_probes(session, run_id, results)
            report = ShardReport(shard.index, shard.hosts, os.getpid(),
                                 time.perf_counter() - started, time.process_time() - cpu,
                                 peak_rss_mib(), tally)
            if keep is not None and not keep(session, report):
                raise _StoredAlready
        return report

    return await stored_again_if_refused(settings, f"shard {shard.index}", len(results), store)


async def stored_again_if_refused(settings: Settings, prober: str, probes: int,
                                  store: Callable[[], T]) -> T:
    """`store()`, the one commit of a probe stage's (or shard's) rows, tried again
    `stage_retries` times with the stage's doubling delay while the store refuses it (busy,
    or out of reach for a moment): a probe stage that fails is run again whole, and asks its
    hosts a second time that night. A refusal no retry mends (`lasting_refusal`: a file it may
    not write, a table gone) fails at once."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return store()
        except OperationalError as error:
            if attempt > settings.stage_retries or lasting_refusal(error):
                raise
            delay = settings.retry_delay * 2 ** (attempt - 1)
            log.warning("%s could not store its %d probes (%s); storing them again in %g s, "
                        "without probing again", prober, probes, error.orig, delay)
            await asyncio.sleep(delay)


class _StoredAlready(Exception):
    """Another run of the shard stored its probes first: this run's are rolled back."""


def store_shard_plan(settings: Settings, run_id: int) -> list[Shard]:
    """Plan the run's shards and store each one's targets, where a worker on any machine
    reads them by run and index."""
    shards = plan_shards(settings)
    with session_scope(engine_for(settings.database_url)) as session:
        save_shards(session, run_id, shards)
    return shards


def night_of(settings: Settings, run_id: int) -> str:
    """What tells the run from every other run with its id, for the keys of its shards' flow
    runs: the orchestrator's flow run of the night (else the run's start). Run ids belong to
    the store, and a new store or a restored backup numbers its runs again, while the Prefect
    server keeps every key it was given: keyed by the run id alone, a night would be handed an
    earlier night's shard runs, long ended, and probe nothing."""
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        return run.flow_run_id or run.started_at.isoformat()


def _stored_report(shard: Shard, row: Any) -> ShardReport:
    return ShardReport(shard.index, shard.hosts, row.pid, row.seconds, row.cpu_seconds,
                       row.peak_rss_mib, stored_tally(row))


async def probe_stored_shard(
    settings: Settings, run_id: int, index: int, flow_run_id: str | None = None
) -> ShardReport:
    """Probe the shard the run stored under `index` and store its probes, once: a shard
    that an earlier attempt (or another run of it) stored is not probed or stored again.

    Where and since when it runs is noted beside its probing (`note_shard_start`), not before
    it: on SQLite that commit waits for any other writer's, such as the night's rollup, which
    stores a day's rows beside the probe stage. The probes' commit records it again."""
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        shard, row = load_shard(session, run_id, index)
    if row.finished_at is not None:
        return _stored_report(shard, row)
    started_at = utcnow()
    noting = asyncio.ensure_future(asyncio.to_thread(
        note_shard_start, settings, run_id, index, flow_run_id, started_at))

    def keep(session: Session, report: ShardReport) -> bool:
        return finish_shard(session, run_id, index, report.tally, report.seconds,
                            report.cpu_seconds or 0.0, report.peak_rss_mib, started_at,
                            flow_run_id)

    # A shard that fails or is stopped leaves the note to end in its thread, unwaited.
    noting.add_done_callback(lambda note: note.cancelled() or note.exception())
    try:
        report = await probe_shard(settings, run_id, shard, keep)
    except _StoredAlready:
        with session_scope(engine) as session:
            report = _stored_report(*load_shard(session, run_id, index))
    await noting  # long ended, as a rule
    return report


def note_shard_start(settings: Settings, run_id: int, index: int, flow_run_id: str | None,
                     started_at: datetime) -> None:
    """Note where and since when the shard runs (`start_shard`), for a look at it while it
    runs. A store too busy to take the note is told in one line; the shard probes on."""
    try:
        with session_scope(engine_for(settings.database_url)) as session:
            start_shard(session, run_id, index, flow_run_id, started_at)
    except OperationalError as error:
        log.warning("shard %d of run %d: where it runs is not noted until its probes are "
                    "stored (%s)", index, run_id, first_line(str(error.orig)))


def stored_shard_outcomes(
    settings: Settings, run_id: int, shards: Sequence[Shard], failures: Mapping[int, str]
) -> list[ShardReport | ShardRunFailed]:
    """Each shard's report as it stored it, else why it did not (`failures`, by index): the
    store, not the orchestrator, tells which probes are in."""
    with session_scope(engine_for(settings.database_url)) as session:
        finished = finished_shards(session, run_id)
    return [
        _stored_report(shard, finished[shard.index]) if shard.index in finished
        else ShardRunFailed(failures.get(shard.index, "ended without storing its probes"))
        for shard in shards
    ]


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
        first = outcomes[failed[0]]
        reason = first_line(f"{type(first).__name__}: {first}")
        raise ShardsFailedError(f"probe shards {failed} of {len(shards)} failed; shard "
                                f"{failed[0]}: {reason}")
    probed = ProbeOutcome(tally.probes, dict(sorted(tally.outcomes.items())),
                          bool(run.network_suspect))
    return reports, probed


def first_line(text: str, limit: int | None = REASON_LENGTH) -> str:
    """The first non-blank line of an error, at most `limit` characters: a database error
    goes on with the statement and its values, which a run's message does not need."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if limit is None or len(line) <= limit else line[:limit - 1] + "…"


def score_entries_now(settings: Settings, as_of: datetime) -> Presented:
    """Compute the presented values of every entry (status, scores, uptime) as of `as_of`."""
    with (
        paused_garbage_collection(),
        session_scope(engine_for(settings.database_url)) as session,
    ):
        return present_entries(session, as_of, settings.probe_origin)


def hand_over_scores(settings: Settings, as_of: datetime, run_id: int | None = None) -> Path:
    """`score_entries_now`, written to a hand-over file (of run `run_id`) an entry at a time as
    each is reached (never every entry's values at once), a span of the entries on each core
    for a large catalogue (`score_parts`); returns the file's path."""
    return hand_over_presented(settings.database_url, as_of, settings.probe_origin, run_id)


PUBLISH_LIMIT = "apidir-publish"


@contextmanager
def publisher_slot(timeout: float | None = None) -> Iterator[None]:
    """The one slot of the Prefect global concurrency limit `apidir-publish` (made with limit 1
    when missing), where a Prefect server is in use: publishers on other machines wait too,
    at most `timeout` seconds (None: for ever), then PublishLockTimeout as for the file lock.
    Prefect's local mode serves one process alone, where the file lock is what counts."""
    if not PREFECT_API_URL.value():
        yield
        return
    with get_client(sync_client=True) as client:
        publish_limit_made(client)
    with ExitStack() as held:
        try:
            held.enter_context(concurrency(PUBLISH_LIMIT, occupy=1, timeout_seconds=timeout,
                                           strict=True))
        except TimeoutError:
            if timeout is None:  # not a wait given up: no wait was bounded
                raise
            raise PublishLockTimeout(
                f"another publisher has held the Prefect concurrency limit {PUBLISH_LIMIT} for "
                f"more than {timeout:g} s; try again when it has finished") from None
        yield


def publish_limit_made(client: SyncPrefectClient) -> None:
    """Make the `apidir-publish` limit with one slot, or set an existing one back to one.
    Created first, as the server creates a name once: Prefect's upsert reads, then creates,
    so two first publishes at once both found it missing and the later one failed."""
    try:
        client.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name=PUBLISH_LIMIT, limit=1))
    except ObjectAlreadyExists:
        client.upsert_global_concurrency_limit_by_name(PUBLISH_LIMIT, 1)


class NothingToPublish(EmptyCatalogError):
    """The store holds no entry: publishing would replace the live release with an empty one."""


def publish_now(
    settings: Settings, presented: PresentedValues, now: datetime, run_id: int | None = None
) -> tuple[Published, list[Change]]:
    """Record the state changes, then write a new release of the static files and record it
    (in the run's record too, with a run); one publisher at a time, here and elsewhere.
    A store holding no entry publishes nothing: its release would replace the live one with
    an empty one (a new store, from a mistyped APIDIR_DATABASE_URL). A write the system
    refuses (a full disk) is told in one line naming where (`write_failures_told`)."""
    categories = load_categories(settings.categories_file)
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        if not holds_entries(session):
            raise NothingToPublish(
                f"{store_name(engine)} holds no entries: "
                "nothing to publish, and the live release is left as it is (`apidir run` "
                "ingests the catalogue first)")
    with (
        write_failures_told(settings.output_dir),
        paused_garbage_collection(),
        publisher_slot(settings.publish_lock_timeout),
        publish_lock(settings.output_dir, settings.publish_lock_timeout),
        session_scope(engine_for(settings.database_url)) as session,
    ):
        record_live_release(session, settings.output_dir)  # its event goes in the change log
        now = release_stamp(session, settings.output_dir, max(now, utcnow()))
        changes = record_state_changes(session, presented.states, now, run_id)
        rules = LifecycleRules(settings.failing_runs, settings.dead_days)
        presented.lifecycles, _ = record_lifecycles(
            session, sorted(active_categories(session)), presented.verdicts,
            curated_deprecations(session), now, rules, run_id)
        since = now - timedelta(days=settings.changes_days)
        published = publish_release(
            session, settings.output_dir, settings.base_url, categories, now, presented, run_id,
            releases_kept=settings.releases_kept, changes=recent_changes(session, since),
            pages=settings.publish_pages, stale_days=settings.stale_days,
            events=recent_events(session, since), spare=settings.publish_spare,
            entries_dir=settings.entries_dir,
        )
    return published, changes


def release_stamp(session: Session, output_dir: Path, now: datetime) -> datetime:
    """When a release that got the lock at `now` is generated: `now`, or just after the last
    release (and at the last catalogue event) when the clock is behind them, set back since
    (`earliest_stamp`); a release stamped before them would fail validation until the clock
    caught up, and every publish with it."""
    earliest = earliest_stamp(session, output_dir)
    if earliest is None or earliest <= now:
        return now
    log.warning("the clock (%s) is behind the last release or catalogue event: this release "
                "is stamped %s, just after it", now.isoformat(), earliest.isoformat())
    return earliest


def publish_handed_over(
    settings: Settings, presented: Path, now: datetime, run_id: int | None = None
) -> tuple[Published, list[Change]]:
    """`publish_now` with the presented values the score stage handed over in the file
    `presented`, each entry's read as the release reaches it."""
    with handed_over(presented) as values:
        return publish_now(settings, values, now, run_id)


def changes_of_run(settings: Settings, run_id: int) -> list[Change]:
    """The state changes the run recorded, read back from the store after its publish."""
    with session_scope(engine_for(settings.database_url)) as session:
        return run_changes(session, run_id)


def roll_up(
    settings: Settings, days: list[date], entry_ids: Collection[str] | None = None,
    run_id: int | None = None,
) -> list[RolledUp]:
    """Store the daily rollups of `days` from the probe history; idempotent. The cycle
    collector is paused, as in the score stage (a fifth of its CPU at 100,000 entries)."""
    with paused_garbage_collection(), rolling_up(settings, run_id) as session:
        return roll_up_days(session, days, entry_ids)


def refuse_pruned_days(settings: Settings, days: list[date]) -> None:
    """Refuse a backfill of days whose raw probes were pruned, before it probes or writes."""
    with session_scope(engine_for(settings.database_url)) as session:
        rollup.refuse_pruned_days(session, days)


class UnknownSelectionError(ValueError):
    """The backfill named entries or categories the store does not have."""


@dataclass(frozen=True)
class Selection:
    """Entries chosen by id or category as the operator named them: what a backfill hands its
    tasks, each of which finds the ids itself (a category at 100,000 entries holds thousands,
    too many to pass from task to task)."""

    entries: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    def entry_ids(self, settings: Settings) -> list[str] | None:
        """The ids chosen (`chosen_entries`); None when nothing narrows the choice."""
        return chosen_entries(settings, list(self.entries), list(self.categories))


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
