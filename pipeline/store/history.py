"""Probe history: which URLs to probe, recording every probe, and reading the history back.

Rows are only ever added. The presented status of an entry comes from its
latest trusted probe run: runs flagged as network-suspect (the prober's own
network was down) are skipped, so one bad night never turns the whole directory
red, and so are runs not yet judged (still open, or ended before their probes
were counted), whose probes may be those of a suspect night.
"""

from __future__ import annotations

from collections import Counter, defaultdict, namedtuple
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from itertools import compress, repeat
from operator import and_, attrgetter, eq
from typing import Any, NamedTuple

import pandas as pd
from sqlalchemy import String, bindparam, case, func, or_, type_coerce, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import Select, SelectOfScalar

from pipeline.contract import ONLINE_NOTE, EndpointStatus, Status, absolute_uri
from pipeline.probing.probe import (
    NOT_PROBED,
    REDIRECT_NOTE_OPENING,
    ProbeResult,
    ProbeTarget,
    kept_final_url,
    left_unchecked,
    probe_targets_for,
    redirected_to,
    stands_in,
    target_host,
)
from pipeline.store.tables import (
    EVERY_ENTRY,
    EndpointRow,
    EntryRow,
    EntrySpan,
    PipelineRun,
    ProbeRow,
    TimeText,
    active_base_urls,
    as_utc,
    driver_column_parts,
    driver_columns,
    in_lists,
    insert_rows,
    json_time,
    utcnow,
)

# A run is network-suspect when at least this share of at least this many probes failed
# to connect at all: real providers do not all go down in the same minute. A run of fewer
# targets is topped up with witnesses (`witness_targets`) so that it can be judged too.
SUSPECT_SHARE = 0.9
SUSPECT_MIN_PROBES = 10
CONNECT_FAILURES = frozenset({"dns", "refused", "connect_timeout", "reset", "tls"})
# Rows of a trusted run read to find witnesses: enough for some distinct hosts, never the run.
WITNESS_ROWS = 1000

# Every column of a probe row that its ProbeResult carries under the same name.
PROBE_COLUMNS = tuple(
    column.name for column in ProbeRow.__table__.columns if column.name not in ("id", "run_id")
)
_probe_values = attrgetter(*PROBE_COLUMNS)  # a result's values of them, in order
HISTORY_COLUMNS = [
    "run_id",
    "entry_id",
    "endpoint_id",
    "url",
    "checked_at",
    "outcome",
    "reason",
    "http_status",
    "total_ms",
    "note",
]
# A target's probes in one run are its first look and, after a failure, its confirmation;
# the last one (by row id) is what the run concluded about it.
_TARGET_KEYS = ["run_id", "entry_id", "url"]


# What `entry_status` reads of a probe (rows of these columns stand in for ProbeRow objects).
STATUS_COLUMNS = (
    "run_id", "entry_id", "endpoint_id", "url", "checked_at", "outcome", "http_status",
    "total_ms", "reason", "error_class", "failure_class", "confirmation", "cors_allow_origin",
    "cors_allow_credentials", "tls_version", "cert_expires_at", "final_url", "redirects", "note",
)
# A probe's `note` (`ProbeResult.note`: what its run left undone of it, the redirect its URL
# answered with not followed), read from its own row: the prober writes the note as the
# probe's error (`_redirect_not_followed`). Computed where the probes are read, NULL on every
# other probe: the note shown and judged is always the probe's own, never one a later run
# left on its endpoint.
PROBE_NOTE = case(((ProbeRow.reason == "redirect")
                   & col(ProbeRow.error).startswith(REDIRECT_NOTE_OPENING, autoescape=True),
                   ProbeRow.error), else_=None)


def _probe_column(name: str) -> Any:
    """The probe's column `name` as a read of probes selects it: its row's, or `note`
    (`PROBE_NOTE`)."""
    return PROBE_NOTE.label(name) if name == "note" else getattr(ProbeRow, name)
# What a state needs (`_deciding_probe`'s state does not depend on the probes' order): the
# rollup asks every entry's state as of a day's end, and reads no more than this.
STATE_COLUMNS = ("entry_id", "url", "outcome", "http_status", "note")


def plan_targets(session: Session, entry_ids: Collection[str] | None = None) -> list[ProbeTarget]:
    """Every URL to probe for the published entries (or only `entry_ids`'), in id order;
    endpoints not called get their reason noted. Reads the columns it needs (the base address
    and the endpoints), never the entries' content: at 100,000 entries those rows take
    gigabytes."""
    entry = EntryRow.__table__.c
    endpoint = EndpointRow.__table__.c
    published = entry.retired_at.is_(None)
    base_urls = active_base_urls(session)
    # Plain tuples from the driver's rows, the notes kept apart: 568,056 endpoints at 100,000
    # entries, where a Row's attributes cost seconds.
    endpoints: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    stored_notes: dict[int, str] = {}
    statement = (
        sa_select(endpoint.id, endpoint.entry_id, endpoint.method, endpoint.path,
                  endpoint.probe_note)
        .join(EntryRow.__table__, entry.id == endpoint.entry_id)
        .where(published, endpoint.active)
        .order_by(endpoint.position, endpoint.id)
    )
    for endpoint_id, entry_id, method, path, note in session.connection().execute(statement):
        endpoints[entry_id].append((endpoint_id, method, path))
        if note is not None:
            stored_notes[endpoint_id] = note
    targets: list[ProbeTarget] = []
    notes_changed: list[dict[str, Any]] = []
    for entry_id in sorted(base_urls if entry_ids is None else set(base_urls) & set(entry_ids)):
        calls = endpoints.get(entry_id, [])
        planned, skipped = probe_targets_for(base_urls[entry_id], calls, entry_id=entry_id)
        targets.extend(planned)
        notes = dict(skipped)
        notes_changed.extend({"endpoint_id": endpoint_id, "note": notes.get(endpoint_id)}
                             for endpoint_id, _, _ in calls
                             if stored_notes.get(endpoint_id) != notes.get(endpoint_id))
    if notes_changed:
        session.execute(
            update(EndpointRow.__table__)
            .where(endpoint.id == bindparam("endpoint_id"))
            .values(probe_note=bindparam("note")),
            notes_changed,
        )
    session.commit()
    return targets


# The redirects the shards are planned with: those of the latest day of probes.
REDIRECTS_SEEN_WITHIN = timedelta(days=1)


def redirect_links(session: Session) -> list[tuple[str, str]]:
    """The hosts the latest day of probes was redirected between, each pair once: (the host
    of the URL probed, the host its last hop reached), where the two differ."""
    probe = ProbeRow.__table__.c
    connection = session.connection()
    latest = connection.execute(sa_select(func.max(probe.checked_at))).scalar()
    if latest is None:
        return []
    statement = sa_select(probe.url, probe.final_url).distinct().where(
        probe.checked_at >= latest - REDIRECTS_SEEN_WITHIN, probe.redirects > 0,
        probe.final_url.is_not(None))
    pairs = {(target_host(url), target_host(final)) for url, final in connection.execute(statement)}
    return sorted((source, target) for source, target in pairs if source != target)


@dataclass(frozen=True)
class ProbeTally:
    """What a run's probes came to; tallies of shards add up to the run's."""

    outcomes: Mapping[str, int] = field(default_factory=dict)
    connect_failures: int = 0
    # Witnesses (probes of no entry, `witness_targets`): they judge the network, nothing else.
    witnesses: int = 0
    witnesses_unconnected: int = 0

    @classmethod
    def of(cls, results: Iterable[ProbeResult]) -> ProbeTally:
        """Counted over targets, each by the run's conclusion: its confirmation, if it had one
        (so a failure probed twice counts once, and a suspect network is not double-counted).
        A probe of no entry is a witness, counted apart; a target not probed (its host given
        up on) is counted as `unchecked`, never as a probe (`probes`)."""
        results = list(results)
        confirmed = {(r.entry_id, r.url) for r in results if r.confirmation}
        results = [r for r in results if r.confirmation or (r.entry_id, r.url) not in confirmed]
        entries = [r for r in results if r.entry_id is not None]
        witnesses = [r for r in results if r.entry_id is None and r.not_probed is None]
        return cls(
            outcomes=dict(Counter(r.outcome for r in entries)),
            connect_failures=sum(1 for r in entries if r.error_class in CONNECT_FAILURES),
            witnesses=len(witnesses),
            witnesses_unconnected=sum(1 for r in witnesses if r.error_class in CONNECT_FAILURES),
        )

    def __add__(self, other: ProbeTally) -> ProbeTally:
        return ProbeTally(
            outcomes=dict(Counter(self.outcomes) + Counter(other.outcomes)),
            connect_failures=self.connect_failures + other.connect_failures,
            witnesses=self.witnesses + other.witnesses,
            witnesses_unconnected=self.witnesses_unconnected + other.witnesses_unconnected,
        )

    @property
    def probes(self) -> int:
        """Targets probed: those not probed (`unchecked`) are no evidence of anything."""
        return sum(count for outcome, count in self.outcomes.items() if outcome != NOT_PROBED)

    @property
    def network_suspect(self) -> bool:
        """Most probes, the witnesses' with the entries', failed to connect at once: the
        prober's network, not the providers."""
        looked = self.probes + self.witnesses
        unconnected = self.connect_failures + self.witnesses_unconnected
        return looked >= SUSPECT_MIN_PROBES and unconnected >= SUSPECT_SHARE * looked


def network_suspect(results: Sequence[ProbeResult]) -> bool:
    """Most probes failed to connect at once: the prober's network, not the providers."""
    return ProbeTally.of(results).network_suspect


def record_probes(session: Session, run: PipelineRun, results: Iterable[ProbeResult]) -> int:
    """Add one row per probe, linked to its run, entry and endpoint; flag a suspect run, judged
    with the witnesses among `results` (never stored)."""
    tally = add_probes(session, run.id, results)
    close_probe_run(session, run, tally)
    return tally.probes


def witness_targets(session: Session, targets: Sequence[ProbeTarget]) -> list[ProbeTarget]:
    """For a run of fewer targets than a suspect run needs: witnesses to top it up, URLs of
    other entries on other hosts (one a host) that got an HTTP answer in the newest trusted
    runs. They are probed only to tell the prober's network down from the run's own hosts
    down; as targets of no entry, they are never stored. None when the run is large enough,
    or no other host answered lately (a catalogue too small to judge its own network)."""
    wanted = SUSPECT_MIN_PROBES - len(targets)
    if wanted <= 0:
        return []
    own_entries = {t.entry_id for t in targets}
    hosts = {target_host(t.url) for t in targets}
    witnesses: list[ProbeTarget] = []
    newest = _trusted_runs().order_by(col(PipelineRun.id).desc()).limit(RECENT_RUNS)
    for run_id in session.exec(newest).all():
        answered = sa_select(ProbeRow.entry_id, ProbeRow.url).where(
            ProbeRow.run_id == run_id, col(ProbeRow.http_status).is_not(None),
        ).order_by(ProbeRow.id).limit(WITNESS_ROWS)
        for entry_id, url in session.connection().execute(answered):
            host = target_host(url)
            if entry_id in own_entries or host in hosts:
                continue
            hosts.add(host)
            witnesses.append(ProbeTarget(url))
            if len(witnesses) == wanted:
                return witnesses
    return witnesses


def add_probes(session: Session, run_id: int, results: Iterable[ProbeResult]) -> ProbeTally:
    """Add one row per probe of an entry (committed by the caller); the run's counts are left
    to `close_probe_run`, since a shard sees only its part of the run. The tally returned
    counts every result, witnesses (of no entry, never stored) apart.

    One bulk INSERT without reading ids back: a night of a large catalogue is a million rows.
    It is the table's own (Core) INSERT with every column in every row, one executemany: the
    ORM's bulk INSERT leaves out each row's None values, so it split the rows into a statement
    per run of rows with the same columns set (thousands a night), each compiled and executed
    apart; a None stored is NULL either way (no column it leaves out has another default).

    A target not probed (its host given up on) is no probe and adds no row, so its entry keeps
    the status, uptime and latency of the runs that probed it; its endpoint is noted with the
    reason, which its status shows should the entry's latest run be this one. A probe whose
    redirect was not followed (that host given up on) is stored, its note in its own row (its
    error: `PROBE_NOTE`), not on its endpoint, whose note a later run may replace.
    """
    results = list(results)
    stored = [r for r in results if r.entry_id is not None and r.not_probed is None]
    _note_endpoints(session, [r for r in results if r.not_probed is not None])
    if stored:
        columns = ("run_id", *PROBE_COLUMNS)
        insert_rows(session, ProbeRow.__table__,
                    (dict(zip(columns, (run_id, *_probe_values(r)), strict=True))
                     for r in stored))
        _widen_checked_bounds(session, run_id, min(r.checked_at for r in stored),
                              max(r.checked_at for r in stored))
    return ProbeTally.of(results)


def _note_endpoints(session: Session, results: Sequence[ProbeResult]) -> None:
    """Note on each endpoint among `results` why the run did not probe it; its next planned
    run clears the note (`plan_targets`)."""
    notes = [{"endpoint_id": r.endpoint_id, "note": r.not_probed}
             for r in results if r.endpoint_id is not None]
    if notes:
        session.execute(update(EndpointRow.__table__)
                        .where(EndpointRow.__table__.c.id == bindparam("endpoint_id"))
                        .values(probe_note=bindparam("note")), notes)


def stored_run_tally(session: Session, run: PipelineRun) -> ProbeTally | None:
    """What the probes `run` stored came to (`ProbeTally.of` them), with the targets it did
    not probe (no row: their count is the run's); None if it stored none. A run that was
    judged stored its probes, even should every one of its hosts have been given up."""
    if run.first_checked_at is None and run.judged_at is None:
        return None  # both kept with every part of the run's probes stored
    stored = ProbeTally.of(session.exec(select(
        ProbeRow.entry_id, ProbeRow.url, ProbeRow.outcome, ProbeRow.confirmation,
        ProbeRow.error_class).where(ProbeRow.run_id == run.id)))
    if not run.probes_unchecked:
        return stored
    return stored + ProbeTally(outcomes={NOT_PROBED: run.probes_unchecked})


def _widen_checked_bounds(session: Session, run_id: int, first: datetime, last: datetime) -> None:
    """The run's first and last check time widened to hold `first` and `last`, in the
    database (shards store their parts at once, each in its own transaction)."""
    run = PipelineRun.__table__.c
    session.execute(update(PipelineRun.__table__).where(run.id == run_id).values(
        first_checked_at=case((or_(run.first_checked_at.is_(None), run.first_checked_at > first),
                               first), else_=run.first_checked_at),
        last_checked_at=case((or_(run.last_checked_at.is_(None), run.last_checked_at < last),
                              last), else_=run.last_checked_at)))


def close_probe_run(session: Session, run: PipelineRun, tally: ProbeTally) -> None:
    """Store the run's probe counts and flag it network-suspect when most failed to connect:
    its judgement, from which its probes count unless it is suspect (`_trusted_runs`)."""
    run.probes = tally.probes
    run.probes_failed = tally.outcomes.get("unreachable", 0)
    run.probes_unchecked = tally.outcomes.get(NOT_PROBED, 0)
    run.network_suspect = tally.network_suspect
    run.judged_at = utcnow()
    session.add(run)
    session.commit()


def _deciding_probe(probes: Sequence[Any]) -> tuple[str, Any]:
    """The state one run's probes of an entry (at least one) give, and the probe deciding it:
    from the probes that count alone. A probe `left_unchecked` (its redirect not followed) is
    no answer of the API, as in the scores and the lifecycle: an entry whose every probe of
    the run is one is `unchecked`, decided by the first of them (its note says why)."""
    counted = [p for p in probes if not left_unchecked(p.note)]
    if not counted:
        return NOT_PROBED, probes[0]
    probes = counted
    live = [p for p in probes if p.outcome == "live"]
    answered = [p for p in probes if p.http_status is not None]
    if live:
        return "live", live[0]
    if answered:
        return "online", answered[0]
    return "unreachable", probes[0]


def latest_states(
    session: Session, until: datetime, entry_ids: Iterable[str] | None = None
) -> dict[str, str]:
    """Each entry's (or each of `entry_ids`') presented state as it was at `until` (that of
    `latest_statuses`), without the rest of its status."""
    latest = latest_probes(session, entry_ids, until, STATE_COLUMNS, in_endpoint_order=False)
    return {entry_id: _deciding_probe(probes)[0] for entry_id, probes in latest.items() if probes}


def entry_status(probes: Sequence[ProbeRow]) -> Status:
    """The presented status from one run's probes of an entry (`status_form`), as a model."""
    return Status.model_validate(status_form(probes)) if probes else Status()


def status_form(probes: Sequence[ProbeRow], time_text: TimeText = json_time) -> dict[str, Any]:
    """The presented status from one run's probes of an entry (at least one), in endpoint
    order, in its JSON form as published (fields in `Status`' order), built without a model
    (the score stage's, 100,000 a night; the release is checked where it is published); its
    time written by `time_text`.

    live if any target answered 200; else online if any answered at all; else
    unreachable; of the probes that count (`_deciding_probe`). The deciding probe gives the
    code, the time and the check date. None counting: unchecked, with no answer, the note and
    URL of the probe left undone beside it.
    """
    state, deciding = _deciding_probe(probes)
    if state == NOT_PROBED:
        return {**_UNCHECKED_FORM, "note": deciding.note, "url": deciding.url}
    return {
        "state": state, "httpStatus": deciding.http_status,
        "responseTimeMs": None if deciding.total_ms is None else round(deciding.total_ms),
        "checkedAt": time_text(deciding.checked_at),
        "note": ONLINE_NOTE if state == "online" else None, "url": deciding.url,
        "failure": deciding.failure_class if all(
            p.failure_class for p in probes if not left_unchecked(p.note)) else None,
        "finalUrl": published_url(redirected_to(deciding.url, deciding.final_url,
                                                  deciding.redirects)),
        "standIn": stands_in(deciding.entry_id, deciding.endpoint_id),
    }


_UNCHECKED_FORM = Status().model_dump(mode="json")  # no answer: every field null but the state


def unprobable_forms(endpoints: Sequence[ActiveEndpoint],
                     reason: str) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    """The status and endpoint statuses (by position) of an entry the catalogue gives no URL to
    probe any longer (`probe.no_targets`, its `reason`): unchecked, saying why, whatever its
    probes of the addresses it listed before said. A status is of the addresses listed now;
    those probes stay the evidence its lifecycle and history are dated by."""
    return ({**_UNCHECKED_FORM, "note": reason},
            {endpoint.position: _not_probed(reason) for endpoint in endpoints})


def published_url(url: str | None) -> str | None:
    """`url` if the release's URL rule takes it, else None: a final URL stored before the prober
    kept only requested hops (a refused redirect's `ftp:` or `mailto:` Location), or before it
    kept none too long (`kept_final_url`), is left out of the status, not the entry out of the
    release."""
    url = kept_final_url(url)
    if url is None:
        return None
    try:
        return absolute_uri(url)
    except ValueError:
        return None


def _trusted_runs() -> SelectOfScalar[int | None]:
    """Ids of the runs whose probes count: those judged (`close_probe_run`) and not flagged
    network-suspect. A run still open, or closed as crashed or failed before its judgement,
    does not count, though some of its shards stored their probes."""
    return select(PipelineRun.id).where(col(PipelineRun.judged_at).is_not(None),
                                        col(PipelineRun.network_suspect).is_(False))


def _untrusted_runs() -> SelectOfScalar[int | None]:
    """Ids of the runs whose probes do not count. `run_id NOT IN` these is `IN _trusted_runs()`
    (every probe has its run), and lets a query bounded in time use the index on `checked_at`
    rather than visit every probe of every trusted run."""
    return select(PipelineRun.id).where(or_(col(PipelineRun.judged_at).is_(None),
                                            col(PipelineRun.network_suspect).is_not(False)))


def latest_statuses(
    session: Session, entry_ids: Iterable[str] | None = None, until: datetime | None = None
) -> dict[str, Status]:
    """Each entry's status from its latest probe run that was not network-suspect.

    With `until`, only probes checked by then count: the status as it was at that moment.
    """
    return {entry_id: entry_status(probes)
            for entry_id, probes in latest_probes(session, entry_ids, until).items()}


class ActiveEndpoint(NamedTuple):
    """An active endpoint as its status is judged: its id, position, and why its latest planned
    run did not probe it. Its method and path (why one
    would not, before any run planned it) are read apart, for the few entries that need them
    (`endpoint_calls`)."""

    id: int
    position: int
    probe_note: str | None


class SpanEndpoints(NamedTuple):
    """The endpoints of the entries in a span, read once for both of their uses."""

    active: dict[str, list[ActiveEndpoint]]  # the active ones, by entry
    order: dict[int | None, int]  # every one's position, by id: what probes are sorted by


def span_endpoints(session: Session, span: EntrySpan = EVERY_ENTRY) -> SpanEndpoints:
    """The endpoints of every entry (in `span`): the active ones by entry, and every one's
    position (an endpoint retired since its probe still orders it), from one read of their
    rows rather than two (some 0.3 s a span of 50,000 entries), without their methods and
    paths (some 290,000 of each a span, which few entries need: `endpoint_calls`)."""
    statement = select(EndpointRow.entry_id, EndpointRow.id, EndpointRow.position,
                       EndpointRow.probe_note, EndpointRow.active).where(
        span.holds(EndpointRow.entry_id))
    by_entry: dict[str, list[ActiveEndpoint]] = defaultdict(list)
    entry_ids, ids, positions, notes, active = driver_columns(session.connection(), statement)
    order = dict(zip(ids, positions, strict=True))
    # the active ones made endpoints a column at a time, then each put with its entry
    for entry_id, endpoint in zip(
            compress(entry_ids, active),
            map(ActiveEndpoint, compress(ids, active), compress(positions, active),
                compress(notes, active)), strict=True):
        by_entry[entry_id].append(endpoint)
    return SpanEndpoints(dict(by_entry), order)


def unexplained_entries(endpoints: Mapping[str, Sequence[ActiveEndpoint]],
                        latest: Mapping[str, Sequence[Any]]) -> list[str]:
    """The entries with an active endpoint that neither their latest probes (`latest`) nor a
    stored note account for: those whose statuses ask the prober why (`unprobed_reasons`)."""
    unexplained = []
    for entry_id, listed in endpoints.items():
        # the endpoints without a note, then whether the probes hold them all: set steps, not
        # a Python step an endpoint (most entries have some, probed)
        unnoted = [endpoint.id for endpoint in listed if endpoint.probe_note is None]
        if unnoted and not {probe.endpoint_id for probe in latest.get(entry_id, ())}.issuperset(
                unnoted):
            unexplained.append(entry_id)
    return unexplained


EndpointCall = tuple[int, str, str]  # an active endpoint's id, method and path


def endpoint_calls(session: Session, entry_ids: Sequence[str]) -> dict[str, list[EndpointCall]]:
    """The active endpoints of `entry_ids`, by entry, in listed order (position, then id), as
    the prober plans them: read only for the entries whose statuses need them (a new store,
    probing off, an endpoint added since the last run)."""
    endpoint = EndpointRow.__table__.c
    calls: dict[str, list[EndpointCall]] = defaultdict(list)
    for chunk in in_lists(sorted(entry_ids)):
        statement = (sa_select(endpoint.entry_id, endpoint.id, endpoint.method, endpoint.path)
                     .where(endpoint.entry_id.in_(chunk), endpoint.active)
                     .order_by(endpoint.position, endpoint.id))
        for entry_id, endpoint_id, method, path in session.connection().execute(statement):
            calls[entry_id].append((endpoint_id, method, path))
    return dict(calls)


def entry_endpoint_statuses(
    endpoints: Sequence[ActiveEndpoint], probes: Iterable[Any],
    reasons: Mapping[int | None, str] | None = None, time_text: TimeText = json_time,
) -> dict[int, dict[str, Any]]:
    """One entry's endpoints' own statuses, by position: from its probe of each in its latest
    trusted run (`probes`), else unchecked with the reason the endpoint is not probed: the one
    noted when a run planned it, or, where no run did (a new store, probing off, an endpoint
    added since), the prober's own (`reasons`, `unprobed_reasons`). A probe `left_unchecked`
    (its redirect not followed, that host given up on) is no answer: unchecked too, with its
    own note alone (`PROBE_NOTE`), never one a later run left on its endpoint. Each in its
    JSON form as published
    (fields in `EndpointStatus`' order), built without a model for each (some 300,000 a night
    at 100k entries), its time written by `time_text`; the release is checked where it is
    published."""
    probed = {probe.endpoint_id: probe for probe in probes if probe.endpoint_id is not None}
    statuses = {}
    for endpoint in endpoints:
        probe = probed.get(endpoint.id)
        if probe is None or left_unchecked(probe.note):  # no answer: as a target not sent
            note = None if probe is None else probe.note
            if note is None:
                note = endpoint.probe_note
            if note is None and reasons is not None:
                note = reasons.get(endpoint.id)
            statuses[endpoint.position] = _not_probed(note)
            continue
        statuses[endpoint.position] = {
            "state": ("live" if probe.outcome == "live"
                      else "online" if probe.http_status is not None else "unreachable"),
            "httpStatus": probe.http_status,
            "responseTimeMs": None if probe.total_ms is None else round(probe.total_ms),
            "checkedAt": time_text(probe.checked_at), "reason": probe.reason or probe.error_class,
            "note": probe.note, "failure": probe.failure_class}
    return statuses


def unprobed_reasons(base_url: str, calls: Sequence[EndpointCall]) -> dict[int | None, str]:
    """Why the prober does not call each of an entry's endpoints it skips, by id: the reasons
    `plan_targets` notes when a run plans the entry, from the same rule (`probe_targets_for`)
    over its `calls` in the same (listed) order (`endpoint_calls`)."""
    _, skipped = probe_targets_for(base_url, list(calls))
    return dict(skipped)


@cache
def _not_probed(note: str | None) -> dict[str, Any]:
    """The status of an endpoint that is not probed, for its reason: one object per reason,
    shared by every such endpoint (some 300,000 a night at 100k entries); never changed once
    made."""
    return EndpointStatus(note=note).model_dump(mode="json")


def latest_probes(
    session: Session, entry_ids: Iterable[str] | None = None, until: datetime | None = None,
    columns: Sequence[str] = STATUS_COLUMNS, in_endpoint_order: bool = True,
    span: EntrySpan = EVERY_ENTRY, order: Mapping[int | None, int] | None = None,
    day: DayProbes | None = None,
) -> dict[str, list[ProbeRow]]:
    """The probes of each entry's latest trusted run (by `until`), in endpoint order (or as
    stored), with their `columns` (`entry_id` and `url` among them); of the entries in `span`
    alone where it is given (`entry_ids`, if any, lie in it). The endpoints' positions are
    read unless `order` gives them (`span_endpoints`); a run's probes are taken from `day`
    (a day's probes of the same span, read already) where it holds all of them.

    Two index-friendly steps (the latest trusted run of each entry, then the probes of those
    few runs) rather than one join, which SQLite plans as runs x entries row visits.
    """
    latest = latest_runs(session, entry_ids, until, span)
    by_entry: dict[str, list[ProbeRow]] = defaultdict(list)
    probe_type = _latest_probe_type(tuple(columns))
    entry_at, url_at = columns.index("entry_id"), columns.index("url")
    texts: dict[str | None, str | None] = {}
    run_ids = sorted(set(latest.values()))
    held = (day.runs_held(session, run_ids)
            if day is not None and until is None and tuple(columns) == STATUS_COLUMNS else set())
    for run_id in run_ids:
        final: dict[tuple[str, str], Any] = {}
        if run_id in held:
            assert day is not None
            parts: Iterable[list[list[Any]]] = [day.columns]
            of_run = day.columns[STATUS_COLUMNS.index("run_id")]
        else:
            statement = select(*(_probe_column(name) for name in columns)).where(
                ProbeRow.run_id == run_id, span.holds(ProbeRow.entry_id, indexed=False))
            if until is not None:
                statement = statement.where(ProbeRow.checked_at <= until)
            parts = _probe_columns(session, statement, columns, texts)
            of_run = None
        for cells in parts:
            # Only the entries whose latest run this is; a confirmation replaces the first look.
            kept = map(eq, map(latest.get, cells[entry_at]), repeat(run_id))
            if of_run is not None:  # a day's probes hold other runs' too
                kept = map(and_, kept, map(eq, of_run, repeat(run_id)))
            final.update(compress(zip(zip(cells[entry_at], cells[url_at], strict=True),
                                      map(probe_type, *cells), strict=True), kept))
        for probe in final.values():
            by_entry[probe.entry_id].append(probe)
    if not in_endpoint_order:
        return by_entry
    if order is None:
        order = _endpoint_order(session, span)
    return {entry_id: sorted(probes, key=lambda p: order.get(p.endpoint_id, -1))
            for entry_id, probes in by_entry.items()}


def _probe_columns(session: Session, statement: Select[Any], columns: Sequence[str],
                   texts: dict[str | None, str | None]) -> Iterator[list[list[Any]]]:
    """The rows of `statement` (probes' `columns`, by id), `ROWS_AT_ONCE` at a time, each part
    as its columns, the recurring texts in them one object each (`texts`). A step over a whole
    column at a time rather than a Python step a row (some 0.15 s of CPU less for a span of
    50,000 entries), over the driver's own rows rather than SQLAlchemy's (`driver_column_parts`:
    some 0.4-0.6 s less for a day of such a span, 140,000 probes)."""
    shared = [n for n, name in enumerate(columns) if name in _RECURRING_TEXTS]
    share = texts.setdefault
    for cells in driver_column_parts(session.connection(), statement.order_by(ProbeRow.id),
                                     ROWS_AT_ONCE):
        for n in shared:
            cells[n] = list(map(share, cells[n], cells[n]))
        yield cells


@dataclass
class DayProbes:
    """The trusted probes of one day (from its first instant to its last) of the entries in a
    span, read once for both the score stage's evidence of that day and the entries' latest
    probes, which are mostly the same rows (some 0.4 s of CPU a span of 50,000 entries, read
    twice before). Held a column at a time: each a list of every probe's value, by id."""

    first: datetime
    last: datetime
    columns: list[list[Any]]  # of `STATUS_COLUMNS`
    by_as_of: list[bool]  # whether each was checked by the moment the day's evidence ends

    def frame(self) -> pd.DataFrame:
        """The probes checked by that moment as `history_frame` gives them."""
        at = {name: STATUS_COLUMNS.index(name) for name in HISTORY_COLUMNS}
        return _concluded([_history_part({
            name: list(compress(self.columns[at[name]], self.by_as_of))
            for name in HISTORY_COLUMNS})])

    def runs_held(self, session: Session, run_ids: Iterable[int]) -> set[int]:
        """Those of `run_ids` trusted and whose every stored probe was checked within the day:
        their probes here are all of theirs (of the span)."""
        run = PipelineRun.__table__.c
        statement = sa_select(run.id, run.first_checked_at, run.last_checked_at).where(
            run.id.in_(list(run_ids)), run.id.in_(_trusted_runs()))
        return {run_id for run_id, first, last in session.connection().execute(statement)
                if first is not None and as_utc(first) >= self.first
                and as_utc(last) <= self.last}


def day_probes(session: Session, first: datetime, last: datetime, as_of: datetime,
               span: EntrySpan = EVERY_ENTRY) -> DayProbes:
    """The trusted probes checked from `first` to `last` (a day) of the entries in `span`,
    each flagged by whether it was checked by `as_of` (compared in the database, as
    `history_frame` bounds them)."""
    statement = _trusted_probes([*(_probe_column(name) for name in STATUS_COLUMNS),
                                 (ProbeRow.checked_at <= as_of).label("by_as_of")],
                                span, first, last)
    columns: list[list[Any]] = [[] for _ in range(len(STATUS_COLUMNS) + 1)]
    for cells in _probe_columns(session, statement, (*STATUS_COLUMNS, "by_as_of"), {}):
        for gathered, part in zip(columns, cells, strict=True):
            gathered.extend(part)
    by_as_of = [bool(flag) for flag in columns.pop()]
    return DayProbes(first, last, columns, by_as_of)


# Texts that recur from probe to probe (an entry's id on each of its URLs, a URL in every run,
# outcomes, reasons, TLS versions, CORS origins): kept as one object each wherever probes are
# read in bulk. The driver makes one for every row.
_RECURRING_TEXTS = frozenset(("entry_id", "url", "outcome", "reason", "error_class",
                              "failure_class", "cors_allow_origin", "tls_version", "final_url"))


@cache
def _latest_probe_type(columns: tuple[str, ...]) -> type[tuple[Any, ...]]:
    """A latest probe with `columns`, read as a row is (`probe.url`), held in a plain tuple."""
    return namedtuple("LatestProbe", columns)  # type: ignore[misc]


RECENT_RUNS = 7  # the newest runs read whole before the entries left are looked up one by one


def latest_runs(
    session: Session, entry_ids: Iterable[str] | None = None, until: datetime | None = None,
    span: EntrySpan = EVERY_ENTRY,
) -> dict[str, int]:
    """The latest trusted run that probed each entry by `until` (all stored entries, or
    `entry_ids`), without reading the whole history, which grows every night: the newest
    runs are read one at a time through the run index until every entry has its run (the
    last nightly run usually places them all), and only the entries left (not probed lately,
    or never) are looked up through the entry index."""
    wanted = set(entry_ids) if entry_ids is not None else set(
        session.exec(select(EntryRow.id).where(span.holds(EntryRow.id))))
    newest = _trusted_runs().order_by(col(PipelineRun.id).desc()).limit(RECENT_RUNS)
    latest: dict[str, int] = {}
    for run_id in session.exec(newest):
        if len(latest) == len(wanted):
            break
        probed = select(ProbeRow.entry_id).distinct().where(
            ProbeRow.run_id == run_id, span.holds(ProbeRow.entry_id, indexed=False))
        if until is not None:
            probed = probed.where(ProbeRow.checked_at <= until)
        for entry_id in session.connection().execute(probed).scalars().all():
            if entry_id in wanted:
                latest.setdefault(entry_id, run_id)
    left = sorted(wanted - latest.keys())
    for chunk in in_lists(left):
        older = select(col(ProbeRow.entry_id), func.max(ProbeRow.run_id)).where(
            col(ProbeRow.entry_id).in_(chunk),
            col(ProbeRow.run_id).in_(_trusted_runs()))
        if until is not None:
            older = older.where(ProbeRow.checked_at <= until)
        latest.update(session.exec(older.group_by(col(ProbeRow.entry_id))).all())
    return latest


def _endpoint_order(session: Session, span: EntrySpan = EVERY_ENTRY) -> dict[int | None, int]:
    statement = select(EndpointRow.id, EndpointRow.position).where(
        span.holds(EndpointRow.entry_id))
    return dict(session.connection().execute(statement).all())


def history_frame(
    session: Session, since: datetime | None = None, until: datetime | None = None,
    span: EntrySpan = EVERY_ENTRY,
) -> pd.DataFrame:
    """Probe history as a data frame for the score stage (trusted runs only; of the entries in
    `span`): one row per target and run, the run's conclusion (a confirmation replaces the
    first look it checked)."""
    statement = _trusted_probes(_history_columns(), span, since, until)
    return _concluded([_history_part(dict(zip(HISTORY_COLUMNS, cells, strict=True)))
                       for cells in _probe_columns(session, statement, HISTORY_COLUMNS, {})])


def _history_columns() -> list[Any]:
    """The probe columns of `HISTORY_COLUMNS` as a read of the history selects them: the check
    times as the database returns them (text on SQLite), parsed at once with the rest."""
    return [type_coerce(ProbeRow.checked_at, String).label(c) if c == "checked_at"
            else _probe_column(c) for c in HISTORY_COLUMNS]


def entries_history(session: Session, entry_ids: Collection[str], since: datetime,
                    until: datetime) -> pd.DataFrame:
    """`history_frame` of the entries `entry_ids` alone (few: read through the entry index, a
    chunk of them at a time)."""
    parts = []
    for chunk in in_lists(sorted(entry_ids)):
        statement = _trusted_probes(_history_columns(), EVERY_ENTRY, since, until).where(
            col(ProbeRow.entry_id).in_(chunk))
        parts += [_history_part(dict(zip(HISTORY_COLUMNS, cells, strict=True)))
                  for cells in _probe_columns(session, statement, HISTORY_COLUMNS, {})]
    return _concluded(parts)


class Unlisted(NamedTuple):
    """What of an entry's probes is no evidence of what it lists now, though they stay as
    history: those of the endpoints it no longer lists (by id), and every one checked before
    its base address moved to the one it lists (`EntryRow.base_url_since`)."""

    endpoints: frozenset[int] = frozenset()
    moved_at: datetime | None = None


def unlisted_probes(session: Session, since: datetime, until: datetime,
                    span: EntrySpan = EVERY_ENTRY) -> dict[str, Unlisted]:
    """The entries (in `span`) whose trusted probes checked in [since, until] hold some that
    are no evidence of what they list now, and which (`Unlisted`): those of an endpoint
    probed then that the entry no longer lists, and those before its base address moved
    after `since`. Few: only an entry the curator edited has any (found by its inactive
    endpoints, or by the index of when addresses moved), so its probes are read through the
    entry index."""
    statement = select(EndpointRow.entry_id).distinct().where(
        col(EndpointRow.active).is_(False), span.holds(EndpointRow.entry_id))
    edited = sorted(session.exec(statement))
    found: dict[str, set[int]] = defaultdict(set)
    for chunk in in_lists(edited):
        probed = (select(ProbeRow.entry_id, ProbeRow.endpoint_id).distinct()
                  .join(EndpointRow, col(EndpointRow.id) == col(ProbeRow.endpoint_id))
                  .where(col(ProbeRow.entry_id).in_(chunk), col(EndpointRow.active).is_(False),
                         col(ProbeRow.run_id).not_in(_untrusted_runs()),
                         ProbeRow.checked_at >= since, ProbeRow.checked_at <= until))
        for entry_id, endpoint_id in session.exec(probed):
            found[entry_id].add(endpoint_id)
    moved = dict(session.exec(select(EntryRow.id, EntryRow.base_url_since).where(
        col(EntryRow.base_url_since) > since, span.holds(EntryRow.id))).all())
    return {entry_id: Unlisted(frozenset(found.get(entry_id, ())),
                               (at := moved.get(entry_id)) and as_utc(at))
            for entry_id in sorted(found.keys() | moved.keys())}


def _trusted_probes(columns: Sequence[Any], span: EntrySpan, since: datetime | None,
                    until: datetime | None) -> Select[Any]:
    """`columns` of the trusted probes of the entries in `span` checked from `since` to
    `until` (either open), as the score stage reads a stretch of the history."""
    statement = select(*columns).where(col(ProbeRow.run_id).not_in(_untrusted_runs()),
                                       span.holds(ProbeRow.entry_id, indexed=False))
    if since is not None:
        statement = statement.where(ProbeRow.checked_at >= since)
    if until is not None:
        statement = statement.where(ProbeRow.checked_at <= until)
    return statement


# Probe rows read and made into a frame at a time: a day of several runs at 100,000 entries
# is millions of rows, each a row object with its own values before it is a frame's.
ROWS_AT_ONCE = 50_000
_HISTORY_TYPES = {"run_id": "int64", "endpoint_id": "float64", "http_status": "float64",
                  "total_ms": "float64"}  # one type in every part, None as NaN


def _history_part(columns: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Columns of `HISTORY_COLUMNS` as a frame, their check times parsed (text as SQLite gives
    them back, or moments)."""
    frame = pd.DataFrame(columns, columns=HISTORY_COLUMNS).astype(_HISTORY_TYPES)
    frame["checked_at"] = pd.to_datetime(frame["checked_at"], utc=True, format="ISO8601")
    return frame


def _concluded(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The probes of `parts` (in the order stored), each target's last of a run alone: the
    run's conclusion (a confirmation replaces the first look it checked)."""
    if not parts:
        parts = [_history_part({name: () for name in HISTORY_COLUMNS})]
    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    del parts
    return frame.drop_duplicates(_TARGET_KEYS, keep="last", ignore_index=True)


def probed_entries(
    session: Session, since: datetime, until: datetime, entry_ids: Iterable[str]
) -> set[str]:
    """Those of `entry_ids` with a trusted probe checked in [since, until] (ids only, read in
    the database through the entry index, a chunk of entries at a time)."""
    wanted, found = list(entry_ids), set()
    for chunk in in_lists(wanted):
        statement = select(ProbeRow.entry_id).distinct().where(
            col(ProbeRow.entry_id).in_(chunk),
            col(ProbeRow.run_id).not_in(_untrusted_runs()), ProbeRow.checked_at >= since,
            ProbeRow.checked_at <= until)
        found.update(session.exec(statement))
    return found
