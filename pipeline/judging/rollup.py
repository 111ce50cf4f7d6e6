"""Daily rollups: each entry's and each probed URL's day, kept for months of trends.

A rollup is derived only from the stored probe history (trusted runs) and the
entries' curated content, as of the end of its day, so computing a day again,
nightly or in a backfill, writes the same rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import insert
from sqlmodel import Session, col, delete, select

from pipeline.judging.content_scores import content_scores
from pipeline.judging.day_figures import DayFigures
from pipeline.judging.evidence import WINDOW_DAYS, bounded_scores, day_bounds
from pipeline.judging.score import ContentScores
from pipeline.store.history import history_frame, latest_states, probed_entries
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EntryRow,
    RolledDay,
    as_utc,
    in_lists,
    utcnow,
)

_DAY_KEYS = ["probes", "responses", "live", "live_share", "p50_ms", "p90_ms"]


@dataclass(frozen=True)
class DayRollup:
    """A day's rollup rows, as stored: one per entry (`DailyEntryRollup`'s columns) and one
    per probed URL (`DailyEndpointRollup`'s)."""

    day: date
    entries: list[dict[str, Any]]
    endpoints: list[dict[str, Any]]


def _day_figures(history: pd.DataFrame, keys: list[str], timed: bool = False) -> pd.DataFrame:
    """Probe counts, live share and latency percentiles per group of `keys`, for one day; with
    `timed`, each group's timed responses too (ascending)."""
    if history.empty:
        columns = [*keys, *_DAY_KEYS, "endpoint_id", *(["timed_ms"] if timed else [])]
        return pd.DataFrame(columns=columns).set_index(keys)
    frame = history.assign(
        total_ms=pd.to_numeric(history["total_ms"], errors="coerce").astype(float),
        responded=history["outcome"].isin(["live", "online"]),
        is_live=history["outcome"] == "live",
    )
    grouped = frame.groupby(keys, sort=True)
    figures = grouped.agg(
        probes=("outcome", "size"),
        responses=("responded", "sum"),
        live=("is_live", "sum"),
        endpoint_id=("endpoint_id", "last"),
    )
    figures["live_share"] = figures["live"] / figures["probes"]
    answered = frame[frame["responded"] & frame["total_ms"].notna()]
    by_group = answered.groupby(keys)["total_ms"]
    figures["p50_ms"] = by_group.quantile(0.5).reindex(figures.index)
    figures["p90_ms"] = by_group.quantile(0.9).reindex(figures.index)
    if timed:
        figures["timed_ms"] = _ascending_lists(answered, keys).reindex(figures.index)
    return figures


def _ascending_lists(answered: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Each group's `total_ms`, ascending, as a list: one sort by group and time, then the
    sorted times cut at the groups' bounds (pandas' `agg(list)` walks every group in Python,
    some 2 s a day at 100,000 entries)."""
    codes = answered.groupby(keys, sort=False).ngroup().to_numpy()
    values = answered["total_ms"].to_numpy()
    order = np.lexsort((values, codes))
    codes, values = codes[order], values[order]
    starts = np.flatnonzero(np.diff(codes, prepend=-1))
    labels = answered.set_index(keys).index[order[starts]]
    return pd.Series([part.tolist() for part in np.split(values, starts[1:])] if len(values)
                     else [], index=labels, dtype=object)


def _numbers(values: list[Any]) -> list[float | None]:
    """Rounded to a thousandth; NaN and None (not measured) as None."""
    return [None if value is None or value != value else round(float(value), 3)
            for value in values]


# A group's figures on a day it was not probed (the tables' defaults).
_UNPROBED = {"probes": 0, "responses": 0, "live": 0, "live_share": None, "p50_ms": None,
             "p90_ms": None}


def _figure_rows(figures: pd.DataFrame, timed: bool = False) -> list[dict[str, object]]:
    """Each group's figures as rollup fields, in the frame's order; with `timed`, the day's
    timed responses too (an empty list when none was timed)."""
    rows = [
        {"probes": int(probes), "responses": int(responses), "live": int(live),
         "live_share": live_share, "p50_ms": p50_ms, "p90_ms": p90_ms}
        for probes, responses, live, live_share, p50_ms, p90_ms in zip(
            figures["probes"].tolist(), figures["responses"].tolist(), figures["live"].tolist(),
            *(_numbers(figures[name].tolist()) for name in ("live_share", "p50_ms", "p90_ms")),
            strict=True)
    ]
    if timed:
        for row, ms in zip(rows, figures["timed_ms"].tolist(), strict=True):
            row["timed_ms"] = [float(v) for v in ms] if isinstance(ms, list) else []
    return rows


def _days_history(session: Session, first: date, last: date) -> pd.DataFrame:
    """The trusted probes of the days from `first` to `last`: their own figures (their scores
    read past days from the rollups, `judging/evidence.py`)."""
    return history_frame(session, since=day_bounds(first)[0], until=day_bounds(last)[1])


def compute_day(
    session: Session,
    day: date,
    entry_ids: Collection[str] | None = None,
    history: pd.DataFrame | None = None,
    judged: Mapping[str, ContentScores] | None = None,
) -> DayRollup:
    """The rollup of `day` for the active entries known or probed by its end (or `entry_ids`).

    `history` may hold the probes of more days than this one (read once for a range of days);
    only the day's own are used; `judged` may hold the content scores of more entries than
    the day's (read once for a range of days too). Its scores are those at the end of the day,
    from the rollups of the days before and a few days of raw probes (`bounded_scores`), with
    the entries' stored Pricing and Depth, as the score stage reads them.
    """
    start, end = day_bounds(day)
    history = _days_history(session, day, day) if history is None else history
    checked = history["checked_at"]
    of_day = history[(checked >= pd.Timestamp(start)) & (checked <= pd.Timestamp(end))]
    statement = select(EntryRow.id, EntryRow.first_seen_at).where(
        col(EntryRow.retired_at).is_(None))
    known, later = [], []  # known by the day's end; first seen after it (rare: a backfill)
    for entry_id, first_seen_at in session.exec(statement):
        if entry_ids is None or entry_id in entry_ids:
            (known if as_utc(first_seen_at) <= end else later).append(entry_id)
    if later:  # only those probed in the window count; asked of the store only when any
        known += probed_entries(session, end - timedelta(days=WINDOW_DAYS), end, later)
    ids = sorted(known)
    of_day = of_day[of_day["entry_id"].isin(ids)]
    judged = content_scores(session, ids) if judged is None else judged
    scores, _ = bounded_scores(session, {i: judged[i] for i in ids}, end)
    states = latest_states(session, until=end, entry_ids=ids)  # none asked of a day before any
    per_entry = _day_figures(of_day, ["entry_id"], timed=True)
    probed_today = set(per_entry.index)
    figures = iter(_figure_rows(per_entry.loc[[i for i in ids if i in probed_today]],
                                timed=True))

    entry_rows = []
    for entry_id in ids:
        score = scores[entry_id]
        row = next(figures) if entry_id in probed_today else _UNPROBED | {"timed_ms": None}
        entry_rows.append({
            "day": day, "entry_id": entry_id, "state": states.get(entry_id, "unchecked"),
            "pricing": score.pricing.value, "latency": score.latency.value,
            "depth": score.depth.value, "provisional": score.provisional,
            "percent": score.percent, "grade": score.grade, "rubric": score.rubric, **row})
    per_url = _day_figures(of_day, ["entry_id", "url"])
    endpoint_rows = [
        {"day": day, "entry_id": entry_id, "url": url,
         "endpoint_id": None if pd.isna(endpoint_id) else int(endpoint_id), **row}
        for (entry_id, url), endpoint_id, row in zip(
            per_url.index, per_url["endpoint_id"].tolist(), _figure_rows(per_url), strict=True)
    ]
    return DayRollup(day, entry_rows, endpoint_rows)


def store_day(
    session: Session, rollup: DayRollup, entry_ids: Collection[str] | None = None
) -> None:
    """Replace the stored rows of that day (for `entry_ids`, or all) with `rollup`'s: one bulk
    insert per table (a day of a large catalogue is hundreds of thousands of rows)."""
    for table, rows in ((DailyEntryRollup, rollup.entries),
                        (DailyEndpointRollup, rollup.endpoints)):
        statement = delete(table).where(col(table.day) == rollup.day)
        if entry_ids is None:
            session.exec(statement)
        else:  # a bounded IN list at a time: a backfill may name any number of entries
            for chunk in in_lists(sorted(entry_ids)):
                session.exec(statement.where(col(table.entry_id).in_(chunk)))
        if rows:
            session.execute(insert(table.__table__), rows)
    session.commit()


@dataclass(frozen=True)
class RolledUp:
    """What a stored day's rollup holds: its rows, counted (the rows go once stored)."""

    day: date
    entries: int
    endpoints: int


def roll_up_days(
    session: Session, days: Iterable[date], entry_ids: Collection[str] | None = None
) -> list[RolledUp]:
    """Compute and store the rollups of every day in `days`; idempotent. The probe history
    is read once for all of them; a day's rows are let go once stored, before the next day's
    are computed (a day of 100,000 entries is some 400,000 rows)."""
    days = list(days)
    if not days:
        return []
    history = _days_history(session, min(days), max(days))
    judged = content_scores(session, entry_ids)
    rollups = []
    for day in days:
        rollup = compute_day(session, day, entry_ids, history, judged)
        store_day(session, rollup, entry_ids)
        if entry_ids is None:  # every entry's row of the day is as of now
            session.merge(RolledDay(day=day, rolled_at=utcnow()))
            session.commit()
        rollups.append(RolledUp(day, len(rollup.entries), len(rollup.endpoints)))
        del rollup
    return rollups


def entry_trends(session: Session, last_day: date, days: int = 30) -> dict[str, list[DayFigures]]:
    """Each entry's daily figures over the `days` days ending on `last_day`, oldest first."""
    statement = (
        select(DailyEntryRollup.entry_id, DailyEntryRollup.day, DailyEntryRollup.probes,
               DailyEntryRollup.responses, DailyEntryRollup.p50_ms)
        .where(DailyEntryRollup.day > last_day - timedelta(days=days),
               DailyEntryRollup.day <= last_day)
        .order_by(DailyEntryRollup.day)
    )
    trends: dict[str, list[DayFigures]] = {}
    for entry_id, day, probes, responses, p50_ms in session.exec(statement):
        trends.setdefault(entry_id, []).append(DayFigures(day, probes, responses, p50_ms))
    return trends
