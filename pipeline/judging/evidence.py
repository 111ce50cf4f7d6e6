"""The score stage's evidence, read in bounded memory: complete past days from the daily
rollups, and raw probes only for the days the windows cut through.

The windows end at `as_of` (T, on day D): 1 day, 7 days and 30 days back. Days D-29 .. D-2
lie wholly inside the 30-day window, and all but D-7 wholly inside or outside the 7-day one,
so their rollups (counts and every timed response of the day) give exactly what the raw
probes would; the raw history is read for D and D-1 (the 1-day window), D-7 and D-30 (where
the 7- and 30-day windows begin). Scores and uptimes come out equal to those computed from
the whole raw window (tests compare them), while the stage reads a few days of probes
instead of thirty, however many nights the store holds.

A past day whose rollups are missing or were computed before it ended (a night that did not
run) is read from its raw probes instead: the stage only reads, so scoring in several
processes at once (publishers waiting for each other) never races to write rollups.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import orjson
import pandas as pd
from sqlalchemy import Text, type_coerce
from sqlmodel import Session, col, select

from pipeline.contract import Uptime
from pipeline.judging.score import (
    COUNT_COLUMNS,
    SAMPLE_COLUMNS,
    WINDOWS,
    EntryScore,
    prepare_history,
    scores_from_samples,
    timed_samples,
    uptimes_from_counts,
    window_counts,
)
from pipeline.store.history import history_frame
from pipeline.store.tables import DailyEntryRollup, RolledDay, as_utc

WINDOW_DAYS = 30


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


def rolled_days(day: date) -> list[date]:
    """The past days whose rollups stand in for their probes when scoring as of `day`."""
    return [day - timedelta(days=n) for n in range(2, WINDOW_DAYS) if n != 7]


def raw_days(day: date) -> list[date]:
    """The days whose raw probes are read when scoring as of `day`."""
    return [day - timedelta(days=n) for n in (0, 1, 7, WINDOW_DAYS)]


def _raw_history(session: Session, as_of: datetime, days: list[date]) -> pd.DataFrame:
    """The raw probes of `days`, up to `as_of`."""
    frames = []
    for day in days:
        start, end = day_bounds(day)
        frames.append(history_frame(session, since=start, until=min(end, as_of)))
    return pd.concat([f for f in frames if not f.empty] or frames[:1], ignore_index=True)


def _rollup_evidence(session: Session, as_of: datetime,
                     days: list[date]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Timed samples and window counts of `days` (complete past days), from their rollups."""
    day = as_of.date()
    statement = select(
        DailyEntryRollup.entry_id, DailyEntryRollup.day, DailyEntryRollup.probes,
        DailyEntryRollup.responses, type_coerce(DailyEntryRollup.timed_ms, Text),
    ).where(col(DailyEntryRollup.day).in_(days), DailyEntryRollup.probes > 0)
    ids, in_week, probes, responses = [], [], [], []
    sample_ids, sample_ms, sample_week = [], [], []
    week_starts = day - timedelta(days=6)
    # Core rows, not ORM ones: a row of each entry and day, some 3 million at 100k entries.
    for entry_id, rolled, day_probes, day_responses, timed in session.connection().execute(
            statement):
        week = rolled >= week_starts
        ids.append(entry_id)
        in_week.append(week)
        probes.append(day_probes)
        responses.append(day_responses)
        if isinstance(timed, str | bytes):  # the JSON text (SQLite); a list (PostgreSQL)
            timed = orjson.loads(timed)
        for ms in timed or ():
            sample_ids.append(entry_id)
            sample_ms.append(ms)
            sample_week.append(week)
    samples = pd.DataFrame({"entry_id": sample_ids, "total_ms": pd.Series(sample_ms, dtype=float),
                            "in_7d": sample_week, "in_30d": True}, columns=SAMPLE_COLUMNS)
    days_frame = pd.DataFrame({"entry_id": ids, "week": in_week, "probes": probes,
                               "responses": responses})
    counts = pd.DataFrame({"entry_id": days_frame["entry_id"]})
    inside = {"1d": False, "7d": days_frame["week"].astype(bool), "30d": True}
    for name in WINDOWS:
        counts[f"probes_{name}"] = days_frame["probes"] * inside[name]
        counts[f"responded_{name}"] = days_frame["responses"] * inside[name]
    counts = counts.groupby("entry_id", sort=True).sum().reset_index()
    return samples, counts.reindex(columns=COUNT_COLUMNS)


def _combined_counts(*parts: pd.DataFrame) -> pd.DataFrame:
    frames = [part for part in parts if not part.empty]
    if not frames:
        return pd.DataFrame(columns=COUNT_COLUMNS)
    return (pd.concat(frames, ignore_index=True).groupby("entry_id", sort=True).sum()
            .reset_index().loc[:, COUNT_COLUMNS])


def bounded_scores(
    session: Session, contents: Mapping[str, Mapping[str, Any]], as_of: datetime
) -> tuple[dict[str, EntryScore], dict[str, Uptime]]:
    """Every entry's scores and uptime as of `as_of`, as `score_entries` and `entry_uptimes`
    give them from the whole window, read from rollups and a few days of raw probes."""
    rolled = rolled_days(as_of.date())
    complete = sorted(complete_days(session, rolled))
    incomplete = sorted(set(rolled) - set(complete))
    raw = prepare_history(_raw_history(session, as_of, raw_days(as_of.date()) + incomplete),
                          as_of)
    rolled_samples, rolled_counts = _rollup_evidence(session, as_of, complete)
    frames = [f for f in (timed_samples(raw), rolled_samples) if not f.empty]
    samples = (pd.concat(frames, ignore_index=True) if frames
               else pd.DataFrame(columns=SAMPLE_COLUMNS))
    samples = samples.astype({"total_ms": float, "in_7d": bool, "in_30d": bool})
    counts = _combined_counts(window_counts(raw), rolled_counts)
    return scores_from_samples(contents, samples), uptimes_from_counts(counts)
