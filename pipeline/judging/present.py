"""The presented values of every entry (status, builder score, uptime) as of one moment:
what the score stage concludes from the store's entries and probe history."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import Session

from pipeline.contract import BuilderScore, EndpointStatus, Status, Uptime
from pipeline.judging.rollup import HISTORY_WINDOW
from pipeline.judging.score import entry_uptimes, score_entries
from pipeline.store.history import endpoint_statuses, history_frame, latest_statuses
from pipeline.store.tables import active_entries


@dataclass
class Presented:
    """The presented values of the entries, by id, as the probe and score stages computed them."""

    statuses: dict[str, Status] = field(default_factory=dict)
    scores: dict[str, BuilderScore] = field(default_factory=dict)
    uptimes: dict[str, Uptime] = field(default_factory=dict)
    endpoints: dict[str, dict[int, EndpointStatus]] = field(default_factory=dict)


def present_entries(session: Session, as_of: datetime) -> Presented:
    """Every active entry's status, scores and uptime as of `as_of`, from the stored history."""
    contents = {row.id: row.content for row in active_entries(session)}
    history = history_frame(session, since=as_of - HISTORY_WINDOW, until=as_of)
    statuses = latest_statuses(session)
    scores = score_entries(contents, history, as_of)
    return Presented(
        statuses=statuses,
        scores={entry_id: entry_score.contract() for entry_id, entry_score in scores.items()},
        uptimes=entry_uptimes(history, as_of),
        endpoints=endpoint_statuses(session),
    )
