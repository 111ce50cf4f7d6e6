"""State changes: which entries moved between live, online and unreachable since the last run.

Each run compares the presented statuses it publishes with the state each entry
was last published with. A first check (from `unchecked`) is not a change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session, col, select

from pipeline.contract import Status
from pipeline.store.tables import EntryRow, EntryState, StateChange, as_utc, utc_text

DOWN = "unreachable"


@dataclass(frozen=True)
class Change:
    """One state change as reported and published."""

    entry_id: str
    name: str
    from_state: str
    to_state: str
    at: datetime

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


def _change(row: StateChange, names: Mapping[str, str]) -> Change:
    return Change(row.entry_id, names.get(row.entry_id, row.entry_id), row.from_state,
                  row.to_state, as_utc(row.at))


def _names(session: Session, ids: list[str]) -> dict[str, str]:
    statement = select(EntryRow.id, EntryRow.name).where(col(EntryRow.id).in_(ids))
    return dict(session.exec(statement).all())


def record_state_changes(
    session: Session, statuses: Mapping[str, Status], now: datetime, run_id: int | None = None
) -> list[Change]:
    """Store each entry's new checked state; return (and record) those that changed."""
    known = {row.entry_id: row for row in session.exec(select(EntryState))}
    rows = []
    for entry_id in sorted(statuses):
        status = statuses[entry_id]
        if status.state == "unchecked":
            continue
        at = status.checked_at or now
        previous = known.get(entry_id)
        if previous is None:
            session.add(EntryState(entry_id=entry_id, state=status.state, since=at))
            continue
        if previous.state == status.state:
            continue
        rows.append(StateChange(entry_id=entry_id, from_state=previous.state,
                                to_state=status.state, at=at, run_id=run_id))
        previous.state, previous.since = status.state, at
        session.add(previous)
    session.add_all(rows)
    session.commit()
    names = _names(session, [row.entry_id for row in rows])
    return [_change(row, names) for row in rows]


def recent_changes(session: Session, since: datetime, limit: int = 500) -> list[Change]:
    """State changes at or after `since`, newest first, at most `limit`."""
    statement = (
        select(StateChange)
        .where(StateChange.at >= since)
        .order_by(col(StateChange.at).desc(), col(StateChange.id).desc())
        .limit(limit)
    )
    rows = list(session.exec(statement))
    names = _names(session, sorted({row.entry_id for row in rows}))
    return [_change(row, names) for row in rows]
