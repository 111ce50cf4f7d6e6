"""Daily rollups over several days of recorded probe history: per-day figures, idempotence."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from sqlmodel import Session, select

from pipeline.judging import rollup as rollup_module
from pipeline.judging.evidence import WINDOW_DAYS, day_bounds, days_between
from pipeline.judging.rollup import (
    ProbesPrunedError,
    compute_day,
    days_to_roll,
    prune_probes,
    pruned_days,
    roll_up_days,
)
from pipeline.judging.score import score_entries
from pipeline.settings import PROBES_KEPT_MIN_DAYS
from pipeline.store.history import (
    add_probes,
    close_probe_run,
    history_frame,
    latest_statuses,
    plan_targets,
    record_probes,
)
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EntryRow,
    ProbeRow,
    RolledDay,
    active_entries,
    as_utc,
    start_run,
)
from tests.conftest import WriteEntry, make_entry
from tests.test_history import result

DAY1 = date(2026, 11, 10)
DAY2 = DAY1 + timedelta(days=1)
DAY3 = DAY1 + timedelta(days=2)


def at(day: date, hour: int) -> datetime:
    return datetime.combine(day, time(hour), tzinfo=UTC)


@pytest.fixture
def session(write_entry: WriteEntry, ingested_store):
    endpoints = [
        {"method": "GET", "path": "/forecast", "description": "Forecast."},
        {"method": "GET", "path": "/current", "description": "Now."},
        {"method": "GET", "path": "/alerts", "description": "Alerts."},
    ]
    write_entry(make_entry(endpoints=endpoints))
    write_entry(make_entry(id="quiet-maps", category="maps", baseUrl="https://maps.example.org",
                           sampleRequest='curl "https://maps.example.org/forecast"'))
    return ingested_store()


@pytest.fixture
def history(session: Session) -> dict[str, str]:
    """Two days of probes of example-weather, and a network-suspect run on the second."""
    targets = [t for t in plan_targets(session)
               if t.entry_id == "example-weather"]
    forecast, current, alerts = targets
    day1 = start_run(session, "nightly")
    record_probes(session, day1, [
        result(forecast.url, "live", 200, 100.0, endpoint=forecast.endpoint_id, at=at(DAY1, 3)),
        result(current.url, "online", 401, 300.0, endpoint=current.endpoint_id, at=at(DAY1, 3)),
        result(alerts.url, "live", 200, 200.0, endpoint=alerts.endpoint_id, at=at(DAY1, 3)),
    ])
    day2 = start_run(session, "nightly")
    record_probes(session, day2, [
        result(forecast.url, "unreachable", None, None, endpoint=forecast.endpoint_id,
               error_class="timeout", at=at(DAY2, 3)),
        result(current.url, "online", 503, 40.0, endpoint=current.endpoint_id, at=at(DAY2, 3)),
        result(alerts.url, "online", 429, 60.0, endpoint=alerts.endpoint_id, at=at(DAY2, 3)),
    ])
    suspect = start_run(session, "nightly")
    record_probes(session, suspect, [
        result(forecast.url, "unreachable", None, None, endpoint=forecast.endpoint_id,
               error_class="dns", at=at(DAY2, 20), entry="example-weather")
        for _ in range(12)
    ])
    assert suspect.network_suspect
    return {"forecast": forecast.url, "current": current.url, "alerts": alerts.url}


def stored(session: Session) -> tuple[list[dict], list[dict]]:
    entries = session.exec(select(DailyEntryRollup).order_by(DailyEntryRollup.day,
                                                             DailyEntryRollup.entry_id))
    endpoints = session.exec(select(DailyEndpointRollup).order_by(
        DailyEndpointRollup.day, DailyEndpointRollup.entry_id, DailyEndpointRollup.url))
    return [r.model_dump() for r in entries], [r.model_dump() for r in endpoints]


def test_a_nightly_rolls_up_each_day_once_it_has_ended(session: Session) -> None:
    """The days a nightly rolls up: those ended, from the first probe stored and at most the
    longest window back, whose rollups were not made after they ended; today waits."""
    assert days_to_roll(session, DAY3, at(DAY3, 2)) == []  # no probe stored yet
    run = start_run(session, "nightly")
    url = next(t.url for t in plan_targets(session) if t.entry_id == "quiet-maps")
    record_probes(session, run, [result(url, "live", 200, 90.0, at=at(day, 3), entry="quiet-maps")
                                 for day in (DAY1, DAY2)])
    assert days_to_roll(session, DAY3, at(DAY3, 2)) == [DAY1, DAY2]
    assert days_to_roll(session, DAY2, at(DAY2, 23)) == [DAY1]  # its own day has not ended
    assert days_to_roll(session, DAY2, at(DAY3, 0)) == [DAY1, DAY2]  # a night run late
    assert days_to_roll(session, DAY3 + timedelta(days=5), at(DAY2, 23)) == [DAY1]  # run early
    roll_up_days(session, [DAY1])  # now, long after the day ended
    assert days_to_roll(session, DAY3, at(DAY3, 2)) == [DAY2]
    session.merge(RolledDay(day=DAY2, rolled_at=at(DAY2, 22)))  # rolled before it ended
    session.commit()
    assert days_to_roll(session, DAY3, at(DAY3, 2)) == [DAY2]
    later = DAY1 + timedelta(days=40)
    assert days_to_roll(session, later, at(later, 2)) == days_between(
        later - timedelta(days=WINDOW_DAYS), later - timedelta(days=1))


def test_a_day_is_rolled_up_again_once_a_run_with_probes_that_day_is_judged_after_it(
        session: Session) -> None:
    """A shard stores its probes before its run is judged, and they count only from then: a
    day rolled up meanwhile lacks them, so it is not complete while such a run is open (it is
    neither pruned nor read from its rollups), and once the run is judged it is rolled up
    again, with them."""
    url = next(t.url for t in plan_targets(session) if t.entry_id == "quiet-maps")
    record_probes(session, start_run(session, "nightly"),
                  [result(url, "live", 200, 90.0, at=at(DAY1, 3), entry="quiet-maps")])
    roll_up_days(session, [DAY1])
    assert days_to_roll(session, DAY1, at(DAY2, 2)) == []
    open_run = start_run(session, "backfill")  # one shard's probes stored, the run not judged
    tally = add_probes(session, open_run.id, [
        result(url, "online", 401, 80.0, at=at(DAY1, 5), entry="quiet-maps")])
    session.commit()
    assert days_to_roll(session, DAY1, at(DAY2, 2)) == [DAY1]
    assert prune_probes(session, DAY1 + timedelta(days=40), PROBES_KEPT_MIN_DAYS) == []
    close_probe_run(session, open_run, tally)  # judged after the day's rollup
    assert days_to_roll(session, DAY1, at(DAY2, 2)) == [DAY1]
    roll_up_days(session, [DAY1])
    assert days_to_roll(session, DAY1, at(DAY2, 2)) == []
    day = session.exec(select(DailyEntryRollup).where(
        DailyEntryRollup.entry_id == "quiet-maps", DailyEntryRollup.day == DAY1)).one()
    assert day.probes == 2


def test_a_run_judged_by_a_clock_behind_the_rollup_s_is_rolled_up_with_its_day(
        session: Session) -> None:
    """Whether a day's rollup read a run does not hang on clocks agreeing: a day rolled up by a
    clock running fast (or on another machine sharing the store), then probed by a run whose
    clock was stepped back into it and which was judged, by that clock, "before" the rollup,
    is not complete: it is rolled up again, with that run's probes, and then is."""
    url = next(t.url for t in plan_targets(session) if t.entry_id == "quiet-maps")
    record_probes(session, start_run(session, "nightly"),
                  [result(url, "live", 200, 90.0, at=at(DAY1, 3), entry="quiet-maps")])
    roll_up_days(session, [DAY1])
    rolled_at = as_utc(session.get(RolledDay, DAY1).rolled_at)
    behind = start_run(session, "nightly")
    record_probes(session, behind, [result(url, "unreachable", None, None, at=at(DAY1, 22),
                                           error_class="refused", entry="quiet-maps")])
    behind.judged_at = rolled_at - timedelta(hours=6)  # by its clock, 6 hours behind
    session.add(behind)
    session.commit()
    assert days_to_roll(session, DAY1, at(DAY2, 3)) == [DAY1]
    roll_up_days(session, [DAY1])
    day = session.exec(select(DailyEntryRollup).where(
        DailyEntryRollup.entry_id == "quiet-maps", DailyEntryRollup.day == DAY1)).one()
    assert (day.probes, day.successes) == (2, 1)
    assert days_to_roll(session, DAY1, at(DAY2, 3)) == []


def test_day_bounds_and_ranges() -> None:
    start, end = day_bounds(DAY1)
    assert start == at(DAY1, 0) and end < at(DAY2, 0) and end > at(DAY1, 23)
    assert days_between(DAY1, DAY3) == [DAY1, DAY2, DAY3]
    with pytest.raises(ValueError, match="ends"):
        days_between(DAY2, DAY1)


def test_entry_figures_per_day(session: Session, history: dict[str, str]) -> None:
    roll_up_days(session, days_between(DAY1, DAY3))
    rows = {(r["day"], r["entry_id"]): r for r in stored(session)[0]}
    first = rows[(DAY1, "example-weather")]
    assert (first["probes"], first["responses"], first["live"]) == (3, 3, 2)
    assert first["live_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert first["p50_ms"] == 200.0 and first["p90_ms"] == pytest.approx(280.0)
    assert first["state"] == "live"

    second = rows[(DAY2, "example-weather")]  # the suspect run's 12 probes do not count
    assert (second["probes"], second["responses"], second["live"]) == (3, 2, 0)
    assert second["live_share"] == 0.0 and second["p50_ms"] == 50.0
    assert second["state"] == "online"

    third = rows[(DAY3, "example-weather")]  # no probes that day: the state carries on
    assert (third["probes"], third["live_share"], third["p50_ms"]) == (0, None, None)
    assert third["state"] == "online"

    assert (DAY1, "quiet-maps") not in rows  # ingested after that day and never probed


def test_a_day_of_two_runs_counts_both_and_no_other_day_counts_them(
    session: Session, history: dict[str, str]
) -> None:
    """Each day's probes are read for that day alone: a second run late on the first day (a
    backfill that probes again) is the first day's, never the second's."""
    again = start_run(session, "backfill")
    record_probes(session, again, [result(history["forecast"], "live", 200, 80.0,
                                          at=at(DAY1, 23))])
    roll_up_days(session, [DAY1, DAY2])
    rows = {(r["day"], r["entry_id"]): r for r in stored(session)[0]}
    first, second = rows[(DAY1, "example-weather")], rows[(DAY2, "example-weather")]
    assert (first["probes"], first["live"], first["timed_ms"]) == (4, 3, [80.0, 100.0, 200.0,
                                                                          300.0])
    assert (second["probes"], second["live"]) == (3, 0)


def retire(session: Session, entry_id: str, at_moment: datetime) -> None:
    """The entry's file removed, as the ingest of the night at `at_moment` stores it."""
    session.exec(select(EntryRow).where(EntryRow.id == entry_id)).one().retired_at = at_moment
    session.commit()


def test_an_entry_retired_after_a_probed_day_keeps_that_day_s_rollup(
        session: Session, history: dict[str, str]) -> None:
    """A nightly ingests before it rolls up: the night that retires an entry rolls up its last
    probed day with it, and rolling up old days again (a backfill) keeps a retired entry's
    rows as they were; an entry retired before a day it was not probed has none that day."""
    maps = next(t.url for t in plan_targets(session) if t.entry_id == "quiet-maps")
    run = start_run(session, "nightly")
    record_probes(session, run, [result(maps, "live", 200, 90.0, at=at(day, 4),
                                        entry="quiet-maps") for day in (DAY1, DAY2)])
    roll_up_days(session, [DAY1])
    before = stored(session)
    retire(session, "quiet-maps", at(DAY3, 3))  # the night of DAY3 retires it, then rolls up
    roll_up_days(session, [DAY2])
    rows = {(r["day"], r["entry_id"]): r for r in stored(session)[0]}
    assert (rows[(DAY2, "quiet-maps")]["probes"], rows[(DAY2, "quiet-maps")]["state"]) == (
        1, "live")
    assert {(r["day"], r["url"]) for r in stored(session)[1]} >= {(DAY2, maps)}

    roll_up_days(session, [DAY1])  # a backfill of an older day
    assert [r for r in stored(session)[0] if r["day"] == DAY1] == [
        r for r in before[0] if r["day"] == DAY1]
    assert [r for r in stored(session)[1] if r["day"] == DAY1] == [
        r for r in before[1] if r["day"] == DAY1]
    roll_up_days(session, [DAY3])  # after it was retired, and not probed: no row
    assert {r["entry_id"] for r in stored(session)[0] if r["day"] == DAY3} == {
        "example-weather"}


def test_a_known_entry_without_probes_is_unchecked(session: Session, history) -> None:
    today = datetime.now(UTC).date()
    rollup = compute_day(session, today)
    quiet = {row["entry_id"]: row for row in rollup.entries}["quiet-maps"]
    assert (quiet["state"], quiet["probes"], quiet["live_share"], quiet["latency"]) == (
        "unchecked", 0, None, None)  # no Latency without probes (rubric 2.0)


def test_scores_are_those_at_the_end_of_each_day(session: Session, history) -> None:
    record_probes(session, start_run(session, "nightly"), [  # a third day: Latency's minimum
        result(url, "live", 200, 150.0, at=at(DAY3, 3)) for url in history.values()])
    rolled = roll_up_days(session, [DAY1, DAY2, DAY3])
    rollups = [compute_day(session, day) for day in (DAY1, DAY2, DAY3)]  # the rows it stored
    assert [(r.day, r.entries, r.endpoints) for r in rolled] == [
        (r.day, len(r.entries), len(r.endpoints)) for r in rollups]
    contents = {row.id: row.content for row in active_entries(session)}
    for rollup in rollups:
        end = day_bounds(rollup.day)[1]
        expected = score_entries(contents, history_frame(session, until=end), end)
        for row in rollup.entries:
            score = expected[row["entry_id"]]
            assert tuple(row[k] for k in ("pricing", "latency", "depth", "percent", "grade")) == (
                score.pricing.value, score.latency.value, score.depth.value, score.percent,
                score.grade)
    day1, day2, day3 = ({r["entry_id"]: r for r in rollup.entries} for rollup in rollups)
    # 3 probes on 1 day, then 6 on 2 days: no Latency yet; 9 on 3 days (3 failed): a Latency
    assert day1["example-weather"]["latency"] is None is day2["example-weather"]["latency"]
    assert day3["example-weather"]["latency"] is not None


def test_a_day_made_and_stored_a_row_at_a_time_is_the_day_stored_at_once(
    session: Session, history: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows of a day are made and stored a chunk at a time (a day of 100,000 entries is
    some 300 MiB of rows); chunks of one row store what one chunk of all does."""
    days = days_between(DAY1, DAY3)
    whole = roll_up_days(session, days)
    at_once = stored(session)
    monkeypatch.setattr(rollup_module, "ROWS_AT_ONCE", 1)
    assert roll_up_days(session, days) == whole
    assert stored(session) == at_once and len(at_once[0]) > 2 and len(at_once[1]) > 2
    assert [(r.day, r.entries, r.endpoints) for r in whole] == [
        (r.day, len(r.entries), len(r.endpoints))
        for r in (compute_day(session, day) for day in days)]


def test_endpoint_figures_per_day(session: Session, history: dict[str, str]) -> None:
    roll_up_days(session, [DAY1, DAY2])
    rows = {(r["day"], r["url"]): r for r in stored(session)[1]}
    assert len(rows) == 6
    forecast = rows[(DAY2, history["forecast"])]
    assert (forecast["probes"], forecast["responses"], forecast["live"]) == (1, 0, 0)
    assert forecast["p50_ms"] is None and forecast["endpoint_id"] is not None
    current = rows[(DAY1, history["current"])]
    assert (current["live_share"], current["p50_ms"], current["p90_ms"]) == (0.0, 300.0, 300.0)


def test_rolling_up_again_writes_the_same_rows(session: Session, history) -> None:
    roll_up_days(session, days_between(DAY1, DAY3))
    first = stored(session)
    roll_up_days(session, days_between(DAY1, DAY3))
    roll_up_days(session, [DAY2], entry_ids={"example-weather"})
    assert stored(session) == first
    assert len(first[0]) == 3 and len(first[1]) == 6


def test_a_chosen_entry_leaves_the_others_rows_alone(session: Session, history) -> None:
    today = datetime.now(UTC).date()
    roll_up_days(session, [today])
    before = stored(session)
    assert {r["entry_id"] for r in before[0]} == {"example-weather", "quiet-maps"}
    rollup = compute_day(session, today, entry_ids={"quiet-maps"})
    assert [row["entry_id"] for row in rollup.entries] == ["quiet-maps"]
    roll_up_days(session, [today], entry_ids={"quiet-maps"})
    assert stored(session) == before


def test_a_backfill_of_more_entries_than_one_statement_may_bind_replaces_their_rows(
        session: Session, history) -> None:
    """A backfill may name more entries than a statement binds values (PostgreSQL: 65,535)."""
    roll_up_days(session, days_between(DAY1, DAY3))
    first = stored(session)
    chosen = {f"aaa-{number:06d}" for number in range(70_000)}  # sorted before the real ones
    roll_up_days(session, days_between(DAY1, DAY3),
                 entry_ids=chosen | {"example-weather", "quiet-maps"})
    assert stored(session) == first


def probe_today(session: Session, history: dict[str, str], today: date) -> None:
    """A trusted run probes example-weather `today`: its older runs are no longer its latest."""
    run = start_run(session, "nightly")
    record_probes(session, run, [result(history["forecast"], "live", 200, 70.0, at=at(today, 1),
                                        entry="example-weather")])


def test_old_days_rolled_up_lose_their_raw_probes_and_keep_their_rollups(
    session: Session, history: dict[str, str],
) -> None:
    """With N days of probes kept, each day that ended more than N days ago and was rolled up
    after it ended loses its raw probes and kept evidence; its rollups stay, and rolling it up
    again is refused, as it would count none. A day never rolled up, or a newer one, keeps its
    probes. Pruning again deletes nothing."""
    kept_days = PROBES_KEPT_MIN_DAYS
    today = DAY2 + timedelta(days=kept_days + 1)  # DAY2 ended kept_days + 1 days ago
    newest, lone = today - timedelta(days=kept_days), DAY1 - timedelta(days=1)
    run = start_run(session, "nightly")
    record_probes(session, run, [result(history["forecast"], "live", 200, 80.0, at=at(day, 3),
                                        entry="example-weather") for day in (lone, newest)])
    roll_up_days(session, [DAY1, DAY2, newest])  # now: each after it ended; `lone` never
    rolled = stored(session)
    probe_today(session, history, today)

    assert prune_probes(session, today, kept_days) == [(DAY1, 3), (DAY2, 15)]
    left = session.exec(select(ProbeRow.checked_at).order_by(ProbeRow.checked_at)).all()
    assert [as_utc(checked).date() for checked in left] == [lone, newest, today]
    assert stored(session) == rolled
    evidence = {day.day: day.evidence for day in session.exec(select(RolledDay))}
    assert evidence[DAY1] is None and evidence[DAY2] is None and evidence[newest] is not None
    assert prune_probes(session, today, kept_days) == []

    assert pruned_days(session, [lone, DAY1, DAY2, newest, DAY3]) == [DAY1, DAY2]
    with pytest.raises(ProbesPrunedError,
                       match=r"raw probes of 2026-11-10 to 2026-11-11 \(2 days\) were"):
        roll_up_days(session, [DAY2, newest, DAY1])
    assert stored(session) == rolled
    assert prune_probes(session, today + timedelta(days=1), kept_days) == [(newest, 1)]


def test_an_entry_s_latest_trusted_run_keeps_its_probes_past_the_limit(
    session: Session, history: dict[str, str],
) -> None:
    """While the prober's network is down for longer than the probes are kept, each active
    entry keeps the probes of its latest trusted run, and so its published status; the rest
    of their day is pruned, the day is marked pruned and a backfill of it refused. Once a
    trusted run probes the entry again, the next pruning deletes them. A retired entry keeps
    nothing."""
    kept_days = PROBES_KEPT_MIN_DAYS
    today = DAY2 + timedelta(days=kept_days + 1)
    maps = next(t.url for t in plan_targets(session) if t.entry_id == "quiet-maps")
    alone = start_run(session, "nightly")  # quiet-maps' latest trusted run
    record_probes(session, alone, [result(maps, "live", 200, 90.0, at=at(DAY1, 4),
                                          entry="quiet-maps")])
    roll_up_days(session, [DAY1, DAY2])
    before = latest_statuses(session)["example-weather"]
    assert before.state == "online" and before.checked_at is not None
    session.exec(select(EntryRow).where(EntryRow.id == "quiet-maps")).one().retired_at = at(
        DAY3, 1)
    down = start_run(session, "nightly")  # tonight: the network down, nothing trusted
    record_probes(session, down, [result(history["forecast"], "unreachable", None, None,
                                         error_class="dns", at=at(today, 1))])
    down.network_suspect = True
    session.add(down)
    session.commit()

    assert prune_probes(session, today, kept_days) == [(DAY1, 4), (DAY2, 12)]
    left = session.exec(select(ProbeRow.url, ProbeRow.checked_at).where(
        ProbeRow.checked_at <= day_bounds(DAY2)[1])).all()
    assert sorted(url for url, _ in left) == sorted(history.values())
    assert {as_utc(checked) for _, checked in left} == {at(DAY2, 3)}
    assert latest_statuses(session)["example-weather"] == before
    assert pruned_days(session, [DAY1, DAY2, DAY3]) == [DAY1, DAY2]
    with pytest.raises(ProbesPrunedError, match="raw probes of 2026-11-11 were"):
        roll_up_days(session, [DAY2])
    assert prune_probes(session, today + timedelta(days=1), kept_days) == []

    tomorrow = today + timedelta(days=1)
    probe_today(session, history, tomorrow)
    assert prune_probes(session, tomorrow, kept_days) == [(DAY2, 3)]
    assert session.exec(select(ProbeRow.id).where(
        ProbeRow.checked_at <= day_bounds(DAY2)[1])).all() == []
    assert latest_statuses(session)["example-weather"].checked_at == at(tomorrow, 1)


def test_a_long_history_is_pruned_a_few_days_a_night_oldest_first(
    session: Session, history: dict[str, str],
) -> None:
    """A call deletes the probes of at most so many days (a day without probes not counted),
    the oldest due first: the next call goes on where it stopped."""
    kept_days = PROBES_KEPT_MIN_DAYS
    day4, day5 = DAY3 + timedelta(days=1), DAY3 + timedelta(days=2)  # DAY3 without probes
    today = day5 + timedelta(days=kept_days + 1)  # every day is due
    run = start_run(session, "nightly")
    record_probes(session, run, [result(history["forecast"], "live", 200, 80.0, at=at(day, 3),
                                        entry="example-weather") for day in (day4, day5)])
    roll_up_days(session, days_between(DAY1, day5))
    probe_today(session, history, today)

    def days_left() -> list[date]:
        checked = session.exec(select(ProbeRow.checked_at).where(
            ProbeRow.checked_at < day_bounds(today)[0])).all()
        return sorted({as_utc(at).date() for at in checked})

    assert days_left() == [DAY1, DAY2, day4, day5]
    assert [day for day, _ in prune_probes(session, today, kept_days, at_most=3)] == [
        DAY1, DAY2, day4]
    assert days_left() == [day5]
    assert [day for day, _ in prune_probes(session, today, kept_days, at_most=3)] == [day5]
    assert days_left() == []
