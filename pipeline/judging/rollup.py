"""Daily rollups: each entry's and each probed URL's day, kept for months of trends.

A rollup is derived only from the stored probe history (trusted runs) and the
entries' curated content, as of the end of its day, so computing a day again,
nightly or in a backfill, writes the same rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date, timedelta

import pandas as pd
from sqlmodel import Session, col, delete, select

from pipeline.judging.content_scores import content_scores
from pipeline.judging.evidence import WINDOW_DAYS, bounded_scores, day_bounds
from pipeline.store.history import history_frame, latest_statuses, probed_entries
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EntryRow,
    RolledDay,
    as_utc,
    utcnow,
)

_DAY_KEYS = ["probes", "responses", "live", "live_share", "p50_ms", "p90_ms"]


@dataclass(frozen=True)
class DayRollup:
    day: date
    entries: list[DailyEntryRollup]
    endpoints: list[DailyEndpointRollup]


def _day_figures(history: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Probe counts, live share and latency percentiles per group of `keys`, for one day."""
    if history.empty:
        return pd.DataFrame(columns=[*keys, *_DAY_KEYS, "endpoint_id"]).set_index(keys)
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
    timed = frame[frame["responded"] & frame["total_ms"].notna()].groupby(keys)["total_ms"]
    figures["p50_ms"] = timed.quantile(0.5).reindex(figures.index)
    figures["p90_ms"] = timed.quantile(0.9).reindex(figures.index)
    figures["timed_ms"] = timed.apply(lambda ms: sorted(float(v) for v in ms)).reindex(
        figures.index)
    return figures


def _number(value: object) -> float | None:
    return None if value is None or pd.isna(value) else round(float(value), 3)


def _figures(row: pd.Series | None, timed: bool = False) -> dict[str, object]:
    """A group's figures as rollup fields; none (the tables' defaults) for a day unprobed.
    With `timed`, the day's timed responses too (an empty list when none was timed)."""
    if row is None:
        return {}
    extra = {}
    if timed:
        extra["timed_ms"] = row["timed_ms"] if isinstance(row["timed_ms"], list) else []
    return extra | {
        "probes": int(row["probes"]),
        "responses": int(row["responses"]),
        "live": int(row["live"]),
        "live_share": _number(row["live_share"]),
        "p50_ms": _number(row["p50_ms"]),
        "p90_ms": _number(row["p90_ms"]),
    }


def _days_history(session: Session, first: date, last: date) -> pd.DataFrame:
    """The trusted probes of the days from `first` to `last`: their own figures (their scores
    read past days from the rollups, `judging/evidence.py`)."""
    return history_frame(session, since=day_bounds(first)[0], until=day_bounds(last)[1])


def compute_day(
    session: Session,
    day: date,
    entry_ids: Collection[str] | None = None,
    history: pd.DataFrame | None = None,
) -> DayRollup:
    """The rollup of `day` for the active entries known or probed by its end (or `entry_ids`).

    `history` may hold the probes of more days than this one (read once for a range of days);
    only the day's own are used. Its scores are those at the end of the day, from the rollups
    of the days before and a few days of raw probes (`bounded_scores`).
    """
    start, end = day_bounds(day)
    history = _days_history(session, day, day) if history is None else history
    checked = history["checked_at"]
    of_day = history[(checked >= pd.Timestamp(start)) & (checked <= pd.Timestamp(end))]
    probed = probed_entries(session, end - timedelta(days=WINDOW_DAYS), end)
    statement = select(EntryRow.id, EntryRow.first_seen_at).where(
        col(EntryRow.retired_at).is_(None))
    ids = sorted(
        entry_id
        for entry_id, first_seen_at in session.exec(statement)
        if (as_utc(first_seen_at) <= end or entry_id in probed)
        and (entry_ids is None or entry_id in entry_ids)
    )
    of_day = of_day[of_day["entry_id"].isin(ids)]
    scores, _ = bounded_scores(session, content_scores(session, ids), end)
    statuses = latest_statuses(session, ids, until=end)
    per_entry = _day_figures(of_day, ["entry_id"])
    per_url = _day_figures(of_day, ["entry_id", "url"])

    entry_rows = []
    for entry_id in ids:
        score = scores[entry_id]
        row = per_entry.loc[entry_id] if entry_id in per_entry.index else None
        status = statuses.get(entry_id)
        entry_rows.append(
            DailyEntryRollup(
                day=day,
                entry_id=entry_id,
                state=status.state if status else "unchecked",
                pricing=score.pricing.value,
                latency=score.latency.value,
                depth=score.depth.value,
                provisional=score.provisional,
                percent=score.percent,
                grade=score.grade,
                rubric=score.rubric,
                **_figures(row, timed=True),
            )
        )
    endpoint_rows = [
        DailyEndpointRollup(
            day=day,
            entry_id=entry_id,
            url=url,
            endpoint_id=None if pd.isna(row["endpoint_id"]) else int(row["endpoint_id"]),
            **_figures(row),
        )
        for (entry_id, url), row in per_url.iterrows()
    ]
    return DayRollup(day, entry_rows, endpoint_rows)


def store_day(
    session: Session, rollup: DayRollup, entry_ids: Collection[str] | None = None
) -> None:
    """Replace the stored rows of that day (for `entry_ids`, or all) with `rollup`'s."""
    for table in (DailyEntryRollup, DailyEndpointRollup):
        statement = delete(table).where(col(table.day) == rollup.day)
        if entry_ids is not None:
            statement = statement.where(col(table.entry_id).in_(list(entry_ids)))
        session.exec(statement)
    session.add_all([*rollup.entries, *rollup.endpoints])
    session.commit()


def roll_up_days(
    session: Session, days: Iterable[date], entry_ids: Collection[str] | None = None
) -> list[DayRollup]:
    """Compute and store the rollups of every day in `days`; idempotent. The probe history
    is read once for all of them."""
    days = list(days)
    if not days:
        return []
    history = _days_history(session, min(days), max(days))
    rollups = []
    for day in days:
        rollup = compute_day(session, day, entry_ids, history)
        store_day(session, rollup, entry_ids)
        if entry_ids is None:  # every entry's row of the day is as of now
            session.merge(RolledDay(day=day, rolled_at=utcnow()))
            session.commit()
        rollups.append(rollup)
    return rollups


@dataclass(frozen=True)
class DayFigures:
    """One entry's day, as its trend chart draws it."""

    day: date
    probes: int
    responses: int
    p50_ms: float | None


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
