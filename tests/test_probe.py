"""The prober against the fake internet: outcomes, reasons, error classes, timings, retries,
politeness and what a probe sends. Loopback only (allow_private=True), never a public host."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import pytest_asyncio
from aiohttp.web import BaseRequest, Response, StreamResponse
from fake_internet import (
    HUGE_BODY,
    CannedServer,
    FakeDNS,
    FakeServer,
    RawServer,
    SilentCloseServer,
    closed_port,
    self_signed_context,
    unaccepting_port,
)

from pipeline.contract import Status
from pipeline.probing.probe import (
    FINAL_URL_MAX_LENGTH,
    MAX_INTERIM_ANSWERS,
    WINDOW_PER_SLOT,
    Prober,
    ProbeResult,
    ProbeSettings,
    ProbeTarget,
    http_reason,
    is_failure,
    probe_all,
    probe_targets_for,
    probe_url,
    redirected_to,
    retry_after_seconds,
    storable,
)
from tests.conftest import REPO

FAST = ProbeSettings(
    allow_private=True,
    per_host_interval=0,
    per_host_concurrency=8,
    connect_timeout=1,
    total_timeout=2,
    backoff_base=0.02,
    confirm_failures=False,  # one look per target; tests/test_health.py covers the second
)


@pytest_asyncio.fixture(loop_scope="function")  # servers live in the loop the test runs in
async def web() -> AsyncIterator[FakeServer]:
    server = await FakeServer().start()
    yield server
    await server.close()


@pytest_asyncio.fixture(loop_scope="function")
async def three_hosts() -> AsyncIterator[FakeServer]:
    """One server answering on 127.0.0.1, .2 and .3: three hosts for the prober."""
    server = await FakeServer(hosts=("127.0.0.1", "127.0.0.2", "127.0.0.3")).start()
    yield server
    await server.close()


def assert_sane_timings(result: ProbeResult) -> None:
    for value in (result.total_ms, result.dns_ms, result.connect_ms, result.ttfb_ms):
        assert value is None or value >= 0
    assert result.checked_at.tzinfo is not None
    assert result.checked_at.utcoffset() == timedelta(0)
    assert datetime.now(UTC) - result.checked_at < timedelta(minutes=1)
    if result.outcome != "unreachable":
        assert result.total_ms is not None and result.ttfb_ms is not None
        assert result.connect_ms is not None
        assert result.total_ms >= result.ttfb_ms


# --- targets --------------------------------------------------------------------------------


def test_targets_skip_other_methods_placeholders_and_duplicates() -> None:
    targets, skipped = probe_targets_for(
        "https://api.example.com/v1/",
        [
            (1, "GET", "/forecast"),
            (2, "POST", "/forecast"),
            (3, "GET", "/stations/{stationId}"),
            (4, "get", "current?units=metric"),
            (5, "GET", "forecast"),
        ],
        entry_id="example-weather",
    )
    assert targets == [
        ProbeTarget("https://api.example.com/v1/forecast", "example-weather", 1),
        ProbeTarget("https://api.example.com/v1/current?units=metric", "example-weather", 4),
    ]
    assert skipped == [
        (2, "method is POST"),
        (3, "path has placeholders"),
        (5, "same URL as GET /forecast"),  # as listed: no reader knows the store's row ids
    ]


def test_a_path_holding_a_placeholder_credential_is_not_probed() -> None:
    """Only the base address was checked for placeholders: `?appid=YOUR_API_KEY` was sent
    as a key every night, noise to the provider, its 401 telling nothing. Probes carry no
    credentials, so such an endpoint is not probed, and says why as the others do."""
    targets, skipped = probe_targets_for(
        "https://api.example.com/v1",
        [(1, "GET", "/weather?appid=YOUR_API_KEY&units=metric"),
         (2, "GET", "/forecast?key=your-api-key"),
         (3, "GET", "/alerts"),
         (4, "GET", "/yourself"),
         (5, "GET", "/your-orders")],
        entry_id="example-weather",
    )
    assert [t.url for t in targets] == ["https://api.example.com/v1/alerts",
                                        "https://api.example.com/v1/yourself",
                                        "https://api.example.com/v1/your-orders"]
    assert skipped == [(1, "path has a placeholder credential (YOUR_API_KEY)"),
                       (2, "path has a placeholder credential (your-api-key)")]
    targets, skipped = probe_targets_for("https://api.example.com/v1",
                                         [(1, "GET", "/weather?appid=YOUR_API_KEY")])
    assert targets == [ProbeTarget("https://api.example.com/v1")]  # the base stands in


def test_a_placeholder_credential_is_named_whole() -> None:
    """The reason names the whole stand-in as the path spells it, not the part of it up to
    the first word naming a credential."""
    _, skipped = probe_targets_for(
        "https://api.example.com",
        [(1, "GET", "/v1?key=Your-Secret-Key"), (2, "GET", "/v2?token=your_access_token_here"),
         (3, "GET", "/v3?k=your-keyring")])
    assert skipped == [(1, "path has a placeholder credential (Your-Secret-Key)"),
                       (2, "path has a placeholder credential (your_access_token_here)")]


def test_a_long_path_of_your_words_is_planned_in_linear_time() -> None:
    """`your-your-…`, no word naming a credential, made the stand-in pattern look ahead from
    every `your-` to the path's end (a 200 KB path, which an entry file may hold: minutes, at
    every run's planning and every release's endpoint notes). Planned within a generous bound
    (a guard against the square, not a speed target), and probed: it names no credential."""
    code = ("from pipeline.probing.probe import probe_targets_for\n"
            "path = '/' + 'your-' * 40_000 + 'orders'\n"
            "targets, skipped = probe_targets_for('https://api.example.com', [(1, 'GET', path)])\n"
            "assert [t.endpoint_id for t in targets] == [1] and skipped == [], skipped\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    _, skipped = probe_targets_for("https://api.example.com",
                                   [(1, "GET", "/x?k=" + "your-" * 1_000 + "Key-ring"),
                                    (2, "GET", "/x?k=your-orders-YOUR_ID-x")])
    assert skipped == [(1, "path has a placeholder credential (" + "your-" * 1_000 + "Key-ring)"),
                       (2, "path has a placeholder credential (YOUR_ID)")]


def test_targets_fall_back_to_the_base_url() -> None:
    targets, skipped = probe_targets_for("https://api.example.com", [(7, "DELETE", "/x")])
    assert targets == [ProbeTarget("https://api.example.com")]
    assert skipped == [(7, "method is DELETE")]
    assert probe_targets_for("https://api.example.com", [])[0] == targets


# --- classification units -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "headers", "reason"),
    [
        (200, {}, None),
        (401, {}, "auth"),
        (403, {}, "auth"),
        (403, {"cf-mitigated": "challenge"}, "bot_challenge"),
        (503, {"server": "cloudflare", "cf-chl-bypass": "1"}, "bot_challenge"),
        (403, {"server": "cloudflare"}, "auth"),
        (999, {}, "bot_challenge"),
        (429, {}, "rate_limited"),
        (404, {}, "not_found"),
        (410, {}, "not_found"),
        (405, {}, "method_not_allowed"),
        (302, {}, "redirect"),
        (500, {}, "server_error"),
        (204, {}, "other"),
        (418, {}, "other"),
    ],
)
def test_http_reason(status: int, headers: dict[str, str], reason: str | None) -> None:
    assert http_reason(status, headers) == reason


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("7", now) == 7
    assert retry_after_seconds("Thu, 01 Jan 2026 12:00:30 GMT", now) == 30
    assert retry_after_seconds("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds(None, now) is None
    # digits float() refuses, and a date past datetime's last year: unreadable, not an error
    assert retry_after_seconds("\u00b2", now) is None
    assert retry_after_seconds("1 Jan 99999999999999999999 00:00 GMT", now) is None


# --- outcomes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "outcome", "reason", "status"),
    [
        ("/ok", "live", None, 200),
        ("/auth", "online", "auth", 401),
        ("/forbidden", "online", "auth", 403),
        ("/challenge", "online", "bot_challenge", 403),
        ("/linkedin", "online", "bot_challenge", 999),
        ("/missing", "online", "not_found", 404),
        ("/gone", "online", "not_found", 410),
        ("/method", "online", "method_not_allowed", 405),
        ("/teapot", "online", "other", 418),
        ("/not-modified", "online", "redirect", 304),
    ],
)
async def test_http_outcomes(
    web: FakeServer, path: str, outcome: str, reason: str | None, status: int
) -> None:
    result = await probe_url(web.url(path), FAST)
    assert (result.outcome, result.reason, result.http_status) == (outcome, reason, status)
    assert result.error_class is None
    assert result.attempts == 1  # none of these is retried
    assert result.final_url == web.url(path)
    assert web.hits[path] == 1
    assert_sane_timings(result)


async def test_slow_server_time_covers_the_delay(web: FakeServer) -> None:
    result = await probe_url(web.url("/slow?d=0.4"), FAST)
    assert result.outcome == "live"
    assert_sane_timings(result)
    assert result.total_ms is not None and result.total_ms >= 400
    assert result.ttfb_ms is not None and result.ttfb_ms >= 400


async def test_a_name_has_a_dns_phase(web: FakeServer) -> None:
    result = await probe_url(web.url("/ok", host="localhost"), FAST)
    assert result.outcome == "live"
    assert result.dns_ms is not None and result.dns_ms >= 0
    assert_sane_timings(result)


async def test_server_error_then_ok_is_retried_once(web: FakeServer) -> None:
    result = await probe_url(web.url("/flaky"), FAST)
    assert (result.outcome, result.attempts, result.http_status) == ("live", 2, 200)
    assert web.hits["/flaky"] == 2


async def test_persistent_server_error_uses_every_attempt(web: FakeServer) -> None:
    result = await probe_url(web.url("/unavailable"), FAST)
    assert (result.outcome, result.reason, result.attempts) == ("online", "server_error", 3)
    assert web.hits["/unavailable"] == 3


async def test_retry_after_seconds_is_honoured(web: FakeServer) -> None:
    result = await probe_url(web.url("/rate?after=1"), FAST)
    assert (result.outcome, result.attempts) == ("live", 2)
    first, second = web.arrivals("/rate")
    assert second - first >= 1.0


async def test_retry_after_http_date_is_honoured(web: FakeServer) -> None:
    result = await probe_url(web.url("/rate-date"), FAST)
    assert (result.outcome, result.attempts) == ("live", 2)
    first, second = web.arrivals("/rate-date")
    assert second - first >= 1.0  # two seconds ahead, with one-second resolution


async def test_retry_after_beyond_the_cap_is_not_retried_early(web: FakeServer) -> None:
    settings = replace(FAST, retry_after_cap=0.5)
    result = await probe_url(web.url("/rate?after=120"), settings)
    assert (result.outcome, result.reason, result.http_status) == ("online", "rate_limited", 429)
    assert result.attempts == 1
    assert web.hits["/rate"] == 1


# --- hosts given up on -----------------------------------------------------------------------


async def _held_off(_r: BaseRequest) -> StreamResponse:
    return Response(status=503, headers={"Retry-After": "1"})


async def _hanging(_r: BaseRequest) -> StreamResponse:
    await asyncio.sleep(30)  # far past the prober's timeout: the host hangs
    return Response(text="late")


async def test_a_host_failing_in_a_row_is_given_up_and_its_other_targets_are_not_sent() -> None:
    """A host holding us off (503 + Retry-After) and a host that hangs, 12 URLs each, beside a
    healthy host: each failing host gets its `host_failures_in_a_row` requests, no more (no
    retry, no second look); its other targets are results with nothing sent, `unchecked`,
    saying why; the healthy host's every target is probed as ever."""
    hosts = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    server = await FakeServer(hosts=hosts, routes={"/held": _held_off,
                                                   "/hang": _hanging}).start()
    settings = replace(FAST, per_host_concurrency=1, total_timeout=0.2, max_attempts=2,
                       retry_after_cap=0.05, confirm_failures=True, host_failures_in_a_row=4,
                       host_failure_budget=0)
    held, hanging, healthy = (
        [ProbeTarget(server.url(f"{path}?i={i}", host), f"entry-{host}", i) for i in range(12)]
        for path, host in zip(("/held", "/hang", "/ok"), hosts, strict=True))
    try:
        results = await probe_all([*held, *hanging, *healthy], settings)
    finally:
        await server.close()
    assert {host: len(server.arrivals(local=host)) for host in hosts} == {
        "127.0.0.1": 4, "127.0.0.2": 4, "127.0.0.3": 12}
    assert len(results) == 36  # one each: no second look at a given-up host's failures
    by_host = {host: [r for r in results if f"//{host}:" in r.url] for host in hosts}
    for host, failed in (("127.0.0.1", ("online", "server_error")),
                         ("127.0.0.2", ("unreachable", "read_timeout"))):
        sent = [r for r in by_host[host] if r.not_probed is None]
        assert [(r.outcome, r.reason or r.error_class, r.failure_class) for r in sent] == [
            (*failed, "transient")] * 4  # concluded from the one look the run had
        unsent = [r for r in by_host[host] if r.not_probed is not None]
        assert len(unsent) == 8
        assert {(r.outcome, r.attempts, r.http_status, r.failure_class, r.not_probed)
                for r in unsent} == {("unchecked", 0, None, None,
                                      "not probed this run: its host failed 4 times in a row")}
        assert not is_failure(unsent[0])
    assert [(r.outcome, r.attempts) for r in by_host["127.0.0.3"]] == [("live", 1)] * 12


async def test_a_host_s_row_counts_each_attempt_where_it_ended_not_the_redirects_on_it() -> None:
    """The requests in a host's row of failures are those that end an attempt there: a URL
    redirected on its host to a 503 adds one an attempt, its retry too, while the 302 on the
    way neither counts nor starts the row again; so one URL's two attempts give the host up
    at a row of 2, and its other URLs are not sent."""
    server = await FakeServer().start()
    settings = replace(FAST, max_attempts=2, per_host_concurrency=1, host_failures_in_a_row=2,
                       host_failure_budget=0)
    try:
        async with Prober(settings) as prober:
            results = [await prober.probe(server.url("/redirect?to="
                                                     + quote(f"/unavailable?i={i}", safe="")))
                       for i in range(3)]
    finally:
        await server.close()
    assert (server.hits["/redirect"], server.hits["/unavailable"]) == (2, 2)
    assert (results[0].outcome, results[0].http_status, results[0].attempts) == (
        "online", 503, 2)
    assert {r.not_probed for r in results[1:]} == {
        "not probed this run: its host failed 2 times in a row"}


def test_the_settings_give_every_prober_its_limits_on_a_failing_host() -> None:
    """The one process's prober and each shard's (`probe_shard` starts from these) alike."""
    from pipeline.settings import Settings

    probe = Settings(probe_host_failures=3, probe_host_budget=7.5).probe_settings()
    assert (probe.host_failures_in_a_row, probe.host_failure_budget) == (3, 7.5)
    defaults = Settings().probe_settings()
    assert (defaults.host_failures_in_a_row, defaults.host_failure_budget) == (
        ProbeSettings().host_failures_in_a_row, ProbeSettings().host_failure_budget)


async def test_a_host_whose_failures_cost_its_budget_is_given_up() -> None:
    """Its failures in a row not counted, a hanging host is still given up once its timed-out
    attempts took `host_failure_budget` seconds: a timed-out attempt costs at least its
    timeout (timed on the clock its deadline runs on), so a budget below one timeout is spent
    by the first, and none of the host's other targets is sent. The note names the budget,
    not the seconds measured, so that it reads the same in every release."""
    server = await FakeServer(routes={"/hang": _hanging}).start()
    settings = replace(FAST, total_timeout=0.2, max_attempts=2, per_host_concurrency=1,
                       host_failures_in_a_row=0, host_failure_budget=0.1)
    try:
        results = await probe_all([ProbeTarget(server.url(f"/hang?i={i}")) for i in range(12)],
                                  settings)
    finally:
        await server.close()
    assert server.hits["/hang"] == 1
    assert [(r.outcome, r.error_class) for r in results if r.not_probed is None] == [
        ("unreachable", "read_timeout")]
    assert {r.not_probed for r in results if r.not_probed is not None} == {
        "not probed this run: its host's failures took 0.1 s"}
    assert len(results) == 12


async def _holding_off(_r: BaseRequest) -> StreamResponse:
    return Response(status=429, headers={"Retry-After": "1"})


async def test_the_retry_after_waits_a_host_asks_for_add_up_to_its_budget() -> None:
    """What a host's failures cost is the time of their attempts and the waits they ask for:
    with the attempts costing nothing (a clock that stands still), two 429s asking for 1 s
    each spend a budget of 1.5 s, and the host's other targets are not sent."""
    server = await FakeServer(routes={"/held": _holding_off}).start()
    settings = replace(FAST, max_attempts=1, per_host_concurrency=1, retry_after_cap=1,
                       host_failures_in_a_row=0, host_failure_budget=1.5)
    try:
        async with Prober(settings, clock=lambda: 0.0) as prober:
            results = [await prober.probe(server.url(f"/held?i={i}")) for i in range(6)]
    finally:
        await server.close()
    assert server.hits["/held"] == 2
    assert [(r.outcome, r.reason) for r in results[:2]] == [("online", "rate_limited")] * 2
    assert {r.not_probed for r in results[2:]} == {
        "not probed this run: its host's failures took 1.5 s"}


async def test_a_retry_after_on_a_probe_s_last_attempt_holds_its_host_all_the_same() -> None:
    """A 429 asking to wait, on an attempt that will not be retried, still holds every other
    probe of the host, and the wait counts against the host's budget: a budget below it is
    spent at once, the host's other URLs are not sent."""
    server = await FakeServer(routes={"/held": _holding_off}).start()
    settings = replace(FAST, max_attempts=1, per_host_concurrency=1, host_failures_in_a_row=0,
                       host_failure_budget=0.5)
    try:
        results = await probe_all([ProbeTarget(server.url(f"/held?i={i}")) for i in range(3)],
                                  settings)
    finally:
        await server.close()
    assert server.hits["/held"] == 1
    assert [r.outcome for r in results] == ["online", "unchecked", "unchecked"]


async def _held_for_long(_r: BaseRequest) -> StreamResponse:
    return Response(status=503, headers={"Retry-After": "600"})


async def test_a_probe_held_off_by_its_host_ends_once_the_host_is_given_up() -> None:
    """One probe of a host waits out the host's Retry-After (600 s, within the cap) when
    another, hanging, is the host's last failure allowed: the waiting probe is woken and ends
    with the answer it had, nothing more sent, and the run ends with the give-up, not the
    wait (its own timeout, far above the one and far below the other, tells them apart)."""
    server = await FakeServer(routes={"/held": _held_for_long, "/hang": _hanging}).start()
    settings = replace(FAST, per_host_concurrency=2, total_timeout=0.3, max_attempts=2,
                       retry_after_cap=600, host_failures_in_a_row=2, host_failure_budget=0)
    try:
        async with asyncio.timeout(60):
            results = await probe_all(
                [ProbeTarget(server.url("/hang")), ProbeTarget(server.url("/held"))], settings)
    finally:
        await server.close()
    assert (server.hits["/hang"], server.hits["/held"]) == (1, 1)
    assert [(r.outcome, r.reason or r.error_class, r.attempts) for r in results] == [
        ("unreachable", "read_timeout", 1), ("online", "server_error", 1)]


async def test_the_backoff_before_a_retry_counts_towards_its_host_s_budget() -> None:
    """The wait before a retry is what the host's failures cost, a backoff as a Retry-After:
    with the attempts costing nothing (a clock that stands still), a 503 whose backoff is
    longer than the budget spends it, and neither its retry nor the host's other targets are
    sent."""
    server = await FakeServer().start()
    settings = replace(FAST, max_attempts=3, per_host_concurrency=1, backoff_base=0.02,
                       host_failures_in_a_row=0, host_failure_budget=0.005)
    try:
        async with Prober(settings, clock=lambda: 0.0) as prober:
            results = [await prober.probe(server.url(f"/unavailable?i={i}")) for i in range(4)]
    finally:
        await server.close()
    assert server.hits["/unavailable"] == 1
    assert (results[0].outcome, results[0].http_status, results[0].attempts) == (
        "online", 503, 1)
    assert {r.not_probed for r in results[1:]} == {
        "not probed this run: its host's failures took 0.005 s"}


async def test_a_probe_backing_off_ends_once_its_host_is_given_up() -> None:
    """One probe of a host backs off before its retry (a backoff of ten minutes and more)
    when another, hanging, is the host's last failure allowed: the backing-off probe is woken
    and ends with the answer it had, nothing more sent, as one held off by a Retry-After is
    (the run's own timeout, far above the hang and far below the backoff, tells them
    apart)."""
    server = await FakeServer(routes={"/hang": _hanging}).start()
    settings = replace(FAST, per_host_concurrency=2, total_timeout=0.3, max_attempts=2,
                       backoff_base=1200, host_failures_in_a_row=2, host_failure_budget=0)
    try:
        async with asyncio.timeout(60):
            results = await probe_all([ProbeTarget(server.url("/hang")),
                                       ProbeTarget(server.url("/unavailable"))], settings)
    finally:
        await server.close()
    assert (server.hits["/hang"], server.hits["/unavailable"]) == (1, 1)
    assert [(r.outcome, r.reason or r.error_class, r.attempts) for r in results] == [
        ("unreachable", "read_timeout", 1), ("online", "server_error", 1)]


async def test_a_target_redirected_to_a_host_given_up_is_the_answer_of_its_own_host() -> None:
    """A URL of a healthy host redirecting to one given up on was asked, and answered: it is a
    probe of that answer, the redirect (`online`, no failure), ending on the URL asked, with
    nothing sent to the host given up on; its note says the redirect was not followed and
    names the host it leads to, not its own."""
    hosts = ("127.0.0.1", "127.0.0.2")
    server = await FakeServer(hosts=hosts).start()
    settings = replace(FAST, max_attempts=1, host_failures_in_a_row=1, host_failure_budget=0)
    failing = server.url("/unavailable", hosts[1])
    redirecting = server.url(f"/redirect?to={quote(failing)}")
    try:
        async with Prober(settings) as prober:
            first = await prober.probe(failing)
            redirected = await prober.probe(redirecting)
    finally:
        await server.close()
    assert (first.outcome, first.http_status) == ("online", 503)
    assert (server.hits["/redirect"], server.hits["/unavailable"]) == (1, 1)
    assert (redirected.outcome, redirected.http_status, redirected.reason, redirected.attempts,
            redirected.redirects, redirected.not_probed) == (
        "online", 302, "redirect", 1, 0, None)
    assert redirected.final_url.startswith(server.url("/redirect?to="))  # yarl's spelling
    assert redirected_to(redirected.url, redirected.final_url, redirected.redirects) is None
    assert redirected.total_ms is not None
    assert not is_failure(redirected)
    assert redirected.note == ("its redirect to 127.0.0.2 was not followed this run: that "
                               "host failed 1 time in a row")
    assert redirected.error == redirected.note


async def test_a_retry_or_second_look_cut_short_at_a_redirect_leaves_the_failure_seen() -> None:
    """A URL redirecting to a host that fails, and is given up on by that failure: its retry
    and its second look stop at the redirect, and neither replaces the failure it retried or
    confirmed (a redirect not followed is no answer of the API): the one look decides."""
    hosts = ("127.0.0.1", "127.0.0.2")
    server = await FakeServer(hosts=hosts).start()
    settings = replace(FAST, max_attempts=2, confirm_failures=True, host_failures_in_a_row=1,
                       host_failure_budget=0)
    redirecting = server.url(f"/redirect?to={quote(server.url('/unavailable', hosts[1]))}")
    try:
        results = await probe_all([ProbeTarget(redirecting, "example-weather", 1)], settings)
    finally:
        await server.close()
    assert (server.hits["/redirect"], server.hits["/unavailable"]) == (3, 1)
    assert [(r.outcome, r.http_status, r.attempts, r.confirmation, r.failure_class, r.note)
            for r in results] == [("online", 503, 1, False, "transient", None)]


# --- redirects ------------------------------------------------------------------------------


async def test_redirect_chain_is_followed_by_hand(web: FakeServer) -> None:
    result = await probe_url(web.url("/chain?n=3"), FAST)
    assert (result.outcome, result.redirects, result.http_status) == ("live", 3, 200)
    assert result.final_url == web.url("/ok")
    assert web.hits["/chain"] == 3 and web.hits["/ok"] == 1
    assert_sane_timings(result)


async def test_too_many_redirects_is_online_redirect(web: FakeServer) -> None:
    result = await probe_url(web.url("/chain?n=7"), replace(FAST, max_redirects=5))
    assert (result.outcome, result.reason, result.http_status) == ("online", "redirect", 302)
    assert result.redirects == 5
    assert web.hits["/chain"] == 6 and web.hits["/ok"] == 0


async def test_redirect_loop(web: FakeServer) -> None:
    result = await probe_url(web.url("/loop-a"), FAST)
    assert (result.outcome, result.error_class, result.http_status) == (
        "unreachable",
        "redirect_loop",
        None,
    )
    assert web.hits["/loop-a"] == 1 and web.hits["/loop-b"] == 1
    assert result.attempts == 1


# --- no answer ------------------------------------------------------------------------------


async def test_connection_refused() -> None:
    result = await probe_url(f"http://127.0.0.1:{closed_port()}/", FAST)
    assert (result.outcome, result.error_class, result.attempts) == ("unreachable", "refused", 1)
    assert result.total_ms is None and result.http_status is None
    assert_sane_timings(result)


async def test_connect_timeout() -> None:
    with unaccepting_port() as port:
        settings = replace(FAST, connect_timeout=0.3, max_attempts=2)
        result = await probe_url(f"http://127.0.0.1:{port}/", settings)
    assert (result.error_class, result.attempts) == ("connect_timeout", 2)
    assert result.connect_ms is None and result.total_ms is None


async def test_server_that_never_answers_times_out_and_is_retried() -> None:
    server = await RawServer("hang").start()
    try:
        settings = replace(FAST, total_timeout=0.5, max_attempts=2)
        result = await probe_url(server.url(), settings)
    finally:
        await server.close()
    assert (result.error_class, result.attempts) == ("read_timeout", 2)
    assert result.connect_ms is not None  # it did connect
    assert result.total_ms is None
    assert_sane_timings(result)


async def test_garbage_instead_of_http_is_a_protocol_error() -> None:
    server = await RawServer("garbage").start()
    try:
        result = await probe_url(server.url(), FAST)
    finally:
        await server.close()
    assert (result.error_class, result.attempts) == ("protocol", 1)
    assert result.error and "\n" not in result.error


@pytest_asyncio.fixture(loop_scope="function")
async def canned() -> AsyncIterator[Any]:
    """Start CannedServers answering with the bytes given (on 127.0.0.1 unless a host is
    given); each is closed after the test."""
    servers: list[CannedServer] = []

    async def start(answer: bytes, host: str = "127.0.0.1", later: bytes = b"") -> CannedServer:
        servers.append(await CannedServer(answer, host=host, later=later).start())
        return servers[-1]

    yield start
    for server in servers:
        await server.close()


@pytest.mark.parametrize(
    ("head", "detail"),
    [
        (b"HTTP/1.1 200 OK\r\nBad Header: x\r\n", "Invalid header token: b'Bad Header: x'"),
        (b"HTTP/1.1 abc OK\r\n", "Bad status line: Invalid status code: b'HTTP/1.1 abc OK'"),
        (b"HTTP/1.1 200 OK\r\nX-Note: a\x00b\r\n", "Invalid HTTP header: b'a\\x00b'"),
    ],
)
async def test_an_answer_that_cannot_be_parsed_is_told_in_the_prober_s_words_with_no_status(
    canned: Any, head: bytes, detail: str,
) -> None:
    """aiohttp reports an answer it cannot parse as `400, message: ...`, which reads as if the
    server had answered 400: the error says the answer could not be parsed and what was wrong
    with it, and no HTTP status is recorded."""
    server = await canned(head + b"Content-Length: 0\r\n\r\n")
    result = await probe_url(server.url(), FAST)
    assert (result.outcome, result.error_class, result.http_status) == (
        "unreachable", "protocol", None)
    assert result.error == f"the server's answer could not be parsed: {detail}"


async def test_a_flood_of_interim_answers_ends_the_probe_as_a_protocol_error(
    canned: Any, web: FakeServer,
) -> None:
    """A server answering with 1xx after 1xx, never a final answer, is given up after a few
    (`MAX_INTERIM_ANSWERS`): a protocol error, not retried, not waited on until the deadline
    while its answers queue up in memory; a host probed beside it is not held up, and a few
    interim answers before the final one are still read as the answer they precede."""
    flood = await canned(b"HTTP/1.1 102 Processing\r\n\r\n" * 100_000)
    hinted = await canned(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n" * 3
                          + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", host="127.0.0.2")
    settings = replace(FAST, total_timeout=60)  # only a hang would reach it
    results = await asyncio.wait_for(probe_all(
        [ProbeTarget(flood.url()), ProbeTarget(hinted.url()), ProbeTarget(web.url("/ok"))],
        settings), timeout=50)
    assert [(r.outcome, r.error_class, r.attempts) for r in results] == [
        ("unreachable", "protocol", 1), ("live", None, 1), ("live", None, 1)]
    assert results[0].error == (f"TooManyInterimAnswers: more than {MAX_INTERIM_ANSWERS} "
                                "interim (1xx) answers, no final one")
    assert flood.requests == 1


async def test_what_a_hostile_server_answers_ends_as_a_result_never_an_error(
    canned: Any, web: FakeServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """A Retry-After that is no number and no date, a redirect to a host name that cannot be
    encoded, a status line outside HTTP's, and a header that is not UTF-8: each probe ends in
    a result of its own, the run goes on, nothing is logged with a traceback, and every text
    of a result is one a store takes."""
    busy = await canned(b"HTTP/1.1 503 Busy\r\nRetry-After: \xc2\xb2\r\nContent-Length: 0\r\n\r\n")
    far = await canned(b"HTTP/1.1 503 Busy\r\nRetry-After: 1 Jan 99999999999999999999 00:00 "
                       b"GMT\r\nContent-Length: 0\r\n\r\n")
    odd_host = await canned(b"HTTP/1.1 302 Found\r\nLocation: http://a..b/\r\n"
                            b"Content-Length: 0\r\n\r\n")
    zero = await canned(b"HTTP/1.1 000 Zero\r\nContent-Length: 0\r\n\r\n")
    latin = await canned(b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: caf\xe9\r\n"
                         b"Content-Length: 0\r\n\r\n")
    urls = [server.url() for server in (busy, far, odd_host, zero, latin)] + [web.url("/ok")]
    with caplog.at_level("WARNING", logger="pipeline.probing.probe"):
        results = await probe_all([ProbeTarget(url) for url in urls], FAST)
    by_url = {result.url: result for result in results}
    assert [by_url[url].outcome for url in urls] == [
        "online", "online", "unreachable", "unreachable", "live", "live"]
    assert (by_url[busy.url()].reason, by_url[busy.url()].attempts) == ("server_error", 3)
    assert by_url[far.url()].http_status == 503
    assert (by_url[odd_host.url()].error_class, by_url[odd_host.url()].attempts) == (
        "malformed", 1)
    assert (by_url[zero.url()].error_class, by_url[zero.url()].error) == (
        "protocol", "not an HTTP status: 0")
    assert by_url[latin.url()].cors_allow_origin == "caf?"
    for result in results:
        for text in (result.url, result.error, result.final_url, result.cors_allow_origin):
            assert text is None or (text.encode("utf-8") and "\x00" not in text)
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_fault_of_the_prober_s_own_ends_its_url_not_the_run(
    web: FakeServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """An error no probe foresaw (here the reading of a 404's reason fails) ends that URL's
    probe as a protocol error, logged once; the other URLs' results are kept."""
    from pipeline.probing import probe as prober

    def failing(status: int, headers: Any) -> str | None:
        if status == 404:
            raise RuntimeError("a fault of the prober's own")
        return http_reason(status, headers)

    monkeypatch.setattr(prober, "http_reason", failing)
    with caplog.at_level("WARNING", logger="pipeline.probing.probe"):
        results = await probe_all([ProbeTarget(web.url("/missing")), ProbeTarget(web.url("/ok"))],
                                  FAST)
    assert [(r.outcome, r.error_class, r.error) for r in results] == [
        ("unreachable", "protocol", "RuntimeError: a fault of the prober's own"),
        ("live", None, None)]
    assert [record.getMessage() for record in caplog.records] == [
        f"unexpected error probing {web.url('/missing')}: RuntimeError: a fault of the "
        "prober's own"]


@pytest.mark.parametrize(
    ("location", "outcome", "error_class"),
    [
        ("ftp://ftp.example.com/x", "unreachable", "blocked"),
        ("mailto:api@example.com", "unreachable", "blocked"),
        ("file:///etc/passwd", "unreachable", "blocked"),
        ("javascript:alert(1)", "unreachable", "blocked"),
        # Locations whose host no request can go to: not followed, the 302 stands.
        ("http://[fe80::1%25eth0]/", "online", None),
        ("https://exa mple.com/", "online", None),
        ("http://127.0.0.1:0/", "online", None),  # no server listens on port 0
    ],
)
async def test_a_redirect_not_followed_never_becomes_the_final_url(
    canned: Any, location: str, outcome: str, error_class: str | None,
) -> None:
    """The URL a probe ended on is the last one requested: a Location the guard refuses, or
    one that is no URL the release could publish, is never a probe's `final_url`."""
    server = await canned(b"HTTP/1.1 302 Found\r\nLocation: " + location.encode()
                          + b"\r\nContent-Length: 0\r\n\r\n")
    result = await probe_url(server.url("/v1"), replace(FAST, max_attempts=1))
    assert (result.outcome, result.error_class) == (outcome, error_class)
    assert result.final_url == server.url("/v1")
    if outcome == "online":
        assert (result.http_status, result.reason, result.redirects) == (302, "redirect", 0)
    assert server.requests == 1
    # Nothing but the probed URL was requested: a status names no final URL of its own.
    assert redirected_to(result.url, result.final_url, result.redirects) is None


@pytest.mark.parametrize("length", [FINAL_URL_MAX_LENGTH, FINAL_URL_MAX_LENGTH + 1, 30_000])
async def test_the_final_url_is_kept_whole_up_to_its_bound_and_not_at_all_past_it(
    canned: Any, length: int,
) -> None:
    """A server may redirect to an address as long as a header (aiohttp reads 32 KiB): the
    final URL a probe records, stores and publishes is whole up to `FINAL_URL_MAX_LENGTH`
    characters, and none past it, never a cut address that would lead elsewhere."""
    page = await canned(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", host="127.0.0.2")
    far = page.url("/") + "x" * (length - len(page.url("/")))
    server = await canned(b"HTTP/1.1 302 Found\r\nLocation: " + far.encode()
                          + b"\r\nContent-Length: 0\r\n\r\n")
    result = await probe_url(server.url("/v1"), FAST)
    assert (result.outcome, result.http_status, result.redirects) == ("live", 200, 1)
    assert page.requests == 1  # the long address was followed all the same
    kept = far if length <= FINAL_URL_MAX_LENGTH else None
    assert result.final_url == kept
    assert redirected_to(result.url, result.final_url, result.redirects) == kept
    # The bound is the one a status's finalUrl promises its readers.
    assert f"longer than {FINAL_URL_MAX_LENGTH:,} characters" in (
        Status.model_fields["final_url"].description or "")


async def test_a_page_whose_address_is_too_long_to_keep_is_named_without_it(canned: Any) -> None:
    """A listed endpoint redirected to an HTML page at an address past the bound is judged as
    any such redirect, its error naming no address rather than `None`."""
    page = await canned(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 0"
                        b"\r\n\r\n", host="127.0.0.2")
    server = await canned(b"HTTP/1.1 302 Found\r\nLocation: " + page.url("/login?").encode()
                          + b"x" * FINAL_URL_MAX_LENGTH + b"\r\nContent-Length: 0\r\n\r\n")
    result, = await probe_all([ProbeTarget(server.url("/v1"), "example-weather", 1)], FAST)
    assert (result.outcome, result.http_status, result.final_url) == ("online", 302, None)
    assert result.error == "redirected to an HTML page at another path"


async def test_port_0_is_malformed_and_settled_not_a_refusal_to_retry() -> None:
    """No server listens on port 0: the URL is malformed, as one with port 65536, and settled
    (dead) at once, never retried nor confirmed as a refused connection would be."""
    results = await probe_all([ProbeTarget("http://127.0.0.1:0/v1", "example-weather", 1)],
                              replace(FAST, confirm_failures=True))
    assert [(r.error_class, r.attempts, r.failure_class) for r in results] == [
        ("malformed", 1, "dead")]
    assert results[0].final_url is None  # nothing was requested


def test_storable_text_loses_what_no_store_takes() -> None:
    assert storable("caf\udce9 \ud800x\x00y") == "caf? ?xy"
    assert storable("café") == "café"
    assert storable(None) is None


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (b"a\x01b\x1bc\x7fd", "abcd"),  # C0 controls, a terminal escape, DEL
        (b"https://x\xe2\x80\xaeevil\xe2\x81\xa6.example", "https://xevil.example"),  # bidi
        (b"a\x0bb\x0cc\td", "a b c d"),  # spacing controls read as a space
        (b"\xef\xbf\xbe\xef\xbf\xbf\xef\xb7\x90*", "*"),  # noncharacters
        (b"\xc2\x85\xc2\x9b*", "*"),  # C1 controls
        (b"https://caf\xc3\xa9.example", "https://café.example"),
    ],
)
async def test_a_header_value_is_stored_without_what_would_reorder_or_control_a_reader_s_text(
    canned: Any, value: bytes, kept: str,
) -> None:
    """Access-Control-Allow-Origin, published as `cors.allowOrigin`, is kept without control
    codes, noncharacters or bidirectional controls: they would reorder or drive what a page or
    a terminal shows around it."""
    server = await canned(b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: " + value
                          + b"\r\nContent-Length: 0\r\n\r\n")
    result = await probe_url(server.url(), FAST)
    assert (result.outcome, result.cors_allow_origin) == ("live", kept)


async def test_a_header_value_of_nothing_a_reader_could_see_is_absent(canned: Any) -> None:
    """An Access-Control-Allow-Origin made only of what is not stored (controls, a bidi
    override) says nothing: it is stored as absent (null), as no header is, not as ""."""
    server = await canned(b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: \x01\xe2\x80\xae\x1b"
                          b"\r\nContent-Length: 0\r\n\r\n")
    result = await probe_url(server.url(), FAST)
    assert (result.outcome, result.cors_allow_origin) == ("live", None)


async def test_waiting_out_a_redirect_target_s_retry_after_is_no_part_of_the_deadline(
    canned: Any,
) -> None:
    """A redirects to B, which asks to be left alone for 2 s (503, Retry-After): the next
    attempt waits out B's time, then asks it again and reads its answer; the wait is not
    counted in the attempt's deadline (1 s), which would throw the answer away."""
    later = await canned(b"HTTP/1.1 503 Busy\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
                         host="127.0.0.2")
    redirecting = await canned(f"HTTP/1.1 302 Found\r\nLocation: {later.url()}\r\n"
                               "Content-Length: 0\r\n\r\n".encode())
    settings = replace(FAST, total_timeout=1.0, max_attempts=2)
    started = asyncio.get_running_loop().time()
    result = await probe_url(redirecting.url(), settings)
    assert (result.outcome, result.http_status, result.attempts) == ("online", 503, 2)
    assert later.requests == 2 and asyncio.get_running_loop().time() - started >= 2


async def test_reset_connection_is_retried() -> None:
    server = await RawServer("reset").start()
    try:
        result = await probe_url(server.url(), FAST)
    finally:
        await server.close()
    assert (result.outcome, result.error_class, result.attempts) == ("unreachable", "reset", 3)
    assert server.connections == 3


async def test_self_signed_certificate_is_a_tls_error(tmp_path: Path) -> None:
    server = await FakeServer(ssl_context=self_signed_context(tmp_path)).start()
    try:
        result = await probe_url(server.url("/ok"), FAST)
    finally:
        await server.close()
    assert (result.outcome, result.error_class, result.attempts) == ("unreachable", "tls", 1)
    assert server.requests == []


async def test_unresolvable_name() -> None:
    result = await probe_url("http://no-such-api.invalid/", replace(FAST, max_attempts=2))
    assert (result.outcome, result.error_class) == ("unreachable", "dns")


async def test_nxdomain_is_not_retried_but_a_temporary_dns_failure_is() -> None:
    dns = FakeDNS({"flaky-dns.test": socket.EAI_AGAIN})
    async with Prober(FAST, inner_resolver=dns) as prober:
        gone = await prober.probe("http://gone.test/")
        flaky = await prober.probe("http://flaky-dns.test/")
    assert (gone.error_class, gone.attempts) == ("dns", 1)
    assert (flaky.error_class, flaky.attempts) == ("dns", 3)


@pytest.mark.parametrize("coding", [b"br", b"zstd"])
async def test_an_answer_whose_body_is_in_a_coding_not_decoded_here_is_still_an_answer(
    canned: Any, coding: bytes,
) -> None:
    """A server may compress its body in a coding aiohttp decodes only with a module of its
    own (brotli, zstandard), whatever was asked: the body is never read, so the answer stands
    on its status and headers, not failed as an error of the protocol for a body nobody
    decodes."""
    server = await canned(b"HTTP/1.1 200 OK\r\nContent-Encoding: " + coding
                          + b"\r\nContent-Length: 8\r\n\r\n\x1b\x07\x00\xf8\xff\x7f\x00\x00")
    result = await probe_url(server.url(), FAST)
    assert (result.outcome, result.http_status, result.error_class) == ("live", 200, None)


@pytest.mark.parametrize(
    ("head", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"zz\r\nnot a chunk\r\n"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", b"okHTTP/9 not an answer\r\n\r\n"),
        (b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\n\n",
         b"-1\r\n"),
    ],
)
@pytest.mark.parametrize("body_read", ["with-the-head", "later", "with-the-head-s-last-byte"])
async def test_a_body_that_cannot_be_parsed_leaves_the_answer_its_head_gave(
    canned: Any, head: bytes, body: bytes, body_read: str,
) -> None:
    """The verdict of a probe is its answer's head, the body never read: a broken chunked
    encoding or bytes past the body's length do not make the 200 a protocol error, whether
    they come in the read that brought the head, in a later one, or in one that brings the
    head's last byte too (the prober's verdict was `protocol` for the first and the last, and
    `live` for the second)."""
    answer = head + body
    cut = {"with-the-head": len(answer), "later": len(head)}.get(body_read, len(head) - 1)
    server = await canned(answer[:cut], later=answer[cut:])
    result = await probe_url(server.url(), FAST)
    assert (result.outcome, result.http_status, result.error_class, result.error) == (
        "live", 200, None, None)


async def test_huge_body_is_not_downloaded(web: FakeServer) -> None:
    result = await probe_url(web.url("/huge"), FAST)
    assert (result.outcome, result.http_status) == ("live", 200)
    await asyncio.wait_for(web.stream_done.wait(), timeout=10)
    # What left the server is what fits in socket buffers, not the 1 GiB announced.
    assert web.streamed < 64 * 1024 * 1024 < HUGE_BODY


# --- what a probe sends -------------------------------------------------------------------


async def test_no_credentials_no_cookies_no_body(web: FakeServer) -> None:
    url = web.url("/cookie").replace("http://", "http://user:secret@")
    result = await probe_url(url, FAST)
    assert result.outcome == "live" and result.redirects == 1
    assert result.final_url == web.url("/ok")
    assert [r.path for r in web.requests] == ["/cookie", "/ok"]
    for request in web.requests:
        assert request.method == "GET"
        assert request.body_length == 0
        names = {name.lower() for name in request.headers}
        assert not names & {"authorization", "cookie", "proxy-authorization"}
        assert "content-length" not in names or request.headers["Content-Length"] == "0"
        assert request.headers["User-Agent"] == FAST.user_agent


# --- politeness -----------------------------------------------------------------------------


async def test_per_host_concurrency_is_held(web: FakeServer) -> None:
    settings = replace(FAST, per_host_concurrency=2)
    targets = [ProbeTarget(web.url(f"/slow?d=0.2&i={i}")) for i in range(6)]
    results = await probe_all(targets, settings)
    assert all(r.outcome == "live" for r in results)
    assert web.max_active["127.0.0.1"] == 2


async def test_per_host_interval_is_held(web: FakeServer) -> None:
    settings = replace(FAST, per_host_interval=0.25)
    await probe_all([ProbeTarget(web.url(f"/ok?i={i}")) for i in range(4)], settings)
    arrivals = web.arrivals("/ok")
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(gaps) == 3
    assert min(gaps) >= 0.25 - 0.01  # timer granularity


async def test_the_interval_holds_between_request_starts_under_contention() -> None:
    """Many hosts, two global slots: a probe whose host's turn came up still waits for a slot,
    and the next request to that host must not start less than the interval after it did.
    Retries (the 503 answers) and the confirmation re-probe are requests to the host too."""
    interval = 0.2
    hosts = tuple(f"127.0.0.{n}" for n in range(1, 13))
    server = await FakeServer(hosts=hosts).start()
    try:
        settings = replace(FAST, global_concurrency=2, per_host_concurrency=2,
                           per_host_interval=interval, max_attempts=2, backoff_base=0.01,
                           confirm_failures=True)
        targets = [
            ProbeTarget(server.url(f"/{'unavailable' if i == 0 else 'slow'}?d=0.05&i={i}", host))
            for host in hosts
            for i in range(4)
        ]
        await probe_all(targets, settings)
    finally:
        await server.close()
    for host in hosts:
        arrivals = server.arrivals(local=host)
        assert len(arrivals) == 3 + 2 + 2  # 3 URLs, 2 attempts at the 503, 2 to confirm it
        gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
        # Arrivals are stamped by the server: a loaded machine may delay one request's arrival
        # more than the next one's, so a gap may read a little short of the interval the
        # prober kept between starts. Without the interval, two slots per host would let two
        # requests arrive together (gaps near 0), far below this bound.
        assert min(gaps) >= interval * 0.75, (host, gaps)


@pytest.mark.parametrize(("answer", "spacing"), [(0.05, 0.3), (0.4, 0.4)])
async def test_shards_redirected_to_a_host_none_was_dealt_share_its_politeness(
    three_hosts: FakeServer, answer: float, spacing: float,
) -> None:
    """Two shards (two probers at once, each dealt its own host) whose URLs all redirect to a
    third host: each starts its requests there two intervals apart (0.3 s) and one at a time
    (a slow answer spaces them more), so that host sees no more than one prober's interval
    and concurrency allow."""
    interval = 0.15
    shared = three_hosts.url(f"/slow?d={answer}", host="127.0.0.3")
    settings = replace(FAST, per_host_concurrency=2, per_host_interval=interval, sharing=2)

    def shard(host: str) -> Any:
        targets = [ProbeTarget(three_hosts.url(f"/redirect?to={quote(f'{shared}&s={host}&i={i}')}",
                                               host=host)) for i in range(4)]
        return probe_all(targets, replace(settings, own_hosts=frozenset({host})))

    results = await asyncio.gather(shard("127.0.0.1"), shard("127.0.0.2"))
    assert [r.outcome for found in results for r in found] == ["live"] * 8
    assert all(r.redirects == 1 for found in results for r in found)
    for host in ("127.0.0.1", "127.0.0.2"):
        starts = [r.arrived for r in three_hosts.requests
                  if r.local == "127.0.0.3" and f"s={host}" in r.query]
        assert len(starts) == 4
        gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
        # Server-stamped arrivals, with the loaded machine's margin (see the test above): one
        # prober's interval alone (0.15 s) stays below it.
        assert min(gaps) >= spacing * 0.75, (host, gaps)
    assert three_hosts.max_active["127.0.0.3"] <= 2  # the shared host's own limit, over both
    own = [later - earlier for earlier, later in
           itertools.pairwise(three_hosts.arrivals("/redirect", local="127.0.0.1"))]
    assert len(own) == 3 and min(own) >= interval * 0.75


async def test_a_host_waiting_its_interval_holds_no_global_slot(three_hosts: FakeServer) -> None:
    """One global slot, two hosts: B's first request must not wait behind A's interval."""
    settings = replace(FAST, global_concurrency=1, per_host_concurrency=1, per_host_interval=0.4)
    a = [ProbeTarget(three_hosts.url(f"/ok?a={i}", host="127.0.0.1")) for i in range(3)]
    b = [ProbeTarget(three_hosts.url(f"/ok?b={i}", host="127.0.0.2")) for i in range(3)]
    await probe_all(a + b, settings)
    from_a = three_hosts.arrivals(local="127.0.0.1")
    from_b = three_hosts.arrivals(local="127.0.0.2")
    assert len(from_a) == len(from_b) == 3
    assert from_b[0] < from_a[1]
    assert from_b[1] < from_a[2]


async def test_global_concurrency_is_held(three_hosts: FakeServer) -> None:
    settings = replace(FAST, global_concurrency=2, per_host_concurrency=3)
    targets = [
        ProbeTarget(three_hosts.url(f"/slow?d=0.15&i={i}", host=f"127.0.0.{1 + i % 3}"))
        for i in range(9)
    ]
    results = await probe_all(targets, settings)
    assert all(r.outcome == "live" for r in results)
    assert three_hosts.max_active_total == 2


async def test_the_busiest_host_starts_first_and_its_urls_go_before_new_hosts(
    three_hosts: FakeServer,
) -> None:
    """One global slot. Host .2 has three URLs, listed after .1 and before .3 (one URL each):
    it starts first (the longest chain decides the end), and its later URLs take the slot
    before any host not yet started (a host is finished before others are opened)."""
    settings = replace(FAST, global_concurrency=1, per_host_concurrency=2)
    targets = [
        ProbeTarget(three_hosts.url("/ok?a", host="127.0.0.1")),
        *(ProbeTarget(three_hosts.url(f"/ok?b={i}", host="127.0.0.2")) for i in range(3)),
        ProbeTarget(three_hosts.url("/ok?c", host="127.0.0.3")),
    ]
    results = await probe_all(targets, settings)
    assert [r.outcome for r in results] == ["live"] * 5
    assert [r.local for r in three_hosts.requests] == [
        "127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.1", "127.0.0.3"]


# --- probe_all ------------------------------------------------------------------------------


async def test_probe_all_keeps_target_order_and_probes_duplicates_once(web: FakeServer) -> None:
    targets = [
        ProbeTarget(web.url("/slow?d=0.2"), "a", 1),
        ProbeTarget(web.url("/missing"), "b", 2),
        ProbeTarget(web.url("/slow?d=0.2"), "c", 3),
    ]
    seen: list[ProbeResult] = []
    results = await probe_all(targets, FAST, on_result=seen.append)
    assert [(r.url, r.entry_id, r.endpoint_id) for r in results] == [
        (t.url, t.entry_id, t.endpoint_id) for t in targets
    ]
    assert [r.outcome for r in results] == ["live", "online", "live"]
    assert web.hits["/slow"] == 1
    assert sorted(r.entry_id or "" for r in seen) == ["a", "b", "c"]


async def test_probe_all_keeps_a_bounded_number_of_probes_waiting(web: FakeServer) -> None:
    """A catalogue's probes are started as the window lets them, not all at once (each
    waiting probe weighs kilobytes): with one global slot, at most WINDOW_PER_SLOT of them
    exist at a time, and every target still gets its result, in target order."""
    settings = replace(FAST, global_concurrency=1)
    targets = [ProbeTarget(web.url(f"/ok?n={n}"), f"e{n}") for n in range(3 * WINDOW_PER_SLOT)]
    alive: list[int] = []
    results = await probe_all(
        targets, settings, on_result=lambda _r: alive.append(len(asyncio.all_tasks()))
    )
    assert [r.entry_id for r in results] == [t.entry_id for t in targets]
    assert all(r.outcome == "live" for r in results)
    assert max(alive) <= WINDOW_PER_SLOT + 2  # the window, the run itself and its feeder
    assert max(alive) >= WINDOW_PER_SLOT // 2  # and it is used: the slot never waits


async def test_probe_all_of_nothing() -> None:
    assert await probe_all([], FAST) == []


# --- keep-alive connections and the deadline of an attempt ---------------------------------


async def test_an_answer_a_server_sends_unasked_on_an_idle_connection_is_no_later_url_s(
) -> None:
    """A server whose body runs past its Content-Length, here a whole 404 written after each
    200, leaves bytes on the kept-alive connection while it waits in the pool: the next URL
    of the host is asked on a fresh connection, and reads its own answer, not that one."""
    async def overspeaking(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                await asyncio.sleep(0.05)  # after the answer was read whole
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(overspeaking, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        results = await probe_all([ProbeTarget(f"{base}/{n}") for n in range(3)],
                                  replace(FAST, per_host_concurrency=1, per_host_interval=0.5))
    finally:
        server.close()
    assert [(r.outcome, r.http_status) for r in results] == [("live", 200)] * 3


async def test_a_keep_alive_connection_closed_after_a_redirect_is_resent_fresh() -> None:
    """The server answers a redirect on a kept-alive connection, then closes that connection
    when the next hop arrives on it, unanswered: the hop goes again on a fresh connection, and
    the live API is reported live, in one attempt."""
    server = await RawServer("drop-after-redirect").start()
    try:
        result = await probe_url(server.url("/start"), replace(FAST, max_attempts=1))
    finally:
        await server.close()
    assert (result.outcome, result.http_status, result.redirects) == ("live", 200, 1)
    assert result.attempts == 1
    assert server.dropped == 1 and server.connections == 2


async def test_a_redirect_chain_ends_within_one_deadline_per_attempt(web: FakeServer) -> None:
    """Six hops of 0.6 s each would take 3.6 s; an attempt's deadline (1 s) covers all its
    hops, so two attempts end in about 2 s, not 7.2 s."""
    settings = replace(FAST, total_timeout=1.0, max_attempts=2)
    started = asyncio.get_running_loop().time()
    result = await probe_url(web.url("/slow-chain?n=6&d=0.6"), settings)
    took = asyncio.get_running_loop().time() - started
    assert (result.outcome, result.error_class, result.attempts) == (
        "unreachable", "read_timeout", 2)
    assert result.redirects < 6
    # without the attempt's deadline each attempt would follow all six hops (7.2 s); the
    # bound is one attempt's whole chain, loose enough for a loaded machine
    assert took < 6 * 0.6


async def closed_by_the_client(
    server: FakeServer, within: float = 2.0, host: str | None = None,
) -> bool:
    """Whether every connection to `server` (to its address `host` alone, if given) is
    closed within `within` seconds (the server sees a close a moment after the client makes
    it); aiohttp keeps an idle one 15 s."""
    def still_open() -> int:
        return server.open_now[host] if host else sum(server.open_now.values())

    deadline = asyncio.get_running_loop().time() + within
    while still_open() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    return not still_open()


async def test_a_host_s_connections_close_after_its_last_url_and_are_reused_before(
    three_hosts: FakeServer,
) -> None:
    """Host .1 has four URLs, two at a time: its two connections carry them all. Host .2 has
    one. Once a host has no URL left its connections are closed, while the prober (and its
    pool) is still open: a host done with is not held open until the keep-alive expires."""
    settings = replace(FAST, per_host_concurrency=2)
    busy = [three_hosts.url(f"/slow?d=0.1&i={i}", host="127.0.0.1") for i in range(4)]
    async with Prober(settings) as prober:
        results = await asyncio.gather(
            *map(prober.probe, busy), prober.probe(three_hosts.url("/ok", host="127.0.0.2")))
        assert [r.outcome for r in results] == ["live"] * 5
        assert await closed_by_the_client(three_hosts)
    assert three_hosts.opened == {"127.0.0.1": 2, "127.0.0.2": 1}


async def test_a_finished_host_s_connections_close_while_another_host_s_stay_pooled() -> None:
    """Host .1 is done with once its one URL is answered, and its connection is closed.
    Hosts .2 and .3 each have a URL the server holds: the connection of their answered URL
    stays open in the pool, and their next URL goes out on it, not on a new one."""
    held = asyncio.Event()

    async def hold(_r: BaseRequest) -> StreamResponse:
        await held.wait()
        return Response(text="held")

    kept = ("127.0.0.2", "127.0.0.3")
    server = await FakeServer(hosts=("127.0.0.1", *kept), routes={"/hold": hold}).start()
    try:
        settings = replace(FAST, per_host_concurrency=2, total_timeout=30)
        async with Prober(settings) as prober:
            holding = [asyncio.create_task(prober.probe(server.url("/hold", host=host)))
                       for host in kept]
            while sum(server.active[host] for host in kept) < len(kept):
                await asyncio.sleep(0.01)
            for host in (*kept, "127.0.0.1"):
                assert (await prober.probe(server.url("/ok", host=host))).outcome == "live"
            assert await closed_by_the_client(server, host="127.0.0.1")
            for host in kept:  # on the pooled connection, still open
                assert (await prober.probe(server.url("/ok", host=host))).outcome == "live"
            assert server.opened == {"127.0.0.1": 1, "127.0.0.2": 2, "127.0.0.3": 2}
            held.set()
            assert [r.outcome for r in await asyncio.gather(*holding)] == ["live"] * 2
            assert await closed_by_the_client(server)
    finally:
        held.set()
        await server.close()


async def test_a_host_s_tls_connection_is_closed_at_once_though_the_server_never_closes_tls(
    tmp_path: Path,
) -> None:
    """Once a host has no URL left, its TLS connection is closed without waiting on the
    server's side of a TLS close, which a server may never send: waiting would hold the
    connection and its buffers for asyncio's 30 s TLS shutdown timeout. Every answer was read
    whole, so nothing is lost by not closing TLS first."""
    server = await SilentCloseServer(self_signed_context(tmp_path)).start()
    loop = asyncio.get_running_loop()
    try:
        async with Prober(replace(FAST, ca_file=str(tmp_path / "cert.pem"))) as prober:
            result = await prober.probe(server.url("/ok"))
            deadline = loop.time() + 2.0
            while not server.ended and loop.time() < deadline:
                await asyncio.sleep(0.02)
            assert (result.outcome, result.http_status) == ("live", 200)
            assert server.ended == 1
    finally:
        await server.close()


async def test_a_confirmation_after_the_host_was_closed_opens_a_fresh_connection(
    web: FakeServer,
) -> None:
    """The host's connection is closed after its only URL; the confirmation of that URL's
    failure, at the end of the run, opens a new one and is answered."""
    results = await probe_all([ProbeTarget(web.url("/missing"), "a", 1)],
                              replace(FAST, confirm_failures=True))
    assert [(r.http_status, r.confirmation) for r in results] == [(404, False), (404, True)]
    assert results[1].failure_class == "dead"
    assert web.opened == {"127.0.0.1": 2}


def test_a_per_account_base_address_is_not_probed() -> None:
    """`https://YOUR_PROJECT_REF.supabase.co` names no host of its own: probing it would
    publish a live API as unreachable, so it is not probed and stays unchecked."""
    from pipeline.probing.probe import probe_targets_for

    for base in ("https://YOUR_PROJECT_REF.supabase.co/storage/v1",
                 "https://api.cloudinary.com/v1_1/YOUR_CLOUD_NAME",
                 "https://{tenant}.example.com"):
        targets, skipped = probe_targets_for(base, [(1, "GET", "/a"), (2, "POST", "/b")])
        assert targets == []
        assert all(reason.startswith("base address is per account") for _, reason in skipped)
    targets, _ = probe_targets_for("https://api.example.com/v1", [(1, "GET", "/a")])
    assert [t.url for t in targets] == ["https://api.example.com/v1/a"]


async def test_cancelling_probe_all_stops_its_probes_and_closes_their_connections(
    web: FakeServer,
) -> None:
    """The probes run on a loop of their own in a thread: cancelling the caller must cancel
    them there too, and return only once their connections are closed."""
    targets = [ProbeTarget(web.url(f"/slow?d=30&i={i}")) for i in range(4)]
    run = asyncio.create_task(probe_all(targets, FAST))
    while web.active["127.0.0.1"] < 4:
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert await closed_by_the_client(web, within=0.5)


def test_the_prober_loop_answers_an_address_lookup_as_the_thread_pool_did() -> None:
    """uvloop's sock_connect looks its IP address up with no socket type, which missed
    uvloop's shortcut (a trip through libuv's thread pool per connection): the prober's loop
    answers it at once with the first entry the thread pool gave; names are looked up as
    before."""
    import uvloop

    from pipeline.probing.prober_loop import new_prober_loop

    ours, theirs = new_prober_loop(), uvloop.new_event_loop()
    try:
        for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
            [answer] = ours.run_until_complete(ours.getaddrinfo(host, 443, family=family))
            full = theirs.run_until_complete(theirs.getaddrinfo(host, 443, family=family))
            assert answer == full[0] and answer[1] == socket.SOCK_STREAM
        by_name = [loop.run_until_complete(loop.getaddrinfo("localhost", 80,
                                                             family=socket.AF_INET))
                   for loop in (ours, theirs)]
        assert by_name[0] == by_name[1]
    finally:
        ours.close()
        theirs.close()


async def test_each_request_on_a_kept_https_connection_records_its_tls(tmp_path: Path) -> None:
    """The second URL of a host goes out on the first's connection: both record the TLS
    version and the certificate's expiry."""
    context = self_signed_context(tmp_path, valid=(timedelta(days=-1), timedelta(days=10)))
    server = await FakeServer(ssl_context=context).start()
    try:
        settings = replace(FAST, per_host_concurrency=1, ca_file=str(tmp_path / "cert.pem"))
        async with Prober(settings) as prober:  # one at a time, the host's both pending
            first, second = await asyncio.gather(
                prober.probe(server.url("/ok?i=1")), prober.probe(server.url("/ok?i=2")))
    finally:
        await server.close()
    assert server.opened == {"127.0.0.1": 1}
    assert first.tls_version in ("TLSv1.2", "TLSv1.3") and first.cert_expires_at is not None
    assert (second.tls_version, second.cert_expires_at) == (first.tls_version,
                                                            first.cert_expires_at)
    assert abs(first.cert_expires_at - (first.checked_at + timedelta(days=10))) \
        < timedelta(minutes=2)


async def test_young_collections_are_spaced_out_while_probes_run_and_restored_after(
    web: FakeServer,
) -> None:
    """While any run probes, a probe's short-lived objects are not promoted by young
    collections every 700 allocations (full collections then walked every result so far);
    the collector's thresholds come back when the last of overlapping runs ends, also when a
    run fails."""
    import gc

    from pipeline.probing.prober_loop import PROBING_YOUNG_THRESHOLD

    before = gc.get_threshold()
    seen: list[int] = []

    def note(_result: ProbeResult) -> None:
        seen.append(gc.get_threshold()[0])

    def fail(_result: ProbeResult) -> None:
        raise RuntimeError("the store is gone")

    slow = [ProbeTarget(web.url(f"/slow?d=0.3&i={i}")) for i in range(2)]
    quick = [ProbeTarget(web.url("/ok"))]
    await asyncio.gather(probe_all(slow, FAST, on_result=note),
                         probe_all(quick, FAST, on_result=note))
    assert seen == [PROBING_YOUNG_THRESHOLD] * 3  # the quick run's end left the slow one's
    assert gc.get_threshold() == before
    with pytest.raises(ExceptionGroup, match="unhandled errors"):  # the run's task group
        await probe_all(quick, FAST, on_result=fail)
    assert gc.get_threshold() == before
