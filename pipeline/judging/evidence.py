"""The score stage's evidence, read in bounded memory: complete past days from the daily
rollups, and raw probes only for the days the windows cut through.

The windows end at `as_of` (T, on day D): 1 day, 7 days and 30 days back, each holding the
probes after its start. A past day wholly inside or wholly outside each window is given
exactly by its rollups (counts and every timed response of the day); the raw history is read
for D and for each day a window starts inside (`evidence_days`). At a time of day, those are
D-1, D-7 and D-30: each is read from the first window start inside it on, its probes counted
for the windows starting inside it, while the windows that hold it whole count it from its
rollups. The nightly runs after the day's probes, near the same time each night, so those
three parts hold next to no probes. At a day's last instant, as the rollups score a day, the
windows begin at days' ends, so only D is read raw and D-30 not at all. Scores and uptimes
come out equal to those computed from the whole raw window (tests compare them), while the
stage reads about one day of probes, however many nights the store holds.

A past day whose rollups are missing or were computed before it ended (a night that did not
run) is read whole from its raw probes instead: the stage only reads, so scoring in several
processes at once (publishers waiting for each other) never races to write rollups.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, date, datetime, time, timedelta

import numpy as np
import orjson
import pandas as pd
from sqlalchemy import Text, and_, case, cast, func, literal
from sqlmodel import Session, col, select

from pipeline.contract import Uptime
from pipeline.judging.score import (
    COUNT_COLUMNS,
    SAMPLE_COLUMNS,
    WINDOWS,
    ContentScores,
    EntryScores,
    prepare_history,
    scores_from_samples,
    timed_samples,
    uptimes_from_counts,
    window_counts,
)
from pipeline.store.history import history_frame
from pipeline.store.tables import EVERY_ENTRY, DailyEntryRollup, EntrySpan, RolledDay, as_utc

WINDOW_DAYS = max(WINDOWS.values())  # the longest window


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The first and the last instant of a UTC day (both inclusive)."""
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1) - timedelta(microseconds=1)


def days_between(start: date, end: date) -> list[date]:
    """Every date from `start` to `end`, both included."""
    if end < start:
        raise ValueError(f"the range ends ({end}) before it starts ({start})")
    return [start + timedelta(days=n) for n in range((end - start).days + 1)]


def complete_days(session: Session, days: Collection[date]) -> set[date]:
    """Those of `days` whose rollups were computed for every entry after the day ended: their
    rows hold all of the day's probes (probes are never dated in the past)."""
    statement = select(RolledDay.day, RolledDay.rolled_at).where(col(RolledDay.day).in_(days))
    return {day for day, rolled_at in session.exec(statement)
            if as_utc(rolled_at) > day_bounds(day)[1]}


def _window_starts(as_of: datetime) -> dict[str, datetime]:
    """Where each window ending at `as_of` starts (a window holds the probes after it)."""
    return {name: as_of - timedelta(days=days) for name, days in WINDOWS.items()}


def evidence_days(as_of: datetime) -> tuple[list[date], list[date]]:
    """The days whose probes count in a window ending at `as_of`, as (raw, rolled): `as_of`'s
    own day and each past day a window starts inside are read raw; the rollups of the past
    days wholly inside or outside each window stand in for their probes (days before every
    window are in neither)."""
    day = as_of.date()
    starts = _window_starts(as_of).values()
    raw, rolled = [day], []
    for back in range(1, WINDOW_DAYS + 1):
        past = day - timedelta(days=back)
        first, last = day_bounds(past)
        if all(last <= start for start in starts):
            continue
        (raw if any(first <= start < last for start in starts) else rolled).append(past)
    return raw, rolled


def day_history(session: Session, day: date, until: datetime | None = None,
                span: EntrySpan = EVERY_ENTRY) -> pd.DataFrame:
    """The trusted raw probes of `day` (up to `until`; of the entries in `span`), read for that
    day alone."""
    start, end = day_bounds(day)
    return history_frame(session, since=start, until=end if until is None else min(end, until),
                         span=span)


def _raw_history(session: Session, as_of: datetime, days: list[date],
                 read: Mapping[date, pd.DataFrame], span: EntrySpan) -> pd.DataFrame:
    """The raw probes of `days`, up to `as_of`; those of a day in `read` are taken as read."""
    frames = [read[day] if day in read else day_history(session, day, as_of, span)
              for day in days]
    return pd.concat([f for f in frames if not f.empty] or frames[:1], ignore_index=True)


def _cut_day(session: Session, day: date, as_of: datetime, span: EntrySpan) -> pd.DataFrame:
    """The prepared probes of `day` (a past day a window starts inside, whose rollups are
    complete), read from the first window start inside it on, and counted only for the
    windows that start inside it: the windows that hold the whole day count it from its
    rollups."""
    first, last = day_bounds(day)
    starts = _window_starts(as_of)
    since = min(start for start in starts.values() if first <= start < last)
    frame = prepare_history(
        history_frame(session, since=since, until=min(last, as_of), span=span), as_of)
    whole = [f"in_{name}" for name, start in starts.items() if start < first]
    if whole:
        frame[whole] = False
    return frame


# Texts of entries parsed at a time: each part's numbers are Python objects for a moment (a
# span of 50,000 entries with 30 nights holds some 3.6 million).
PARSED_AT_ONCE = 5_000


def _milliseconds(texts: list[str]) -> tuple[np.ndarray, list[int]]:
    """The timed responses in each of `texts` (JSON numbers joined by commas, or empty), all
    in one array, and how many each text holds. Parsed as JSON arrays, a part of the texts at
    a time: 0.3 s for 3.6 million numbers, against 0.8 s for NumPy's text parser."""
    sizes = [text.count(",") + 1 if text else 0 for text in texts]
    values, at = np.empty(sum(sizes)), 0  # filled in place: no second copy of them all
    for first in range(0, len(texts), PARSED_AT_ONCE):
        joined = ",".join(text for text in texts[first : first + PARSED_AT_ONCE] if text)
        if joined:
            part = orjson.loads(f"[{joined}]")
            values[at : at + len(part)] = part
            at += len(part)
    return values, sizes


def _rollup_evidence(session: Session, days: list[date], week_starts: date,
                     span: EntrySpan) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Timed samples and window counts of `days` (complete past days), from their rollups.

    One row per entry: the counts summed and the days' timed responses joined (brackets
    dropped) in the database, so the some 3 million rows of 100k entries never reach Python
    one by one, and the samples are parsed as one string.
    """
    rollup = DailyEntryRollup.__table__.c
    in_week = rollup.day >= week_starts
    text = cast(rollup.timed_ms, Text)
    timed = func.substr(text, 2, func.length(text) - 2)  # the numbers, brackets dropped
    has_timed = and_(rollup.timed_ms.is_not(None), text.not_in(["[]", "null"]))
    sums = {
        "probes_1d": literal(0), "responded_1d": literal(0),
        "probes_7d": func.sum(case((in_week, rollup.probes), else_=0)),
        "responded_7d": func.sum(case((in_week, rollup.responses), else_=0)),
        "probes_30d": func.sum(rollup.probes), "responded_30d": func.sum(rollup.responses),
    }
    statement = (
        select(rollup.entry_id, *(value.label(name) for name, value in sums.items()),
               func.aggregate_strings(case((and_(in_week, has_timed), timed)), ","),
               func.aggregate_strings(case((and_(~in_week, has_timed), timed)), ","))
        .where(rollup.day.in_(days), rollup.probes > 0, span.holds(rollup.entry_id))
        .group_by(rollup.entry_id))
    rows = session.connection().execute(statement).all()
    ids = np.array([row[0] for row in rows], dtype=object)
    parts = []
    for column, in_7d in ((-2, True), (-1, False)):
        ms, sizes = _milliseconds([row[column] or "" for row in rows])
        parts.append(pd.DataFrame({"entry_id": np.repeat(ids, sizes), "total_ms": ms,
                                   "in_7d": in_7d, "in_30d": True}))
    samples = pd.concat(parts, ignore_index=True).reindex(columns=SAMPLE_COLUMNS)
    counts = pd.DataFrame([row[:-2] for row in rows], columns=["entry_id", *sums]).astype(
        {name: "int64" for name in sums})
    return samples, counts.reindex(columns=COUNT_COLUMNS)


def _combined_counts(*parts: pd.DataFrame) -> pd.DataFrame:
    frames = [part for part in parts if not part.empty]
    if not frames:
        return pd.DataFrame(columns=COUNT_COLUMNS)
    return (pd.concat(frames, ignore_index=True).groupby("entry_id", sort=True).sum()
            .reset_index().loc[:, COUNT_COLUMNS])


def bounded_scores(
    session: Session, judged: Mapping[str, ContentScores], as_of: datetime,
    own_day: pd.DataFrame | None = None, span: EntrySpan = EVERY_ENTRY,
) -> tuple[EntryScores, dict[str, Uptime]]:
    """Every entry's scores (of those in `judged`, with their content scores) and uptime as of
    `as_of`, as `score_entries` and `entry_uptimes` give them from the whole window, read from
    rollups and a few days of raw probes (of the entries in `span`). `own_day`: the probes of
    `as_of`'s day up to it (`day_history`), where the caller has read them already."""
    raw_days, rolled = evidence_days(as_of)
    day, past_raw = as_of.date(), raw_days[1:]
    complete = complete_days(session, rolled + past_raw)
    # A past day a window starts inside is read raw whole only without complete rollups;
    # with them, raw from that start on, and from its rollups for the windows holding it.
    cut = [past for past in past_raw if past in complete]
    whole_raw = [day, *(past for past in past_raw if past not in complete),
                 *sorted(set(rolled) - complete)]
    read = {} if own_day is None else {day: own_day}
    raw = prepare_history(_raw_history(session, as_of, whole_raw, read, span), as_of)
    if cut:
        raw = pd.concat([raw, *(_cut_day(session, past, as_of, span) for past in cut)],
                        ignore_index=True)
    oldest_held = day - timedelta(days=WINDOW_DAYS - 1)  # days before it no window holds whole
    from_rollups = sorted({*(d for d in rolled if d in complete),
                           *(d for d in cut if d >= oldest_held)})
    week_starts = day - timedelta(days=6)
    rolled_samples, rolled_counts = _rollup_evidence(session, from_rollups, week_starts, span)
    frames = [f for f in (timed_samples(raw), rolled_samples) if not f.empty]
    samples = (pd.concat(frames, ignore_index=True) if frames
               else pd.DataFrame(columns=SAMPLE_COLUMNS))
    samples = samples.astype({"total_ms": float, "in_7d": bool, "in_30d": bool})
    counts = _combined_counts(window_counts(raw), rolled_counts)
    return scores_from_samples(judged, samples), uptimes_from_counts(counts)
