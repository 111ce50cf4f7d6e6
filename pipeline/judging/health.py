"""Health with evidence: what an entry's latest trusted run says of its transport (HTTPS,
CORS) and of its failures, and where the entry stands in its life over runs.

Everything here reads the final probes of a run (a confirmation replaces the first look it
checked), so one failed request never marks an entry: only a failure seen twice counts (or
seen once, where confirmation is off and one look decides).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any
from urllib.parse import urlsplit

from pipeline.contract import Deprecation, Lifecycle, LifecycleState
from pipeline.judging.score import NO_ENDPOINT_CHECKABLE, NOTE_COLUMN, uncheckable_reason, unchecked
from pipeline.probing.probe import storable
from pipeline.store.tables import TimeText, as_utc, json_time

ANY_ORIGIN = "*"
_note = attrgetter(NOTE_COLUMN)  # a probe's note, as a run's probes are read


@dataclass(frozen=True)
class RunVerdict:
    """What one run concluded about an entry's targets."""

    run_id: int | None
    checked_at: datetime
    targets: int
    failed: int  # targets whose failure was concluded (and classed)
    dead: int  # of those, dead (404/410 on every look, or no such host)
    seen_once: int = 0  # of the failed, those concluded from one look (no confirmation)

    @property
    def down(self) -> bool:
        """Every target failed (no answer, or 404/410, a challenge, 429 or 5xx)."""
        return self.targets > 0 and self.failed == self.targets

    @property
    def all_dead(self) -> bool:
        return self.targets > 0 and self.dead == self.targets


def run_verdict(probes: Sequence[Any]) -> RunVerdict | None:
    """The verdict of a run from its final probes of one entry (`history.STATUS_COLUMNS`),
    of the targets it checked: an `unchecked` probe (its redirect not followed) is none, as
    the scores count it nowhere (None: no target checked, as with no probes)."""
    notes = list(map(_note, probes))
    if notes.count(None) < len(notes):  # most runs leave nothing undone: no probe asked
        probes = [p for p, note in zip(probes, notes, strict=True) if not unchecked(note)]
    if not probes:
        return None
    # One pass over the probes, most of which failed in no way (asked of every probed entry).
    failed = dead = seen_once = 0
    for probe in probes:
        if probe.failure_class:
            failed += 1
            dead += probe.failure_class == "dead"
            seen_once += not probe.confirmation
    return RunVerdict(probes[0].run_id, as_utc(max(p.checked_at for p in probes)), len(probes),
                      failed, dead, seen_once)


def _last_checked(probes: Sequence[Any]) -> datetime | None:
    """When the last of `probes` was checked, in UTC (None: no probes): the latest of their
    times as read (all of one kind: naive from SQLite, aware elsewhere), made UTC once."""
    return as_utc(max((p.checked_at for p in probes), default=None))


_C0_OR_SPACE = "".join(map(chr, range(33)))  # what `urlsplit` strips before the scheme


def is_https(base_url: str) -> bool:
    """Whether the scheme is https, as `urlsplit` reads it, without splitting the whole URL
    (asked of every entry by the score and publish stages)."""
    text = base_url.lstrip(_C0_OR_SPACE)
    if "\t" in text or "\r" in text or "\n" in text:  # urlsplit drops them anywhere
        return urlsplit(base_url).scheme.lower() == "https"
    return text[:6].lower() == "https:"


def measured_https(base_url: str, probes: Sequence[Any], as_of: datetime,
                   time_text: TimeText = json_time) -> dict[str, Any]:
    """HTTPS of the base address, with the TLS version and certificate expiry the run saw: the
    published `https` value in its JSON form (fields in `Https`' order), built without a model
    for each entry; the release is checked against the contract where it is published. Times
    written by `time_text` (the score stage's memo of `json_time`)."""
    enabled = is_https(base_url)
    seen = next((p for p in probes if p.tls_version), None)
    if seen is None:
        return {"enabled": enabled, "tlsVersion": None, "certExpires": None,
                "certDaysLeft": None, "checkedAt": time_text(_last_checked(probes))}
    expires = as_utc(seen.cert_expires_at)
    return {"enabled": enabled, "tlsVersion": seen.tls_version,
            "certExpires": time_text(seen.cert_expires_at),
            "certDaysLeft": None if expires is None else (expires - as_of) // timedelta(days=1),
            "checkedAt": time_text(seen.checked_at)}


def measured_cors(probes: Sequence[Any], origin: str,
                  time_text: TimeText = json_time) -> dict[str, Any]:
    """yes when an answer allowed any origin or ours; no when answers came without that;
    unknown only when no target answered at all. The published `cors` value in its JSON form
    (fields in `Cors`' order), as `measured_https` gives its own."""
    answered = [p for p in probes if p.http_status is not None]
    if not answered:
        return {"state": "unknown", "allowOrigin": None, "credentials": None,
                "checkedAt": time_text(_last_checked(probes))}
    allowing = [p for p in answered if p.cors_allow_origin in (ANY_ORIGIN, origin)]
    deciding = allowing[0] if allowing else answered[0]
    # `storable` again: a value stored before the prober dropped control codes is shown without.
    return {"state": "yes" if allowing else "no",
            "allowOrigin": storable(deciding.cors_allow_origin),
            "credentials": deciding.cors_allow_credentials,
            "checkedAt": time_text(deciding.checked_at)}


@dataclass
class LifecycleRecord:
    """An entry's lifecycle as kept between runs (the store's `entry_lifecycle` row)."""

    state: LifecycleState
    since: datetime
    down_runs: int = 0
    dead_since: datetime | None = None
    judged_run_id: int | None = None


@dataclass(frozen=True)
class LifecycleRules:
    failing_runs: int = 3  # consecutive down runs before `failing`
    dead_days: int = 14  # days confirmed dead before `dead`


def judge_lifecycle(
    previous: LifecycleRecord | None,
    verdict: RunVerdict | None,
    deprecation: Deprecation | None,
    now: datetime,
    rules: LifecycleRules,
) -> LifecycleRecord:
    """The entry's lifecycle after `verdict` (its latest trusted run), counted once per run:
    judging the same run again changes nothing but the curated deprecation. No verdict (its
    latest trusted run checked none of its targets: every host given up on, or only redirects
    not followed) is no evidence, so the state judged before stands."""
    record = LifecycleRecord("active", now) if previous is None else LifecycleRecord(
        previous.state, previous.since, previous.down_runs, previous.dead_since,
        previous.judged_run_id)
    if (verdict is None and previous is not None and deprecation is None
            and previous.state != "deprecated"):
        return record
    if verdict is not None and (previous is None or verdict.run_id != record.judged_run_id):
        record.judged_run_id = verdict.run_id
        record.down_runs = record.down_runs + 1 if verdict.down else 0
        if not verdict.all_dead:
            record.dead_since = None
        elif record.dead_since is None:
            record.dead_since = verdict.checked_at
    state = _state(record, verdict, deprecation, rules)
    if state != record.state:
        record.state, record.since = state, now
    return record


def _state(record: LifecycleRecord, verdict: RunVerdict | None, deprecation: Deprecation | None,
           rules: LifecycleRules) -> LifecycleState:
    if deprecation is not None:
        return "deprecated"
    dead_for = _dead_for(record, verdict)
    if dead_for is not None and dead_for >= timedelta(rules.dead_days):
        return "dead"
    if record.down_runs >= rules.failing_runs:
        return "failing"
    if verdict is not None and verdict.failed:
        return "degraded"
    return "active"


def _dead_for(record: LifecycleRecord, verdict: RunVerdict | None) -> timedelta | None:
    """How long every target has been confirmed dead (None: it is not), between trusted
    verdicts: from the first run of the unbroken dead streak to the latest (`verdict`). Never
    by the clock: nights whose runs are network-suspect, or publishing without probing, add no
    evidence, so they never make an entry dead."""
    if record.dead_since is None or verdict is None or not verdict.all_dead:
        return None
    return verdict.checked_at - record.dead_since


def lifecycle_reason(record: LifecycleRecord, verdict: RunVerdict | None,
                     deprecation: Deprecation | None, no_targets: str | None = None) -> str:
    """The judgement in a few words, as published; of an entry with no URL to probe
    (`no_targets`), what it rests on and that nothing can be checked any longer."""
    reason = _judged_reason(record, verdict, deprecation)
    if no_targets is None or record.state == "deprecated":
        return reason
    if verdict is None and record.judged_run_id is None:
        return uncheckable_reason(no_targets)
    last = "" if verdict is None else f"; last checked {verdict.checked_at.date().isoformat()}"
    return f"{reason}; {NO_ENDPOINT_CHECKABLE} any longer ({no_targets}){last}"


def deprecated_reason(on: object | None) -> str:
    """The reason of a deprecated lifecycle: the provider's, with its day (`on`) if stated;
    the same words whether judged over runs or not yet."""
    return f"deprecated by its provider on {on}" if on else "deprecated by its provider"


def _judged_reason(record: LifecycleRecord, verdict: RunVerdict | None,
                   deprecation: Deprecation | None) -> str:
    if record.state == "deprecated":
        return deprecated_reason(deprecation.on.isoformat()
                                 if deprecation and deprecation.on else None)
    if record.state == "dead":
        since = record.dead_since.date().isoformat() if record.dead_since else "?"
        return f"every target confirmed dead (404/410 or no such host) since {since}"
    if record.state == "failing":
        return f"every target {_failed(verdict)} in {record.down_runs} runs in a row"
    if record.state == "degraded" and verdict is not None:
        return (f"{verdict.failed} of {verdict.targets} targets {_failed(verdict)} "
                "in the last run")
    if verdict is None and record.judged_run_id is not None:  # judged before: that stands
        seen = "some targets failed" if record.state == "degraded" else "its targets passed"
        return f"{seen} when last checked; none was checked in the latest run"
    if verdict is None:
        return "not probed yet"
    return f"{verdict.targets - verdict.failed} of {verdict.targets} targets passed"


def _failed(verdict: RunVerdict | None) -> str:
    """How the failures were seen: twice, unless one of them was concluded from one look."""
    return "failed twice" if verdict is not None and not verdict.seen_once else "failed"


def published_lifecycle(record: LifecycleRecord, verdict: RunVerdict | None,
                        deprecation: Deprecation | None,
                        no_targets: str | None = None) -> Lifecycle:
    return Lifecycle(
        state=record.state,
        since=record.since,
        reason=lifecycle_reason(record, verdict, deprecation, no_targets),
        successor=deprecation.successor if deprecation is not None else None,
    )
