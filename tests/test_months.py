"""Months of nights on one store: each night rolls up the days ended and prunes the raw probes
past the kept limit, as the nightly does, and the trends, uptimes and scores still read whole."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlmodel import Session, col, func, select

from pipeline.judging.content_scores import content_scores, store_content_scores
from pipeline.judging.evidence import bounded_scores, day_bounds, day_history, days_between
from pipeline.judging.rollup import (
    days_to_roll,
    entry_trends,
    prune_probes,
    pruned_days,
    roll_up_days,
)
from pipeline.judging.score import counted_probes, succeeded_probes
from pipeline.settings import PROBES_KEPT_MIN_DAYS
from pipeline.store.history import record_probes
from pipeline.store.tables import DailyEntryRollup, ProbeRow, active_entries, as_utc, start_run
from tests.conftest import WriteEntry, listed_endpoint_ids, make_entry
from tests.test_evidence import ENTRIES, TODAY, from_the_whole_window, probe

NIGHTS = 120
KEPT_DAYS = PROBES_KEPT_MIN_DAYS


def day_counts(session: Session, day: date) -> Counter[tuple[str, date, str]]:
    """The day's counted probes and successful probes of each entry, read from its raw probes
    while it still has them."""
    history = counted_probes(day_history(session, day))
    succeeded = succeeded_probes(history["outcome"], history["reason"], history["endpoint_id"],
                                 history["entry_id"])
    counts: Counter[tuple[str, date, str]] = Counter()
    for entry_id, ok in zip(history["entry_id"], succeeded, strict=True):
        counts[entry_id, day, "probes"] += 1
        counts[entry_id, day, "successes"] += int(ok)
    return counts


@pytest.fixture
def months(write_entry: WriteEntry, ingested_store) -> tuple[Session, Counter]:
    """`NIGHTS` nightly runs ending on TODAY, each as the nightly orders its stages: the days
    ended rolled up and the raw probes past `KEPT_DAYS` pruned, then the night's probes (some
    entries left out some nights). What each day counted, read before it was pruned."""
    for entry_id in ENTRIES:
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    store_content_scores(session)
    rng = random.Random(11)
    listed = {entry_id: listed_endpoint_ids(session, entry_id) for entry_id in ENTRIES}
    counts: Counter[tuple[str, date, str]] = Counter()
    for day in days_between((TODAY - timedelta(days=NIGHTS - 1)).date(), TODAY.date()):
        night = datetime(day.year, day.month, day.day, 3, rng.randrange(60), tzinfo=UTC)
        roll_up_days(session, days_to_roll(session, day, night))
        prune_probes(session, day, KEPT_DAYS)
        run = start_run(session, "nightly")
        record_probes(session, run, [
            look for entry_id in ENTRIES[: rng.choice([2, 3])]
            for n, path in enumerate(("/a", "/b"))
            for look in probe(entry_id, f"https://{entry_id}.example.com{path}", night, rng,
                              listed[entry_id][n])])
        counts += day_counts(session, day)
    return session, counts


def test_after_months_of_nights_the_trends_uptimes_and_scores_read_whole(months) -> None:
    """After 120 nights with 31 days of raw probes kept: every day keeps its rollups; the days
    past the limit lost their raw probes, and no day the windows read raw did (today's scores
    and uptimes are those of the whole raw window); the 30-day trend and the uptimes count
    every probe and day of the month."""
    session, counts = months
    first = (TODAY - timedelta(days=NIGHTS - 1)).date()
    yesterday = (TODAY - timedelta(days=1)).date()
    probed_days = sorted({day for _, day, _ in counts})
    assert len(probed_days) == NIGHTS

    # every day ended keeps its rollup rows, pruned or not
    rolled = set(session.exec(select(DailyEntryRollup.day).distinct()))
    assert rolled == set(days_between(first, yesterday))
    # the raw probes past the limit are gone, a night at a time; those the windows read stay
    oldest_raw = as_utc(session.exec(select(func.min(ProbeRow.checked_at))).one()).date()
    assert oldest_raw == TODAY.date() - timedelta(days=KEPT_DAYS)
    assert pruned_days(session, probed_days) == days_between(first, oldest_raw - timedelta(1))
    for day in days_between(oldest_raw, TODAY.date()):
        assert day_counts(session, day) == Counter(
            {key: n for key, n in counts.items() if key[1] == day}), day

    as_of = TODAY.replace(hour=23)
    contents = {row.id: row.content for row in active_entries(session)}
    expected_scores, expected_uptimes = from_the_whole_window(session, contents, as_of)
    scores, uptimes = bounded_scores(session, content_scores(session), as_of)
    assert {k: v.contract() for k, v in scores.items()} == expected_scores
    assert uptimes == expected_uptimes
    assert any(s.latency is not None for s in expected_scores.values())  # real evidence
    month = days_between(yesterday - timedelta(days=29), yesterday)
    trends = entry_trends(session, yesterday)
    for entry_id in ENTRIES:
        assert [day[:3] for day in trends[entry_id]] == [  # a day not probed: (day, 0, 0)
            (day.toordinal(), counts[entry_id, day, "probes"], counts[entry_id, day, "successes"])
            for day in month]
        assert uptimes[entry_id]["evidence"]["last30d"]["days"] == sum(
            1 for day in [*month[1:], TODAY.date()] if counts[entry_id, day, "probes"])
    assert session.exec(select(func.count()).select_from(ProbeRow).where(
        col(ProbeRow.checked_at) < day_bounds(oldest_raw)[0])).one() == 0


def test_a_run_across_midnight_counts_each_probe_in_the_rollup_of_the_day_it_was_checked(
    write_entry: WriteEntry, ingested_store,
) -> None:
    """A run that starts at 23:50 and checks at 23:55 and 00:10: each probe counts for the UTC
    day it was checked; neither day's rollup drops it, none counts it twice, and the nightly
    rolls up each day once it has ended and its runs were judged."""
    write_entry(make_entry(id="alpha"))
    session = ingested_store()
    url = "https://alpha.example.com/a"
    endpoint = listed_endpoint_ids(session, "alpha")[0]
    rng = random.Random(3)
    day1 = (TODAY - timedelta(days=3)).date()
    day2, day3 = day1 + timedelta(days=1), day1 + timedelta(days=2)

    def checked(day: date, hour: int, minute: int) -> datetime:
        return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)

    for night in (day1, day2):  # two nights, each across midnight
        run = start_run(session, "nightly")
        record_probes(session, run, [
            look for moment in (checked(night, 23, 55), checked(night + timedelta(1), 0, 10),
                                checked(night + timedelta(1), 0, 12))
            for look in probe("alpha", url, moment, rng, endpoint)])
    assert days_to_roll(session, day3, checked(day3, 0, 30)) == [day1, day2]
    roll_up_days(session, [day1, day2, day3])
    rows = {row.day: row for row in session.exec(select(DailyEntryRollup))}
    raw = counted_probes(day_history(session, day1)), counted_probes(day_history(session, day2))
    assert [rows[day].probes for day in (day1, day2)] == [len(frame) for frame in raw]
    every = sum(len(counted_probes(day_history(session, day))) for day in (day1, day2, day3))
    assert sum(row.probes for row in rows.values()) == every  # none dropped, none twice
