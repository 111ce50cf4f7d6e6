"""The presented values of every entry (status, builder score, uptime, health) as of one
moment: what the score stage concludes from the store's entries and probe history."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Protocol

from pydantic import Field
from sqlmodel import Session

from pipeline.contract import BuilderScore, Lifecycle, Status
from pipeline.judging.changes import CheckedState
from pipeline.judging.content_scores import content_scores
from pipeline.judging.evidence import bounded_scores, day_bounds
from pipeline.judging.health import RunVerdict, measured_cors, measured_https, run_verdict
from pipeline.probing.probe import unprobable_entries
from pipeline.store.history import (
    day_probes,
    endpoint_calls,
    entry_endpoint_statuses,
    latest_probes,
    span_endpoints,
    status_form,
    unexplained_entries,
    unprobable_forms,
    unprobed_reasons,
)
from pipeline.store.tables import EVERY_ENTRY, EntrySpan, active_base_urls, time_texts

# A presented value in its JSON form, as published: built without a model for each entry (one
# costs some 2 µs to build and as much to write, a dozen times an entry), and checked against
# the contract where the release is published.
JsonForm = dict[str, Any]


@dataclass
class EntryValues:
    """One entry's presented values, as the score stage concluded them (None: not measured);
    its `lifecycle` is judged when the release is published. Each in its JSON form
    (`status_form`, `EntryScore.json_form`, `measured_https`, …); the status and the builder
    score may be models too."""

    status: Status | JsonForm | None = None
    score: BuilderScore | JsonForm | None = None
    uptime: JsonForm | None = None
    endpoints: dict[int, JsonForm] | None = None
    verdict: RunVerdict | None = None
    https: JsonForm | None = None
    cors: JsonForm | None = None
    # Never written out with the rest (a hand-over file): judged anew as a release is published.
    lifecycle: Annotated[Lifecycle | None, Field(exclude=True)] = None


@dataclass
class WrittenValues:
    """One entry's presented values in their JSON form, as written to a hand-over file:
    published as they are read, without models built again for each entry (about 0.1 ms an
    entry). Endpoint statuses by their endpoint's position."""

    status: JsonForm | None = None
    score: JsonForm | None = None
    uptime: JsonForm | None = None
    endpoints: dict[int, JsonForm] | None = None
    https: JsonForm | None = None
    cors: JsonForm | None = None
    lifecycle: Lifecycle | None = None


class PresentedValues(Protocol):
    """What a release is published from: each entry's values (from memory, or read back from a
    stage's hand-over file), the states and verdicts the publisher records whole, and the
    lifecycles it judges from those."""

    verdicts: Mapping[str, RunVerdict]
    lifecycles: dict[str, Lifecycle]

    @property
    def states(self) -> Mapping[str, CheckedState]: ...

    def entry(self, entry_id: str) -> EntryValues: ...

    def published(self, entry_id: str) -> EntryValues | WrittenValues:
        """The entry's values as the release writes them: models, or their JSON form."""
        ...


@dataclass
class Presented:
    """The presented values of the entries, by id, as the probe and score stages computed them;
    `lifecycles` are judged when the release is published (once per run, under its lock)."""

    statuses: dict[str, Status | JsonForm] = field(default_factory=dict)
    scores: dict[str, BuilderScore | JsonForm] = field(default_factory=dict)
    uptimes: dict[str, JsonForm] = field(default_factory=dict)
    endpoints: dict[str, dict[int, JsonForm]] = field(default_factory=dict)
    verdicts: dict[str, RunVerdict] = field(default_factory=dict)
    https: dict[str, JsonForm] = field(default_factory=dict)
    cors: dict[str, JsonForm] = field(default_factory=dict)
    lifecycles: dict[str, Lifecycle] = field(default_factory=dict)

    @property
    def states(self) -> dict[str, CheckedState]:
        return {entry_id: checked_state(status) for entry_id, status in self.statuses.items()}

    def entry(self, entry_id: str) -> EntryValues:
        return EntryValues(**{name: getattr(self, plural).get(entry_id)
                              for name, plural in _BY_ENTRY.items()})

    def published(self, entry_id: str) -> EntryValues:
        return self.entry(entry_id)

    def items(self) -> Iterator[tuple[str, EntryValues]]:
        """Every entry with a value, by id."""
        ids = set().union(*(getattr(self, name) for name in _BY_ENTRY.values()))
        return ((entry_id, self.entry(entry_id)) for entry_id in sorted(ids))

    @classmethod
    def gather(cls, values: Iterable[tuple[str, EntryValues]]) -> Presented:
        """The entries' values, held together."""
        presented = cls()
        for entry_id, entry in values:
            for name, plural in _BY_ENTRY.items():
                value = getattr(entry, name)
                if value is not None:
                    getattr(presented, plural)[entry_id] = value
        return presented


def checked_state(status: Status | JsonForm) -> CheckedState:
    """What the state changes read of a status, a model or its JSON form."""
    if isinstance(status, Status):
        return CheckedState(status.state, status.checked_at)
    checked = status["checkedAt"]
    return CheckedState(status["state"],
                        None if checked is None else datetime.fromisoformat(checked))


# Each field of an entry's values, and the field of `Presented` holding it for every entry.
_BY_ENTRY = {"status": "statuses", "score": "scores", "uptime": "uptimes",
             "endpoints": "endpoints", "verdict": "verdicts", "https": "https", "cors": "cors",
             "lifecycle": "lifecycles"}


def present_each(session: Session, as_of: datetime, origin: str = "",
                 span: EntrySpan = EVERY_ENTRY) -> Iterator[tuple[str, EntryValues]]:
    """Every active entry's status, scores, uptime and measured health as of `as_of`, one entry
    at a time, by id, from the stored history (past days from their rollups:
    `judging/evidence.py`); `origin` is the one the prober sent, which CORS answers are read
    against. An entry's values are built as it is reached and its evidence let go, so what is
    held at once is the evidence, never every entry's presented values (some 2 GB at 100k).
    With a `span`, only the entries in it are read and presented."""
    base_urls = active_base_urls(session, span)
    # Why each entry the catalogue gives no URL to probe any longer has none, asked once for
    # its evidence (none read) and its statuses.
    unprobable = unprobable_entries(base_urls)
    # The day's probes are read once, for its evidence and the latest probes (mostly the same
    # rows). The scores first: the frames they are computed from are gone before the latest
    # probes are gathered, so the two never weigh on memory at once (about 200 MB less at
    # 100k entries).
    day = day_probes(session, *day_bounds(as_of.date()), as_of, span)
    scores, uptimes = bounded_scores(
        session, content_scores(session, span=span), as_of, own_day=day.frame(), span=span,
        unprobable=unprobable)
    endpoints, order = span_endpoints(session, span)
    latest = latest_probes(session, base_urls, span=span, order=order, day=day)
    del order, day
    # The methods and paths of the entries whose statuses ask the prober why an endpoint is
    # not probed: few, once a run has planned them (an unprobable entry's say why without).
    calls = endpoint_calls(session, [entry_id for entry_id in unexplained_entries(endpoints, latest)
                                     if base_urls.get(entry_id) and entry_id not in unprobable])
    time_text = time_texts()  # a probe's time is written once for all its entry's values
    for entry_id in sorted(base_urls):
        probes = latest.pop(entry_id, None)
        listed = endpoints.pop(entry_id, None)
        called = calls.pop(entry_id, None)
        values = EntryValues(  # the score built as it is reached (`EntryScores`)
            score=scores.json_form(entry_id) if entry_id in scores else None,
            uptime=uptimes.get(entry_id),
        )
        if (why := unprobable.get(entry_id)) is not None:
            # Nothing listed can be checked: no status, HTTPS or CORS of addresses no longer
            # listed (nor uptime or Latency: `bounded_scores` read none of their probes);
            # their probes still date the lifecycle (its verdict).
            values.status, endpoint_statuses = unprobable_forms(listed or (), why)
            if listed is not None:
                values.endpoints = endpoint_statuses
            values.verdict = run_verdict(probes) if probes else None
            yield entry_id, values
            continue
        if listed is not None:
            values.endpoints = entry_endpoint_statuses(
                listed, probes or (),
                None if called is None else unprobed_reasons(base_urls[entry_id], called),
                time_text)
        if probes:
            values.status = status_form(probes, time_text)
            values.verdict = run_verdict(probes)
            values.https = measured_https(base_urls[entry_id], probes, as_of, time_text)
            values.cors = measured_cors(probes, origin, time_text)
        yield entry_id, values


def present_entries(session: Session, as_of: datetime, origin: str = "") -> Presented:
    """Every active entry's presented values (`present_each`), held together."""
    return Presented.gather(present_each(session, as_of, origin))
