"""Bounded scoring (SQLite and PostgreSQL): scores and uptimes read from the daily rollups plus
a few days of raw probes equal those computed from the whole raw window, for any time of day,
and a day without complete rollups is rolled up first."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import orjson
import pytest
from sqlalchemy import func, null
from sqlmodel import Session, col, delete, select, update

from pipeline.catalogue.entries import read_catalog
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.contract import Uptime
from pipeline.judging import rollup
from pipeline.judging.content_scores import content_scores, store_content_scores
from pipeline.judging.evidence import (
    EPOCH_DAY,
    bounded_scores,
    day_bounds,
    days_between,
    evidence_days,
)
from pipeline.judging.present import Presented, present_each, present_entries
from pipeline.judging.rollup import keep_evidence, keep_missing_evidence, roll_up_days
from pipeline.judging.score import FAILED_PROBE_MS, entry_uptimes, score_entries
from pipeline.operations import score_parts
from pipeline.operations.handover import discard, handed_over, handover_dir
from pipeline.operations.score_parts import hand_over_presented
from pipeline.probing.probe import ProbeResult, failure_class, is_failure
from pipeline.store.history import history_frame, latest_probes, record_probes, span_endpoints
from pipeline.store.tables import (
    EVERY_ENTRY,
    DailyEndpointRollup,
    DailyEntryRollup,
    EntrySpan,
    ProbeRow,
    RolledDay,
    active_entries,
    entry_spans,
    start_run,
)
from tests.conftest import (
    WriteEntry,
    ingested_session,
    listed_endpoint_ids,
    make_entry,
    model_json_of,
)

TODAY = datetime(2026, 11, 23, tzinfo=UTC)
ENTRIES = ("alpha", "beta", "gamma")


# The answers of an `online` look: an auth wall (the service answering) and answers that are
# failures (not found, rate limited, broken), which count neither as up nor as fast.
ONLINE_ANSWERS = ((401, "auth"), (404, "not_found"), (429, "rate_limited"), (503, "server_error"))


def probe(entry_id: str, url: str, at: datetime, rng: random.Random,
          endpoint_id: int) -> list[ProbeResult]:
    """One target's looks in a run (a listed endpoint): mostly answers, some failures, each
    failure confirmed."""
    def look(outcome: str, confirmation: bool = False) -> ProbeResult:
        status, reason = (rng.choice(ONLINE_ANSWERS) if outcome == "online"
                          else ({"live": 200}.get(outcome), None))
        return ProbeResult(
            url=url, entry_id=entry_id, endpoint_id=endpoint_id, checked_at=at,
            outcome=outcome, reason=reason, error_class=None if status else "read_timeout",
            http_status=status,
            total_ms=round(rng.lognormvariate(5, 0.8), 3) if status and rng.random() > 0.05
            else None, dns_ms=None, connect_ms=None, ttfb_ms=None, final_url=url, attempts=1,
            redirects=0, error=None, confirmation=confirmation)

    first = look(rng.choices(["live", "online", "unreachable"], weights=[6, 2, 2])[0])
    if not is_failure(first):
        return [first]
    second = look(rng.choice(["live", first.outcome]), confirmation=True)
    second.failure_class = failure_class(first, second)
    return [first, second]


@pytest.fixture
def history(write_entry: WriteEntry, ingested_store) -> Session:
    for entry_id in ENTRIES:
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    store_content_scores(session)  # as the ingest stage does: Pricing and Depth read back
    rng = random.Random(7)
    listed = {entry_id: listed_endpoint_ids(session, entry_id) for entry_id in ENTRIES}
    for day in days_between((TODAY - timedelta(days=40)).date(), TODAY.date()):
        for hour in sorted(rng.sample(range(24), rng.choice([1, 2, 3]))):
            at = datetime(day.year, day.month, day.day, hour, rng.randrange(60), tzinfo=UTC)
            run = start_run(session, "nightly")
            results = [look for entry_id in ENTRIES[: rng.choice([2, 3])]
                       for n, path in enumerate(("/a", "/b"))
                       for look in probe(entry_id, f"https://{entry_id}.example.com{path}", at,
                                         rng, listed[entry_id][n])]
            record_probes(session, run, results)
    roll_up_days(session, days_between((TODAY - timedelta(days=35)).date(), TODAY.date()))
    return session


def from_the_whole_window(session: Session, contents: dict, as_of: datetime):
    raw = history_frame(session, since=as_of - timedelta(days=30), until=as_of)
    scores = score_entries(contents, raw, as_of)
    return ({k: v.contract() for k, v in scores.items()},
            {k: v for k, v in entry_uptimes(raw, as_of).items() if k in contents})


def test_rollups_and_a_few_raw_days_give_exactly_the_whole_window(history: Session) -> None:
    contents = {row.id: row.content for row in active_entries(history)}
    for as_of in (TODAY.replace(hour=0, minute=30), TODAY.replace(hour=13, minute=7),
                  TODAY.replace(hour=23, minute=59), TODAY,
                  day_bounds((TODAY - timedelta(days=1)).date())[1]):  # a day's last instant
        expected_scores, expected_uptimes = from_the_whole_window(history, contents, as_of)
        scores, uptimes = bounded_scores(history, content_scores(history), as_of)
        assert {k: v.contract() for k, v in scores.items()} == expected_scores, as_of
        assert uptimes == expected_uptimes, as_of
        assert any(s.latency is not None for s in expected_scores.values())  # real evidence
        assert any(0 < (u["last7d"] or 0) < 1 for u in expected_uptimes.values())
        for uptime in uptimes.values():  # each the model's JSON, byte for byte, without it
            assert orjson.dumps(uptime) == model_json_of(Uptime, uptime)


def answers(entry_id: str, at: datetime, status: int, reason: str | None,
            endpoint_id: int, path: str = "/forecast",
            host: str | None = None) -> list[ProbeResult]:
    """A run's looks at an entry's endpoint (at `path`, on `host`, else the entry's own)
    answering `status` (`reason`) in 40 ms: a failure is looked at again, and answered the
    same."""
    def look(confirmation: bool) -> ProbeResult:
        url = f"https://{host or f'{entry_id}.example.com'}{path}"
        return ProbeResult(
            url=url, entry_id=entry_id, endpoint_id=endpoint_id, checked_at=at,
            outcome="live" if status == 200 else "online",
            reason=reason, error_class=None, http_status=status, total_ms=40.0, dns_ms=None,
            connect_ms=None, ttfb_ms=None, final_url=url, attempts=1, redirects=0, error=None,
            confirmation=confirmation)

    first = look(False)
    if not is_failure(first):
        return [first]
    second = look(True)
    second.failure_class = failure_class(first, second)
    return [first, second]


def probed_nightly(session: Session, first: date, last: date,
                   looks: Callable[[datetime], list[ProbeResult]]) -> None:
    """A trusted run a night at 03:00 from `first` to `last`, storing `looks(at)` of each."""
    for day in days_between(first, last):
        at = datetime.combine(day, datetime.min.time(), tzinfo=UTC).replace(hour=3)
        record_probes(session, start_run(session, "nightly"), looks(at))


def test_an_api_answering_only_failures_is_neither_up_nor_fast(
    write_entry: WriteEntry, ingested_store,
) -> None:
    """An API whose every probe is a confirmed 404 (or 429, or 5xx) answered fast is down:
    uptime 0 and Latency 0 (its failed probes count as slower than any threshold), from the
    raw probes and from the rollups alike; one asking for a key (401) is up, and fast. The
    rollups count the successful probes apart."""
    failing = {"gone": (404, "not_found"), "throttled": (429, "rate_limited"),
               "broken": (503, "server_error")}
    for entry_id in (*failing, "walled"):
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    store_content_scores(session)
    probed_nightly(session, (TODAY - timedelta(days=12)).date(), TODAY.date(), lambda at: [
        look for entry_id, (status, reason) in (*failing.items(), ("walled", (401, "auth")))
        for look in answers(entry_id, at, status, reason,
                            listed_endpoint_ids(session, entry_id)[0])])
    roll_up_days(session, days_between((TODAY - timedelta(days=12)).date(),
                                       (TODAY - timedelta(days=1)).date()))
    contents = {row.id: row.content for row in active_entries(session)}
    for as_of in (TODAY.replace(hour=12), day_bounds((TODAY - timedelta(days=1)).date())[1]):
        expected_scores, expected_uptimes = from_the_whole_window(session, contents, as_of)
        scores, uptimes = bounded_scores(session, content_scores(session), as_of)
        assert {k: v.contract() for k, v in scores.items()} == expected_scores, as_of
        assert uptimes == expected_uptimes, as_of
        days = 13 if as_of.date() == TODAY.date() else 12  # a probe a day, from 12 days back
        for entry_id in failing:
            assert uptimes[entry_id] == {
                "last1d": 0.0, "last7d": 0.0, "last30d": 0.0,
                "evidence": {"last1d": {"probes": 1, "succeeded": 0, "days": 1},
                             "last7d": {"probes": 7, "succeeded": 0, "days": 7},
                             "last30d": {"probes": days, "succeeded": 0, "days": days}}}
            latency = scores[entry_id].latency
            assert latency.value == 0 and not scores[entry_id].provisional, entry_id
            assert latency.evidence["last30d"]["samples"] == 0
            assert (latency.evidence["probes"], latency.evidence["failed"]) == (7, 7)
            assert latency.evidence["days"] == 7
            assert latency.reasons[0] == "0 of 7 probes succeeded in 7 days"
        assert {k: uptimes["walled"][k] for k in ("last1d", "last7d", "last30d")} == {
            "last1d": 1.0, "last7d": 1.0, "last30d": 1.0}
        assert uptimes["walled"]["evidence"]["last30d"] == {"probes": days, "succeeded": days,
                                                            "days": days}
        assert scores["walled"].latency.value == 100  # a fast 401 is fast
    gone = session.get(DailyEntryRollup, ((TODAY - timedelta(days=2)).date(), "gone"))
    assert (gone.probes, gone.responses, gone.successes, gone.timed_ms, gone.p50_ms) == (
        1, 1, 0, [], None)
    walled = session.get(DailyEntryRollup, ((TODAY - timedelta(days=2)).date(), "walled"))
    assert (walled.probes, walled.successes, walled.timed_ms) == (1, 1, [40.0])
    # the entry page's daily trend draws the same uptime: no day of the 404s is up
    trends = rollup.entry_trends(session, (TODAY - timedelta(days=1)).date())
    assert {day[1:] for day in trends["gone"]} == {(1, 0, None)}  # (ordinal, probes, …)
    assert {day[1:] for day in trends["walled"]} == {(1, 1, 40.0)}


# An entry's endpoints: a path it keeps listing, and one its provider retired (answering 404).
LISTED_AND_RETIRED = [{"method": "GET", "path": "/forecast", "description": "Forecast."},
                      {"method": "GET", "path": "/retired", "description": "Gone since."}]


def listed_and_retired(session: Session, at: datetime,
                       retired_only: bool = False) -> list[ProbeResult]:
    """A run's looks at both endpoints of "pruned" and "listing" (`LISTED_AND_RETIRED`):
    /forecast answering 200, /retired 404; at /retired alone with `retired_only`."""
    return [look for entry_id in ("pruned", "listing")
            for (path, status, reason), endpoint_id in zip(
                (("/forecast", 200, None), ("/retired", 404, "not_found")),
                listed_endpoint_ids(session, entry_id), strict=True)
            if path == "/retired" or not retired_only
            for look in answers(entry_id, at, status, reason, endpoint_id, path)]


def test_the_probes_of_an_endpoint_no_longer_listed_count_no_more(
    write_entry: WriteEntry, ingested_store,
) -> None:
    """An entry that drops an endpoint whose path was retired (it answered 404 every night) is
    scored on the endpoints it lists: the 404s of the one it dropped lower neither its uptime
    nor its Latency, from the day it is dropped, whether its days are read from their rollups
    or raw. Its probes stay stored as history; an entry listing such an endpoint still pays
    for its 404s."""
    for entry_id in ("pruned", "listing"):
        write_entry(make_entry(id=entry_id, endpoints=LISTED_AND_RETIRED))
    session = ingested_store()
    store_content_scores(session)
    probed_nightly(session, (TODAY - timedelta(days=12)).date(), TODAY.date(),
                   lambda at: listed_and_retired(session, at))
    roll_up_days(session, days_between((TODAY - timedelta(days=12)).date(),
                                       (TODAY - timedelta(days=1)).date()))
    stored = session.exec(select(func.count()).select_from(ProbeRow)).one()
    write_entry(make_entry(id="pruned", endpoints=LISTED_AND_RETIRED[:1]))
    session = ingested_store()  # the curator's edit ingested: /retired is no longer listed
    store_content_scores(session)
    for as_of in (TODAY.replace(hour=12), day_bounds((TODAY - timedelta(days=1)).date())[1]):
        scores, uptimes = bounded_scores(session, content_scores(session), as_of)
        days = 13 if as_of.date() == TODAY.date() else 12
        assert uptimes["pruned"]["last7d"] == uptimes["pruned"]["last30d"] == 1.0, as_of
        assert uptimes["pruned"]["evidence"]["last30d"] == {
            "probes": days, "succeeded": days, "days": days}
        latency = scores["pruned"].latency
        assert (latency.value, latency.evidence["probes"], latency.evidence["failed"]) == (
            100, 7, 0), as_of
        assert uptimes["listing"]["last7d"] == 0.5  # still listed: its 404s count
        assert scores["listing"].latency.evidence["failed"] == 7
    assert session.exec(select(func.count()).select_from(ProbeRow)).one() == stored


def test_the_trends_leave_out_the_days_of_an_endpoint_no_longer_listed(
    write_entry: WriteEntry, ingested_store,
) -> None:
    """The page's daily trend of an entry that drops an endpoint whose path was retired (it
    answered 404 every night) draws the days of the endpoints it lists, as its uptime and
    score count them: each day is its listed endpoint's alone, counted as the rollup counts
    it, and a day when only the dropped one was probed has no figures. An entry still listing
    such an endpoint keeps its days as rolled up."""
    for entry_id in ("pruned", "listing"):
        write_entry(make_entry(id=entry_id, endpoints=LISTED_AND_RETIRED))
    session = ingested_store()
    store_content_scores(session)
    first, last = (TODAY - timedelta(days=6)).date(), (TODAY - timedelta(days=1)).date()
    lone = (TODAY - timedelta(days=3)).date()  # only /retired was probed that night
    probed_nightly(session, first, last,
                   lambda at: listed_and_retired(session, at, retired_only=at.date() == lone))
    roll_up_days(session, days_between(first, last))
    before = rollup.entry_trends(session, last)
    assert {day[1:] for day in before["pruned"]} == {(2, 1, 40.0), (1, 0, None)}
    write_entry(make_entry(id="pruned", endpoints=LISTED_AND_RETIRED[:1]))
    session = ingested_store()  # the curator's edit ingested: /retired is no longer listed
    trends = rollup.entry_trends(session, last)
    forecast = {row.day: (row.probes, row.successes, row.p50_ms) for row in session.exec(
        select(DailyEndpointRollup).where(DailyEndpointRollup.entry_id == "pruned",
                                          col(DailyEndpointRollup.url).endswith("/forecast")))}
    assert trends["pruned"] == [(day.toordinal(), *forecast.get(day, (0, 0, None)))
                                for day in days_between(first, last)]
    assert {day[1:] for day in trends["pruned"]} == {(1, 1, 40.0), (0, 0, None)}
    assert trends["pruned"][(lone - first).days][1:] == (0, 0, None)
    assert trends["listing"] == before["listing"] == [
        (row.day.toordinal(), row.probes, row.successes, row.p50_ms)
        for row in session.exec(select(DailyEntryRollup).where(
            DailyEntryRollup.entry_id == "listing").order_by(col(DailyEntryRollup.day)))]
    assert {day[1:] for day in trends["listing"]} == {(2, 1, 40.0), (1, 0, None)}


# A base address moved: the old host answering 404 up to the move, the new one 200 after.
OLD_ADDRESS, NEW_ADDRESS = "api.old.example", "api.new.example"
MOVED_AT = (TODAY - timedelta(days=6)).replace(hour=12)  # after that night's run at 03:00


def probed_around_a_move(session: Session, data_dir: Path, write_entry: WriteEntry) -> None:
    """"moving" and "dark" at the old address and "staying" at its own, each answering 404
    every night from 12 days back to 6 days back, then "moving" and "dark" moved to the new
    address at `MOVED_AT` (ingested then), after which "moving" and "staying" answer 200 (at
    15:00 that day, then every night to today) and "dark" is probed no more. "unprobed" is
    never probed. The days before the move are rolled up before it, the rest after."""
    def looks(at: datetime) -> list[ProbeResult]:
        before = at < MOVED_AT
        hosts = {"moving": OLD_ADDRESS if before else NEW_ADDRESS, "staying": None,
                 **({"dark": OLD_ADDRESS} if before else {})}
        return [look for entry_id, host in hosts.items()
                for look in answers(entry_id, at, 404 if before else 200,
                                    "not_found" if before else None,
                                    listed_endpoint_ids(session, entry_id)[0], host=host)]

    first, moved = (TODAY - timedelta(days=12)).date(), MOVED_AT.date()
    probed_nightly(session, first, moved, looks)
    roll_up_days(session, days_between(first, moved - timedelta(days=1)))
    for entry_id in ("moving", "dark"):
        write_entry(make_entry(id=entry_id, baseUrl=f"https://{NEW_ADDRESS}",
                               sampleRequest=f'curl "https://{NEW_ADDRESS}/forecast"'))
    entries = data_dir / "entries"
    assert ingest_catalog(session, read_catalog([entries], entries),
                          now=MOVED_AT).updated == ["dark", "moving"]
    store_content_scores(session)
    record_probes(session, start_run(session, "nightly"), looks(MOVED_AT.replace(hour=15)))
    probed_nightly(session, moved + timedelta(days=1), TODAY.date(), looks)
    roll_up_days(session, days_between(moved, (TODAY - timedelta(days=1)).date()))


def test_the_probes_of_a_base_address_moved_from_count_no_more(
    write_entry: WriteEntry, ingested_store, data_dir: Path,
) -> None:
    """An entry whose base address moved (the old host answering 404 every night) is scored
    on the probes of the address it lists now: those checked before the move lower neither
    its uptime nor its Latency, whether their days are read from their rollups or raw, for
    the 7-day and 30-day windows alike. One that moved and was not probed since is as one
    never probed. An entry that never moved still pays for its 404s; every probe stays
    stored as history."""
    for entry_id in ("moving", "staying", "dark", "unprobed"):
        write_entry(make_entry(id=entry_id, baseUrl=f"https://{OLD_ADDRESS}",
                               sampleRequest=f'curl "https://{OLD_ADDRESS}/forecast"'))
    session = ingested_store()
    probed_around_a_move(session, data_dir, write_entry)
    stored = session.exec(select(func.count()).select_from(ProbeRow)).one()
    for as_of in (TODAY.replace(hour=12), day_bounds((TODAY - timedelta(days=1)).date())[1]):
        scores, uptimes = bounded_scores(session, content_scores(session), as_of)
        after = 7 if as_of.date() == TODAY.date() else 6  # at 15:00 on the move's day, nightly
        assert uptimes["moving"]["last7d"] == uptimes["moving"]["last30d"] == 1.0, as_of
        assert uptimes["moving"]["evidence"]["last7d"] == uptimes["moving"]["evidence"][
            "last30d"] == {"probes": after, "succeeded": after, "days": after}, as_of
        latency = scores["moving"].latency
        assert (latency.value, latency.evidence["probes"], latency.evidence["failed"]) == (
            100, after, 0), as_of
        assert uptimes["staying"]["evidence"]["last30d"] == {  # 7 nights of 404s before
            "probes": 7 + after, "succeeded": after, "days": 7 + after - 1}, as_of
        assert scores["staying"].latency.evidence["failed"] > 0
        assert "dark" not in uptimes and "unprobed" not in uptimes  # uptime null
        assert scores["dark"].latency == scores["unprobed"].latency, as_of
        assert scores["dark"].latency.value is None
        assert scores["dark"].latency.evidence["probes"] == 0
    assert session.exec(select(func.count()).select_from(ProbeRow)).one() == stored


def test_the_trends_leave_out_the_days_of_a_base_address_moved_from(
    write_entry: WriteEntry, ingested_store, data_dir: Path,
) -> None:
    """The page's daily trend of an entry whose base address moved has no figures on the days
    before the move, and the day of the move counts only the probes after it (each day
    counted as the rollup counts it); an entry that never moved keeps its days as rolled
    up."""
    for entry_id in ("moving", "staying", "dark", "unprobed"):
        write_entry(make_entry(id=entry_id, baseUrl=f"https://{OLD_ADDRESS}",
                               sampleRequest=f'curl "https://{OLD_ADDRESS}/forecast"'))
    session = ingested_store()
    probed_around_a_move(session, data_dir, write_entry)
    first, last = (TODAY - timedelta(days=12)).date(), (TODAY - timedelta(days=1)).date()
    trends = rollup.entry_trends(session, last)
    moved = MOVED_AT.date()
    assert trends["moving"] == [(day.toordinal(), *((1, 1, 40.0) if day >= moved
                                                    else (0, 0, None)))
                                for day in days_between(first, last)]
    assert {day[1:] for day in trends["dark"]} == {(0, 0, None)}
    assert trends["staying"] == [
        (row.day.toordinal(), row.probes, row.successes, row.p50_ms)
        for row in session.exec(select(DailyEntryRollup).where(
            DailyEntryRollup.entry_id == "staying").order_by(col(DailyEntryRollup.day)))]
    assert trends["staying"][(moved - first).days][1:] == (2, 1, 40.0)


def test_the_trends_keep_one_object_for_each_day_and_median(
    write_entry: WriteEntry, ingested_store,
) -> None:
    """The pages' trends of every entry are held through the whole site (3,000,000 days at
    100,000 entries with 30 days): each entry's days are read as stored, and a day or median
    that entries share is one object among them, not one each."""
    for entry_id in ("alpha", "beta"):
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    days = [(TODAY - timedelta(days=back)).date() for back in (2, 1)]
    for entry_id in ("alpha", "beta"):
        for day, p50_ms in zip(days, (120.5, None), strict=True):
            session.add(DailyEntryRollup(day=day, entry_id=entry_id, probes=3, successes=2,
                                         p50_ms=p50_ms))
    session.commit()
    trends = rollup.entry_trends(session, days[-1])
    alpha, beta = trends["alpha"], trends["beta"]
    assert alpha == beta == [(days[0].toordinal(), 3, 2, 120.5), (days[1].toordinal(), 3, 2, None)]
    assert alpha[0][0] is beta[0][0] and alpha[1][0] is beta[1][0]
    assert alpha[0][3] is beta[0][3]
    assert dict(trends) == {"alpha": alpha, "beta": beta}


def test_a_complete_days_kept_evidence_is_its_rows_and_follows_a_backfill(
    history: Session,
) -> None:
    """The score stage reads a complete past day from the evidence its `RolledDay` keeps: the
    scores and uptimes it gives are those its rows give. A backfill of some entries of that
    day (a probe added, their rows rolled up again) keeps the day's evidence with them."""
    as_of = TODAY.replace(hour=12)
    past = evidence_days(as_of)[1][2]  # a day every window holds whole
    kept = history.get(RolledDay, past)
    assert kept.evidence is not None and "alpha" in kept.evidence_entries.split(",")
    run = start_run(history, "backfill")
    at = datetime.combine(past, datetime.min.time(), tzinfo=UTC).replace(hour=23)
    record_probes(history, run, probe("alpha", "https://alpha.example.com/a", at,
                                      random.Random(3), listed_endpoint_ids(history, "alpha")[0]))
    before = history.get(RolledDay, past).evidence
    roll_up_days(history, [past], entry_ids={"alpha"})
    history.expire_all()
    assert history.get(RolledDay, past).evidence != before  # alpha's new probe is in it

    def judged_now() -> tuple[dict, dict]:
        scores, uptimes = bounded_scores(history, content_scores(history), as_of)
        return {k: v.json_form() for k, v in scores.items()}, uptimes

    from_kept = judged_now()
    history.exec(update(RolledDay).values(evidence=None, evidence_entries=None))
    history.commit()
    assert judged_now() == from_kept  # every day from its rows
    assert any(score["latency"] is not None for score in from_kept[0].values())


def test_days_rolled_up_before_their_evidence_was_kept_get_it_once(
    history: Session, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store migrated to 0018 keeps no evidence for the days it rolled up before: the rollup
    stage keeps it, once, for the complete days the score stage may read, newest first, as
    rolling them up keeps it. A day before the window or rolled up before it ended is left as
    it is; the scores are the same."""
    today = TODAY.date()
    as_of = TODAY.replace(hour=12)
    evidence_of = {day.day: (day.evidence_entries, day.evidence)
                   for day in history.exec(select(RolledDay))}
    from_kept = bounded_scores(history, content_scores(history), as_of)
    incomplete = today - timedelta(days=4)
    history.exec(update(RolledDay).values(evidence=None, evidence_entries=None))
    history.exec(update(RolledDay).where(col(RolledDay.day) == incomplete).values(
        rolled_at=datetime.combine(incomplete, datetime.min.time(), tzinfo=UTC)))
    history.commit()
    for day in sorted(evidence_of)[::2]:  # every other day kept: both kinds read in turn
        keep_evidence(history, day)
    history.commit()
    scores, uptimes = bounded_scores(history, content_scores(history), as_of)
    assert ({k: v.json_form() for k, v in scores.items()}, uptimes) == (
        {k: v.json_form() for k, v in from_kept[0].items()}, from_kept[1])
    history.exec(update(RolledDay).values(evidence=None, evidence_entries=None))
    history.commit()

    kept = keep_missing_evidence(history, today)
    window = days_between(today - timedelta(days=30), today)
    assert kept == sorted((set(window) & evidence_of.keys()) - {incomplete}, reverse=True)
    assert len(kept) == 30 and min(evidence_of) < kept[-1]  # days before the window exist
    history.expire_all()
    for day in history.exec(select(RolledDay)):
        if day.day in kept:
            assert (day.evidence_entries, day.evidence) == evidence_of[day.day], day.day
        else:
            assert day.evidence is None and day.evidence_entries is None, day.day
    assert keep_missing_evidence(history, today) == []
    scores, uptimes = bounded_scores(history, content_scores(history), as_of)
    assert ({k: v.json_form() for k, v in scores.items()}, uptimes) == (
        {k: v.json_form() for k, v in from_kept[0].items()}, from_kept[1])

    # A day found lacking whose evidence a backfill kept meanwhile keeps the backfill's.
    monkeypatch.setattr(rollup, "complete_days", lambda session, days: {kept[0], kept[1]})
    history.exec(update(RolledDay).where(col(RolledDay.day) == kept[1]).values(
        evidence=None, evidence_entries=None))
    history.exec(update(RolledDay).where(col(RolledDay.day) == kept[0]).values(
        evidence=b"kept by a backfill", evidence_entries="alpha"))
    history.commit()
    assert keep_missing_evidence(history, today) == [kept[1]]
    history.expire_all()
    assert history.get(RolledDay, kept[0]).evidence == b"kept by a backfill"
    assert history.get(RolledDay, kept[1]).evidence == evidence_of[kept[1]][1]


@pytest.mark.parametrize("which", ["rolled", "cut"])
def test_a_day_rolled_up_before_it_ended_is_read_from_its_raw_probes(
    history: Session, which: str,
) -> None:
    """A day whose rollups were made before it ended is read raw whole: a day the windows
    hold whole or leave out, and a day a window starts inside (the day before)."""
    contents = {row.id: row.content for row in active_entries(history)}
    as_of = TODAY.replace(hour=12)
    raw_days, rolled = evidence_days(as_of)
    stale = rolled[3] if which == "rolled" else raw_days[1]
    history.exec(delete(DailyEntryRollup).where(DailyEntryRollup.day == stale))
    history.merge(RolledDay(day=stale, rolled_at=datetime.combine(stale, datetime.min.time(),
                                                                  tzinfo=UTC)))
    history.commit()
    scores, uptimes = bounded_scores(history, content_scores(history), as_of)
    expected_scores, expected_uptimes = from_the_whole_window(history, contents, as_of)
    assert {k: v.contract() for k, v in scores.items()} == expected_scores
    assert uptimes == expected_uptimes
    # read, never written: scoring in several processes at once cannot race
    assert history.exec(select(DailyEntryRollup).where(DailyEntryRollup.day == stale)).all() == []


def test_a_day_a_window_starts_inside_is_read_raw_only_from_that_start(history: Session) -> None:
    """With complete rollups, the probes of a past day before the windows that start inside it
    are never read: removed from the store, the scores stay those of the whole window."""
    contents = {row.id: row.content for row in active_entries(history)}
    as_of = TODAY.replace(hour=13, minute=7)
    expected_scores, expected_uptimes = from_the_whole_window(history, contents, as_of)
    removed = 0
    for past in evidence_days(as_of)[0][1:]:
        first, _ = day_bounds(past)
        start = min(as_of - timedelta(days=n) for n in (1, 7, 30)
                    if first <= as_of - timedelta(days=n))
        removed += history.exec(delete(ProbeRow).where(
            ProbeRow.checked_at >= first, ProbeRow.checked_at < start)).rowcount
    history.commit()
    assert removed > 20  # the three days' probes before their windows start
    scores, uptimes = bounded_scores(history, content_scores(history), as_of)
    assert {k: v.contract() for k, v in scores.items()} == expected_scores
    assert uptimes == expected_uptimes


def test_the_raw_days_and_the_rolled_days_cover_the_window_once() -> None:
    """Every day a window holds any of is read once, raw or from its rollups; raw only where a
    window starts inside the day (and the day of `as_of` itself)."""
    day = TODAY.date()
    for as_of in (TODAY, TODAY.replace(hour=13, minute=7), day_bounds(day)[1]):
        raw, rolled = map(set, evidence_days(as_of))
        assert not raw & rolled, as_of
        inside = {day - timedelta(days=n) for n in range(31)
                  if day_bounds(day - timedelta(days=n))[1] > as_of - timedelta(days=30)}
        assert raw | rolled == inside, as_of
        assert len(raw) <= 4, as_of  # never more raw days, however long the store's history
    assert evidence_days(TODAY.replace(hour=13))[0] == [
        day - timedelta(days=n) for n in (0, 1, 7, 30)]
    # scored as of a day's last instant (as a day's rollup is), the windows start at days'
    # ends: that day alone is read raw, and the day 30 days before it is in no window
    raw, rolled = evidence_days(day_bounds(day)[1])
    assert raw == [day] and rolled == [day - timedelta(days=n) for n in range(1, 30)]


def test_the_entries_presented_span_by_span_are_those_presented_at_once(
    history: Session,
) -> None:
    """Each span reads only its own entries' rows (probes, rollups, endpoints, content scores),
    and what it presents of them is what the whole stage does."""
    as_of = TODAY.replace(hour=13, minute=7)  # raw today, a cut day and rolled days
    whole = present_entries(history, as_of)
    spans = entry_spans(history, 2)
    assert spans == [EntrySpan(None, "beta"), EntrySpan("beta", None)]
    in_spans = [dict(present_each(history, as_of, span=span)) for span in spans]
    assert [sorted(values) for values in in_spans] == [["alpha"], ["beta", "gamma"]]
    assert Presented.gather(v for values in in_spans for v in values.items()) == whole
    assert whole.scores["alpha"]["latency"] is not None and whole.uptimes["gamma"]["last7d"]
    # every reader of a span holds its entries' rows alone
    for span, ids in zip(spans, ([["alpha"], ["beta", "gamma"]]), strict=True):
        scores, uptimes = bounded_scores(history, content_scores(history, span=span), as_of,
                                         span=span)
        assert sorted(scores) == sorted(uptimes) == ids
        assert sorted(content_scores(history, span=span)) == ids
        assert sorted(latest_probes(history, span=span)) == ids
        assert sorted(span_endpoints(history, span).active) == ids
        assert sorted(history_frame(history, span=span)["entry_id"].unique()) == ids


def test_entries_are_cut_into_spans_of_at_least_so_many(
    write_entry: WriteEntry, ingested_store,
) -> None:
    for n in range(10):
        write_entry(make_entry(id=f"api-{n:03d}"))
    store = ingested_store()
    assert entry_spans(store, 3) == [EntrySpan(None, "api-003"), EntrySpan("api-003", "api-006"),
                                     EntrySpan("api-006", None)]
    assert entry_spans(store, 3, smallest=4) == [EntrySpan(None, "api-005"),
                                                 EntrySpan("api-005", None)]
    assert entry_spans(store, 3, smallest=6) == [EVERY_ENTRY]
    assert entry_spans(store, 1) == [EVERY_ENTRY]


def test_a_span_of_a_database_that_sorts_ids_its_own_way_takes_its_own_kept_evidence(
    postgres_server: str, write_entry: WriteEntry, data_dir: Path,
) -> None:
    """On a PostgreSQL database whose collation ignores punctuation, a span's bounds lie in
    the database's order; a day's kept evidence (one text of every entry) is cut into spans
    in that order too, as the day's rows are: each entry in exactly one span."""
    from pipeline.judging.evidence import _rollup_evidence, day_evidence
    from pipeline.store.tables import insert_rows
    from tests.postgres_server import PUNCTUATION_IGNORED, scratch_database

    ids = ["a0-api", "openai", "open-meteo", "zeta"]  # the database's order
    for entry_id in ids:
        write_entry(make_entry(id=entry_id))
    day = TODAY.date() - timedelta(days=1)
    with (
        scratch_database(postgres_server, PUNCTUATION_IGNORED) as url,
        ingested_session(url, data_dir / "entries") as session,
    ):
        insert_rows(session, DailyEntryRollup.__table__, [
            {"day": day, "entry_id": entry_id, "probes": 2, "responses": 1, "live": 1,
             "timed_ms": [float(n)], "state": "live", "percent": 50, "grade": "C",
             "rubric": "r"} for n, entry_id in enumerate(ids)])
        session.commit()
        spans = entry_spans(session, 2)
        assert spans == [EntrySpan(None, "open-meteo"), EntrySpan("open-meteo", None)]

        def read(span: EntrySpan) -> list[str]:
            samples, counts = _rollup_evidence(session, [day], day, span)
            assert sorted(set(samples["entry_id"])) == sorted(counts["entry_id"])
            return sorted(counts["entry_id"])

        from_rows = [read(span) for span in spans]
        assert from_rows == [["a0-api", "openai"], ["open-meteo", "zeta"]]
        session.merge(RolledDay(day=day, rolled_at=TODAY, **day_evidence(session, day)))
        session.commit()
        assert [read(span) for span in spans] == from_rows


def test_the_stage_in_worker_processes_hands_over_the_file_of_one_process(
    history: Session, database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every span in a worker process of its own gives, joined, the very hand-over file one
    process gives; the process that asks presents no span itself (it holds what its caller
    imported: a span's evidence on top made it the stage's largest process); a span that fails
    fails the stage and leaves no file behind."""
    as_of = TODAY.replace(hour=13, minute=7)
    alone = hand_over_presented(database_url, as_of, "", 7, workers=1)

    def here(*_: object, **__: object) -> Iterator[tuple[str, object]]:
        raise AssertionError("a span presented in the process that asked")
        yield  # a generator, as the real one

    monkeypatch.setattr(score_parts, "present_each", here)  # this process's, not a worker's
    in_spans = hand_over_presented(database_url, as_of, "", 7, workers=2, span_entries=1)
    try:
        assert in_spans.read_bytes() == alone.read_bytes()
        with handed_over(in_spans) as values:
            assert sorted(values.states) == list(ENTRIES)
    finally:
        discard(alone)
        discard(in_spans)
    before = set(handover_dir().iterdir())
    # A rolled-up day read from its rows, one of which (gamma's, in the second span) holds a
    # timed response that is no number: that span's worker fails, the first's file is removed.
    day = (TODAY - timedelta(days=3)).date()
    history.execute(update(RolledDay).where(col(RolledDay.day) == day).values(
        evidence=None, evidence_entries=None))
    history.execute(update(DailyEntryRollup).where(
        col(DailyEntryRollup.day) == day, col(DailyEntryRollup.entry_id) == "gamma").values(
        timed_ms=["slow"], probes=1))
    history.commit()
    with pytest.raises(ValueError, match="float"):
        hand_over_presented(database_url, as_of, "", 7, workers=2, span_entries=1)
    assert set(handover_dir().iterdir()) == before  # the worker's file is gone too


def test_a_days_timed_responses_are_told_apart_row_by_row_and_parsed_back_exactly() -> None:
    """A day's rows' JSON lists, written one after the other as the database joins them (with
    or without a space after each comma, empty, or JSON null): the numbers come back as the
    floats those lists name, in order, with how many each row holds."""
    from pipeline.judging.evidence import _day_timed

    rng = random.Random(3)
    rows = [[round(rng.lognormvariate(5, 1.2), rng.choice((0, 1, 3))) for _ in range(n)]
            for n in (3, 0, 1, 7, 0, 2, 1)]
    texts = [json.dumps(row, separators=(", " if n % 2 else ",", ":"))
             for n, row in enumerate(rows)]
    texts[4] = "null"
    values, sizes = _day_timed("".join([*texts, "[100,0.1,1e-05]"]))
    assert sizes.tolist() == [*map(len, rows), 3]
    assert values.tolist() == [float(v) for row in rows for v in row] + [100.0, 0.1, 1e-05]
    assert values.dtype == float
    assert _day_timed("[][]null")[1].tolist() == [0, 0, 0]
    assert _day_timed("")[1].tolist() == []
    for broken in ("[1,2][3", "[1,,2]", '["a"]'):
        with pytest.raises(ValueError):
            _day_timed(broken)


def test_the_rollups_of_days_with_other_entries_are_summed_for_their_own_entries(
    write_entry: WriteEntry, ingested_store,
) -> None:
    """Each day's rows are joined into one text per column in the database; the rows of days
    holding other entries (or a row with no timed responses, or none stored as the rollups
    were before they kept them) still count for their own entry and window."""
    from pipeline.judging.evidence import _rollup_evidence, day_evidence
    from pipeline.store.tables import RolledDay, insert_rows

    for entry_id in ENTRIES:
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    day = TODAY.date()
    rows = {  # days back: {entry: (probes, successes, timed)}
        1: {"alpha": (3, 2, [120.5, 80.0]), "gamma": (2, 1, [40.0]), "beta": (1, 0, None)},
        3: {"beta": (4, 0, []), "gamma": (1, 1, None), "alpha": (0, 0, None)},
        9: {"alpha": (2, 2, [10.0, 20.0]), "beta": (5, 3, [7.0, 9.0, 11.0])},
        12: {"gamma": (6, 6, [1.0] * 6)},  # a day not asked for
    }
    insert_rows(session, DailyEntryRollup.__table__, [
        {"day": day - timedelta(days=back), "entry_id": entry_id, "probes": probes,
         "responses": probes, "successes": successes, "live": successes, "timed_ms": timed,
         "state": "live", "percent": 50, "grade": "C", "rubric": "r"}
        for back, day_rows in rows.items() for entry_id, (probes, successes, timed)
        in day_rows.items()])  # None as JSON null
    session.exec(update(DailyEntryRollup).where(  # and as none stored at all
        col(DailyEntryRollup.day) == day - timedelta(days=3),
        col(DailyEntryRollup.entry_id) == "gamma").values(timed_ms=null()))
    session.commit()
    assert session.exec(select(func.count()).where(  # both kinds of none are there
        col(DailyEntryRollup.timed_ms).is_(None))).one() == 1
    asked = [day - timedelta(days=back) for back in (1, 3, 9)]
    # Read from the rows; then with one day's evidence kept with the day (and the others read
    # from their rows), then every day's: the same evidence each time.
    for kept in ((), (3,), (1, 3, 9, 12)):
        for back in kept:
            session.merge(RolledDay(day=day - timedelta(days=back), rolled_at=TODAY,
                                    **day_evidence(session, day - timedelta(days=back))))
        session.commit()
        samples, counts = _rollup_evidence(session, asked, day - timedelta(days=6), EVERY_ENTRY)
        # each timed successful probe, and each failed probe timed as a failure is, on its day
        assert sorted(map(tuple, samples.to_numpy().tolist())) == sorted(
            (entry_id, ms, failed, (day - EPOCH_DAY).days - back, back <= 6, True)
            for back in (1, 3, 9) for entry_id, (probes, successes, timed) in rows[back].items()
            for ms, failed in [*((ms, False) for ms in timed or ()),
                               *[(float(FAILED_PROBE_MS), True)] * (probes - successes)]), kept
        # days: those with probes (alpha's row of none, 3 days back, is no day of probes)
        assert sorted(counts.to_dict("records"), key=lambda row: row["entry_id"]) == [
            {"entry_id": "alpha", "probes_1d": 0, "succeeded_1d": 0, "days_1d": 0,
             "probes_7d": 3, "succeeded_7d": 2, "days_7d": 1,
             "probes_30d": 5, "succeeded_30d": 4, "days_30d": 2},
            {"entry_id": "beta", "probes_1d": 0, "succeeded_1d": 0, "days_1d": 0,
             "probes_7d": 5, "succeeded_7d": 0, "days_7d": 2,
             "probes_30d": 10, "succeeded_30d": 3, "days_30d": 3},
            {"entry_id": "gamma", "probes_1d": 0, "succeeded_1d": 0, "days_1d": 0,
             "probes_7d": 3, "succeeded_7d": 2, "days_7d": 2,
             "probes_30d": 3, "succeeded_30d": 2, "days_30d": 2},
        ], kept
        beta_only = EntrySpan("beta", "gamma")
        assert set(_rollup_evidence(session, asked, day, beta_only)[1]["entry_id"]) == {"beta"}
        # a day kept whole gives the entries asked for alone, their samples alone
        wanted = _rollup_evidence(session, asked, day, EVERY_ENTRY, wanted={"gamma"})
        assert set(wanted[1]["entry_id"]) == set(wanted[0]["entry_id"]) == {"gamma"}
        assert wanted[0]["failed"].tolist() == [False, True]  # its 40 ms and its failed probe
        empty = _rollup_evidence(session, [day], day, EVERY_ENTRY)
        assert empty[0].empty and empty[1].empty
        assert list(empty[0].columns) == ["entry_id", "total_ms", "failed", "day", "in_7d",
                                          "in_30d"]
    assert session.get(RolledDay, day - timedelta(days=12)).evidence_entries == "gamma"


def test_a_days_kept_evidence_is_read_back_exactly_and_refused_cut_short() -> None:
    from pipeline.judging.evidence import DayEvidence

    kept = DayEvidence("alpha,beta", np.array([3, 1]), np.array([2, 0]),
                       np.array([120.5, 0.1 + 0.2]), np.array([2, 0]))
    packed = kept.packed()
    again = DayEvidence.unpacked(packed["evidence_entries"], packed["evidence"])
    assert again.entries == "alpha,beta" and again.row_count() == 2
    for name in ("probes", "successes", "timed", "sizes"):
        assert getattr(again, name).tolist() == getattr(kept, name).tolist(), name
    nothing = DayEvidence("", *(np.empty(0) for _ in range(4))).packed()
    assert DayEvidence.unpacked("", nothing["evidence"]).row_count() == 0
    for broken in (packed["evidence"][:-8], packed["evidence"] + b"\0" * 8):
        with pytest.raises(ValueError, match="cut short or too long"):
            DayEvidence.unpacked("alpha,beta", broken)
    miscounted = kept._replace(sizes=np.array([1, 0]), timed=np.array([1.0, 2.0])).packed()
    with pytest.raises(ValueError, match="other timed responses than its rows"):
        DayEvidence.unpacked("alpha,beta", miscounted["evidence"])


def test_samples_joined_by_code_give_latency_the_figures_they_give_by_name() -> None:
    """The day's samples (entries by name) and the rollups' (by code, of other entries too),
    joined: the same samples in the same order, and Latency's figures equal those of the
    samples named one by one, for entries in either part, in neither, and not scored."""
    import pandas as pd

    from pipeline.judging.evidence import joined_samples
    from pipeline.judging.score import _latency_stats

    rng = random.Random(5)
    def part(names: list[str]) -> pd.DataFrame:
        failed = [rng.random() < 0.2 for _ in names]
        return pd.DataFrame({"entry_id": names,
                             "total_ms": [float(FAILED_PROBE_MS) if no else
                                          round(rng.lognormvariate(5, 1), 3) for no in failed],
                             "failed": failed, "day": [rng.randrange(20_000, 20_007)
                                                       for _ in names],
                             "in_7d": [rng.random() < 0.3 for _ in names], "in_30d": True}
                            ).astype({"day": np.int32})

    day = part([rng.choice(["alpha", "beta", "unscored"]) for _ in range(40)])
    rolled = part([rng.choice(["beta", "gamma"]) for _ in range(300)])
    rolled["entry_id"] = pd.Categorical(rolled["entry_id"], categories=["gamma", "beta"])
    joined = joined_samples(day, rolled)
    assert isinstance(joined["entry_id"].dtype, pd.CategoricalDtype)
    by_name = pd.concat([day, rolled.astype({"entry_id": object})], ignore_index=True)
    assert joined.astype({"entry_id": object}).equals(by_name)

    def figures(samples: pd.DataFrame) -> dict:
        return {name: [None if value != value else value for value in values]
                for name, values in _latency_stats(samples, ["alpha", "beta", "delta",
                                                             "gamma"]).items()}
    assert figures(joined) == figures(by_name)
    assert figures(joined)["samples_30d"][1] > 0 and figures(joined)["samples_30d"][2] == 0
    assert joined_samples(day.iloc[:0]).empty
