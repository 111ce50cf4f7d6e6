"""The presented values of every entry (status, builder score, uptime, health) as of one
moment: what the score stage concludes from the store's entries and probe history."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import Session

from pipeline.contract import (
    BuilderScore,
    Cors,
    EndpointStatus,
    Https,
    Lifecycle,
    Status,
    Uptime,
)
from pipeline.judging.content_scores import content_scores
from pipeline.judging.evidence import bounded_scores
from pipeline.judging.health import RunVerdict, measured_cors, measured_https, run_verdict
from pipeline.store.history import endpoint_statuses, entry_status, latest_probes
from pipeline.store.tables import active_base_urls


@dataclass
class Presented:
    """The presented values of the entries, by id, as the probe and score stages computed them;
    `lifecycles` are judged when the release is published (once per run, under its lock)."""

    statuses: dict[str, Status] = field(default_factory=dict)
    scores: dict[str, BuilderScore] = field(default_factory=dict)
    uptimes: dict[str, Uptime] = field(default_factory=dict)
    endpoints: dict[str, dict[int, EndpointStatus]] = field(default_factory=dict)
    verdicts: dict[str, RunVerdict] = field(default_factory=dict)
    https: dict[str, Https] = field(default_factory=dict)
    cors: dict[str, Cors] = field(default_factory=dict)
    lifecycles: dict[str, Lifecycle] = field(default_factory=dict)


def present_entries(session: Session, as_of: datetime, origin: str = "") -> Presented:
    """Every active entry's status, scores, uptime and measured health as of `as_of`, from the
    stored history (past days from their rollups: `judging/evidence.py`); `origin` is the one
    the prober sent, which CORS answers are read against."""
    base_urls = active_base_urls(session)
    # The scores first: the frames they are computed from are gone before the latest probes
    # are read, so the two never weigh on memory at once (about 200 MB less at 100k entries).
    scores, uptimes = bounded_scores(session, content_scores(session), as_of)
    contracts = {entry_id: entry_score.contract() for entry_id, entry_score in scores.items()}
    del scores
    latest = {entry_id: probes for entry_id, probes in latest_probes(session).items()
              if entry_id in base_urls}
    verdicts = {entry_id: run_verdict(probes) for entry_id, probes in latest.items()}
    return Presented(
        statuses={entry_id: entry_status(probes) for entry_id, probes in latest.items()},
        scores=contracts,
        uptimes={entry_id: uptime for entry_id, uptime in uptimes.items()
                 if entry_id in base_urls},
        endpoints=endpoint_statuses(session, latest=latest),
        verdicts={entry_id: v for entry_id, v in verdicts.items() if v is not None},
        https={entry_id: measured_https(base_urls[entry_id], probes, as_of)
               for entry_id, probes in latest.items()},
        cors={entry_id: measured_cors(probes, origin) for entry_id, probes in latest.items()},
    )
