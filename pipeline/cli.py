"""The `apidir` command: run the pipeline, validate entries, publish, print the contract."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from pipeline.catalogue.entries import CatalogReport, CategoryError, load_categories, read_catalog
from pipeline.probing.probe import (
    ProbeResult,
    ProbeSettings,
    ProbeTarget,
    probe_all,
    probe_targets_for,
    redirected_to,
)
from pipeline.settings import Settings

app = typer.Typer(
    help="API Directory: curate, probe, score and publish the catalogue.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: each value named by what it is (DATE, ID, URL)
)
LOCAL_BASE_URL = Settings.model_fields["base_url"].default


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        from pipeline.contract import INTERFACE_VERSION

        typer.echo(f"apidir {version('apidir')} (interface {INTERFACE_VERSION})")
        raise typer.Exit()


@app.callback()
def options(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """API Directory: curate, probe, score and publish the catalogue."""


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command with one line on standard error."""
    typer.echo(f"apidir: {message}", err=True)
    raise typer.Exit(code)


def write_out(text: str) -> None:
    """Write a document to standard output; one line when there is none to write to (the
    command started with it closed, `apidir openapi >&-`: Python's sys.stdout is None)."""
    if sys.stdout is None:
        fail("standard output is closed")
    sys.stdout.write(text)


class _WithoutTraceback(logging.Filter):
    """Log lines on the terminal keep their message and lose the traceback (the run's record,
    Prefect's UI and APIDIR_DEBUG=1 keep it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def terminal_logs_without_tracebacks() -> None:
    """A failed run ends in one line on the terminal, not in Prefect's tracebacks; nor does a
    warning logged where no handler is set (Python's last resort prints it)."""
    if os.environ.get("APIDIR_DEBUG"):
        return
    names = [name for name in logging.root.manager.loggerDict if name.startswith("prefect")]
    handlers = [handler for logger in [logging.root, *map(logging.getLogger, names)]
                for handler in logger.handlers]
    for handler in [*handlers, logging.lastResort]:
        if isinstance(handler, logging.StreamHandler) and not any(
                isinstance(kept, _WithoutTraceback) for kept in handler.filters):
            handler.addFilter(_WithoutTraceback())


def warn_if_local(settings: Settings) -> None:
    """A release for a real host must not point its `meta.source` and sitemap at localhost."""
    if settings.base_url == LOCAL_BASE_URL:
        what = "meta.source and sitemap.xml point" if settings.publish_pages else \
            "meta.source points"
        typer.echo(f"apidir: warning: {what} at the local default {LOCAL_BASE_URL}; "
                   "set APIDIR_BASE_URL to the address the output folder is served from",
                   err=True)


@contextmanager
def time_limit_told(output_dir: Path) -> Iterator[None]:
    """A run stopped by its time limit ends in the line its record took (`time_limit_line`:
    the setting, and whether a release went live), else the same words from what the command
    saw of the live release; and says so when the alert of it was not delivered."""
    from prefect.flow_engine import FlowRunTimeoutError

    from pipeline.operations.runs import time_limit_line, time_limit_recorded
    from pipeline.release.swap import live_release

    before = live_release(output_dir)
    try:
        yield
    except FlowRunTimeoutError as stopped:
        line = time_limit_recorded(stopped) or time_limit_line(
            Settings().run_timeout, live_release(output_dir) == before)
        fail(line + alert_not_delivered(stopped))


@app.command()
def run() -> None:
    """Run the nightly pipeline once, here, in Prefect's local mode."""
    from flows.nightly import nightly
    from pipeline.operations.local_mode import tether_temporary_server
    from pipeline.store.tables import engine_for

    terminal_logs_without_tracebacks()
    settings = Settings()
    # The store is opened and made ready (upgraded, or refused in one line: no file, a newer
    # version's, out of date) before Prefect starts, as `backfill` does, not amid its logs.
    engine_for(settings.database_url)
    tether_temporary_server()
    with time_limit_told(settings.output_dir):
        result = asyncio.run(nightly())
    warn_if_local(settings)  # of the release made: a refused store or a failure is all it says
    typer.echo(
        f"published release {result['version']} with {result['published']} entries "
        f"to {settings.output_dir}/"
    )
    if line := invalid_files_line(result["ingest"]):
        typer.echo(line, err=True)


def invalid_files_line(ingested: dict[str, Any]) -> str | None:
    """The line that tells of the invalid entry files a run kept at their last valid version,
    from the run's ingest brief (counts, and the first ids of each kind)."""
    invalid = ingested["counts"]["invalid"]
    if not invalid:
        return None
    named = ingested["named"]["invalid"]
    more = f" and {invalid - len(named):,} more" if invalid > len(named) else ""
    return (f"{invalid:,} invalid entry file(s) kept their last valid version: "
            f"{', '.join(named)}{more} (see `apidir validate`)")


def day_of(text: str) -> date:
    """A day written as YYYY-MM-DD."""
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a day written as YYYY-MM-DD") from None


@app.command()
def backfill(
    start: Annotated[date, typer.Argument(
        parser=day_of, metavar="START", help="First day (UTC), as 2026-11-01.")],
    end: Annotated[date, typer.Argument(
        parser=day_of, metavar="END", help="Last day (UTC), included.")],
    entry: Annotated[list[str] | None, typer.Option(
        metavar="ID", help="Only this entry (repeatable).")] = None,
    category: Annotated[list[str] | None, typer.Option(
        metavar="CATEGORY", help="Only this category's entries (repeatable).")] = None,
    reprobe: Annotated[bool, typer.Option(help="Probe the chosen entries first.")] = False,
) -> None:
    """Recompute the daily rollups and scores of each day in a range, then republish."""
    from difflib import get_close_matches

    from flows.backfill import backfill as backfill_flow
    from pipeline.contract import CATEGORY_IDS
    from pipeline.judging.evidence import days_between
    from pipeline.judging.rollup import ProbesPrunedError
    from pipeline.operations.local_mode import tether_temporary_server
    from pipeline.operations.stages import refuse_pruned_days

    terminal_logs_without_tracebacks()
    if end < start:
        fail(f"END {end} is before START {start}")
    check_backfill_days(start, end)
    for name in category or ():
        if name not in CATEGORY_IDS:
            close = get_close_matches(name, CATEGORY_IDS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            fail(f"no category {name!r}: {hint}the categories are {', '.join(CATEGORY_IDS)}")
    try:  # told before Prefect starts (a store path naming no file too, as the store opens):
        # the flow refuses them as well, amid its own logs
        refuse_pruned_days(Settings(), days_between(start, end))
    except ProbesPrunedError as refused:
        fail(str(refused))

    tether_temporary_server()
    with time_limit_told(Settings().output_dir):
        result = asyncio.run(
            backfill_flow(start, end, entries=entry, categories=category, reprobe=reprobe))
    typer.echo(
        f"rolled up {len(result['days'])} days ({result['rows']} rows); "
        f"published release {result['version']} with {result['published']} entries"
    )


# The first day a backfill may roll up: no probe is older, and a day's windows reach back a
# month from it, which the first days a date can hold cannot.
FIRST_BACKFILL_DAY = date(1970, 1, 1)


def check_backfill_days(start: date, end: date) -> None:
    """Refuse, naming the date, a range reaching past today (UTC: a day not yet begun has
    nothing to roll up, and the last days a date can hold have no next day) or before
    FIRST_BACKFILL_DAY."""
    from datetime import UTC, datetime

    today = datetime.now(UTC).date()
    if end > today:
        fail(f"END {end} is after today ({today}, UTC): a backfill rolls up days that have "
             "begun")
    if start < FIRST_BACKFILL_DAY:
        fail(f"START {start} is before {FIRST_BACKFILL_DAY}: no probe is that old")


@app.command()
def validate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(metavar="[PATH]...",
                       help="Entry files or folders (default: every entry under the data folder)."),
    ] = None,
    stale: Annotated[bool, typer.Option(
        "--stale", help="Also list entries whose facts were last verified more than "
        "APIDIR_STALE_DAYS days ago (exit status 1 when there are any).")] = False,
) -> None:
    """Check entry files and report every problem at once; exit status 0 only when all is valid."""
    settings = Settings()
    if not paths and not settings.entries_dir.is_dir():
        fail(f"no entries folder at {settings.entries_dir}: run from a checkout of the "
             "catalogue, set APIDIR_DATA_DIR, or name the files to check")
    missing = [str(path) for path in paths or () if not path.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}")
    problems: list[str] = []
    try:
        load_categories(settings.categories_file)
    except CategoryError as exc:
        problems.append(str(exc))
    report = read_catalog(paths or [settings.entries_dir], settings.entries_dir,
                          max_bytes=settings.entry_max_bytes)
    problems.extend(str(p) for p in report.problems)
    if not report.files:
        problems.append(
            f"no entry files found under {', '.join(map(str, paths or [settings.entries_dir]))}"
        )
    for line in problems:
        typer.echo(line, err=True)
    files = len(report.files)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {files} file(s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"{files} entry file(s) valid")
    if stale:
        list_stale(report, settings.stale_days)


def list_stale(report: CatalogReport, stale_days: int) -> None:
    """One line per entry whose facts are older than `stale_days` (or never dated)."""
    from datetime import UTC
    from datetime import datetime as moment

    today = moment.now(UTC).date()
    # the undated first, then the oldest: a date of year one is a date, not "never"
    old = sorted((entry.verified is not None, entry.verified or date.min, str(path), entry.id)
                 for path, entry in report.entries.items()
                 if entry.verified is None or (today - entry.verified).days > stale_days)
    for dated, verified, path, entry_id in old:
        when = (f"verified {verified}, {(today - verified).days:,} days ago" if dated
                else "never verified")
        typer.echo(f"{path}: entry {entry_id}: {when} (stale after {stale_days} days)")
    typer.echo(f"{len(old)} stale entr{'y' if len(old) == 1 else 'ies'}")
    if old:
        raise typer.Exit(1)


@app.command()
def probe(
    urls: Annotated[list[str] | None, typer.Argument(
        metavar="[URL]...", help="URLs to probe.")] = None,
    entry: Annotated[list[str] | None, typer.Option(
        "--entry", "-e", metavar="ID", help="Probe this entry's targets (repeatable).")] = None,
    allow_private: Annotated[bool, typer.Option(
        "--allow-private", help="Turn the network guard off: private addresses allowed.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=(
        "Print results as JSON lines, one per look: a URL that failed gets a second line, "
        'its second look ("confirmation": true), which decides it.'))] = False,
) -> None:
    """Probe entries or URLs now and print each result; nothing is stored. Exit status 1
    when any probe got no HTTP response (unreachable, blocked, malformed), else 0."""
    terminal_logs_without_tracebacks()
    settings = Settings()
    targets = [ProbeTarget(url) for url in urls or []]
    if entry:
        report = read_catalog([settings.entries_dir], settings.entries_dir,
                              max_bytes=settings.entry_max_bytes)
        by_id = {e.id: e for e in report.entries.values()}
        for entry_id in entry:
            found = by_id.get(entry_id)
            if found is None:
                typer.echo(f"no valid entry {entry_id!r} under {settings.entries_dir}", err=True)
                raise typer.Exit(2)
            endpoints = [(i, e.method or "GET", e.path or "/")
                         for i, e in enumerate(found.endpoints or [])]
            planned, skipped = probe_targets_for(found.base_url, endpoints, entry_id=entry_id)
            targets.extend(planned)
            for index, reason in skipped:
                typer.echo(f"{entry_id}: not probed: {endpoints[index][1]} {endpoints[index][2]}"
                           f" ({reason})", err=True)
    if not targets:
        typer.echo("name at least one URL or --entry ID", err=True)
        raise typer.Exit(2)
    probe_settings = settings.probe_settings()
    if allow_private:
        probe_settings = replace(probe_settings, allow_private=True)
    results = asyncio.run(_probe_with_progress(targets, probe_settings))
    for result in results:
        typer.echo(json.dumps(_result_dict(result)) if as_json else _result_line(result))
    # A failed target's second look (at the end) decides it, as in a run.
    final = {(r.entry_id, r.url): r for r in results}.values()
    failed = sum(1 for result in final if result.outcome == "unreachable")
    unprobed = sum(1 for result in final if result.not_probed is not None)
    if failed or unprobed:
        typer.echo(f"{failed + unprobed} of {len(final)} probe(s) got no HTTP response"
                   + (f" ({unprobed} not sent: their host was given up on)" if unprobed else ""),
                   err=True)
        raise typer.Exit(1)


async def _probe_with_progress(
    targets: list[ProbeTarget], probe_settings: ProbeSettings
) -> list[ProbeResult]:
    """Run the probes with a progress bar on the terminal (standard error)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("probing", total=len({t.url for t in targets}))
        return await probe_all(targets, probe_settings, on_result=lambda result: (
            None if result.confirmation else bar.advance(task)))


def _result_dict(result: ProbeResult) -> dict[str, object]:
    data = asdict(result)
    data["checked_at"] = result.checked_at.isoformat()
    # Where its redirects ended, as a run publishes it (`finalUrl`): none when not redirected.
    data["final_url"] = redirected_to(result.url, result.final_url, result.redirects)
    return data


def _result_line(result: ProbeResult) -> str:
    detail = result.reason or result.error_class or ""
    code = result.http_status if result.http_status is not None else "---"
    took = f"{result.total_ms:.0f} ms" if result.total_ms is not None else "no response"
    who = f"{result.entry_id}: " if result.entry_id else ""
    extra = f" ({result.error})" if result.error and result.outcome == "unreachable" else ""
    if result.not_probed:
        extra = f" ({result.not_probed})"
    if final_url := redirected_to(result.url, result.final_url, result.redirects):
        extra += f" -> {final_url}"  # the status's finalUrl, as a run publishes it
    if result.confirmation:  # the second look at a failure, at the end of the run
        extra += f" [second look: {result.failure_class or 'recovered'}]"
    return f"{who}{result.outcome:<11} {code} {took:>12}  {detail:<16} {result.url}{extra}"


@app.command()
def publish() -> None:
    """Score the stored entries from their probe history and publish a new release now,
    without ingesting or probing."""
    from pipeline.operations.handover import discard
    from pipeline.operations.stages import hand_over_scores, publish_handed_over
    from pipeline.store.tables import utcnow

    settings = Settings()
    now = utcnow()
    presented = hand_over_scores(settings, now)
    try:
        published, changes = publish_handed_over(settings, presented, now)
    finally:
        discard(presented)
    warn_if_local(settings)  # of the release made: a refused store or a failure is all it says
    for left_out in published.left_out:
        typer.echo(f"apidir: warning: {left_out}", err=True)
    typer.echo(f"{published}" + (f"; {len(changes)} state changes" if changes else ""))


@app.command()
def serve(
    folder: Annotated[Path | None, typer.Option(
        "--dir", metavar="FOLDER", help="Release folder (default: the output folder).")] = None,
    host: Annotated[str, typer.Option(metavar="ADDRESS", help="Address to listen on.")
                    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(metavar="PORT", min=0, max=65535,
                                      help="Port to listen on.")] = 8000,
) -> None:
    """Preview the published release locally with the headers its static host sends."""
    from pipeline.release.serve import HostFileError, host_and_port, serve_release

    folder = folder or Settings().output_dir
    if not folder.is_dir():
        fail(f"{folder}: no published release here (run `apidir run` first)")
    # a request aiohttp cannot parse (a target past 8 KiB) is logged with its traceback
    terminal_logs_without_tracebacks()

    def ready(address: str) -> None:
        typer.echo(f"serving {folder}/ at {address} (Ctrl+C stops)")

    try:
        serve_release(folder, host, port, ready)  # returns when told to stop (SIGTERM)
        typer.echo("stopped")
    except HostFileError as exc:  # before OSError: an unreadable file is not the address's fault
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot serve on {host_and_port(host, port)}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        typer.echo("stopped")


# `db downgrade` and `db compact` refuse a store a run is still using, unless told to go on.
IgnoreRunning = Annotated[bool, typer.Option(
    "--ignore-running",
    help="Go on although the store marks runs as running: for a run whose machine or "
         "process is gone.")]

db = typer.Typer(help="The store: show its schema, upgrade it, take it back, compact it, "
                 "back it up, close a run left running.",
                 no_args_is_help=True)
app.add_typer(db, name="db")

T = TypeVar("T")
if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from pipeline.store.tables import PipelineRun


def on_store(action: Callable[[Engine], T],
             refused: type[Exception] | tuple[type[Exception], ...] = ()) -> T:
    """`action` on an engine of the configured store, let go after it, whatever happened: a
    refusal it raises (`refused`) ends the command in its own line."""
    from pipeline.store.tables import open_engine

    engine = open_engine(Settings().database_url)
    try:
        return action(engine)
    except refused as exc:
        fail(str(exc))
    finally:
        engine.dispose()


@db.command("current")
def db_current() -> None:
    """Print the store's schema revision and the one this version needs; exit status 1 when
    the store needs `apidir db upgrade`, 2 when a newer version wrote it."""
    from pipeline.store.migrate import head_revision, refuse_too_new, store_name, store_revision

    def revision(engine: Engine) -> str | None:
        current = store_revision(engine)
        refuse_too_new(current, store_name(engine))
        return current

    current, head = on_store(revision), head_revision()
    if current == head:
        typer.echo(f"schema revision {current} (up to date)")
        return
    typer.echo(f"schema revision {current or 'none (empty database)'}; this version needs "
               f"{head}: run `apidir db upgrade`")
    raise typer.Exit(1)


@db.command("upgrade")
def db_upgrade() -> None:
    """Upgrade the store to this version's schema in place, keeping every row."""
    from pipeline.store.migrate import upgrade_store

    before, after = on_store(upgrade_store)
    if before == after:
        typer.echo(f"schema revision {after}: already up to date")
    else:
        typer.echo(f"upgraded the store from schema revision {before or 'none'} to {after}")


@db.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(
        metavar="REVISION",
        help="The older version's schema revision, e.g. 0017 (its `apidir db current` names "
             "it).")],
    ignore_running: IgnoreRunning = False,
) -> None:
    """Take the store back to an older version's schema, before installing that version: every
    row its schema holds is kept; what later revisions added is dropped (a newer version
    builds it again on upgrade). Back the store up and pause the schedule first: a store a run
    is still using is refused."""
    from pipeline.store.migrate import RevisionRefusedError, downgrade_store

    before, after = on_store(lambda engine: downgrade_store(engine, revision, ignore_running),
                             RevisionRefusedError)
    if before == after:
        typer.echo(f"schema revision {after}: already there")
    else:
        typer.echo(f"took the store back from schema revision {before} to {after}")


@db.command("compact")
def db_compact(
    ignore_running: IgnoreRunning = False,
) -> None:
    """Give the disk back the space deleted rows left, such as raw probes pruned past
    APIDIR_PROBES_KEPT_DAYS (later nights reuse it, but no file shrinks by itself). SQLite
    rewrites its file, and needs free disk of the file's size meanwhile; PostgreSQL rewrites
    each table, locked while it runs. Pause the schedule first: a store a run is still using
    is refused; a `db upgrade` or `db downgrade` under way is waited for."""
    from pipeline.store.compact import CompactRefusedError, compact_store

    compacted = on_store(lambda engine: compact_store(engine, ignore_running),
                         CompactRefusedError)
    typer.echo(f"compacted the store from {compacted.before:,} to {compacted.after:,} bytes")


@db.command("backup")
def db_backup(
    target: Annotated[Path, typer.Argument(
        metavar="FILE", help="The new file to write the backup to (never overwritten).")],
) -> None:
    """Copy a SQLite store to a new file, consistent while a run writes (the store's file
    alone may lack the latest writes, still in its write-ahead log); to restore it, stop the
    runs and point APIDIR_DATABASE_URL at the copy. A PostgreSQL store is backed up with
    pg_dump."""
    from pipeline.store.backup import BackupRefusedError, back_up_store

    backed_up = on_store(lambda engine: back_up_store(engine, target), BackupRefusedError)
    typer.echo(f"backed up the store (schema revision {backed_up.revision}) to "
               f"{backed_up.path}: {backed_up.size:,} bytes")


@db.command("close-run")
def db_close_run(
    run_id: Annotated[int, typer.Argument(
        metavar="RUN", help="The run's id, as `db compact` or `db downgrade` names it.")],
) -> None:
    """Record as crashed a run the store still marks running whose process is gone with its
    machine (a container replaced, a store restored on another server): its days are then
    rolled up and pruned as others, and `db compact` and `db downgrade` go on. The webhook is
    sent the `run_crashed` alert a run reaping it would send, and its Prefect flow run, on the
    server of PREFECT_API_URL, is marked Crashed as that run would mark it. A run older than
    APIDIR_RUN_TIMEOUT and an hour is closed so by the next run; a run of this machine whose
    process is alive is refused."""
    from pipeline.store.tables import RunNotClosedError, close_run, engine_for, session_scope

    settings = Settings()
    try:
        with session_scope(engine_for(settings.database_url)) as session:
            closed = close_run(session, run_id, settings.run_timeout)
    except RunNotClosedError as exc:
        fail(str(exc))
    told = [crash_alert_told(settings, closed)]
    if closed.flow_run_id is not None:
        told.append(flow_run_crash_told(closed))
    typer.echo(f"run {closed.id} ({closed.flow}, on {closed.host or 'an unnamed host'}) is "
               f"recorded as crashed; {'; '.join(told)}")


def flow_run_crash_told(closed: PipelineRun) -> str:
    """Mark the Prefect flow run of a run the operator closed Crashed, as a run reaping it
    would (its process never told Prefect, which shows it running), and say whether it was.
    Only on the Prefect server of PREFECT_API_URL: a temporary one started only for this
    would not hold it."""
    from prefect.settings import PREFECT_API_URL

    from pipeline.operations.runs import crash_flow_run_left_running

    named = f"its Prefect flow run {closed.flow_run_id}"
    if not PREFECT_API_URL.value():
        return f"{named} was not marked Crashed: PREFECT_API_URL is not set"
    crashed = asyncio.run(crash_flow_run_left_running(closed))
    return f"{named} was marked Crashed" if crashed.marked else (
        f"{named} was not marked Crashed: {crashed.why}")


def crash_alert_told(settings: Settings, closed: PipelineRun) -> str:
    """Send the `run_crashed` alert of a run the operator closed, as the next run would have
    on reaping it (the crash is news to whoever watches the webhook), and say what became of
    it. The Secret block holding the webhook is read from a Prefect server (PREFECT_API_URL):
    without one, no temporary server is started only to look for it. The record is closed
    whatever became of the alert."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    from pipeline.operations.runs import alert_left_running, prefect_unreachable

    secret, server = settings.alert_webhook_secret, PREFECT_API_URL.value()
    if not settings.alert_webhook_url and not (secret and server):
        kept = (f", nor PREFECT_API_URL naming the Prefect server that keeps the Secret block "
                f"{secret!r}") if secret else ""
        return f"no alert was sent: APIDIR_ALERT_WEBHOOK_URL is not set{kept}"
    try:
        delivery = asyncio.run(alert_left_running(settings, closed))
    except httpx.TransportError as exc:
        return f"the alert was not delivered: {prefect_unreachable(exc)}"
    if delivery is None:
        return f"no alert was sent: no webhook is saved in the Secret block {secret!r}"
    if not delivery.delivered:
        return f"the alert was not delivered: {delivery.error}"
    return "the run_crashed alert was sent"


@app.command()
def draft(
    source: Annotated[str, typer.Argument(
        metavar="SOURCE", help="The provider's OpenAPI or Swagger description: a file or URL.")],
    category: Annotated[str | None, typer.Option(
        metavar="CATEGORY", help="Write data/entries/CATEGORY/ID.yaml (else print it).")] = None,
    entry_id: Annotated[str | None, typer.Option(
        "--id", metavar="ID", help="The entry's id (default: from the title).")] = None,
) -> None:
    """Draft an entry from a provider's official API description; every field it cannot
    know is a TODO that `validate` rejects until it is filled."""
    from pipeline.catalogue.draft import (
        DRAFT_PURPOSE,
        draft_entry,
        entry_id_problem,
        load_description,
        render_draft,
        write_draft,
    )
    from pipeline.contract import CATEGORY_IDS
    from pipeline.probing.netguard import GuardPolicy

    if category is not None and category not in CATEGORY_IDS:
        fail(f"no category {category!r}: the categories are {', '.join(CATEGORY_IDS)}")
    if entry_id is not None and (problem := entry_id_problem(entry_id)):
        fail(problem)
    settings = Settings()
    description = load_description(
        source, user_agent=settings.user_agent("draft", DRAFT_PURPOSE),
        policy=GuardPolicy(allow_private=settings.probe_allow_private))
    entry = draft_entry(description, source, category, entry_id)
    text = render_draft(entry)
    if category is None:
        write_out(text)
        return
    target = write_draft(text, settings.entries_dir, category, entry["id"])
    typer.echo(f"wrote {target}: fill every TODO, then `apidir validate {target}`")


automations = typer.Typer(help="Prefect automations of the directory.", no_args_is_help=True)
app.add_typer(automations, name="automations")


@automations.command("apply")
def automations_apply(
    file: Annotated[Path, typer.Option(
        metavar="FILE", help="The automation definitions.")] = Path(
            "deploy/prefect/automations.yaml"),
    within: Annotated[float | None, typer.Option(
        metavar="SECONDS", min=10, help="Override each trigger's window (to try one out).")
    ] = None,
) -> None:
    """Create the automations on the Prefect server of PREFECT_API_URL (the alert on a missed
    night among them), with the alert webhook saved as a Webhook block; without a webhook,
    those that call it are skipped with a warning."""
    from prefect.settings import PREFECT_API_URL

    from pipeline.operations.automations import apply_automations, missing_webhook_hint

    if not PREFECT_API_URL.value():
        fail("automations live on a Prefect server: set PREFECT_API_URL (see the README, "
             "Run on a schedule)")
    settings = Settings()
    done = asyncio.run(apply_automations(file, settings, within))
    if done.skipped:
        typer.echo(f"apidir: warning: no alert webhook, so {', '.join(done.skipped)} not "
                   f"applied: {missing_webhook_hint(settings)}", err=True)
    typer.echo(f"applied {len(done.applied)} automation(s): {', '.join(done.applied)}")


@app.command()
def openapi() -> None:
    """Print the OpenAPI 3.1 document of the public interface."""
    from pipeline.release.openapi import render_openapi

    write_out(render_openapi())


@app.command("entry-schema")
def entry_schema() -> None:
    """Print the JSON Schema of an entry file, for editors (`make openapi` refreshes
    docs/entry.schema.json)."""
    from pipeline.catalogue.schema import render_entry_schema

    write_out(render_entry_schema())


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors a user can cause (bad settings, files, selections, a busy lock, an old store):
    each is told in one line, never a traceback."""
    from pydantic import ValidationError
    from sqlalchemy.exc import ArgumentError

    from pipeline.catalogue.draft import DraftError
    from pipeline.catalogue.ingest import EmptyCatalogError
    from pipeline.operations.automations import AutomationError
    from pipeline.operations.runs import StageFailed, UnusableWebhook
    from pipeline.operations.stages import UnknownSelectionError
    from pipeline.release.after_publish import AfterPublishFailed
    from pipeline.release.publish import ReleaseNotRecorded
    from pipeline.release.swap import PublishLockTimeout, PublishWriteFailed, UnsafeOutputFolder
    from pipeline.release.validate import ReleaseValidationError
    from pipeline.store.locks import LockFileLost, StoreLockTimeout
    from pipeline.store.migrate import MigrationFailedError, StoreOutOfDateError, StoreTooNewError
    from pipeline.store.tables import StoreUnreadableError

    return (ValidationError, ArgumentError, EmptyCatalogError, StageFailed,
            AutomationError, DraftError, UnknownSelectionError, PublishLockTimeout,
            LockFileLost, ReleaseNotRecorded, ReleaseValidationError, StoreOutOfDateError,
            StoreTooNewError, StoreUnreadableError, MigrationFailedError, CategoryError, OSError,
            UnsafeOutputFolder, PublishWriteFailed, UnusableWebhook, StoreLockTimeout,
            AfterPublishFailed)


def user_caused(error: BaseException) -> bool:
    """Whether a user can cause `error` (`_user_errors`), or its store's operator can: a
    database refusing the store for how it was set up (`migrate.operator_caused`)."""
    from sqlalchemy.exc import DBAPIError

    from pipeline.store.migrate import operator_caused

    return isinstance(error, _user_errors()) or (
        isinstance(error, DBAPIError) and operator_caused(error))


def one_line(error: BaseException, command: str = "apidir") -> str:
    """An error as one line: a settings error names its variables, a failed validation
    counts its problems and shows the first, a database error says what failed (`command`,
    or a run's stage), on which store, and why, without the statement it ran; a failed run
    whose alert was not delivered says so."""
    return _said(error, command) + alert_not_delivered(error)


def _said(error: BaseException, command: str) -> str:
    """What `one_line` says of `error` itself."""
    from pydantic import ValidationError
    from sqlalchemy.exc import DBAPIError

    from pipeline.operations.runs import StageFailed, error_words, failure_line
    from pipeline.release.publish import TooManyLeftOut
    from pipeline.release.validate import ReleaseValidationError

    if isinstance(error, ValidationError) and error.title == Settings.__name__:
        fields = "; ".join(
            f"APIDIR_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in error.errors()
        )
        return f"invalid setting: {fields}"
    if isinstance(error, ValidationError):  # a model built from them: no setting of that name
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or '-'}: {e['msg']}"
                           for e in error.errors())
        return f"invalid {error.title}: {fields}"
    if isinstance(error, TooManyLeftOut):  # its own line names the first entry left out
        return str(error)
    if isinstance(error, ReleaseValidationError):
        return (f"release failed validation ({len(error.problems)} problems; the live release "
                f"is unchanged), first: {error.problems[0]}")
    if isinstance(error, StageFailed | DBAPIError) and (
            told := failure_line(error, command, Settings().database_url)):
        return told
    return error_words(error)


def alert_not_delivered(error: BaseException) -> str:
    """The clause a failed run's last line ends with when its alert was not delivered (the
    webhook told nothing, so the command must); empty otherwise."""
    from pipeline.operations.runs import undelivered_alert

    note = undelivered_alert(error)
    return f"; {note}" if note else ""


def command_named(args: list[str]) -> str:
    """The command `args` ran, as a line names it ("publish", "db compact"): its words up to
    the first that names no command."""
    named: list[str] = []
    commands = getattr(typer.main.get_command(app), "commands", {})  # a group's, by name
    while len(named) < len(args) and args[len(named)] in commands:
        named.append(args[len(named)])
        commands = getattr(commands[named[-1]], "commands", {})
    return " ".join(named) or "apidir"


def interrupted(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt (Ctrl-C) is what `error` came from: Typer turns one into a
    quiet exit with status 130, the interrupt kept as its cause."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


class Terminated(SystemExit):
    """SIGTERM (`kill`, a service manager stopping the command), raised where the command is,
    as Ctrl-C raises KeyboardInterrupt: the command unwinds, a run closes its record and
    Prefect stops its temporary server at exit, where the signal's default action would end
    the process on the spot and leave the server running. A SystemExit, so that an event loop
    re-raises it from a callback, as it does KeyboardInterrupt, rather than log it and go on."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal = signal_number


def _raise_terminated(signal_number: int, _frame: object) -> None:
    raise Terminated(signal_number)


def termination_signals() -> tuple[type[BaseException], ...]:
    """SIGTERM as the command may see it: Terminated, or Prefect's TerminationSignal, which a
    flow raises in its place (a flow re-sends the signal to the handler it found, which
    raises Terminated, unless the signal was ignored: then its own reaches the command)."""
    prefects = sys.modules.get("prefect.exceptions")  # never raised where Prefect is not loaded
    return (Terminated, *([prefects.TerminationSignal] if prefects else []))


def end_on_sigterm() -> bool:
    """Have SIGTERM raise Terminated, unless the caller set it otherwise (ignored, it stays
    ignored); whether it does."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _raise_terminated)
    return True


def main() -> None:
    """The `apidir` command, with every error a user can cause told in one line (exit 2)
    and any other in one line too, with the way to see its traceback (exit 1); Ctrl-C and
    SIGTERM say so, and exit with the shell's status for the signal (130, 143)."""
    from pipeline.operations.local_mode import patient_startup, started_too_late, too_late_line

    patient_startup()
    raises_terminated = end_on_sigterm()
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("apidir: interrupted", err=True)
        sys.exit(130)
    except termination_signals() as stopped:
        typer.echo("apidir: terminated", err=True)
        sys.exit(128 + int(getattr(stopped, "signal", signal.SIGTERM)))
    except SystemExit as done:
        if done.code == 130 and interrupted(done):  # Typer's Exit(130) for Ctrl-C, silent
            typer.echo("apidir: interrupted", err=True)
        raise
    except Exception as error:
        if os.environ.get("APIDIR_DEBUG"):
            raise
        if user_caused(error):
            typer.echo(f"apidir: {one_line(error, command_named(sys.argv[1:]))}", err=True)
            sys.exit(2)
        if started_too_late(error):
            typer.echo(f"apidir: {too_late_line()}", err=True)
            sys.exit(1)
        typer.echo(f"apidir: unexpected {type(error).__name__}: "
                   f"{one_line(error, command_named(sys.argv[1:]))} "
                   "(APIDIR_DEBUG=1 shows the traceback)", err=True)
        sys.exit(1)
    finally:
        if raises_terminated:  # as it was: a SIGTERM while Prefect's server stops ends it all
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


if __name__ == "__main__":
    main()
