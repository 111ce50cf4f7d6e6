"""The run summary an operator reads: a markdown report and a table of every entry.

Plain functions of plain values; the flows publish them as Prefect artifacts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from sqlmodel import Session, col, select

from pipeline.catalogue.ingest import IngestSummary
from pipeline.contract import BuilderScore, Status, StatusState
from pipeline.judging.changes import Change
from pipeline.store.tables import PipelineRun, ProbeRow

SLOWEST = 10


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


def _cell(value: object) -> str:
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return lines


def _names(ids: Sequence[str]) -> str:
    return ", ".join(f"`{entry_id}`" for entry_id in ids) if ids else "none"


def run_report(
    run: PipelineRun,
    statuses: Mapping[str, Status],
    changes: Sequence[Change] = (),
    ingest: IngestSummary | None = None,
    slowest: Sequence[ProbeRow] = (),
    abandoned: Sequence[PipelineRun] = (),
) -> str:
    """Markdown: entries by state, changes since the previous run, new and retired entries,
    the slowest endpoints, the validation errors, and the runs found left running."""
    states = Counter(status.state for status in statuses.values())
    lines = [f"# {run.flow} run {run.id}: {run.state}", ""]
    for dead in abandoned:
        lines += [f"**Crashed earlier:** {dead.flow} run {dead.id} (started "
                  f"{dead.started_at:%Y-%m-%d %H:%M} UTC) was left running; {dead.message}.", ""]
    if run.release_version:
        lines += [f"Published release `{run.release_version}` with "
                  f"{run.entries_published} entries.", ""]
    if run.message:
        lines += [f"**Error:** {run.message}", ""]
    if run.network_suspect:
        lines += ["**Network-suspect run:** most probes failed to connect at once; the published "
                  "statuses keep the last trusted run.", ""]
    lines += ["## Entries by state", ""]
    by_state = [(state, states[state]) for state in get_args(StatusState)]
    lines += _table(["state", "entries"], by_state)
    lines += ["", f"## State changes since the previous run ({len(changes)})", ""]
    if changes:
        lines += _table(["entry", "from", "to", "at"],
                        [(c.entry_id, c.from_state, c.to_state, c.document()["at"])
                         for c in changes])
    else:
        lines.append("No entry changed state.")
    if ingest is not None:
        lines += ["", "## Catalogue", "",
                  f"- New: {_names(ingest.added)}",
                  f"- Restored: {_names(ingest.restored)}",
                  f"- Retired: {_names(ingest.retired)}",
                  f"- Updated: {len(ingest.updated)}; unchanged: {len(ingest.unchanged)}"]
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
                         for error in errors])
    else:
        lines.append("Every entry file is valid.")
    return "\n".join(lines) + "\n"


def entry_table(
    categories: Mapping[str, str],
    statuses: Mapping[str, Status],
    scores: Mapping[str, BuilderScore],
) -> list[dict[str, Any]]:
    """One row per published entry (`categories`: its category by id): its status and its
    score, sorted by id."""
    rows = []
    for entry_id in sorted(categories):
        status = statuses.get(entry_id) or Status()
        score = scores.get(entry_id)
        rows.append({
            "entry": entry_id,
            "category": categories[entry_id],
            "state": status.state,
            "httpStatus": status.http_status,
            "responseTimeMs": status.response_time_ms,
            "checkedAt": status.checked_at.isoformat() if status.checked_at else None,
            "grade": score.grade if score else None,
            "percent": score.percent if score else None,
            "pricing": score.pricing if score else None,
            "latency": score.latency if score else None,
            "depth": score.depth if score else None,
        })
    return rows
