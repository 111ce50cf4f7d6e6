"""Changes: which entries moved between live, online and unreachable since the last run, and
the catalogue's events (entries added and retired, lifecycle transitions).

Each run compares the presented statuses it publishes with the state each entry
was last published with. A first check (from `unchecked`) is not a change, nor is the first
lifecycle judgement of an entry (its `added` event stands for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlmodel import Session, col, select
from sqlmodel.sql.expression import Select

from pipeline.contract import Deprecation, Lifecycle, Status
from pipeline.judging.health import (
    LifecycleRecord,
    LifecycleRules,
    RunVerdict,
    judge_lifecycle,
    published_lifecycle,
)
from pipeline.probing.probe import unprobable_entries
from pipeline.store.tables import (
    EntryEvent,
    EntryLifecycle,
    EntryRow,
    EntryState,
    ReleaseRow,
    StateChange,
    active_base_urls,
    as_utc,
    in_lists,
    rename_halves,
    utc_text,
    write_rows,
)

DOWN = "unreachable"


class _Held:
    """A published change or event: the id it tells of (`entry_id`) and the entry holding it,
    which a rename may have moved it to since (`held_by`)."""

    entry_id: str | None
    held_by: str | None

    @property
    def holder(self) -> str | None:
        """The entry whose history holds it: what a release must hold to show it, and what its
        link opens (a release holds no former id). None: a release's event."""
        return self.held_by or self.entry_id


@dataclass(frozen=True)
class Change(_Held):
    """One state change as reported and published."""

    entry_id: str
    name: str
    from_state: str
    to_state: str
    at: datetime
    held_by: str | None = None  # the entry holding it, where a rename moved it (`_about`)

    @property
    def direction(self) -> str:
        """`down` (stopped answering), `up` (answers again) or `changed` (live ⇄ online)."""
        if self.to_state == DOWN:
            return "down"
        if self.from_state == DOWN:
            return "up"
        return "changed"

    def document(self) -> dict[str, str]:
        return {
            "entry": self.entry_id,
            "name": self.name,
            "from": self.from_state,
            "to": self.to_state,
            "at": utc_text(self.at),
        }


def _change(row: Mapping[str, Any], names: Mapping[str, str]) -> Change:
    """A state change as published, from its row's values: of the id it was about, named as
    that id is (as an event, `_event`)."""
    return Change(_about(row), _name(row, names), row["from_state"], row["to_state"],
                  as_utc(row["at"]), row["entry_id"])


def _about(row: Mapping[str, Any]) -> str:
    """The id a stored change or event tells of: its entry's, or the id it was about where a
    rename moved it since to the entry that took that id over."""
    return row.get("former_id") or row["entry_id"]


def _name(row: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The name a stored change or event is published with: its entry's (`names`), or, where
    a rename moved it from the id it tells of, that id. The holder's name is another entry's
    where a long-retired id was merged into a live one (it would tell the live one retired, or
    down when the old id went down), and the store keeps no name of an id taken over: its row
    is gone with the move."""
    return row.get("former_id") or names.get(row["entry_id"], row["entry_id"])


def _named(rows: list[dict[str, Any]]) -> list[str]:
    """The entries whose names `rows` are published with (`_name`): those told of their own."""
    return sorted({row["entry_id"] for row in rows if not row.get("former_id")})


def _names(session: Session, ids: list[str]) -> dict[str, str]:
    """The names of the entries `ids`, a bounded IN list at a time: a night may change more
    entries than one statement may bind values (PostgreSQL: 65,535)."""
    names: dict[str, str] = {}
    for chunk in in_lists(ids):
        names.update(session.exec(select(EntryRow.id, EntryRow.name)
                                  .where(col(EntryRow.id).in_(chunk))).all())
    return names


class CheckedState(NamedTuple):
    """What the state changes read of an entry's status."""

    state: str
    checked_at: datetime | None


def record_state_changes(
    session: Session, statuses: Mapping[str, Status | CheckedState], now: datetime,
    run_id: int | None = None,
) -> list[Change]:
    """Store each entry's new checked state; return (and record) those that changed."""
    table = EntryState.__table__
    known = dict(session.connection().execute(select(table.c.entry_id, table.c.state)).all())
    new, changed, changes = [], [], []
    for entry_id in sorted(statuses):
        status = statuses[entry_id]
        if status.state == "unchecked":
            continue
        at = status.checked_at or now
        previous = known.get(entry_id)
        if previous is None:
            new.append({"entry_id": entry_id, "state": status.state, "since": at})
            continue
        if previous == status.state:
            continue
        changes.append({"entry_id": entry_id, "from_state": previous, "to_state": status.state,
                        "at": at, "run_id": run_id})
        changed.append({"entry_id": entry_id, "state": status.state, "since": at})
    write_rows(session, table, new, changed)
    write_rows(session, StateChange.__table__, changes)
    session.commit()
    names = _names(session, [change["entry_id"] for change in changes])
    return [_change(change, names) for change in changes]


def recent_changes(session: Session, since: datetime, limit: int = 500) -> list[Change]:
    """State changes at or after `since`, newest first, at most `limit`."""
    statement = (
        select(StateChange)
        .where(StateChange.at >= since)
        .order_by(col(StateChange.at).desc(), col(StateChange.id).desc())
        .limit(limit)
    )
    return _changes(session, statement)


def _changes(session: Session, statement: Select[StateChange]) -> list[Change]:
    """The state changes `statement` selects, with their entries' names."""
    rows = [row.model_dump() for row in session.exec(statement)]
    names = _names(session, _named(rows))
    return [_change(row, names) for row in rows]


def run_changes(session: Session, run_id: int) -> list[Change]:
    """The state changes the run `run_id` recorded, in the order it recorded them: what the
    run's summary and alerts tell, read from the store, not handed from task to task."""
    return _changes(session, select(StateChange).where(StateChange.run_id == run_id)
                    .order_by(col(StateChange.id)))


@dataclass(frozen=True)
class Event(_Held):
    """One event of the catalogue as published: added, retired, or a lifecycle transition."""

    kind: str
    entry_id: str | None
    name: str | None
    from_state: str | None
    to_state: str | None
    at: datetime
    version: str | None = None
    # A rename: the entry's former id (added) or its new id (retired)
    renamed: str | None = None
    held_by: str | None = None  # the entry holding it, where a rename moved it (`_about`)

    def document(self) -> dict[str, str]:
        if self.kind == "release":
            return {"kind": self.kind, "version": self.version, "at": utc_text(self.at)}
        document = {"kind": self.kind, "entry": self.entry_id, "name": self.name,
                    "at": utc_text(self.at)}
        if self.kind == "lifecycle":
            document |= {"from": self.from_state, "to": self.to_state}
        if self.renamed is not None:
            document["renamedFrom" if self.kind == "added" else "renamedTo"] = self.renamed
        return document


def record_lifecycles(
    session: Session,
    entry_ids: list[str],
    verdicts: Mapping[str, RunVerdict],
    deprecations: Mapping[str, Deprecation],
    now: datetime,
    rules: LifecycleRules,
    run_id: int | None = None,
) -> tuple[dict[str, Lifecycle], list[Event]]:
    """Judge each entry's lifecycle after its latest trusted run; store it, record each
    transition as an event, and return the published lifecycles and the new events. An entry
    the catalogue now gives no URL to probe (`probe.no_targets` of its base address) keeps the
    state judged before, its reason saying nothing can be checked any longer and when it last
    was: a state no evidence backs is not turned into another on none."""
    table = EntryLifecycle.__table__
    known = {row.entry_id: row for row in session.connection().execute(select(table))}
    unprobable = unprobable_entries(active_base_urls(session))
    lifecycles: dict[str, Lifecycle] = {}
    events: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    for entry_id in entry_ids:
        row = known.get(entry_id)
        previous = None if row is None else LifecycleRecord(
            row.state, as_utc(row.since), row.down_runs, as_utc(row.dead_since),
            row.judged_run_id)
        verdict, deprecation = verdicts.get(entry_id), deprecations.get(entry_id)
        record = judge_lifecycle(previous, verdict, deprecation, now, rules)
        lifecycles[entry_id] = published_lifecycle(record, verdict, deprecation,
                                                   unprobable.get(entry_id))
        if previous is not None and previous.state != record.state:
            events.append({"entry_id": entry_id, "kind": "lifecycle", "from_value": previous.state,
                           "to_value": record.state, "at": now, "run_id": run_id})
        if previous != record:
            (new if row is None else changed).append({
                "entry_id": entry_id, "state": record.state, "since": record.since,
                "down_runs": record.down_runs, "dead_since": record.dead_since,
                "judged_run_id": record.judged_run_id})
    write_rows(session, table, new, changed)
    write_rows(session, EntryEvent.__table__, events)
    session.commit()
    names = _names(session, [event["entry_id"] for event in events])
    return lifecycles, [_event(event, names) for event in events]


def _event(row: Mapping[str, Any], names: Mapping[str, str]) -> Event:
    """A catalogue event as published, from its row's values: of the id it was about
    (`_about`), named as that id is (`_name`)."""
    return Event(row["kind"], _about(row), _name(row, names), row["from_value"],
                 row["to_value"], as_utc(row["at"]), held_by=row["entry_id"])


def _published(event: Event) -> list[Event]:
    """A stored event as published: a rename (stored under the new id, naming the former) as
    the former id retired and the new one added, each naming the other, which a consumer of
    interface 2.0.0 reads as it always has; of those, only what was news when it was stored
    (`rename_halves`): a merge does not tell again of an id added, or retired, long ago."""
    if event.kind != "renamed":
        return [event]
    ids = {"added": (event.entry_id, event.from_state),  # (entry, the other id it names)
           "retired": (event.from_state, event.entry_id)}
    return [Event(half, ids[half][0], event.name, None, None, event.at, renamed=ids[half][1],
                  held_by=event.held_by)
            for half in rename_halves(event.to_state)]


def recent_events(session: Session, since: datetime, limit: int = 500) -> list[Event]:
    """Catalogue events at or after `since`, newest first, at most `limit`."""
    statement = (
        select(EntryEvent)
        .where(EntryEvent.at >= since)
        .order_by(col(EntryEvent.at).desc(), col(EntryEvent.id).desc())
        .limit(limit)
    )
    rows = [row.model_dump() for row in session.exec(statement)]
    names = _names(session, _named(rows))
    releases = session.exec(
        select(ReleaseRow.version, ReleaseRow.generated).where(ReleaseRow.generated >= since)
        .order_by(col(ReleaseRow.generated).desc()).limit(limit)).all()
    events = [published for row in rows for published in _published(_event(row, names))] + [
        Event("release", None, None, None, None, as_utc(generated), version)
        for version, generated in releases]
    return sorted(events, key=lambda event: event.at, reverse=True)[:limit]


def release_event(version: str, at: datetime) -> Event:
    """The event of a release being published."""
    return Event("release", None, None, None, None, at, version)


def curated_deprecations(session: Session) -> dict[str, Deprecation]:
    """The deprecation each active entry's curator recorded, by id; a successor that is no
    active entry (its file gone: retired) is left out, so no page links to an entry the
    release does not hold (the ingest reports the deprecated entry's file)."""
    curated = col(EntryRow.content)["deprecated"]  # read in the database, not every content
    # As text, a missing key is NULL on every database (SQLite quotes the JSON value, so a
    # missing one read as JSON is the text 'null', and every entry's came back).
    statement = select(EntryRow.id, curated).where(
        col(EntryRow.retired_at).is_(None), curated.as_string().is_not(None))
    deprecations = {entry_id: Deprecation.model_validate(value)
                    for entry_id, value in session.exec(statement) if value}
    named = sorted({d.successor for d in deprecations.values() if d.successor is not None})
    active: set[str] = set()
    for chunk in in_lists(named):
        active.update(session.exec(select(EntryRow.id).where(
            col(EntryRow.id).in_(chunk),
            col(EntryRow.retired_at).is_(None))))
    return {entry_id: deprecation if deprecation.successor is None
            or deprecation.successor in active
            else deprecation.model_copy(update={"successor": None})
            for entry_id, deprecation in deprecations.items()}
