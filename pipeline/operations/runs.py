"""Run bookkeeping shared by every flow: open a run's record, retry its stages, fail it, crash
it, complete it with its summary, and send the alerts that go with each."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from logging import Logger, LoggerAdapter
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import anyio
import httpx
from prefect import Flow, get_client, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.blocks.system import Secret
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.objects import FlowRun, TaskRun
from prefect.client.schemas.sorting import ArtifactSort
from prefect.exceptions import ObjectNotFound
from prefect.flow_engine import FlowRunTimeoutError
from prefect.runtime import flow_run as current_flow_run
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Crashed, State
from prefect.tasks import Task, exponential_backoff
from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, col, select

from pipeline.catalogue.ingest import EmptyCatalogError
from pipeline.judging.changes import Change
from pipeline.operations.alerts import (
    AlertEvent,
    Delivery,
    alert_payload,
    not_delivered,
    send_alert,
)
from pipeline.operations.events import (
    RUN_ENTRIES_LEFT_OUT,
    RUN_FAILED,
    RUN_NETWORK_SUSPECT,
    emit_run_event,
    emit_state_changes,
)
from pipeline.operations.handover import load_entry_figures
from pipeline.operations.memory import release_freed_memory
from pipeline.operations.report import (
    LISTED,
    IngestBrief,
    entry_table,
    left_out_of_release,
    run_report,
    slowest_probes,
    unjudged_since_previous,
)
from pipeline.release.after_publish import AfterPublishFailed
from pipeline.release.layout import FULL_DATASET
from pipeline.release.publish import ReleaseNotRecorded, left_out_line
from pipeline.release.swap import PublishLockTimeout, PublishWriteFailed
from pipeline.release.validate import ReleaseValidationError
from pipeline.settings import Settings, webhook_url_problem
from pipeline.store.locks import LockFileRefused, StoreLockTimeout
from pipeline.store.migrate import (
    StoreOutOfDateError,
    StoreTooNewError,
    lasting_refusal,
    store_failure_line,
)
from pipeline.store.tables import (
    ABANDONED,
    PipelineRun,
    StoreUnreadableError,
    active_categories,
    claim_run_end,
    engine_for,
    finish_run,
    reap_abandoned_runs,
    session_scope,
    start_run,
)

T = TypeVar("T")
# Bad input does not get better by trying again: only other errors are retried. Nor is a wait
# for the publish lock or the store's lock given up: its wait was the retry, and
# APIDIR_PUBLISH_LOCK_TIMEOUT (APIDIR_STORE_LOCK_TIMEOUT) bounds the whole of it (retried, a
# stage waited that long once more for each retry). Nor a release
# swapped in but not recorded: it is live, and a retry would publish a second one. Nor a store
# its operator set up so that the pipeline cannot use it (`lasting_refusal`): no rights, no
# writes, a table gone, a lock file that is a link (`LockFileRefused`).
PERMANENT_ERRORS = (EmptyCatalogError, ReleaseValidationError, ValidationError, ValueError,
                    PublishLockTimeout, StoreLockTimeout, LockFileRefused, ReleaseNotRecorded,
                    AfterPublishFailed)  # a retry would publish again, the release being live

# How a failed run's error notes that its alert was not delivered.
UNDELIVERED = "the alert was not delivered: "
# How the error of a run its time limit stopped notes the line the run's record took.
TIME_LIMIT_TOLD = "the run's record says: "


class StageFailed(RuntimeError):
    """A stage of a run failed; the message says which stage and what went wrong where."""

    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(f"{stage} stage failed: {type(error).__name__}: {error}")
        self.stage = stage


def failure_line(error: BaseException, what: str, database_url: str) -> str | None:
    """The one line of a failure the store or the publish's disk caused, the same in the run's
    record, its alert and the command's last line; None for any other failure, which tells
    itself. `what` failed (a command, a run), unless a stage did: then the stage is named."""
    if isinstance(error, StageFailed):
        what, error = f"{error.stage} stage", error.__cause__  # type: ignore[assignment]
    if isinstance(error, PublishWriteFailed | AfterPublishFailed):  # each names itself
        return str(error)
    if isinstance(error, DBAPIError):
        return store_failure_line(what, error, make_url(database_url))
    return None


def transient_failure(_task: Task, _task_run: TaskRun, state: State) -> bool:
    """Prefect's retry condition: retry unless the error is one of bad input, or a store
    refusal no retry mends."""
    return not (isinstance(state.data, PERMANENT_ERRORS) or lasting_refusal(state.data))


def with_retries(stage: Task, settings: Settings) -> Task:
    """`stage` retried `settings.stage_retries` times, the delay doubling from `retry_delay`."""
    return stage.with_options(
        retries=settings.stage_retries,
        retry_delay_seconds=exponential_backoff(backoff_factor=settings.retry_delay),
        retry_jitter_factor=0.2 if settings.retry_delay else None,
        retry_condition_fn=transient_failure,
    )


async def run_stage(name: str, call: Awaitable[T]) -> T:
    """Await a stage; a failure names it. What it freed goes back to the system, so the next
    stage does not start on top of this one's high-water mark."""
    try:
        return await call
    except Exception as exc:
        raise StageFailed(name, exc) from exc
    finally:
        release_freed_memory()


# How long stages beside a stopped one are given to end once cancelled.
BESIDE_GRACE_SECONDS = 10.0


async def run_beside(stage: Awaitable[T], *beside: Awaitable[Any]) -> T:
    """Await `stage` in this task, as it would be awaited alone: the run's time limit or its
    cancellation reaches it as before (a probe stage then cancels its shards). The stages
    `beside` it run at once, each a task of its own, and are waited for once it has ended; a
    failure of theirs is raised first, as that of a stage before it, then its own. If `stage`
    is stopped, they are cancelled and given a few seconds to end."""
    running = [asyncio.ensure_future(other) for other in beside]
    try:
        result = await stage
    except Exception:
        outcomes = await asyncio.gather(*running, return_exceptions=True)
        _raise_first(outcomes)
        raise
    except BaseException:
        for task in running:
            task.cancel()
        with anyio.move_on_after(BESIDE_GRACE_SECONDS, shield=True):
            await asyncio.gather(*running, return_exceptions=True)
        raise
    _raise_first(await asyncio.gather(*running, return_exceptions=True))
    return result


def _raise_first(outcomes: Sequence[object]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


async def open_run(settings: Settings, flow: str) -> int:
    """Record a new run, then close (as crashed, alerting, its Prefect flow run marked
    Crashed: `close_left_running`) every earlier run whose process died without closing its own
    record: on this host, or on a machine that is gone (`reap_abandoned_runs`). Closed after
    this run began, so its report lists them (`abandoned_since`)."""
    with session_scope(engine_for(settings.database_url)) as session:
        run = start_run(session, flow, current_flow_run.id)
    await close_left_running(settings, get_run_logger())
    return run.id


async def close_left_running(settings: Settings,
                             logger: Logger | LoggerAdapter[Logger]) -> list[PipelineRun]:
    """Close, as crashed, every run whose process died without closing its own record
    (`reap_abandoned_runs`), and tell of each: a warning and its `run_crashed` alert. A dead run
    two runs starting together both find is closed, and alerted, by one of them alone."""
    with session_scope(engine_for(settings.database_url)) as session:
        reaped = reap_abandoned_runs(session, settings.run_timeout)
    for dead in reaped:
        logger.warning("%s run %d was left running: %s", dead.flow, dead.id, dead.message)
        await alert_left_running(settings, dead)
        if (crashed := await crash_flow_run_left_running(dead)).refused:
            logger.warning("%s run %d: its Prefect flow run %s was not marked Crashed: %s",
                           dead.flow, dead.id, dead.flow_run_id, crashed.why)
    return reaped


def error_words(error: BaseException) -> str:
    """An error's text on one line, or its type's name where it has none."""
    return " ".join(str(error).split()) or type(error).__name__


def prefect_unreachable(error: httpx.TransportError) -> str:
    """The line of a Prefect server that cannot be reached: the client's own words ("All
    connection attempts failed") name no address."""
    return (f"the Prefect server at {PREFECT_API_URL.value()} (PREFECT_API_URL) cannot be "
            f"reached: {error_words(error)}")


@dataclass(frozen=True)
class FlowRunCrashed:
    """What became of the Prefect flow run of a run closed as left running: `marked` Crashed,
    or why not (`why`): it names none, Prefect ended it, Prefect does not know it, or the
    server could not be asked or refused (`refused`, which the reaper warns of)."""

    marked: bool
    why: str | None = None
    refused: bool = False


async def crash_flow_run_left_running(dead: PipelineRun) -> FlowRunCrashed:
    """Mark the Prefect flow run of a run closed as left running Crashed, with its record's
    line, where Prefect still shows it unended: its process died without telling Prefect, which
    would show it running for ever (and hold the automations watching for its end). A flow
    run Prefect has ended, or does not know (a temporary local server's), is left as it is.
    The run (or the command) goes on whatever became of it."""
    if dead.flow_run_id is None:
        return FlowRunCrashed(False, "the run names no Prefect flow run")
    try:
        async with get_client() as client:
            flow_run = await client.read_flow_run(UUID(dead.flow_run_id))
            if flow_run.state is not None and flow_run.state.is_final():
                return FlowRunCrashed(False, f"Prefect had ended it ({flow_run.state.name})")
            await client.set_flow_run_state(flow_run.id, Crashed(message=dead.message),
                                            force=True)
    except ObjectNotFound:
        return FlowRunCrashed(False, f"the Prefect server at {PREFECT_API_URL.value()} does "
                              "not know it")
    except httpx.TransportError as exc:
        return FlowRunCrashed(False, prefect_unreachable(exc), refused=True)
    except (httpx.HTTPError, ValueError) as exc:  # the server's refusal, a malformed id
        return FlowRunCrashed(False, error_words(exc), refused=True)
    return FlowRunCrashed(True)


async def alert_left_running(settings: Settings, dead: PipelineRun) -> Delivery | None:
    """The `run_crashed` alert of a run closed because no process runs it any more, found so
    by the next run or said so by the operator (`apidir db close-run`): its own process died
    before it could tell, so this is the webhook's one word of that crash."""
    return await alert(settings, "run_crashed", dead.flow, dead, message=dead.message,
                       flow_run_id=dead.flow_run_id)


def abandoned_since(session: Session, run: PipelineRun) -> list[PipelineRun]:
    """The runs this run found left running by a dead process, and closed."""
    statement = select(PipelineRun).where(
        PipelineRun.state == "crashed", col(PipelineRun.finished_at) >= run.started_at,
        col(PipelineRun.message).startswith(ABANDONED))
    return list(session.exec(statement))


async def complete_run(settings: Settings, run_id: int, handed_over: Path,
                       changes: list[Change], ingested: IngestBrief | None) -> PipelineRun:
    """Mark the run completed and publish its summary as Prefect artifacts: a markdown
    report and a table of the entries (every one, or at scale those most worth a look), from
    the entries' figures handed over in a file with the presented values."""
    figures = load_entry_figures(handed_over)
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        finish_run(session, run, "completed")
        categories = active_categories(session)
        table = entry_table(categories, figures, changes)
        dataset = f"{settings.base_url.rstrip('/')}/{FULL_DATASET}"
        report = run_report(run, figures, changes, ingested, slowest_probes(session, run_id),
                            abandoned_since(session, run), (len(table), len(categories), dataset),
                            unjudged_since_previous(session, run))
    await acreate_markdown_artifact(markdown=report, key=f"{run.flow}-summary",
                                    description=f"{run.flow} run {run_id}")
    whole = len(table) == len(categories)
    await acreate_table_artifact(
        table=table, key=f"{run.flow}-entries",
        description="Every entry's status and builder score." if whole else
        f"{len(table):,} of {len(categories):,} entries' status and builder score: those that "
        "changed state, then failures first.",
    )
    return run


# The flows that publish run reports, and the keys of their artifacts (`complete_run`).
REPORTING_FLOWS = ("nightly", "backfill")
REPORT_KEYS = tuple(f"{flow}-{kind}" for flow in REPORTING_FLOWS for kind in ("summary", "entries"))
# Reports deleted a night at most, read a page at a time: a server that kept years of them
# is pruned over a few nights, never one night's thousands of calls.
REPORTS_PRUNED_A_NIGHT = 1000
REPORT_PAGE = 200


@dataclass(frozen=True)
class PrunedReports:
    """The run reports a night deleted from the Prefect server, and why it stopped short of
    the rest, if it did (the server could not be asked or refused: the next night goes on)."""

    deleted: int
    problem: str | None = None


async def prune_run_reports(settings: Settings, now: datetime) -> PrunedReports | None:
    """Delete the runs' summary artifacts (`REPORT_KEYS`, never another's) created longer ago
    than `APIDIR_REPORTS_KEPT_DAYS` before `now`, at most `REPORTS_PRUNED_A_NIGHT`: each run
    adds two, which a Prefect server keeps for ever (the store keeps every run's record).
    Prefect's local mode keeps its server's database under PREFECT_HOME from run to run, so
    its reports are pruned as a server's are. None where the setting keeps every one."""
    if not settings.reports_kept_days:
        return None
    before = now - timedelta(days=settings.reports_kept_days)
    ours = ArtifactFilter(key=ArtifactFilterKey(any_=list(REPORT_KEYS)))
    deleted = kept = 0
    try:
        async with get_client() as client:
            while deleted < REPORTS_PRUNED_A_NIGHT:
                # newest first (the API sorts no other way by date): the reports kept stay in
                # front, and each page after them is read where the deleted ones were
                page = await client.read_artifacts(artifact_filter=ours,
                                                   sort=ArtifactSort.CREATED_DESC,
                                                   offset=kept, limit=REPORT_PAGE)
                old = [found for found in page if found.created and found.created < before]
                kept += len(page) - len(old)
                for artifact in old[:REPORTS_PRUNED_A_NIGHT - deleted]:
                    with suppress(ObjectNotFound):  # another run's pruning took it first
                        await client.delete_artifact(artifact.id)
                    deleted += 1
                if len(page) < REPORT_PAGE:
                    break
    except httpx.HTTPError as exc:
        return PrunedReports(deleted, error_words(exc))
    return PrunedReports(deleted)


class UnusableWebhook(ValueError):
    """The alert webhook kept in the Prefect Secret block is no address an alert can be POSTed
    to; the line names the block, never the address (a webhook's often holds its token)."""


async def webhook_url(settings: Settings) -> str | None:
    """The alert webhook: `APIDIR_ALERT_WEBHOOK_URL`, else the Prefect Secret block named by
    `APIDIR_ALERT_WEBHOOK_SECRET` where one is saved, else none. The block's address is checked
    as the setting's is, when read (`webhook_url_problem`): UnusableWebhook when it is none."""
    if settings.alert_webhook_url:
        return settings.alert_webhook_url
    if not settings.alert_webhook_secret:
        return None
    try:
        secret = await Secret.aload(settings.alert_webhook_secret)
    except ValueError:  # no such block
        return None
    url = str(secret.get()) or None
    if url and (problem := webhook_url_problem(url)):
        raise UnusableWebhook(f"the alert webhook in the Prefect Secret block "
                              f"{settings.alert_webhook_secret!r} (APIDIR_ALERT_WEBHOOK_SECRET): "
                              f"{problem}")
    return url


async def alert(
    settings: Settings,
    event: AlertEvent,
    flow: str,
    run: PipelineRun | None,
    changes: Sequence[Change] = (),
    message: str | None = None,
    flow_run_id: str | None = None,
) -> Delivery | None:
    """Send one alert to the configured webhook; how it went (none configured: nothing is
    sent, None)."""
    try:
        url = await webhook_url(settings)
    except UnusableWebhook as unusable:
        return not_delivered(event, str(unusable))
    if not url:
        return None
    payload = alert_payload(event, flow, run, changes, message, flow_run_id or current_flow_run.id)
    return await send_alert(url, payload, settings.alert_timeout)


async def alert_state_changes(settings: Settings, flow: str, run: PipelineRun,
                              changes: list[Change]) -> None:
    if changes:
        emit_state_changes(flow, run.id, changes)
        await alert(settings, "state_changed", flow, run, changes)


async def report_network_suspect(settings: Settings, flow: str, run_id: int) -> bool:
    """Tell the operator (event and alert) when the run's probes were flagged network-suspect:
    its statuses are not trusted, so a whole night may pass unmeasured."""
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
    if not run.network_suspect:
        return False
    message = (f"{run.probes_failed} of {run.probes} probes failed to connect: the prober's "
               "network was likely down; published statuses keep the last trusted run")
    get_run_logger().warning("%s run %d flagged network-suspect: %s", flow, run_id, message)
    emit_run_event(RUN_NETWORK_SUSPECT, flow, run_id, message)
    await alert(settings, "run_network_suspect", flow, run, message=message)
    return True


async def report_left_out(settings: Settings, flow: str, run_id: int) -> int:
    """Tell the operator (a warning a line per entry, event and alert) of the stored entries
    the run's release left out because its check refused them: the release is published
    without them until their files are fixed. Returns how many were left out."""
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
    left_out = left_out_of_release(run)
    if not left_out:
        return 0
    lines = [left_out_line(problem) for problem in left_out[:LISTED]]
    logger = get_run_logger()
    for line in lines:
        logger.warning("release %s: %s", run.release_version, line)
    more = len(left_out) - len(lines)
    message = "\n".join([
        f"{len(left_out)} stored entries left out of release {run.release_version}, which "
        "its check refused; fix their files:", *lines,
        *([f"… and {more} more: the run's summary lists them"] if more > 0 else [])])
    emit_run_event(RUN_ENTRIES_LEFT_OUT, flow, run_id, message)
    await alert(settings, "entries_left_out", flow, run, message=message)
    return len(left_out)


async def fail_run(settings: Settings, run_id: int, error: BaseException, flow: str) -> None:
    """Keep the failure in the run's record and tell the webhook."""
    message = failure_line(error, f"{flow} run", settings.database_url) or (
        str(error) if isinstance(error, StageFailed) else f"{type(error).__name__}: {error}")
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        finish_run(session, run, "failed", message)
    get_run_logger().error("%s run %d failed: %s", flow, run_id, message)
    emit_run_event(RUN_FAILED, flow, run_id, message)
    delivery = await alert(settings, "run_failed", flow, run, message=message)
    if delivery is not None and not delivery.delivered:  # the command's last line tells it
        error.add_note(f"{UNDELIVERED}{delivery.error}")


def undelivered_alert(error: BaseException) -> str | None:
    """Why the alert of the run `error` failed was not delivered, if it was not: the operator
    learns of that failure from the command, then, not from the webhook."""
    return _noted(error, UNDELIVERED)


def _noted(error: BaseException, prefix: str) -> str | None:
    """The note of `error` that starts with `prefix` (the hooks tell the command through
    notes on the error it raises), if it has one."""
    notes = getattr(error, "__notes__", ())
    return next((note for note in notes if note.startswith(prefix)), None)


async def _close_left_open(flow: Flow, flow_run: FlowRun, state: State, ending: str,
                           event: AlertEvent) -> None:
    """Close the run's record if the flow ended without closing it, and tell; a run its time
    limit stopped is told in the command's line (`time_limit_line`), which the error it raises
    carries to the command, with a note of an alert not delivered."""
    if isinstance(state.data, STORE_REFUSALS):
        return  # the run was refused its store before it had a record there: nothing to close
    settings = Settings()
    stopped = state.data if isinstance(state.data, FlowRunTimeoutError) else None
    with session_scope(engine_for(settings.database_url)) as session:
        statement = select(PipelineRun).where(PipelineRun.flow_run_id == str(flow_run.id))
        run = session.exec(statement).first()
        if run is None or run.state != "running":
            return  # the flow closed it itself, and alerted
        message = state.message or f"the flow run {ending}"
        if stopped is not None:  # its release is recorded once it is live: none, none went live
            message = time_limit_line(flow.timeout_seconds or 0, run.release_version is None)
        if not claim_run_end(session, run, ending, message):
            return  # closed meanwhile by a run that reaped it, and alerted
        if stopped is not None:
            stopped.add_note(f"{TIME_LIMIT_TOLD}{message}")
    if ending == "failed":
        emit_run_event(RUN_FAILED, flow.name, run.id, message)
    delivery = await alert(settings, event, flow.name, run, message=message,
                           flow_run_id=str(flow_run.id))
    if stopped is not None and delivery is not None and not delivery.delivered:
        stopped.add_note(f"{UNDELIVERED}{delivery.error}")


# A store a run cannot open as this version's (a newer version's schema, one out of date and
# not upgraded, one unreadable): the run had no record in it, and the hook reads none.
STORE_REFUSALS = (StoreTooNewError, StoreOutOfDateError, StoreUnreadableError)


def time_limit_line(seconds: float, unchanged: bool) -> str:
    """The one line of a run stopped by its time limit, in its record, its alert and the
    command's last line: the setting that set the limit (Prefect's own words name neither it
    nor the release), and whether a release went live before the stop."""
    live = ("nothing was published: the live release is unchanged" if unchanged
            else "its new release went live before it was stopped")
    return (f"the run passed its time limit (APIDIR_RUN_TIMEOUT={seconds:g} s) and was "
            f"stopped; {live}")


def time_limit_recorded(error: BaseException) -> str | None:
    """The line the run's record took for the time limit that stopped it (`time_limit_line`),
    if its record was closed so; None otherwise."""
    note = _noted(error, TIME_LIMIT_TOLD)
    return None if note is None else note.removeprefix(TIME_LIMIT_TOLD)


async def alert_crash(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """Prefect's on-crashed hook: the process died or was cancelled under the run."""
    await _close_left_open(flow, flow_run, state, "crashed", "run_crashed")


async def close_failed_run(flow: Flow, flow_run: FlowRun, state: State) -> None:
    """Prefect's on-failure hook: a run stopped from outside its own code (its time limit
    passed) is recorded as failed and alerted; a stage failure was already both."""
    await _close_left_open(flow, flow_run, state, "failed", "run_failed")


@contextmanager
def api_for_workers() -> Iterator[None]:
    """Point the processes of a process-pool task runner at this process's Prefect API. With no
    PREFECT_API_URL set, Prefect runs a temporary server for this process alone; left so, every
    pool process would start one of its own (some 20 s each, and their runs would not show)."""
    from prefect.server.api.server import SubprocessASGIServer

    server = None if PREFECT_API_URL.value() else SubprocessASGIServer()
    if server is None or not server.running:
        yield
        return
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield
