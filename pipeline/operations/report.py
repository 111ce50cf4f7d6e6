"""The run summary an operator reads: a markdown report and a table of the entries, bounded
at scale to those most worth a look (the published release holds every entry).

Plain functions of plain values; the flows publish them as Prefect artifacts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, get_args

from sqlmodel import Session, col, func, select

from pipeline.catalogue.ingest import IngestSummary
from pipeline.contract import BuilderScore, Status, StatusState
from pipeline.judging.changes import Change
from pipeline.release.publish import LEFT_OUT_RULE
from pipeline.store.tables import PipelineRun, ProbeRow, as_utc

SLOWEST = 10
# Names and rows the summary lists of each kind (new entries, state changes, validation
# errors) before it counts the rest: a first night of 100,000 new entries listed whole made a
# 2.3 MB summary, past the size of an event Prefect's server publishes.
LISTED = 200


def slowest_probes(session: Session, run_id: int, limit: int = SLOWEST) -> list[ProbeRow]:
    """The run's answered probes with the longest time to response headers."""
    statement = (
        select(ProbeRow)
        .where(ProbeRow.run_id == run_id)
        .where(col(ProbeRow.total_ms).is_not(None))
        .where(col(ProbeRow.http_status).is_not(None))
        .order_by(col(ProbeRow.total_ms).desc(), col(ProbeRow.id))
        .limit(limit)
    )
    return list(session.exec(statement))


@dataclass(frozen=True)
class UnjudgedRuns:
    """The runs that ended (failed or crashed) before their probes were judged, since the
    previous completed run of a flow: the probes they stored count nowhere, so the statuses
    and changes the report tells come from earlier runs. The newest `listed` of `count`, each
    with the probes it stored."""

    listed: list[tuple[PipelineRun, int]]
    count: int


def unjudged_since_previous(session: Session, run: PipelineRun,
                            limit: int = LISTED) -> UnjudgedRuns:
    """The runs of any flow that ended unjudged (`judged_at` unset) since the previous completed
    run of `run`'s flow (ever, when there is none), by the end of `run`: what an operator
    reading `run`'s report has not been told by an earlier one.

    Runs are ordered by their ids, which the store's sequence gives as each starts, never by
    clock times written by different machines (a worker's clock ahead would hide every run
    that ended after it by a slower clock, one behind would tell again what was told). The
    previous completed run is the one of the highest id below `run`'s; a run's end is placed
    by the highest id in the store when it ended (`last_run_at_end`), so a run started before
    that one (a long backfill, a run reaped or closed by hand later) is listed when it ended
    after it, whatever its clock said. Runs whose ends no start came between are listed by
    both reports: told twice rather than never."""
    mark = col(PipelineRun.last_run_at_end)
    previous = session.exec(
        select(PipelineRun.last_run_at_end)
        .where(PipelineRun.flow == run.flow, PipelineRun.state == "completed",
               col(PipelineRun.id) < run.id)
        .order_by(col(PipelineRun.id).desc()).limit(1)).first()
    since = [] if previous is None else [mark >= previous]
    until = [] if run.last_run_at_end is None else [mark <= run.last_run_at_end]
    ended = [PipelineRun.id != run.id, col(PipelineRun.state).in_(("failed", "crashed")),
             col(PipelineRun.judged_at).is_(None), col(PipelineRun.finished_at).is_not(None),
             *since, *until]
    count = session.exec(select(func.count()).select_from(PipelineRun).where(*ended)).one()
    runs = list(session.exec(select(PipelineRun).where(*ended)
                             .order_by(col(PipelineRun.id).desc()).limit(limit)))
    stored = dict(session.exec(
        select(ProbeRow.run_id, func.count()).where(col(ProbeRow.run_id).in_(
            [ended_run.id for ended_run in runs])).group_by(ProbeRow.run_id)).all())
    return UnjudgedRuns([(ended_run, stored.get(ended_run.id, 0)) for ended_run in runs], count)


def _unjudged_lines(unjudged: UnjudgedRuns) -> list[str]:
    """The report's section on the runs that ended unjudged since the previous one."""
    lines = ["", f"## Runs ended unjudged since the previous completed run ({unjudged.count})",
             ""]
    if not unjudged.count:
        return [*lines, "Every run that ended since then was judged."]
    lines += ["These runs failed or crashed before their probes were judged: the probes they "
              "stored count nowhere (statuses, state changes, scores and rollups read the "
              "judged runs alone).", ""]
    lines += _table(["run", "flow", "state", "started", "ended", "probes stored", "message"],
                    [(ended.id, ended.flow, ended.state, _minute(ended.started_at),
                      _minute(ended.finished_at), f"{stored:,}", ended.message)
                     for ended, stored in unjudged.listed])
    return lines + _rows_beyond(unjudged.count, len(unjudged.listed),
                                "every run is in the store's `pipeline_run` table")


def _minute(moment: datetime | None) -> str:
    return "" if moment is None else f"{as_utc(moment):%Y-%m-%d %H:%M} UTC"


def left_out_of_release(run: PipelineRun) -> list[dict[str, Any]]:
    """The run's errors that name an entry its release left out (`publish.LeftOut`)."""
    return [error for error in run.errors or [] if error.get("rule") == LEFT_OUT_RULE]


def _cell(value: object) -> str:
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return lines


@dataclass(frozen=True)
class IngestBrief:
    """An ingest told by its counts and the first ids of each kind that the report names: the
    flow's ingest result, a few kB at any size (the summary's lists hold every id, 100,000
    unchanged ones on a quiet night at 100k)."""

    counts: dict[str, int]
    named: dict[str, list[str]]

    @classmethod
    def of(cls, summary: IngestSummary, limit: int = LISTED) -> IngestBrief:
        kinds = ("added", "updated", "unchanged", "retired", "restored", "invalid", "renamed")
        lists = {kind: getattr(summary, kind) for kind in kinds}
        return cls(counts={kind: len(ids) for kind, ids in lists.items()},
                   named={kind: lists[kind][:limit] for kind in NAMED})

    def names(self, kind: str) -> str:
        """The ids of `kind` the brief names, and how many more there are."""
        return _names(self.named[kind], self.counts[kind])


# The kinds of ingested entries a brief names; the other kinds it counts.
NAMED = ("added", "restored", "retired", "invalid", "renamed")


def _names(ids: Sequence[str], count: int) -> str:
    if not ids:
        return "none"
    names = ", ".join(f"`{entry_id}`" for entry_id in ids)
    return names + (f" and {count - len(ids):,} more" if count > len(ids) else "")


def _rows_beyond(count: int, limit: int, where: str) -> list[str]:
    """The line that counts the rows a bounded table leaves out, and where they all are."""
    return [] if count <= limit else ["", f"… and {count - limit:,} more: {where}."]


def run_report(
    run: PipelineRun,
    figures: Mapping[str, Mapping[str, Any]],
    changes: Sequence[Change] = (),
    ingest: IngestBrief | None = None,
    slowest: Sequence[ProbeRow] = (),
    abandoned: Sequence[PipelineRun] = (),
    table: tuple[int, int, str] | None = None,
    unjudged: UnjudgedRuns | None = None,
) -> str:
    """Markdown: entries by state (`figures`: `entry_figures`), changes since the previous
    run, the runs ended unjudged since then (`unjudged`), new and retired entries, the slowest
    endpoints, the validation errors, and the runs found left running; `table` (rows listed,
    entries published, where every entry is published) says what the run's entries table
    holds."""
    states = Counter(figure["state"] for figure in figures.values())
    lines = [f"# {run.flow} run {run.id}: {run.state}", ""]
    for dead in abandoned:
        lines += [f"**Crashed earlier:** {dead.flow} run {dead.id} (started "
                  f"{dead.started_at:%Y-%m-%d %H:%M} UTC) was left running; {dead.message}.", ""]
    if run.release_version:
        lines += [f"Published release `{run.release_version}` with "
                  f"{run.entries_published} entries.", ""]
    if run.message:
        lines += [f"**Error:** {run.message}", ""]
    if left_out := left_out_of_release(run):
        lines += [f"**Left out of the release:** {len(left_out):,} stored entries the release's "
                  "check refused (rule `" + LEFT_OUT_RULE + "` below); every other entry is "
                  "published. Fix their files.", ""]
    if run.network_suspect:
        lines += ["**Network-suspect run:** most probes failed to connect at once; the published "
                  "statuses keep the last trusted run.", ""]
    lines += ["## Entries by state", ""]
    by_state = [(state, states[state]) for state in get_args(StatusState)]
    lines += _table(["state", "entries"], by_state)
    if table is not None:
        listed, published, dataset = table
        whole = "every entry" if listed >= published else (
            f"{listed:,} of {published:,} entries: those that changed state first, then the "
            "unreachable, online, unchecked and live ones")
        lines += ["", f"The `{run.flow}-entries` table lists {whole}; every entry's status and "
                  f"score is published in {dataset}."]
    lines += ["", f"## State changes since the previous run ({len(changes)})", ""]
    if changes:
        lines += _table(["entry", "from", "to", "at"],
                        [(c.entry_id, c.from_state, c.to_state, c.document()["at"])
                         for c in changes[:LISTED]])
        lines += _rows_beyond(len(changes), LISTED, "every change is published in "
                              "`api/changes.json`")
    else:
        lines.append("No entry changed state.")
    if unjudged is not None:
        lines += _unjudged_lines(unjudged)
    if ingest is not None:
        lines += ["", "## Catalogue", "",
                  f"- New: {ingest.names('added')}",
                  f"- Restored: {ingest.names('restored')}",
                  f"- Retired: {ingest.names('retired')}",
                  f"- Renamed: {ingest.names('renamed')}",
                  f"- Updated: {ingest.counts['updated']:,}; "
                  f"unchanged: {ingest.counts['unchanged']:,}"]
    lines += ["", "## Slowest endpoints", ""]
    if slowest:
        lines += _table(["entry", "url", "HTTP", "ms"],
                        [(p.entry_id, p.url, p.http_status, round(p.total_ms or 0))
                         for p in slowest])
    else:
        lines.append("No endpoint answered in this run.")
    errors = run.errors or []  # the ingest stage keeps them in the run's record
    lines += ["", f"## Validation errors ({len(errors)})", ""]
    if errors:
        lines += _table(["file", "line", "entry", "field", "rule", "message"],
                        [tuple(error.get(key, "") for key in
                               ("file", "line", "entry", "field", "rule", "message"))
                         for error in errors[:LISTED]])
        lines += _rows_beyond(len(errors), LISTED, "`apidir validate` lists every one")
    else:
        lines.append("Every entry file is valid.")
    return "\n".join(lines) + "\n"


ENTRY_ROWS = 1_000  # rows of the entries table: a catalogue this size is listed whole
# The order the table lists entries in beyond the changed ones: failures first, live last.
_STATE_ORDER = {"unreachable": 1, "online": 2, "unchecked": 3, "live": 4}


def entry_figure(status: Status | Mapping[str, Any] | None,
                 score: BuilderScore | Mapping[str, Any] | None) -> dict[str, Any]:
    """What the run's record shows of an entry: its state, answer and grade (the status and
    the score each a model or its JSON form)."""
    if not isinstance(status, Mapping):
        status = (status or Status()).model_dump(mode="json")
    if isinstance(score, BuilderScore):
        score = {name: getattr(score, name) for name in _SCORE_FIGURES}
    return {
        **{name: status[name] for name in _STATUS_FIGURES},
        **{name: score[name] if score else None for name in _SCORE_FIGURES},
    }


# A status's and a builder score's fields the run's record shows (in JSON; the score's are
# the same in Python).
_STATUS_FIGURES = ("state", "httpStatus", "responseTimeMs", "checkedAt")
_SCORE_FIGURES = ("grade", "percent", "pricing", "latency", "depth")


def entry_figures(
    statuses: Mapping[str, Status | Mapping[str, Any]],
    scores: Mapping[str, BuilderScore | Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """`entry_figure` of each entry with a status or a score, by id. Small beside the presented
    values (no reasons, evidence or endpoints), so the score stage hands it over apart and the
    run's record reads it alone."""
    return {entry_id: entry_figure(statuses.get(entry_id), scores.get(entry_id))
            for entry_id in sorted(statuses.keys() | scores.keys())}


_UNSCORED = entry_figure(None, None)


def entry_table(
    categories: Mapping[str, str],
    figures: Mapping[str, Mapping[str, Any]],
    changes: Sequence[Change] = (),
    limit: int = ENTRY_ROWS,
) -> list[dict[str, Any]]:
    """One row per published entry (`categories`: its category by id) with its status and
    score (`entry_figures`), at most `limit` rows: the entries that changed state in the run,
    then the unreachable, online, unchecked and live ones, each by id. A catalogue of at most
    `limit` entries is listed whole; a larger one shows those most worth a look, and the
    published release holds every entry."""
    changed = {change.entry_id for change in changes}

    def rank(entry_id: str) -> tuple[int, str]:
        state = (figures.get(entry_id) or _UNSCORED)["state"]
        return (0 if entry_id in changed else _STATE_ORDER.get(state, 3), entry_id)

    return [{"entry": entry_id, "category": categories[entry_id],
             **(figures.get(entry_id) or _UNSCORED)}
            for entry_id in sorted(categories, key=rank)[:limit]]
