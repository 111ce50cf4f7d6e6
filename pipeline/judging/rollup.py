"""Daily rollups: each entry's and each probed URL's day, kept for months of trends.

A rollup is derived only from the stored probe history (trusted runs) and the
entries' curated content, as of the end of its day, so computing a day again,
nightly or in a backfill, writes the same rows.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Select
from sqlmodel import Session, col, delete, func, or_, select, update

from pipeline.judging.content_scores import content_scores, judged_content_scores
from pipeline.judging.day_figures import Trends
from pipeline.judging.evidence import (
    WINDOW_DAYS,
    bounded_scores,
    complete_days,
    day_bounds,
    day_evidence,
    day_history,
    day_runs,
    days_between,
    listed_history,
)
from pipeline.judging.score import ContentScores, counted_probes, succeeded_probes
from pipeline.probing.probe import unprobable_entries
from pipeline.store.history import (
    Unlisted,
    latest_runs,
    latest_states,
    probed_entries,
    unlisted_probes,
)
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EntryRow,
    PipelineRun,
    ProbeRow,
    RolledDay,
    active_base_urls,
    active_entry_ids,
    as_utc,
    in_lists,
    insert_rows,
    utcnow,
)

_DAY_KEYS = ["probes", "responses", "successes", "live", "live_share", "p50_ms", "p90_ms"]


@dataclass(frozen=True)
class DayRollup:
    """A day's rollup rows, as stored: one per entry (`DailyEntryRollup`'s columns) and one
    per probed URL (`DailyEndpointRollup`'s)."""

    day: date
    entries: list[dict[str, Any]]
    endpoints: list[dict[str, Any]]


# Rows made and stored at a time: a day of 100,000 entries is some 370,000 rows, about
# 300 MiB as the dicts an insert takes, where a day's figures are a few tens of MiB.
ROWS_AT_ONCE = 20_000


@dataclass(frozen=True)
class _DayRows:
    """A day's rollup rows, made a chunk at a time as they are stored."""

    day: date
    entries: Iterator[list[dict[str, Any]]]
    endpoints: Iterator[list[dict[str, Any]]]


def _day_figures(history: pd.DataFrame, keys: list[str], timed: bool = False) -> pd.DataFrame:
    """Probe counts, live share and latency percentiles per group of `keys`, for one day; with
    `timed`, each group's timed successful probes too (ascending): the same probes and times
    uptime and Latency read of a raw day (`score.counted_probes`, `score.succeeded_probes`)."""
    history = counted_probes(history)
    if history.empty:
        columns = [*keys, *_DAY_KEYS, "endpoint_id", *(["timed_ms"] if timed else [])]
        return pd.DataFrame(columns=columns).set_index(keys)
    frame = history.assign(
        total_ms=pd.to_numeric(history["total_ms"], errors="coerce").astype(float),
        responded=history["outcome"].isin(["live", "online"]),
        succeeded=succeeded_probes(history["outcome"], history.get("reason"),
                                   history.get("endpoint_id"), history.get("entry_id")),
        is_live=history["outcome"] == "live",
    )
    grouped = frame.groupby(keys, sort=True)
    figures = grouped.agg(
        probes=("outcome", "size"),
        responses=("responded", "sum"),
        successes=("succeeded", "sum"),
        live=("is_live", "sum"),
        endpoint_id=("endpoint_id", "last"),
    )
    figures["live_share"] = figures["live"] / figures["probes"]
    answered = frame[frame["succeeded"] & frame["total_ms"].notna()]
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
_UNPROBED = {"probes": 0, "responses": 0, "successes": 0, "live": 0, "live_share": None,
             "p50_ms": None, "p90_ms": None}


def _figure_rows(figures: pd.DataFrame, timed: bool = False) -> list[dict[str, object]]:
    """Each group's figures as rollup fields, in the frame's order; with `timed`, the day's
    timed successful probes too (an empty list when none was timed)."""
    rows = [
        {"probes": int(probes), "responses": int(responses), "successes": int(successes),
         "live": int(live), "live_share": live_share, "p50_ms": p50_ms, "p90_ms": p90_ms}
        for probes, responses, successes, live, live_share, p50_ms, p90_ms in zip(
            figures["probes"].tolist(), figures["responses"].tolist(),
            figures["successes"].tolist(), figures["live"].tolist(),
            *(_numbers(figures[name].tolist()) for name in ("live_share", "p50_ms", "p90_ms")),
            strict=True)
    ]
    if timed:
        for row, ms in zip(rows, figures["timed_ms"].tolist(), strict=True):
            row["timed_ms"] = [float(v) for v in ms] if isinstance(ms, list) else []
    return rows


def compute_day(
    session: Session,
    day: date,
    entry_ids: Collection[str] | None = None,
    judged: Mapping[str, ContentScores] | None = None,
) -> DayRollup:
    """The rollup of `day` for the entries published at its end or probed that day (or those of
    them in `entry_ids`).

    `judged` may hold the content scores of more entries than the day's (read once for a
    range of days). Its scores are those at the end of the day, from the rollups of the days
    before and a few days of raw probes (`bounded_scores`), with the entries' stored Pricing
    and Depth, as the score stage reads them.
    """
    rows = _day_rows(session, day, entry_ids, judged)
    return DayRollup(day, [row for chunk in rows.entries for row in chunk],
                     [row for chunk in rows.endpoints for row in chunk])


def _day_rows(
    session: Session,
    day: date,
    entry_ids: Collection[str] | None,
    judged: Mapping[str, ContentScores] | None,
) -> _DayRows:
    """`compute_day`'s rows, made `ROWS_AT_ONCE` at a time from the day's figures. The day's
    probes are read once, for its figures and its scores: scored as of its last instant, the
    day is the only one whose raw probes the scores read (`evidence.evidence_days`).

    The day's entries are those published at its end and those with trusted probes that day,
    retired since or not: a nightly ingests (and retires) before it rolls up the day before,
    and a backfill rolls up days of entries retired since; neither may drop a day's evidence.
    """
    end = day_bounds(day)[1]
    of_day = day_history(session, day)
    probed = set(of_day["entry_id"].unique())
    statement = select(EntryRow.id, EntryRow.first_seen_at).where(
        or_(col(EntryRow.retired_at).is_(None), col(EntryRow.retired_at) > end))
    known, later = [], []  # known by the day's end; first seen after it (rare: a backfill)
    for entry_id, first_seen_at in session.exec(statement):
        if entry_id not in probed and (entry_ids is None or entry_id in entry_ids):
            (known if as_utc(first_seen_at) <= end else later).append(entry_id)
    if later:  # only those probed in the window count; asked of the store only when any
        known += probed_entries(session, end - timedelta(days=WINDOW_DAYS), end, later)
    ids = sorted({*known, *(probed if entry_ids is None else probed & set(entry_ids))})
    judged = content_scores(session, ids) if judged is None else judged
    chosen = {i: judged[i] for i in ids if i in judged}
    if len(chosen) < len(ids):  # entries retired since, which `content_scores` leaves out
        chosen |= judged_content_scores(session, set(ids) - chosen.keys())
    scores, _ = bounded_scores(session, chosen, end, own_day=of_day)
    states = latest_states(session, until=end, entry_ids=ids)  # none asked of a day before any
    of_day = of_day[of_day["entry_id"].isin(ids)]
    per_entry = _day_figures(of_day, ["entry_id"], timed=True)
    per_url = _day_figures(of_day, ["entry_id", "url"])
    del of_day  # the day's figures are all the rows need
    probed_today = set(per_entry.index)

    def entry_chunks() -> Iterator[list[dict[str, Any]]]:
        for first in range(0, len(ids), ROWS_AT_ONCE):
            chunk = ids[first : first + ROWS_AT_ONCE]
            figures = iter(_figure_rows(per_entry.loc[[i for i in chunk if i in probed_today]],
                                        timed=True))
            rows = []
            for entry_id in chunk:
                score = scores[entry_id]
                row = (next(figures) if entry_id in probed_today
                       else _UNPROBED | {"timed_ms": None})
                rows.append({
                    "day": day, "entry_id": entry_id, "state": states.get(entry_id, "unchecked"),
                    "pricing": score.pricing.value, "latency": score.latency.value,
                    "depth": score.depth.value, "provisional": score.provisional,
                    "percent": score.percent, "grade": score.grade, "rubric": score.rubric,
                    **row})
            yield rows

    def endpoint_chunks() -> Iterator[list[dict[str, Any]]]:
        for first in range(0, len(per_url), ROWS_AT_ONCE):
            part = per_url.iloc[first : first + ROWS_AT_ONCE]
            yield [
                {"day": day, "entry_id": entry_id, "url": url,
                 "endpoint_id": None if pd.isna(endpoint_id) else int(endpoint_id), **row}
                for (entry_id, url), endpoint_id, row in zip(
                    part.index, part["endpoint_id"].tolist(), _figure_rows(part), strict=True)
            ]

    return _DayRows(day, entry_chunks(), endpoint_chunks())


def _store_rows(
    session: Session, rollup: _DayRows, entry_ids: Collection[str] | None = None
) -> tuple[int, int]:
    """Replace the stored rows of that day (for `entry_ids`, or all) with `rollup`'s: one bulk
    insert per chunk (a day of a large catalogue is hundreds of thousands of rows), left for
    the caller to commit once; the rows stored per table."""
    counts = []
    for table, chunks in ((DailyEntryRollup, rollup.entries),
                          (DailyEndpointRollup, rollup.endpoints)):
        statement = delete(table).where(col(table.day) == rollup.day)
        if entry_ids is None:
            session.exec(statement)
        else:  # a bounded IN list at a time: a backfill may name any number of entries
            for chunk in in_lists(sorted(entry_ids)):
                session.exec(statement.where(col(table.entry_id).in_(chunk)))
        stored = 0
        for rows in chunks:
            insert_rows(session, table.__table__, rows)
            stored += len(rows)
        counts.append(stored)
    return counts[0], counts[1]


@dataclass(frozen=True)
class RolledUp:
    """What a stored day's rollup holds: its rows, counted (the rows go once stored)."""

    day: date
    entries: int
    endpoints: int


def roll_up_days(
    session: Session, days: Iterable[date], entry_ids: Collection[str] | None = None
) -> list[RolledUp]:
    """Compute and store the rollups of every day in `days`; idempotent. Each day's probes are
    read for that day alone (a day may hold several runs: a backfill that probes again, manual
    runs); its rows are made and stored `ROWS_AT_ONCE` at a time (a day of 100,000 entries is
    some 370,000 rows)."""
    days = list(days)
    if not days:
        return []
    refuse_pruned_days(session, days)
    judged = content_scores(session, entry_ids)
    rollups = []
    for day in days:
        runs_read = day_runs(session, day) if entry_ids is None else ""  # before its probes
        entries, endpoints = _store_rows(
            session, _day_rows(session, day, entry_ids, judged), entry_ids)
        # The day's evidence in columns, from the rows as now stored, in the same transaction.
        if entry_ids is None:  # every entry's row of the day is as of now
            session.merge(RolledDay(day=day, rolled_at=utcnow(), runs_read=runs_read,
                                    **day_evidence(session, day)))
        else:  # some entries' rows changed: a complete day's evidence with them
            keep_evidence(session, day)
        session.commit()
        rollups.append(RolledUp(day, entries, endpoints))
    return rollups


def keep_evidence(session: Session, day: date, missing_only: bool = False) -> bool:
    """Keep `day`'s rollup evidence (`day_evidence`, from its rows as stored) with its
    `RolledDay`, where it has one (and, `missing_only`, where it keeps none yet); whether it
    was written. Not committed."""
    statement = update(RolledDay).where(col(RolledDay.day) == day)
    if missing_only:
        statement = statement.where(col(RolledDay.evidence).is_(None))
    return bool(session.execute(statement.values(**day_evidence(session, day))).rowcount)


def keep_missing_evidence(session: Session, today: date) -> list[date]:
    """Keep the rollup evidence (`keep_evidence`) of the complete days the score stage may read
    from today on that have none: days rolled up before their evidence was kept with them
    (migration 0018). The score stage reads each from its rows until then, some 2 s of CPU a
    span at 100,000 entries for 30 of them; keeping it costs some 0.2-1 s a day, once. Newest
    first, each committed on its own, and only while the day still has none: a backfill rolling
    it up meanwhile keeps its own, from its new rows. The days kept."""
    lacking = session.exec(select(RolledDay.day).where(
        col(RolledDay.evidence).is_(None),
        col(RolledDay.day) >= today - timedelta(days=WINDOW_DAYS))).all()
    kept = []
    for day in sorted(complete_days(session, lacking), reverse=True):
        if keep_evidence(session, day, missing_only=True):
            kept.append(day)
        session.commit()
    return kept


class ProbesPrunedError(ValueError):
    """Days were asked to be rolled up again whose raw probes were pruned (`prune_probes`)."""


# The most stretches of days a refusal names one by one: pruning goes oldest first, so the
# pruned days of a range are mostly one stretch.
NAMED_STRETCHES = 5


def _named(days: list[date]) -> str:
    """`days` (ascending) as the stretches of consecutive days they make, each named by its
    first and last day, so that a backfill over months of pruned nights names every day in a
    few words."""
    stretches: list[list[date]] = []
    for day in days:
        if stretches and day - stretches[-1][-1] == timedelta(days=1):
            stretches[-1].append(day)
        else:
            stretches.append([day])
    named = [stretch[0].isoformat() if len(stretch) == 1
             else f"{stretch[0].isoformat()} to {stretch[-1].isoformat()} ({len(stretch)} days)"
             for stretch in stretches[:NAMED_STRETCHES]]
    left = sum(len(stretch) for stretch in stretches[NAMED_STRETCHES:])
    return ", ".join(named) + (f" and {left} more days" if left else "")


def _has_probes(session: Session, day: date) -> bool:
    start, end = day_bounds(day)
    return session.exec(select(ProbeRow.id).where(
        col(ProbeRow.checked_at) >= start, col(ProbeRow.checked_at) <= end).limit(1)).first() \
        is not None


def pruned_days(session: Session, days: Iterable[date]) -> list[date]:
    """Those of `days` whose raw probes were pruned (`prune_probes`): rolling one up again
    would replace its figures with those of a day without its probes."""
    return sorted(session.exec(select(RolledDay.day).where(
        col(RolledDay.day).in_(sorted(set(days))), col(RolledDay.probes_pruned))))


def refuse_pruned_days(session: Session, days: Iterable[date]) -> None:
    """Raise ProbesPrunedError, naming them, if any of `days` had its raw probes pruned; it
    names the first of `days` after them too, from which the range can be computed again."""
    days = sorted(set(days))
    if pruned := pruned_days(session, days):
        after = [day for day in days if day > pruned[-1]]
        raise ProbesPrunedError(
            f"the raw probes of {_named(pruned)} were pruned (APIDIR_PROBES_KEPT_DAYS): those "
            "days can no longer be computed again, and their stored rollups stand as they are"
            + (f"; the days from {after[0]} on can be" if after else ""))


# The most days whose raw probes one nightly deletes (some seconds a day at 100,000 entries):
# a year of history is pruned in some seven weeks of nights, each a little longer, and a night
# that pruned nothing for a few nights catches up on the next.
PRUNED_DAYS_A_NIGHT = 7


def prune_probes(session: Session, today: date, kept_days: int,
                 at_most: int = PRUNED_DAYS_A_NIGHT) -> list[tuple[date, int]]:
    """Delete the raw probes of each day that ended more than `kept_days` days before `today`
    and was rolled up after it ended (its rollups stand in for them: trends, uptime and
    scores read those), with the rollup evidence kept for the score stage, whose window such
    a day has left, and mark the day pruned. A day never rolled up completely keeps its
    probes, its only record. The probes of an active entry's latest trusted run stay while
    it is its latest: its published status is read from them, and a prober whose network was
    down for longer than `kept_days` still publishes each entry's last trusted status. Oldest
    first, each day committed on its own, at most `at_most` days with probes deleted a call:
    a long history is pruned over several nights rather than in one long first night; (day,
    probes deleted) of each day pruned."""
    first = session.exec(select(func.min(ProbeRow.checked_at))).one()
    last = today - timedelta(days=kept_days + 1)
    if first is None or last < as_utc(first).date():
        return []
    days = days_between(as_utc(first).date(), last)
    complete = complete_days(session, days)
    kept: dict[int, set[str]] | None = None  # read once a day holds probes to delete
    pruned = []
    for day in days:
        if day not in complete or not _has_probes(session, day):
            continue
        if kept is None:
            kept = _latest_kept(session, day_bounds(last)[1])
        deleted = _delete_probes(session, day, kept)
        session.execute(update(RolledDay).where(col(RolledDay.day) == day).values(
            evidence=None, evidence_entries=None, probes_pruned=True))
        session.commit()
        if deleted:
            pruned.append((day, deleted))
            if len(pruned) == at_most:
                break
    return pruned


def _latest_kept(session: Session, until: datetime) -> dict[int, set[str]]:
    """The runs with probes checked by `until` that are some active entries' latest trusted
    run, with those entries: the probes pruning keeps. On a night like any other none are (each
    entry's latest run is the night's own), and no probe is read."""
    active = active_entry_ids(session)
    latest = latest_runs(session, active)
    early = set(session.exec(select(PipelineRun.id).where(
        col(PipelineRun.id).in_(sorted(set(latest.values()))),
        col(PipelineRun.first_checked_at) <= until)))
    kept: dict[int, set[str]] = {run_id: set() for run_id in early}
    for entry_id, run_id in latest.items():
        if run_id in early:
            kept[run_id].add(entry_id)
    return kept


def _delete_probes(session: Session, day: date, kept: Mapping[int, set[str]]) -> int:
    """Delete `day`'s probes but those of the runs in `kept` of the entries named with them;
    how many were deleted. Not committed."""
    start, end = day_bounds(day)
    of_day = (col(ProbeRow.checked_at) >= start, col(ProbeRow.checked_at) <= end)
    deleted = session.execute(delete(ProbeRow).where(
        *of_day, col(ProbeRow.run_id).not_in(sorted(kept)))).rowcount
    for run_id, entry_ids in kept.items():
        probed = session.exec(select(ProbeRow.entry_id).distinct().where(
            *of_day, ProbeRow.run_id == run_id)).all()
        for chunk in in_lists(sorted(set(probed) - entry_ids)):
            deleted += session.execute(delete(ProbeRow).where(
                *of_day, ProbeRow.run_id == run_id, col(ProbeRow.entry_id).in_(chunk))).rowcount
    return deleted


def days_to_roll(session: Session, day: date, now: datetime) -> list[date]:
    """The days a nightly of `day` rolls up, as of `now`: each day up to `day` that has ended,
    is at most `WINDOW_DAYS` before it and not before the first probe stored, and whose
    rollups are not complete (`complete_days`). A day is rolled up once, after it ended:
    yesterday on a night like any other, also the days of nights that did not run."""
    first = session.exec(select(func.min(ProbeRow.checked_at))).one()
    if first is None:
        return []
    # `day` once it has ended, else the day before it or before today, whichever is earlier
    last = day if day_bounds(day)[1] < now else min(day, now.date()) - timedelta(days=1)
    start = max(as_utc(first).date(), day - timedelta(days=WINDOW_DAYS))
    if last < start:
        return []
    candidates = days_between(start, last)
    complete = complete_days(session, candidates)
    return [candidate for candidate in candidates if candidate not in complete]


def entry_trends(session: Session, last_day: date, days: int = 30) -> Trends:
    """Each entry's daily figures over the `days` days ending on `last_day`, oldest first, as the
    pages' workers are sent them (`day_figures.sent_days`): read as the store's plain rows,
    without an ORM row or a DayFigures a day (3,000,000 days at 100k with 30 days kept), and
    kept flat (`Trends`). An entry the catalogue gives no URL to probe any longer
    (`probe.unprobable_entries`) has no day, as one never probed: its days are of addresses
    it no longer lists, as its status, uptime and score leave them out. Nor do the days of an
    entry count the probes of an endpoint it no longer lists, or those checked before its
    base address moved (`unlisted_probes`), as its uptime and score do not: such an entry's
    days are counted again without them (`_listed_days`), the rest read as stored."""
    chart = days_between(last_day - timedelta(days=days - 1), last_day)
    rollup = DailyEntryRollup.__table__.c
    statement = (select(rollup.entry_id, rollup.day, rollup.probes, rollup.successes,
                        rollup.p50_ms)
                 .where(rollup.day >= chart[0], rollup.day <= last_day).order_by(rollup.day))
    unprobable = unprobable_entries(active_base_urls(session))
    unlisted = {entry_id: left for entry_id, left in unlisted_probes(
        session, day_bounds(chart[0])[0], day_bounds(last_day)[1]).items()
        if entry_id not in unprobable}
    if not unlisted:
        return Trends(session.connection().execute(statement), leaving_out=unprobable)
    # Left out as the rows are read, not by a NOT IN list in the statement, which a database
    # bounds (PostgreSQL at 65,535 values) however many entries a curator edited.
    others = (row for row in session.connection().execute(statement)
              if row[0] not in unlisted)
    return Trends(chain(others, _listed_days(session, statement, unlisted, chart)),
                  leaving_out=unprobable)


def _listed_days(
    session: Session, statement: Select[Any], unlisted: Mapping[str, Unlisted],
    days: list[date],
) -> Iterator[tuple[str, date, int, int, float | None]]:
    """The rows of `statement` (entry id, day, probes, successes, median) of the entries in
    `unlisted` in `days`, each day's figures counted again from their raw probes without
    those it names (`listed_history`): a day's rollup holds its entry's every probe as one.
    The chart's probes are read once and each day counted as the rollup counts it
    (`_day_figures`, by entry and UTC day); a day with no probe of what the entry lists now
    (before its base address moved, or of a dropped endpoint alone) has none, as a day
    without probes, and the day it moved counts the probes after. Few entries (those a
    curator edited), whose raw probes are kept for every day of the chart, read through the
    entry index, and their rows by their keys."""
    history = listed_history(session, unlisted, day_bounds(days[0])[0], day_bounds(days[-1])[1])
    history = history.assign(day=pd.to_datetime(history["checked_at"], utc=True).dt.date)
    figures = _day_figures(history, ["entry_id", "day"])
    listed = {key: (row["probes"], row["successes"], row["p50_ms"])
              for key, row in zip(figures.index, _figure_rows(figures), strict=True)}
    unprobed = (_UNPROBED["probes"], _UNPROBED["successes"], _UNPROBED["p50_ms"])
    rollup = DailyEntryRollup.__table__.c
    for chunk in in_lists(sorted(unlisted)):
        for entry_id, day, *_ in session.connection().execute(
                statement.where(rollup.day.in_(days), rollup.entry_id.in_(chunk))):
            yield entry_id, day, *listed.get((entry_id, day), unprobed)
