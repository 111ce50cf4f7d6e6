"""Probe history in the store (SQLite and PostgreSQL): rows only added, status from the latest
trusted run, suspect runs."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import orjson
import pandas as pd
import pytest
from pydantic import AwareDatetime, TypeAdapter
from sqlalchemy import event, func, make_url
from sqlmodel import Session, col, select

from pipeline.catalogue.entries import load_categories, read_catalog
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.contract import ONLINE_NOTE, EndpointStatus, Status
from pipeline.judging.changes import record_lifecycles
from pipeline.judging.content_scores import content_scores
from pipeline.judging.evidence import bounded_scores
from pipeline.judging.health import LifecycleRules, RunVerdict, run_verdict
from pipeline.judging.present import checked_state, present_entries
from pipeline.judging.rollup import roll_up_days
from pipeline.probing.probe import Prober, ProbeResult, ProbeSettings, failure_class
from pipeline.release.layout import FULL_DATASET, category_file, entry_document, entry_markdown
from pipeline.release.pages import entry_page
from pipeline.release.publish import publish_release
from pipeline.store.history import (
    PROBE_COLUMNS,
    RECENT_RUNS,
    ProbeTally,
    add_probes,
    close_probe_run,
    day_probes,
    history_frame,
    latest_probes,
    latest_runs,
    latest_states,
    latest_statuses,
    network_suspect,
    plan_targets,
    probed_entries,
    record_probes,
    status_form,
)
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EndpointRow,
    EntryLifecycle,
    PipelineRun,
    ProbeRow,
    as_utc,
    engine_for,
    finish_run,
    json_time,
    session_scope,
    start_run,
    utc_text,
)
from tests.conftest import REPO, WriteEntry, hold_the_write_lock, make_entry, model_json_of
from tests.fake_internet import FakeServer

T0 = datetime(2026, 11, 20, 3, 0, tzinfo=UTC)


def result(url: str, outcome: str, status: int | None = None, ms: float | None = 100.0,
           entry: str | None = "example-weather", endpoint: int | None = None,
           error_class: str | None = None, at: datetime = T0) -> ProbeResult:
    return ProbeResult(url=url, entry_id=entry, endpoint_id=endpoint, checked_at=at,
                       outcome=outcome, reason=None, error_class=error_class,
                       http_status=status, total_ms=ms, dns_ms=1.0, connect_ms=2.0,
                       ttfb_ms=ms, final_url=url, attempts=1, redirects=0, error=None)


@pytest.fixture
def session(write_entry: WriteEntry, ingested_store):
    endpoints = [
        {"method": "GET", "path": "/forecast", "description": "Forecast."},
        {"method": "POST", "path": "/alerts", "description": "Create an alert."},
        {"method": "GET", "path": "/stations/{id}", "description": "One station."},
        {"method": "GET", "path": "/current", "description": "Now."},
    ]
    write_entry(make_entry(endpoints=endpoints))
    write_entry(make_entry(id="open-api", category="maps", baseUrl="https://open.example.org",
                           sampleRequest='curl -X POST "https://open.example.org/a"',
                           endpoints=[{"method": "POST", "path": "/a", "description": "A."}]))
    return ingested_store()


def test_targets_are_get_endpoints_without_placeholders_or_the_base_url(session) -> None:
    targets = plan_targets(session)
    urls = [(t.entry_id, t.url) for t in targets]
    assert urls == [("example-weather", "https://api.example.com/v1/forecast"),
                    ("example-weather", "https://api.example.com/v1/current"),
                    ("open-api", "https://open.example.org")]
    notes = {row.path: row.probe_note for row in session.exec(select(EndpointRow))}
    assert notes["/alerts"] == "method is POST"
    assert notes["/stations/{id}"] == "path has placeholders"
    assert notes["/forecast"] is None

    # A note that no longer holds (written by an earlier plan) is cleared; the others stay.
    forecast = session.exec(select(EndpointRow).where(EndpointRow.path == "/forecast")).one()
    forecast.probe_note = "method is POST"
    session.add(forecast)
    session.commit()
    assert plan_targets(session) == targets
    session.expire_all()  # the plan writes its notes past the objects this session holds
    assert {row.path: row.probe_note for row in session.exec(select(EndpointRow))} == notes


def handed_over_status(session) -> Status:
    """The entry's status as the score stage hands it over (`status_form`): what its model
    writes, byte for byte, and the status `latest_statuses` reads."""
    form = status_form(latest_probes(session)["example-weather"])
    assert orjson.dumps(form) == model_json_of(Status, form)
    assert Status.model_validate(form) == latest_statuses(session)["example-weather"]
    return Status.model_validate(form)


def test_status_is_live_when_any_target_returned_200(session) -> None:
    run = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    record_probes(session, run, [
        result(forecast.url, "online", 401, 80, endpoint=forecast.endpoint_id),
        result(current.url, "live", 200, 120.4, endpoint=current.endpoint_id),
    ])
    status = handed_over_status(session)
    assert (status.state, status.http_status, status.response_time_ms) == ("live", 200, 120)
    assert status.url == current.url and status.checked_at == T0 and status.note is None


def test_status_is_online_with_the_note_when_no_target_returned_200(session) -> None:
    run = start_run(session, "nightly")
    record_probes(session, run, [
        result("https://api.example.com/v1/forecast", "unreachable", None, None,
               error_class="read_timeout"),
        result("https://api.example.com/v1/current", "online", 403, 90),
    ])
    status = handed_over_status(session)
    assert (status.state, status.http_status, status.note) == ("online", 403, ONLINE_NOTE)


def test_status_is_unreachable_without_any_response_and_latest_run_wins(session) -> None:
    first = start_run(session, "nightly")
    record_probes(session, first, [result("https://api.example.com/v1/forecast", "live", 200)])
    second = start_run(session, "nightly")
    record_probes(session, second, [
        result("https://api.example.com/v1/forecast", "unreachable", None, None,
               error_class="refused", at=T0 + timedelta(days=1))])
    status = handed_over_status(session)
    assert status.state == "unreachable" and status.http_status is None
    assert status.response_time_ms is None and status.checked_at == T0 + timedelta(days=1)
    assert len(session.exec(select(ProbeRow)).all()) == 2  # nothing overwritten


def test_targets_of_a_host_given_up_on_are_no_probes_and_keep_the_last_evidence(
        session) -> None:
    """A run that gave up on a host stores no row for the targets it did not send: the entry
    keeps the status of the run that probed it, and its history (uptime, latency) gains no
    failure and no sample; the run counts them apart from its probes; an endpoint the latest
    run did not probe says why."""
    from pipeline.probing.probe import not_probed
    from pipeline.store.history import entry_endpoint_statuses, span_endpoints

    first = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    record_probes(session, first, [
        result(forecast.url, "live", 200, endpoint=forecast.endpoint_id),
        result(current.url, "live", 200, endpoint=current.endpoint_id),
    ])
    second = start_run(session, "nightly")
    plan_targets(session)
    reason = "not probed this run: its host failed 10 times in a row"
    given_up = [replace(not_probed(target.url, reason), entry_id=target.entry_id,
                        endpoint_id=target.endpoint_id) for target in (forecast, current)]
    assert record_probes(session, second, given_up) == 0
    tally = ProbeTally.of(given_up)
    assert (tally.probes, tally.outcomes) == (0, {"unchecked": 2})
    assert second.probes == 0 and second.probes_failed == 0
    assert session.exec(select(func.count()).select_from(ProbeRow)).one() == 2
    status = handed_over_status(session)
    assert (status.state, status.checked_at) == ("live", T0)
    assert set(history_frame(session)["run_id"]) == {first.id}
    # A later run that probed one of them and gave up on the other: its note tells why.
    third = start_run(session, "nightly")
    plan_targets(session)
    record_probes(session, third, [
        result(forecast.url, "live", 200, endpoint=forecast.endpoint_id,
               at=T0 + timedelta(days=2)), given_up[1]])
    statuses = entry_endpoint_statuses(span_endpoints(session).active["example-weather"],
                                       latest_probes(session)["example-weather"])
    assert statuses[0]["state"] == "live"
    assert (statuses[3]["state"], statuses[3]["note"]) == ("unchecked", reason)
    plan_targets(session)  # the next run's plan clears the note
    assert session.get(EndpointRow, current.endpoint_id).probe_note is None


def test_a_probe_whose_redirect_was_not_followed_is_stored_and_its_endpoint_says_why(
        session) -> None:
    """A target whose own host answered with a redirect to a host the run gave up on is a
    probe, stored and counted as one, but no answer of the API: its endpoint's published
    status is unchecked, as a target not sent, with the note saying why the redirect was not
    followed; the next run's plan clears it."""
    from pipeline.store.history import entry_endpoint_statuses, span_endpoints

    run = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    note = ("its redirect to www.example.com was not followed this run: that host failed 10 "
            "times in a row")
    redirected = replace(result(current.url, "online", 302, endpoint=current.endpoint_id),
                         reason="redirect", error=note, note=note)
    assert record_probes(session, run, [
        result(forecast.url, "live", 200, endpoint=forecast.endpoint_id), redirected]) == 2
    assert session.exec(select(func.count()).select_from(ProbeRow)).one() == 2
    statuses = entry_endpoint_statuses(span_endpoints(session).active["example-weather"],
                                       latest_probes(session)["example-weather"])
    assert statuses[0]["note"] is None
    assert EndpointStatus.model_validate(statuses[3]) == EndpointStatus(
        state="unchecked", note=note)
    plan_targets(session)  # the next run's plan clears the note
    assert session.get(EndpointRow, current.endpoint_id).probe_note is None


def test_an_endpoint_status_shows_no_note_a_later_untrusted_run_left_of_another_probe(
        session) -> None:
    """An endpoint's probe that ended on a redirect of its own (a 302 to a sign-in page) in
    the latest trusted run shows no note, though a later run that does not count (suspect,
    or ended before its judgement) gave its host up and noted so: that note is of no probe
    shown. The note of a redirect not followed is shown beside that probe alone."""
    from pipeline.probing.probe import not_probed
    from pipeline.store.history import add_probes, entry_endpoint_statuses, span_endpoints

    trusted = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    to_sign_in = replace(result(current.url, "online", 302, endpoint=current.endpoint_id),
                         reason="redirect", error="redirected to an HTML page at another path")
    record_probes(session, trusted, [
        result(forecast.url, "live", 200, endpoint=forecast.endpoint_id), to_sign_in])
    later = start_run(session, "nightly")  # never judged: its probes count nowhere
    plan_targets(session)
    reason = "not probed this run: its host failed 10 times in a row"
    add_probes(session, later.id, [replace(not_probed(target.url, reason),
                                           entry_id=target.entry_id,
                                           endpoint_id=target.endpoint_id)
                                   for target in (forecast, current)])
    session.commit()
    assert session.get(EndpointRow, current.endpoint_id).probe_note == reason
    statuses = entry_endpoint_statuses(span_endpoints(session).active["example-weather"],
                                       latest_probes(session)["example-weather"])
    assert (statuses[3]["reason"], statuses[3]["httpStatus"]) == ("redirect", 302)
    assert statuses[3]["note"] is None


def test_an_endpoint_status_shows_the_note_of_its_own_probe_alone(session) -> None:
    """The note beside an endpoint's status belongs to the probe whose status it is: a later
    run that does not count (never judged), whose redirect to a host it gave up on was not
    followed, leaves no note beside the trusted run's own 302 (one without a Location); and a
    trusted probe whose redirect was not followed keeps its note, though a later run planned
    the endpoint (clearing what was noted on it) and probed it live."""
    from pipeline.store.history import add_probes, entry_endpoint_statuses, span_endpoints

    note = ("its redirect to www.example.com was not followed this run: that host failed 10 "
            "times in a row")

    def not_followed(target, status: int, at: datetime) -> ProbeResult:
        return replace(result(target.url, "online", status, endpoint=target.endpoint_id, at=at),
                       reason="redirect", error=note, note=note)

    trusted = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    own_302 = replace(result(current.url, "online", 302, endpoint=current.endpoint_id),
                      reason="redirect", error="HTTP 302")
    record_probes(session, trusted, [not_followed(forecast, 301, T0), own_302])
    later = start_run(session, "nightly")  # never judged: its probes count nowhere
    plan_targets(session)
    add_probes(session, later.id, [
        result(forecast.url, "live", 200, endpoint=forecast.endpoint_id, at=T0 + timedelta(1)),
        not_followed(current, 302, T0 + timedelta(1))])
    session.commit()
    statuses = entry_endpoint_statuses(span_endpoints(session).active["example-weather"],
                                       latest_probes(session)["example-weather"])
    assert {position: (status["state"], status["httpStatus"], status["note"])
            for position, status in statuses.items() if position in (0, 3)} == {
        0: ("unchecked", None, note), 3: ("online", 302, None)}
    # The day's probes read once (the score stage's way) give each probe its own note too.
    day = day_probes(session, T0 - timedelta(hours=1), T0 + timedelta(hours=1), T0)
    notes = day.frame()["note"]
    assert (notes.notna().tolist(), notes.iloc[0]) == ([True, False], note)
    assert latest_probes(session, day=day)["example-weather"] == latest_probes(session)[
        "example-weather"]


async def failed_then_redirected_to_it(session, endpoint_id: int | None,
                                       redirected_id: int | None,
                                       failed_by: str = "example-weather") -> list[ProbeResult]:
    """One run stored, on the loopback fake internet: a URL of `failed_by` fails (503) and its
    host is given up on; then an endpoint of example-weather (`redirected_id`) answers with a
    redirect to it, not followed: its 302 is stored with its note. The two probes, in turn,
    the failure concluded (`failure_class`)."""
    hosts = ("127.0.0.1", "127.0.0.2")
    server = await FakeServer(hosts=hosts).start()
    settings = ProbeSettings(allow_private=True, per_host_interval=0, connect_timeout=1,
                             total_timeout=2, max_attempts=1, confirm_failures=False,
                             host_failures_in_a_row=1, host_failure_budget=0)
    failing = server.url("/unavailable", hosts[1])
    redirecting = server.url(f"/redirect?to={quote(failing)}")
    run = start_run(session, "nightly")
    try:
        async with Prober(settings) as prober:  # in turn: the failure gives its host up first
            looks = [replace(await prober.probe(url), entry_id=entry_id, endpoint_id=target)
                     for url, entry_id, target in (
                         (failing, failed_by, endpoint_id),
                         (redirecting, "example-weather", redirected_id))]
    finally:
        await server.close()
    # Each concluded from its one look, as a run without confirmation concludes it.
    looks = [replace(look, failure_class=failure_class(look)) for look in looks]
    assert (server.hits["/unavailable"], server.hits["/redirect"]) == (1, 1)
    assert looks[1].note is not None and looks[1].note.startswith(
        "its redirect to 127.0.0.2 was not followed this run")
    record_probes(session, run, looks)
    return looks


async def test_a_redirect_not_followed_is_scored_as_unchecked_from_probe_to_score(
        session) -> None:
    """From the prober on the loopback fake internet, through the store, to the score stage and
    the day's rollup: an endpoint whose URL redirects to a host the run gave up on (it failed)
    is stored as its own 302 with its note, shown beside it, but is no evidence: neither up
    nor down, and no latency sample. The entry's uptime is that of its other endpoint alone,
    which failed."""
    from pipeline.store.history import entry_endpoint_statuses, span_endpoints

    forecast, current = plan_targets(session)[:2]
    looks = await failed_then_redirected_to_it(session, forecast.endpoint_id,
                                               current.endpoint_id)
    failing = looks[0].url
    as_of = max(look.checked_at for look in looks) + timedelta(seconds=1)

    statuses = entry_endpoint_statuses(span_endpoints(session).active["example-weather"],
                                       latest_probes(session)["example-weather"])
    assert (statuses[3]["state"], statuses[3]["httpStatus"]) == ("unchecked", None)
    assert statuses[3]["note"] == looks[1].note and looks[1].note.startswith(
        "its redirect to 127.0.0.2 was not followed this run")
    assert (statuses[0]["httpStatus"], statuses[0]["note"]) == (503, None)

    scores, uptimes = bounded_scores(session, content_scores(session), as_of)
    uptime = uptimes["example-weather"]
    assert (uptime["last1d"], uptime["evidence"]["last1d"]["probes"],
            uptime["evidence"]["last1d"]["succeeded"]) == (0.0, 1, 0)
    latency = scores.json_form("example-weather")["evidence"]["latency"]
    assert (latency["probes"], latency["failed"], latency["last7d"]["samples"]) == (1, 1, 0)

    roll_up_days(session, [as_of.date()])
    entry_day = session.exec(select(DailyEntryRollup).where(
        DailyEntryRollup.entry_id == "example-weather")).one()
    assert (entry_day.probes, entry_day.successes, entry_day.p50_ms) == (1, 0, None)
    assert [row.url for row in session.exec(select(DailyEndpointRollup))] == [failing]


async def test_a_redirect_not_followed_is_no_target_checked_in_the_lifecycle(session) -> None:
    """Through the store to the entry's lifecycle: a run whose one other target failed is a
    run the entry was down in, its unfollowed 302 no target that passed; a run whose only
    probe of the entry is such a 302 gives no verdict, as a run that stored none, so it
    neither counts as down nor breaks the count of runs down in a row."""
    forecast, current = plan_targets(session)[:2]
    rules = LifecycleRules()

    def lifecycle_after_the_latest_run() -> tuple[RunVerdict | None, EntryLifecycle]:
        verdict = run_verdict(latest_probes(session)["example-weather"])
        record_lifecycles(session, ["example-weather"],
                          {} if verdict is None else {"example-weather": verdict}, {},
                          datetime.now(UTC), rules)
        return verdict, session.exec(select(EntryLifecycle)).one()

    await failed_then_redirected_to_it(session, forecast.endpoint_id, current.endpoint_id)
    verdict, lifecycle = lifecycle_after_the_latest_run()
    assert verdict is not None and (verdict.targets, verdict.failed, verdict.down) == (1, 1, True)
    assert (lifecycle.state, lifecycle.down_runs) == ("degraded", 1)

    # The next run fails another entry's URL on that host: example-weather's only probe is
    # the unfollowed 302, its status unchecked.
    await failed_then_redirected_to_it(session, None, current.endpoint_id, failed_by="open-api")
    assert latest_statuses(session)["example-weather"].state == "unchecked"
    verdict, lifecycle = lifecycle_after_the_latest_run()
    assert verdict is None and lifecycle.down_runs == 1


async def test_an_entry_s_status_rests_on_its_counted_probes_not_a_redirect_not_followed(
        session) -> None:
    """Through the prober on the loopback fake internet and the store: the entry's published
    status follows the one rule of the scores and the lifecycle (`score.unchecked`). Beside a
    failed endpoint, an unfollowed 302 is no answer that keeps the entry from failing in the
    run; an entry whose only probe of the run is one is unchecked, with its note and URL, not
    online on its 3xx (its state as of the day's end too); a 302 the URL answered for good
    (a redirect to a sign-in page) stays online."""
    forecast, current = plan_targets(session)[:2]
    looks = await failed_then_redirected_to_it(session, forecast.endpoint_id,
                                               current.endpoint_id)
    status = latest_statuses(session)["example-weather"]
    assert (status.state, status.http_status, status.failure) == ("online", 503, "transient")
    assert status.url == looks[0].url

    # The next run fails another entry's URL on that host: example-weather's only probe is
    # the unfollowed 302.
    looks = await failed_then_redirected_to_it(session, None, current.endpoint_id,
                                               failed_by="open-api")
    redirected = looks[1]
    assert handed_over_status(session) == latest_statuses(session)["example-weather"] == Status(
        state="unchecked", note=redirected.note, url=redirected.url)
    day_end = redirected.checked_at + timedelta(seconds=1)
    assert latest_states(session, day_end)["example-weather"] == "unchecked"

    # A run whose 302 is the URL's own answer (a sign-in page): online, as before.
    own = start_run(session, "nightly")
    record_probes(session, own, [replace(
        result(current.url, "online", 302, endpoint=current.endpoint_id, at=day_end),
        reason="redirect", error="redirected to an HTML page at another path")])
    status = latest_statuses(session)["example-weather"]
    assert (status.state, status.http_status, status.note) == ("online", 302, ONLINE_NOTE)


TWO_ENDPOINTS = [{"method": "GET", "path": "/forecast", "description": "Forecast."},
                 {"method": "GET", "path": "/current", "description": "Now."}]


def made_per_account(write_entry: WriteEntry, ingested_store) -> Session:
    """The store after example-weather's base address became one per account (no URL to
    probe, whatever it lists), its two endpoints kept."""
    write_entry(make_entry(baseUrl="https://YOUR_PROJECT_REF.example.com/v1",
                           endpoints=TWO_ENDPOINTS, sampleRequest=(
                               'curl "https://YOUR_PROJECT_REF.example.com/v1/forecast"')))
    return ingested_store()


def test_an_entry_left_with_no_url_to_probe_keeps_its_state_saying_why_and_since_when(
        write_entry: WriteEntry, ingested_store) -> None:
    """An entry judged degraded whose base address becomes one per account (no URL to probe,
    whatever it lists) gains no evidence again: its latest verdict, of the URLs it listed,
    is read again each night. Its state stands, night after night, the reason saying no
    endpoint can be checked any longer and when it last was: no recovery is told on no
    evidence."""
    write_entry(make_entry(endpoints=TWO_ENDPOINTS))
    session = ingested_store()
    forecast, current = plan_targets(session)
    run = start_run(session, "nightly")
    record_probes(session, run, [
        replace(result(forecast.url, "unreachable", None, None, endpoint=forecast.endpoint_id,
                       error_class="refused"), failure_class="transient"),
        result(current.url, "live", 200, endpoint=current.endpoint_id)])

    def judged(now: datetime) -> tuple[str, str | None, int]:
        verdict = run_verdict(latest_probes(session)["example-weather"])
        assert verdict is not None and verdict.run_id == run.id  # the only evidence there is
        lifecycles, _ = record_lifecycles(session, ["example-weather"],
                                          {"example-weather": verdict}, {}, now,
                                          LifecycleRules())
        row = session.exec(select(EntryLifecycle)).one()
        return lifecycles["example-weather"].state, lifecycles["example-weather"].reason, (
            row.down_runs)

    assert judged(T0 + timedelta(hours=1)) == (
        "degraded", "1 of 2 targets failed in the last run", 0)
    session = made_per_account(write_entry, ingested_store)
    assert plan_targets(session) == []
    why = ("no endpoint can be checked any longer (base address is per account "
           "(YOUR_PROJECT_REF)); last checked 2026-11-20")
    assert judged(T0 + timedelta(days=2)) == (
        "degraded", f"1 of 2 targets failed in the last run; {why}", 0)
    for days in (30, 90):
        assert judged(T0 + timedelta(days=days)) == (
            "degraded", f"1 of 2 targets failed in the last run; {why}", 0)


def test_an_entry_left_with_no_url_to_probe_publishes_no_status_of_addresses_it_no_longer_lists(
        write_entry: WriteEntry, ingested_store) -> None:
    """An entry probed live whose base address becomes one per account: the score stage
    presents it unchecked, saying why, its endpoints too, and no HTTPS or CORS, rather than
    the status its probes of the addresses it listed before gave; those probes still date
    its lifecycle (the verdict). An entry never probed so says why as well."""
    write_entry(make_entry(endpoints=TWO_ENDPOINTS))
    session = ingested_store()
    forecast, current = plan_targets(session)
    run = start_run(session, "nightly")
    record_probes(session, run, [result(forecast.url, "live", 200, endpoint=forecast.endpoint_id),
                                 result(current.url, "live", 200, endpoint=current.endpoint_id)])
    as_of = T0 + timedelta(hours=1)
    before = present_entries(session, as_of).entry("example-weather")
    assert checked_state(before.status).state == "live" and before.https and before.cors

    session = made_per_account(write_entry, ingested_store)
    why = "base address is per account (YOUR_PROJECT_REF)"
    after = present_entries(session, as_of + timedelta(days=1)).entry("example-weather")
    assert Status.model_validate(after.status) == Status(state="unchecked", note=why)
    assert after.endpoints is not None and [
        EndpointStatus.model_validate(status) for status in after.endpoints.values()] == [
        EndpointStatus(note=why)] * 2
    assert (after.https, after.cors) == (None, None)
    assert after.verdict is not None and after.verdict.run_id == run.id

    write_entry(make_entry(id="example-never", name="Example Never",
                           baseUrl="https://YOUR_TENANT.example.org/api",
                           sampleRequest='curl "https://YOUR_TENANT.example.org/api/forecast"'))
    session = ingested_store()
    never = present_entries(session, as_of).entry("example-never")
    assert Status.model_validate(never.status) == Status(
        state="unchecked", note="base address is per account (YOUR_TENANT)")
    assert never.verdict is None


def per_account_twin(write_entry: WriteEntry) -> None:
    """example-twin: example-weather's content once its base address is per account, under
    its own id, and never probed (no URL to probe from the start)."""
    write_entry(make_entry(id="example-twin", name="Example Twin",
                           baseUrl="https://YOUR_PROJECT_REF.example.com/v1",
                           endpoints=TWO_ENDPOINTS, sampleRequest=(
                               'curl "https://YOUR_PROJECT_REF.example.com/v1/forecast"')))


# The night after example-weather's four nights of probes (`probed_for_nights`).
AFTER_NIGHTS = T0 + timedelta(days=3, hours=1)


def probed_for_nights(write_entry: WriteEntry, ingested_store) -> tuple[Session, PipelineRun]:
    """example-weather probed live on four nights (enough for Latency and an uptime), the
    first three rolled up (their days read from the rollups, the fourth's raw), beside
    `per_account_twin` never probed; the store and the last run."""
    write_entry(make_entry(endpoints=TWO_ENDPOINTS))
    per_account_twin(write_entry)
    session = ingested_store()
    forecast, current = plan_targets(session)
    for night in range(4):
        at = T0 + timedelta(days=night)
        run = start_run(session, "nightly")
        record_probes(session, run, [
            result(forecast.url, "live", 200, endpoint=forecast.endpoint_id, at=at),
            result(current.url, "live", 200, 150.0, endpoint=current.endpoint_id, at=at)])
    roll_up_days(session, [(T0 + timedelta(days=night)).date() for night in range(3)])
    return session, run


def test_an_entry_left_with_no_url_to_probe_is_scored_as_an_entry_never_probed(
        write_entry: WriteEntry, ingested_store, tmp_path: Path) -> None:
    """An entry probed on earlier days (enough for Latency and an uptime, past days read from
    their rollups, the day's raw) whose base address then becomes one per account: its
    probes are of addresses it no longer lists, so its score and uptime are those of its twin
    never probed (Latency unrated, the grade from its content alone, no uptime), in the score
    stage's values and in every published file; those probes still date its lifecycle."""
    session, run = probed_for_nights(write_entry, ingested_store)
    as_of = AFTER_NIGHTS
    probed = present_entries(session, as_of)
    assert probed.scores["example-weather"]["latency"] is not None  # evidence to leave out
    assert probed.uptimes["example-weather"]["last7d"] == 1.0

    session = made_per_account(write_entry, ingested_store)
    presented = present_entries(session, as_of)
    twin = presented.entry("example-twin")
    assert twin.score is not None and twin.score["latency"] is None and twin.uptime is None
    after = presented.entry("example-weather")
    assert (after.score, after.uptime) == (twin.score, twin.uptime)
    assert after.verdict is not None and after.verdict.run_id == run.id

    out = tmp_path / "public"
    publish_release(session, out, "https://directory.test",
                    load_categories(REPO / "data" / "categories.yaml"), as_of, presented)

    def published(path: str, key: str) -> dict[str, dict]:
        document = orjson.loads((out / path).read_bytes())[key]
        return {api["id"]: api for api in ([document] if key == "api" else document)}

    for apis in (published(FULL_DATASET, "apis"), published(category_file("weather"), "apis"),
                 {entry_id: published(entry_document(entry_id), "api")[entry_id]
                  for entry_id in ("example-weather", "example-twin")}):
        weather, never = apis["example-weather"], apis["example-twin"]
        assert weather["uptime"] is None and weather["builderScore"] == never["builderScore"]

    def uptime_said(entry_id: str) -> tuple[str, str]:
        html = (out / entry_page(entry_id)).read_text()
        text = (out / entry_markdown(entry_id)).read_text()
        block = re.search(r'<dl class="uptime" id="uptime">.*?</dl>', html, re.S)
        line = next(line for line in text.splitlines() if line.startswith("Uptime:"))
        return (block.group() if block else "", line)

    assert uptime_said("example-weather") == uptime_said("example-twin")
    assert "no probes" in uptime_said("example-weather")[1]


def test_an_entry_left_with_no_url_to_probe_says_why_latency_will_not_count(
        write_entry: WriteEntry, ingested_store, tmp_path: Path) -> None:
    """An entry with no URL to probe (probed before, or never) will never have a probe for
    Latency: its reason and its page's grade basis say why, not that it waits for "5 on 3
    days" as an entry not probed yet does; its evidence still counts its 0 probes."""
    session, _ = probed_for_nights(write_entry, ingested_store)
    write_entry(make_entry(id="example-fresh", name="Example Fresh", endpoints=TWO_ENDPOINTS))
    session = made_per_account(write_entry, ingested_store)
    presented = present_entries(session, AFTER_NIGHTS)
    why = "no endpoint can be checked (base address is per account (YOUR_PROJECT_REF))"
    for entry_id in ("example-weather", "example-twin"):
        score = presented.entry(entry_id).score
        assert score is not None and score["latency"] is None and score["provisional"]
        assert score["reasons"]["latency"] == [why]
        assert (score["evidence"]["latency"]["probes"], score["evidence"]["latency"]["days"]) == (
            0, 0)
    fresh = presented.entry("example-fresh").score  # not probed yet: it waits for probes
    assert fresh is not None and fresh["reasons"]["latency"] == [
        "graded after 5 probes on 3 days within 7 days, none so far"]

    out = tmp_path / "public"
    publish_release(session, out, "https://directory.test",
                    load_categories(REPO / "data" / "categories.yaml"), AFTER_NIGHTS, presented)
    html = (out / entry_page("example-weather")).read_text()
    basis = re.search(r'<p class="note" id="grade-basis">(.*?)</p>', html, re.S)
    assert basis is not None and "graded after 5 probes" not in basis.group(1)
    assert basis.group(1) == (f"Provisional: Latency has no probe to count: {why}, so this "
                              "grade comes from Pricing and Depth alone.")


def test_an_entry_left_with_no_url_to_probe_has_the_trend_of_an_entry_never_probed(
        write_entry: WriteEntry, ingested_store, tmp_path: Path) -> None:
    """An entry whose days were probed and rolled up, whose base address then becomes one per
    account: those days are of addresses it no longer lists, so its page's trend is its twin's
    never probed, on the night its page is drawn whole and on the next, spliced."""
    session, _ = probed_for_nights(write_entry, ingested_store)
    categories = load_categories(REPO / "data" / "categories.yaml")
    out = tmp_path / "public"

    def trend_shown(entry_id: str) -> str:
        html = (out / entry_page(entry_id)).read_text()
        part = re.search(r"<h3>Daily trend</h3>.*?<h3>Uptime</h3>", html, re.S)
        assert part is not None
        return part.group()

    publish_release(session, out, "https://directory.test", categories, AFTER_NIGHTS,
                    present_entries(session, AFTER_NIGHTS))
    assert "<svg" in trend_shown("example-weather")  # its days drawn while it had a URL

    session = made_per_account(write_entry, ingested_store)
    for night in range(2):
        as_of = AFTER_NIGHTS + timedelta(days=night)
        published = publish_release(session, out, "https://directory.test", categories, as_of,
                                    present_entries(session, as_of))
        assert published.pages is not None
        assert published.pages.spliced == 1 + night  # the twin, then it too
        assert trend_shown("example-weather") == trend_shown("example-twin")


def test_a_run_read_back_counts_the_targets_it_did_not_probe_as_when_it_ran(session) -> None:
    """A stage run again after its probes were stored reads them back rather than probing
    again: the targets of a host given up on, which store no row, are counted as they were
    (`unchecked`), also for a run whose every host was given up (none stored at all)."""
    from pipeline.probing.probe import not_probed
    from pipeline.store.history import stored_run_tally

    forecast, current = plan_targets(session)[:2]
    reason = "not probed this run: its host failed 10 times in a row"
    given_up = [replace(not_probed(target.url, reason), entry_id=target.entry_id,
                        endpoint_id=target.endpoint_id) for target in (forecast, current)]
    some = start_run(session, "nightly")
    results = [result(forecast.url, "live", 200, endpoint=forecast.endpoint_id), given_up[1]]
    record_probes(session, some, results)
    assert stored_run_tally(session, some).outcomes == ProbeTally.of(results).outcomes == {
        "live": 1, "unchecked": 1}
    every = start_run(session, "nightly")
    record_probes(session, every, given_up)
    stored = stored_run_tally(session, every)
    assert stored is not None and (stored.probes, stored.outcomes) == (0, {"unchecked": 2})
    assert stored_run_tally(session, start_run(session, "nightly")) is None  # not yet stored


def test_a_run_where_everything_failed_at_once_is_flagged_and_ignored(session) -> None:
    good = start_run(session, "nightly")
    record_probes(session, good, [result("https://api.example.com/v1/forecast", "live", 200)])
    down = start_run(session, "nightly")
    failures = [result(f"https://h{i}.example.com/", "unreachable", None, None,
                       error_class="dns", at=T0 + timedelta(days=1)) for i in range(12)]
    record_probes(session, down, failures)
    assert down.network_suspect and not good.network_suspect
    assert latest_statuses(session)["example-weather"].state == "live"
    frame = history_frame(session)
    assert set(frame["run_id"]) == {good.id}


def test_a_runs_probes_count_only_once_the_run_is_judged(session) -> None:
    """A shard commits its probes before the run is judged: until the run is closed and
    found not network-suspect they count nowhere (statuses, states, the score stage's history,
    the entries probed, the latest runs), and a run that ended before its judgement (reaped
    as crashed) never counts. Judged, a run's probes count at once."""
    forecast = "https://api.example.com/v1/forecast"
    good = start_run(session, "nightly")
    record_probes(session, good, [result(forecast, "live", 200)])
    later = T0 + timedelta(days=1)

    def counted() -> tuple[str, str, set[int], set[str], dict[str, int]]:
        frame = history_frame(session)
        return (latest_statuses(session)["example-weather"].state,
                latest_states(session, later)["example-weather"], set(frame["run_id"]),
                probed_entries(session, later, later, ["example-weather"]),
                latest_runs(session, ["example-weather"]))

    trusted_only = ("live", "live", {good.id}, set(), {"example-weather": good.id})
    down = start_run(session, "nightly")  # a shard's part: the prober's network was down
    add_probes(session, down.id, [result(f"https://h{i}.example.com/", "unreachable", None,
                                         None, error_class="refused", at=later)
                                  for i in range(12)])
    session.commit()
    assert counted() == trusted_only  # still open
    finish_run(session, down, "crashed", "abandoned: the process running it is gone")
    assert counted() == trusted_only  # never judged
    assert down.judged_at is None

    gone = start_run(session, "nightly")
    tally = add_probes(session, gone.id, [result(forecast, "unreachable", None, None,
                                                 error_class="refused", at=later)])
    session.commit()
    assert counted() == trusted_only
    close_probe_run(session, gone, tally)
    assert not gone.network_suspect and gone.judged_at is not None
    assert counted() == ("unreachable", "unreachable", {good.id, gone.id}, {"example-weather"},
                         {"example-weather": gone.id})


def test_network_suspect_needs_many_probes_and_connection_failures() -> None:
    url = "https://a.example.com/"
    assert not network_suspect([result(url, "unreachable", error_class="dns")] * 5)
    assert network_suspect([result(url, "unreachable", error_class="refused")] * 10)
    mixed = [result(url, "unreachable", error_class="dns")] * 8 + [result(url, "live", 200)] * 2
    assert not network_suspect(mixed)
    timeouts = [result(url, "unreachable", error_class="read_timeout")] * 10
    assert not network_suspect(timeouts)  # servers that accept but stall are the providers'


def test_witnesses_judge_a_small_run_and_are_not_counted_as_its_probes() -> None:
    """Four targets refused: suspect when the witnesses (probes of no entry) were refused too,
    trusted when they answered; the run's counts are its own targets' either way."""
    own = [result(f"https://a.example.com/{n}", "unreachable", error_class="refused")
           for n in range(4)]
    refused = [result(f"https://w{n}.example.com/", "unreachable", entry=None,
                      error_class="refused") for n in range(6)]
    answered = [result(f"https://w{n}.example.com/", "online", 401, entry=None)
                for n in range(6)]
    assert not network_suspect(own)  # too few to judge alone
    assert network_suspect(own + refused)
    assert not network_suspect(own + answered)
    tally = ProbeTally.of(own + answered)
    assert (tally.probes, tally.outcomes, tally.witnesses) == (4, {"unreachable": 4}, 6)


def test_history_frame_has_the_columns_the_score_stage_reads(session) -> None:
    run = start_run(session, "nightly")
    record_probes(session, run, [result("https://api.example.com/v1/forecast", "live", 200, 42)])
    frame = history_frame(session, since=T0 - timedelta(days=1))
    assert list(frame.columns) == ["run_id", "entry_id", "endpoint_id", "url", "checked_at",
                                   "outcome", "reason", "http_status", "total_ms", "note"]
    assert frame.loc[0, "total_ms"] == 42 and str(frame["checked_at"].dt.tz) == "UTC"
    assert history_frame(session, since=T0 + timedelta(hours=1)).empty


def two_nights_with_a_confirmation(session) -> tuple[str, str, PipelineRun]:
    """Two nightly runs a day apart, each probing two URLs of one entry, one of them failing
    first and live at its second look: the two URLs and the last run."""
    forecast, current = "https://api.example.com/v1/forecast", "https://api.example.com/v1/current"
    for day in range(2):
        run = start_run(session, "nightly")
        at = T0 + timedelta(days=day)
        record_probes(session, run, [
            result(forecast, "unreachable", None, None, error_class="refused", at=at),
            result(current, "live", 200, 40.0 + day, at=at),
            replace(result(forecast, "live", 200, 55.0, at=at + timedelta(minutes=5)),
                    confirmation=True),
        ])
    return forecast, current, run


def test_history_frame_read_a_few_rows_at_a_time_is_the_frame_read_at_once(
    session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parts of one row each: a first look and its confirmation in different parts still leave
    the confirmation alone, and a part with no status code or time keeps the numeric types."""
    import pipeline.store.history as history

    two_nights_with_a_confirmation(session)
    whole = history_frame(session)
    monkeypatch.setattr(history, "ROWS_AT_ONCE", 1)
    parts = history_frame(session)
    pd.testing.assert_frame_equal(parts, whole)
    assert len(parts) == 4 and set(parts["outcome"]) == {"live"}  # confirmations kept
    assert [str(parts[c].dtype) for c in ("endpoint_id", "http_status", "total_ms")] == [
        "float64"] * 3
    assert parts["url"].iloc[0] is parts["url"].iloc[2]  # one object for a URL of two runs


def test_latest_probes_read_a_row_at_a_time_share_their_recurring_texts(
    session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The latest run's probes, read one row at a time, are those read at once: a confirmation
    in a later part still replaces its first look, and an entry's id and each outcome is one
    object on all its probes."""
    import pipeline.store.history as history

    forecast, current, run = two_nights_with_a_confirmation(session)
    whole = latest_probes(session)
    monkeypatch.setattr(history, "ROWS_AT_ONCE", 1)
    probes = latest_probes(session)["example-weather"]
    assert probes == whole["example-weather"] and len(probes) == 2
    assert [(p.url, p.outcome, p.total_ms, p.confirmation) for p in probes] == [
        (forecast, "live", 55.0, True), (current, "live", 41.0, False)]
    assert {p.run_id for p in probes} == {run.id}
    assert probes[0].entry_id is probes[1].entry_id and probes[0].outcome is probes[1].outcome


def test_a_run_keeps_the_first_and_last_check_time_of_its_probes_stored_in_parts(
    session,
) -> None:
    """Shards store a run's probes in parts, each widening the run's bounds in the database;
    a run with no probe stored has none."""
    run, empty = start_run(session, "nightly"), start_run(session, "nightly")
    url = "https://api.example.com/v1/forecast"
    add_probes(session, run.id, [result(url, "live", 200, at=T0 + timedelta(hours=1))])
    session.commit()
    add_probes(session, run.id, [result(url, "live", 200, at=T0),
                                 result(url, "live", 200, at=T0 + timedelta(minutes=30))])
    session.commit()
    add_probes(session, run.id, [result(url, "live", 200, at=T0 + timedelta(hours=2))])
    session.commit()
    session.expire_all()
    stored = session.get(PipelineRun, run.id)
    assert (as_utc(stored.first_checked_at), as_utc(stored.last_checked_at)) == (
        T0, T0 + timedelta(hours=2))
    assert session.get(PipelineRun, empty.id).first_checked_at is None


def day_of_runs(session) -> tuple[datetime, datetime]:
    """The day of T0 (its first and last instant) with: a run begun the day before that ends
    inside it; two runs inside it, the later one probing one URL of the entry and a
    confirmation; a network-suspect run; a run probing after the day's end. Each entry's
    latest probes come from several of them."""
    first = T0.replace(hour=0)
    last = first + timedelta(days=1) - timedelta(microseconds=1)
    forecast, current = "https://api.example.com/v1/forecast", "https://api.example.com/v1/current"
    base = "https://open.example.org"

    def run_of(*looks: ProbeResult, suspect: bool = False) -> None:
        run = start_run(session, "nightly")
        record_probes(session, run, looks)
        if suspect:
            run.network_suspect = True
            session.add(run)
            session.commit()

    run_of(result(forecast, "live", 200, at=first - timedelta(minutes=5)),
           result(base, "live", 200, entry="open-api", at=first - timedelta(minutes=1)),
           result(current, "live", 200, at=first + timedelta(minutes=5)))
    run_of(result(forecast, "unreachable", None, None, error_class="dns", at=T0),
           result(current, "online", 401, at=T0))
    run_of(result(current, "unreachable", None, None, error_class="refused",
                  at=T0 + timedelta(hours=1)),
           replace(result(current, "live", 200, 80.0, at=T0 + timedelta(hours=1, minutes=5)),
                   confirmation=True))
    run_of(result(forecast, "unreachable", None, None, error_class="dns", at=T0),
           suspect=True)
    run_of(result(base, "online", 403, entry="open-api", at=last - timedelta(minutes=1)),
           result(base, "online", 403, entry="open-api", at=last + timedelta(minutes=2)))
    return first, last


@pytest.mark.parametrize("hours", [5, 23.99], ids=["as of mid-day", "as of the day's end"])
def test_a_day_read_once_gives_the_day_s_history_and_the_latest_probes(
    session, hours: float,
) -> None:
    """The day's probes read once give the frame `history_frame` gives for the day up to the
    moment, and the latest probes of each entry `latest_probes` reads run by run: runs held
    whole within the day come from the read (the store is not asked for them again), a run
    begun the day before or ending after it is read from the store."""
    first, last = day_of_runs(session)
    as_of = first + timedelta(hours=hours)
    day = day_probes(session, first, last, as_of)
    pd.testing.assert_frame_equal(day.frame(), history_frame(session, first, as_of))
    assert len(day.frame()) == 4 + (hours > 23)  # a confirmation replaces its first look
    runs = sorted(session.exec(select(PipelineRun.id)).all())
    assert day.runs_held(session, runs) == {runs[1], runs[2]}

    asked: list[str] = []
    engine = session.get_bind()

    def note(conn, cursor, statement, parameters, context, executemany) -> None:
        asked.append(statement)

    event.listen(engine, "before_cursor_execute", note)
    try:
        shared = latest_probes(session, day=day)
    finally:
        event.remove(engine, "before_cursor_execute", note)
    assert shared == latest_probes(session)
    assert [(p.run_id, p.confirmation) for p in shared["example-weather"]] == [(runs[2], True)]
    assert [p.run_id for p in shared["open-api"]] == [runs[4]]
    by_run = [s for s in asked if "FROM probe" in s and "run_id =" in s and "DISTINCT" not in s]
    assert len(by_run) == 1  # the run after the day's end alone


def test_each_endpoint_has_its_own_status_or_says_why_it_is_not_probed(session) -> None:
    from dataclasses import replace

    from pipeline.store.history import entry_endpoint_statuses, latest_probes, span_endpoints

    def endpoint_statuses(entry_id: str) -> dict:
        return entry_endpoint_statuses(span_endpoints(session).active[entry_id],
                                       latest_probes(session).get(entry_id, ()))

    assert endpoint_statuses("example-weather")[0]["state"] == "unchecked"  # no run yet
    run = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    record_probes(session, run, [
        replace(result(forecast.url, "online", 401, 80.4, endpoint=forecast.endpoint_id),
                reason="auth"),
        result(current.url, "unreachable", None, None, endpoint=current.endpoint_id,
               error_class="read_timeout"),
    ])
    statuses = endpoint_statuses("example-weather")
    assert sorted(statuses) == [0, 1, 2, 3]  # one per endpoint, by position
    assert {name: value for name, value in statuses[0].items() if value is not None} == {
        "state": "online", "httpStatus": 401, "responseTimeMs": 80, "checkedAt": utc_text(T0),
        "reason": "auth"}
    assert (statuses[1]["state"], statuses[1]["note"]) == ("unchecked", "method is POST")
    # one status per reason, shared by every endpoint not probed for it, written as its own
    assert statuses[1] is endpoint_statuses("open-api")[0]
    assert (statuses[2]["state"], statuses[2]["note"]) == ("unchecked", "path has placeholders")
    assert (statuses[3]["state"], statuses[3]["reason"], statuses[3]["httpStatus"]) == (
        "unreachable", "read_timeout", None)
    # Each in its JSON form: what the model writes, byte for byte, without the model.
    for status in statuses.values():
        assert orjson.dumps(status) == model_json_of(EndpointStatus, status)


def test_the_span_endpoints_read_once_serve_both_their_uses(session) -> None:
    """One read of the endpoints gives the active ones by entry and every endpoint's position,
    a retired one's too: the latest probes sorted by it are those sorted by their own read."""
    from pipeline.store.history import _endpoint_order, span_endpoints

    run = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    record_probes(session, run, [
        result(current.url, "live", 200, endpoint=current.endpoint_id),
        result(forecast.url, "live", 200, endpoint=forecast.endpoint_id)])
    retired = session.get(EndpointRow, forecast.endpoint_id)
    retired.active = False  # retired since the run probed it
    session.add(retired)
    session.commit()

    endpoints = span_endpoints(session)
    assert sorted(e.position for e in endpoints.active["example-weather"]) == [1, 2, 3]
    stored = session.exec(select(EndpointRow).where(EndpointRow.active)).all()
    assert sorted((entry_id, e.id, e.position, e.probe_note)
                  for entry_id, active in endpoints.active.items() for e in active) == sorted(
        (row.entry_id, row.id, row.position, row.probe_note) for row in stored)
    assert endpoints.order == _endpoint_order(session)
    assert endpoints.order[forecast.endpoint_id] == 0
    probes = latest_probes(session, order=endpoints.order)
    assert probes == latest_probes(session)
    assert [p.url for p in probes["example-weather"]] == [forecast.url, current.url]


def whole_history_latest(session, until: datetime | None = None) -> dict[str, int]:
    """The reference: each entry's latest trusted run by `until`, from every probe stored."""
    statement = (select(ProbeRow.entry_id, func.max(ProbeRow.run_id))
                 .join(PipelineRun, PipelineRun.id == ProbeRow.run_id)
                 .where(col(PipelineRun.network_suspect).is_(False)))
    if until is not None:
        statement = statement.where(ProbeRow.checked_at <= until)
    return dict(session.exec(statement.group_by(ProbeRow.entry_id)).all())


def test_the_latest_runs_are_found_without_the_whole_history_and_equal_it(session) -> None:
    """The newest runs are read first and the rest looked up by entry: the same latest run as
    a look at every probe, for an entry probed only long ago, past a network-suspect run, and
    as of any moment."""
    forecast = "https://api.example.com/v1/forecast"
    old = start_run(session, "nightly")
    record_probes(session, old, [result(forecast, "live", 200)])  # probed once, long ago
    for night in range(1, RECENT_RUNS + 3):
        run = start_run(session, "nightly")
        at = T0 + timedelta(days=night)
        record_probes(session, run, [result("https://open.example.org", "live", 200,
                                            entry="open-api", at=at)])
    down = start_run(session, "nightly")
    record_probes(session, down, [result(f"https://h{i}.example.com/", "unreachable", None,
                                         None, entry="open-api", error_class="dns",
                                         at=T0 + timedelta(days=30)) for i in range(12)])
    assert down.network_suspect
    for until in (None, T0, T0 + timedelta(days=3, hours=1), T0 + timedelta(days=40)):
        expected = whole_history_latest(session, until)
        assert latest_runs(session, until=until) == expected
        assert latest_runs(session, ["example-weather"], until) == {
            k: v for k, v in expected.items() if k == "example-weather"}
    assert latest_runs(session) == {"example-weather": old.id, "open-api": down.id - 1}
    assert latest_runs(session, until=T0 - timedelta(days=1)) == {}


def test_states_as_of_a_moment_are_those_of_the_latest_run_by_then_for_the_entries_asked(
    session,
) -> None:
    for at, outcome, status in ((T0, "live", 200), (T0 + timedelta(days=1), "unreachable", None)):
        run = start_run(session, "nightly")
        record_probes(session, run, [
            result("https://api.example.com/v1/forecast", outcome, status, at=at),
            result("https://open.example.org", "online", 401, entry="open-api", at=at),
        ])
    assert latest_states(session, T0 + timedelta(hours=1)) == {
        "example-weather": "live", "open-api": "online"}
    later = T0 + timedelta(days=1, hours=1)
    assert latest_states(session, later, ["example-weather"]) == {
        "example-weather": "unreachable"}
    assert latest_states(session, later, []) == {}
    assert latest_states(session, T0 - timedelta(hours=1)) == {}
    # Read from fewer columns and not put in endpoint order, the states are the statuses' own.
    mixed = start_run(session, "nightly")
    at = T0 + timedelta(days=2)
    record_probes(session, mixed, [
        result("https://api.example.com/v1/forecast", "online", 401, at=at),
        result("https://api.example.com/v1/current", "live", 200, at=at),
        result("https://open.example.org", "unreachable", None, entry="open-api", at=at),
    ])
    for until in (T0 + timedelta(hours=1), later, at):
        assert latest_states(session, until) == {
            entry_id: status.state
            for entry_id, status in latest_statuses(session, until=until).items()}
    assert latest_states(session, at) == {"example-weather": "live", "open-api": "unreachable"}


def test_rows_inserted_at_once_are_stored_as_sqlalchemy_stores_them(session) -> None:
    """`insert_rows` (one statement compiled once on SQLite, copied in on PostgreSQL) stores
    every kind of value as SQLAlchemy's own executemany does: dates, UTC times, JSON and its
    null, booleans, None, ids the database draws."""
    from datetime import date

    from sqlalchemy import insert, text

    from pipeline.store.tables import DailyEntryRollup, insert_rows

    def rows(day: date) -> list[dict]:
        base = {"day": day, "probes": 3, "responses": 2, "live": 1, "state": "live",
                "pricing": 80, "depth": None, "percent": 71, "grade": "B", "rubric": "r1"}
        return [
            base | {"entry_id": "example-weather", "live_share": 1 / 3, "p50_ms": 120.25,
                    "p90_ms": None, "timed_ms": [12.5, 120.25, 7e-05], "latency": 90,
                    "provisional": False},
            base | {"entry_id": "open-api", "live_share": None, "p50_ms": None,
                    "p90_ms": 3.0, "timed_ms": None, "latency": None, "provisional": True},
        ]

    table = DailyEntryRollup.__table__
    insert_rows(session, table, rows(date(2026, 11, 20)))
    session.execute(insert(table), rows(date(2026, 11, 21)))
    run = start_run(session, "nightly")
    looks = [replace(result("https://a.example/x", "live", 200, 12.5), confirmation=True,
                     cors_allow_credentials=False, tls_version="TLSv1.3",
                     cert_expires_at=T0 + timedelta(days=90)),
             result("https://a.example/y", "unreachable", None, None, error_class="dns")]
    add_probes(session, run.id, looks)
    other = start_run(session, "nightly")
    session.execute(insert(ProbeRow.__table__), [
        {"run_id": other.id, **{name: getattr(look, name) for name in PROBE_COLUMNS}}
        for look in looks])
    session.commit()

    def stored(query: str) -> list[tuple]:  # the values as the database holds them
        return [tuple(row) for row in session.connection().exec_driver_sql(query)]

    by_day = stored("SELECT * FROM daily_entry ORDER BY day, entry_id")
    assert len(by_day) == 4
    assert [row[1:] for row in by_day[:2]] == [row[1:] for row in by_day[2:]]
    assert by_day[0][0] != by_day[2][0]
    columns = ", ".join(PROBE_COLUMNS)
    probes = stored(f"SELECT run_id, {columns} FROM probe ORDER BY run_id, url")
    assert [row[1:] for row in probes[:2]] == [row[1:] for row in probes[2:]]
    assert {row[0] for row in probes} == {run.id, other.id}
    assert session.exec(text("SELECT count(*) FROM probe WHERE confirmation")).one()[0] == 2


def test_rows_given_one_at_a_time_are_stored_and_let_go_as_they_are_bound(
    database_url: str,
) -> None:
    """`insert_rows` given a generator reads each row once, as it binds it, and holds none of
    them: a row is gone by the time the next but one is made (a night's probes at 100k, as
    dicts, are some 150 MiB never held at once), and every row is stored."""
    import weakref
    from datetime import date

    from sqlalchemy import JSON, Column, Date, Integer, MetaData, String, Table, select
    from sqlmodel import Session

    from pipeline.store.tables import engine_for, insert_rows

    table = Table("streamed", MetaData(), Column("id", Integer, primary_key=True),
                  Column("name", String(20)), Column("day", Date), Column("figures", JSON))
    engine = engine_for(database_url)
    table.create(engine)

    class Row(dict):  # a dict that a weak reference can follow
        pass

    made: list[weakref.ref] = []

    def rows() -> Iterator[Row]:
        for n in range(50):
            if n >= 2:
                assert made[n - 2]() is None, f"row {n - 2} still held when row {n} is made"
            row = Row(id=n, name=f"row-{n}", day=date(2026, 11, 20), figures=[n, 0.5])
            made.append(weakref.ref(row))
            yield row

    with Session(engine) as session:
        insert_rows(session, table, rows())
        session.commit()
        stored = session.connection().execute(select(table).order_by(table.c.id)).all()
    assert [tuple(row) for row in stored] == [
        (n, f"row-{n}", date(2026, 11, 20), [n, 0.5]) for n in range(50)]


def test_rows_inserted_at_once_get_the_defaults_sqlalchemy_fills_in(database_url: str) -> None:
    """A column left out whose default SQLAlchemy computes in Python is filled in, as its own
    executemany fills it: neither copied in nor inserted as the database's null."""
    from sqlalchemy import Column, Integer, MetaData, String, Table, select
    from sqlmodel import Session

    from pipeline.store.tables import engine_for, insert_rows

    table = Table("defaulted", MetaData(), Column("id", Integer, primary_key=True),
                  Column("name", String(20)), Column("kind", String(20), default="plain"))
    engine = engine_for(database_url)  # the store, made as the product makes it
    table.create(engine)
    with Session(engine) as session:
        insert_rows(session, table, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
        insert_rows(session, table, [{"id": 3, "name": "c", "kind": "given"}])
        session.commit()
        stored = session.connection().execute(select(table).order_by(table.c.id)).all()
    assert [tuple(row) for row in stored] == [(1, "a", "plain"), (2, "b", "plain"),
                                              (3, "c", "given")]


@pytest.fixture
def sqlite_url(write_entry: WriteEntry, data_dir: Path, tmp_path: Path) -> str:
    """A SQLite store that ingested one entry (`example-weather`)."""
    url = f"sqlite:///{tmp_path / 'var' / 'apidir.db'}"
    write_entry(make_entry())
    entries = data_dir / "entries"
    with session_scope(engine_for(url)) as session:
        ingest_catalog(session, read_catalog([entries], entries))
    return url


def test_a_write_to_a_sqlite_store_waits_out_another_writers_commit(sqlite_url: str) -> None:
    """Shards end together and each stores its probes in one commit: a shard's write waits for
    another's commit longer than the driver's 5 s instead of failing ("database is locked")
    and being probed again."""
    with session_scope(engine_for(sqlite_url)) as session:
        run_id = start_run(session, "nightly").id
    held = threading.Event()
    holder = threading.Thread(target=hold_the_write_lock,
                              args=(make_url(sqlite_url).database, 6.0), kwargs={"taken": held})
    holder.start()
    held.wait()
    started = time.monotonic()
    try:
        with session_scope(engine_for(sqlite_url)) as session:
            add_probes(session, run_id, [result("https://api.example.com/forecast", "live", 200)])
    finally:
        holder.join()
    assert time.monotonic() - started >= 5.0  # it waited past the driver's default
    with session_scope(engine_for(sqlite_url)) as session:
        assert session.exec(select(func.count()).select_from(ProbeRow)).one() == 1


def test_a_busy_timeout_in_a_sqlite_url_is_kept(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'apidir.db'}"
    for given, milliseconds in ((url, 300_000), (f"{url}?timeout=0.25", 250)):
        with engine_for(given).connect() as connection:
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == milliseconds


def test_as_utc_marks_stored_naive_times_utc_and_leaves_the_rest() -> None:
    naive = datetime(2026, 3, 29, 1, 30, 15, 123456, fold=1)
    marked = as_utc(naive)
    assert type(marked) is datetime and marked.tzinfo is UTC
    assert marked.replace(tzinfo=None) == naive and marked.fold == 1
    aware = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
    assert as_utc(aware) is aware and as_utc(None) is None
    stamp = as_utc(pd.Timestamp("2026-03-29 01:30:15.5"))  # a subclass keeps its own type
    assert isinstance(stamp, pd.Timestamp) and stamp == pd.Timestamp("2026-03-29 01:30:15.5Z")


@pytest.mark.parametrize("moment", [
    datetime(2026, 3, 29, 1, 30, 15, 123456), datetime(2026, 3, 29, 1, 30),
    datetime(2026, 3, 29, 1, 30, 15, 120, tzinfo=UTC), datetime(2026, 3, 29, tzinfo=UTC),
    pd.Timestamp("2026-03-29 01:30:15.5"), pd.Timestamp("2026-03-29 01:30:15.5Z"),
], ids=["naive", "naive whole seconds", "aware", "aware midnight", "stamp", "aware stamp"])
def test_a_stored_time_is_written_as_the_contract_writes_it(moment: datetime) -> None:
    """Naive as SQLite hands it back (UTC) or aware: the text the models write for the same
    moment in UTC, so a value built without its model publishes the same bytes."""
    written = TypeAdapter(AwareDatetime).dump_json(as_utc(moment)).decode()
    assert utc_text(moment) == json_time(moment) == written.strip('"')
    assert written.endswith('Z"') and json_time(None) is None


async def test_a_header_that_is_not_utf8_is_stored_with_the_night_s_other_probes(
    session,
) -> None:
    """A server's `Access-Control-Allow-Origin` in bytes that are not UTF-8 (as aiohttp
    decodes them, lone surrogates) reaches the store as text it takes: the run's probes,
    stored in one statement, are all kept."""
    from fake_internet import CannedServer

    from pipeline.probing.probe import ProbeSettings, probe_url

    server = await CannedServer(b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: caf\xe9\r\n"
                                b"Content-Length: 0\r\n\r\n").start()
    try:
        odd = await probe_url(server.url(), ProbeSettings(allow_private=True))
    finally:
        await server.close()
    run = start_run(session, "nightly")
    fine = result("https://api.example.com/v1/current", "live", 200)
    record_probes(session, run, [replace(odd, entry_id="example-weather"), fine])
    stored = dict(session.exec(select(ProbeRow.url, ProbeRow.cors_allow_origin).where(
        ProbeRow.run_id == run.id)).all())
    assert stored == {server.url(): "caf?", fine.url: None}


def test_columns_read_from_the_driver_are_those_sqlalchemy_reads(session) -> None:
    """`driver_columns` (the driver's rows, each column's result processor applied a column at
    a time) gives what SQLAlchemy's rows give on either database: moments, booleans, numbers,
    texts and NULLs; and an empty list a column where no row matches."""
    from pipeline.store.tables import driver_columns

    run = start_run(session, "nightly")
    forecast, current = plan_targets(session)[:2]
    expires = T0 + timedelta(days=60)
    record_probes(session, run, [
        replace(result(forecast.url, "live", 200, endpoint=forecast.endpoint_id),
                cert_expires_at=expires, tls_version="TLSv1.3"),
        replace(result(current.url, "unreachable", None, ms=None, endpoint=current.endpoint_id,
                       error_class="refused", at=T0 + timedelta(seconds=1)),
                confirmation=True)])
    probe = ProbeRow.__table__.c
    statement = select(probe.entry_id, probe.endpoint_id, probe.checked_at, probe.confirmation,
                       probe.http_status, probe.total_ms, probe.cert_expires_at,
                       probe.tls_version, (probe.checked_at <= T0).label("early")
                       ).order_by(probe.id)
    rows = session.connection().execute(statement).all()
    columns = driver_columns(session.connection(), statement)
    assert len(rows) == 2
    assert [tuple(row) for row in rows] == list(zip(*columns, strict=True))
    assert [type(value) for value in columns[2] + columns[3]] == [datetime] * 2 + [bool] * 2
    assert driver_columns(session.connection(), statement.where(probe.id < 0)) == [[]] * 9
