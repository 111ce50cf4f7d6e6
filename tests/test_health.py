"""Health with evidence on the fake internet: confirmed failures and their classes, what a
browser would be told (CORS), HTTPS with the certificate's expiry. Loopback only."""

from __future__ import annotations

import datetime as dt
import itertools
from collections import namedtuple
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import orjson
import pytest
import pytest_asyncio
from aiohttp import web
from fake_internet import FakeServer, RawServer, closed_port, self_signed_context

from pipeline.contract import Cors, Deprecation, Https
from pipeline.judging.health import (
    LifecycleRecord,
    LifecycleRules,
    RunVerdict,
    is_https,
    judge_lifecycle,
    lifecycle_reason,
    measured_cors,
    measured_https,
    run_verdict,
)
from pipeline.probing.probe import (
    ProbeResult,
    ProbeSettings,
    ProbeTarget,
    is_failure,
    probe_all,
)
from pipeline.store.tables import utc_text
from tests.conftest import model_json_of

ORIGIN = "https://directory.test"
SETTINGS = ProbeSettings(
    allow_private=True,
    per_host_interval=0,
    per_host_concurrency=8,
    connect_timeout=1,
    total_timeout=1,
    backoff_base=0.01,
    max_attempts=1,  # one request per look: the second look is the confirmation
    origin=ORIGIN,
)


def by_url(results: list[ProbeResult]) -> dict[str, list[ProbeResult]]:
    looks: dict[str, list[ProbeResult]] = {}
    for result in results:
        looks.setdefault(result.url, []).append(result)
    return looks


@pytest_asyncio.fixture(loop_scope="function")
async def web_server() -> AsyncIterator[FakeServer]:
    server = await FakeServer().start()
    yield server
    await server.close()


async def probe(urls: list[str],
                settings: ProbeSettings = SETTINGS) -> dict[str, list[ProbeResult]]:
    return by_url(await probe_all([ProbeTarget(url, "e", 1) for url in urls], settings))


async def test_each_failure_class_from_two_looks(web_server: FakeServer, tmp_path: Path) -> None:
    hanging, resetting = await RawServer("hang").start(), await RawServer("reset").start()
    expired = await FakeServer(ssl_context=self_signed_context(
        tmp_path, valid=(dt.timedelta(days=-30), dt.timedelta(days=-1)))).start()
    try:
        urls = {
            "dead-404": web_server.url("/missing"),
            "dead-410": web_server.url("/gone"),
            "dead-dns": "http://no-such-api.invalid/",
            "blocked-challenge": web_server.url("/challenge"),
            "blocked-429": web_server.url("/rate-always"),
            "transient-5xx": web_server.url("/unavailable"),
            "transient-timeout": hanging.url(),
            "transient-reset": resetting.url(),
            "transient-refused": f"http://127.0.0.1:{closed_port()}/",
            "tls": expired.url("/ok"),
            "fine-auth": web_server.url("/auth"),
            "fine-ok": web_server.url("/ok"),
        }

        async def always_429(_r: web.BaseRequest) -> web.StreamResponse:
            return web.Response(status=429)

        web_server.routes["/rate-always"] = always_429
        looks = await probe(list(urls.values()), replace(SETTINGS, ca_file=str(tmp_path /
                                                                                 "cert.pem")))
    finally:
        for server in (hanging, resetting, expired):
            await server.close()
    for name, url in urls.items():
        expected = None if name.startswith("fine") else name.split("-")[0]
        final = looks[url][-1]
        assert final.failure_class == expected, (name, looks[url])
        assert len(looks[url]) == (1 if expected is None else 2), name
        if expected:
            first, second = looks[url]
            assert (first.confirmation, second.confirmation) == (False, True)
            assert first.failure_class is None  # one look alone is never a failure


async def test_a_base_address_standing_in_is_not_dead_for_a_404(web_server: FakeServer) -> None:
    """The target of no endpoint is an entry's base address standing in for its endpoints: a
    404 or 410 there is its host answering (no failure, no second look), while a 429 or a 5xx
    fails as anywhere. The same URL listed as another entry's endpoint is dead for its 404."""
    missing, gone, broken = (web_server.url(path) for path in ("/missing", "/gone",
                                                                "/unavailable"))
    results = await probe_all([ProbeTarget(missing, "root", None), ProbeTarget(gone, "gone", None),
                               ProbeTarget(broken, "broken", None), ProbeTarget(missing, "api", 1)],
                              SETTINGS)
    concluded = {r.entry_id: r for r in results}  # a confirmation comes after its first look
    assert {entry: (r.http_status, r.failure_class) for entry, r in concluded.items()} == {
        "root": (404, None), "gone": (410, None), "broken": (503, "transient"),
        "api": (404, "dead")}
    assert not is_failure(concluded["root"]) and is_failure(concluded["api"])
    assert sorted(r.url for r in results if r.confirmation) == sorted([broken, missing, missing])


async def test_a_flapping_target_is_not_a_failure_but_one_failing_twice_is(
    web_server: FakeServer,
) -> None:
    looks = await probe([web_server.url("/flaky"), web_server.url("/missing")])
    flaky, missing = looks[web_server.url("/flaky")], looks[web_server.url("/missing")]
    assert [r.http_status for r in flaky] == [500, 200]
    assert flaky[-1].failure_class is None and flaky[-1].outcome == "live"
    assert [r.http_status for r in missing] == [404, 404]
    assert missing[-1].failure_class == "dead"


async def test_confirmations_come_after_every_first_look_and_keep_the_host_interval(
    web_server: FakeServer,
) -> None:
    settings = replace(SETTINGS, per_host_interval=0.2, per_host_concurrency=1)
    paths = ["/missing", "/ok", "/auth", "/teapot", "/unavailable"]
    await probe([web_server.url(path) for path in paths], settings)
    arrivals = sorted((r.arrived, r.path) for r in web_server.requests)
    assert [path for _, path in arrivals[:5]] == paths  # first looks, in order
    assert sorted(path for _, path in arrivals[5:]) == ["/missing", "/unavailable"]
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(arrivals)]
    assert min(gaps) >= 0.19  # one host: its interval holds across both rounds


async def test_confirmation_can_be_turned_off_and_one_look_then_decides(
    web_server: FakeServer,
) -> None:
    """Without a second look, a failed first look is classed as if it had been seen twice: it
    is all the run has, and a failure left unclassed would never count."""
    paths = {"/missing": "dead", "/unavailable": "transient", "/challenge": "blocked",
             "/ok": None, "/auth": None}
    looks = await probe([web_server.url(path) for path in paths],
                        replace(SETTINGS, confirm_failures=False))
    for path, expected in paths.items():
        [only] = looks[web_server.url(path)]
        assert (only.confirmation, only.failure_class) == (False, expected), path
        assert web_server.hits[path] == 1


async def test_a_url_refused_before_sending_is_settled_without_a_second_look() -> None:
    looks = await probe(["http://[::1/broken", "http://10.0.0.1/"],
                        replace(SETTINGS, allow_private=False))
    for results in looks.values():
        [only] = results
        assert only.failure_class == "dead" and only.error_class in ("malformed", "blocked")


# --- CORS --------------------------------------------------------------------------------


def cors_route(headers: dict[str, str]):
    async def respond(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(text="{}", headers=headers)

    return respond


@pytest.mark.parametrize(
    ("headers", "state", "allow_origin", "credentials"),
    [
        ({"Access-Control-Allow-Origin": "*"}, "yes", "*", None),
        ({"Access-Control-Allow-Origin": ORIGIN, "Access-Control-Allow-Credentials": "true"},
         "yes", ORIGIN, True),
        ({"Access-Control-Allow-Origin": "https://only-them.example"}, "no",
         "https://only-them.example", None),
        ({}, "no", None, None),
    ],
    ids=["allow-all", "our-origin", "another-origin", "none"],
)
async def test_cors_as_a_browser_would_be_told(
    web_server: FakeServer, headers: dict[str, str], state: str, allow_origin: str | None,
    credentials: bool | None,
) -> None:
    web_server.routes["/cors"] = cors_route(headers)
    [result] = (await probe([web_server.url("/cors")]))[web_server.url("/cors")]
    [request] = web_server.requests
    assert request.headers["Origin"] == ORIGIN  # sent, never with credentials or cookies
    assert "Authorization" not in request.headers and "Cookie" not in request.headers
    cors = measured_cors([result], ORIGIN)
    assert cors == {"state": state, "allowOrigin": allow_origin, "credentials": credentials,
                    "checkedAt": utc_text(result.checked_at)}
    assert orjson.dumps(cors) == model_json_of(Cors, cors)  # the model's JSON, without it


def test_an_allowed_origin_stored_with_control_codes_is_published_without() -> None:
    """A value an older prober stored as the server sent it is published by the same rule
    as the prober stores one now (`storable`)."""
    stored = SimpleNamespace(http_status=200, cors_allow_origin="x\u202eevil\x1b[2J",
                             cors_allow_credentials=None,
                             checked_at=dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC))
    assert measured_cors([stored], ORIGIN)["allowOrigin"] == "xevil[2J"


async def test_cors_is_unknown_only_when_nothing_answered(web_server: FakeServer) -> None:
    refused = f"http://127.0.0.1:{closed_port()}/"
    looks = await probe([refused, web_server.url("/auth")])
    unknown = measured_cors([looks[refused][-1]], ORIGIN)
    assert unknown["state"] == "unknown"
    assert orjson.dumps(unknown) == model_json_of(Cors, unknown)
    answered = [looks[refused][-1], looks[web_server.url("/auth")][-1]]
    assert measured_cors(answered, ORIGIN)["state"] == "no"  # a 401 answered: it is known


# --- HTTPS -------------------------------------------------------------------------------


async def test_https_records_tls_version_and_certificate_expiry(tmp_path: Path) -> None:
    context = self_signed_context(tmp_path, valid=(dt.timedelta(days=-1), dt.timedelta(days=10,
                                                                                         hours=1)))
    server = await FakeServer(ssl_context=context).start()
    try:
        url = server.url("/ok")
        [result] = (await probe([url], replace(SETTINGS, ca_file=str(tmp_path / "cert.pem"))))[url]
    finally:
        await server.close()
    assert result.outcome == "live" and result.tls_version in ("TLSv1.2", "TLSv1.3")
    https = measured_https(url, [result], result.checked_at)
    assert https["enabled"] and https["tlsVersion"] == result.tls_version
    assert https["certDaysLeft"] == 10
    expires = dt.datetime.fromisoformat(https["certExpires"])
    assert abs(expires - (result.checked_at + dt.timedelta(days=10, hours=1))) \
        < dt.timedelta(minutes=2)
    assert orjson.dumps(https) == model_json_of(Https, https)  # the model's JSON, without it


async def test_plain_http_has_no_tls_and_is_not_https(web_server: FakeServer) -> None:
    url = web_server.url("/ok")
    [result] = (await probe([url]))[url]
    assert result.tls_version is None and result.cert_expires_at is None
    https = measured_https(url, [result], result.checked_at)
    assert https == {"enabled": False, "tlsVersion": None, "certExpires": None,
                     "certDaysLeft": None, "checkedAt": utc_text(result.checked_at)}
    assert orjson.dumps(https) == model_json_of(Https, https)


async def test_an_expired_certificate_is_a_tls_failure_with_no_expiry_read(tmp_path: Path) -> None:
    context = self_signed_context(tmp_path, valid=(dt.timedelta(days=-30), dt.timedelta(days=-2)))
    server = await FakeServer(ssl_context=context).start()
    try:
        url = server.url("/ok")
        looks = (await probe([url], replace(SETTINGS, ca_file=str(tmp_path / "cert.pem"))))[url]
    finally:
        await server.close()
    assert [r.error_class for r in looks] == ["tls", "tls"]
    assert looks[-1].failure_class == "tls" and server.requests == []


def test_a_run_is_counted_by_its_conclusions_not_by_its_looks() -> None:
    from pipeline.store.history import ProbeTally

    def look(n: int, confirmation: bool, outcome: str) -> ProbeResult:
        return ProbeResult(
            url=f"https://api{n}.example.com/", entry_id=f"e{n}", endpoint_id=None,
            checked_at=dt.datetime.now(dt.UTC), outcome=outcome, reason=None,
            error_class="refused" if outcome == "unreachable" else None,
            http_status=200 if outcome == "live" else None, total_ms=None, dns_ms=None,
            connect_ms=None, ttfb_ms=None, final_url=None, attempts=1, redirects=0, error=None,
            confirmation=confirmation)

    # 10 targets, 8 refused on the first look; 2 of those answer the second: 6 of 10 failed.
    results = [look(n, False, "unreachable" if n < 8 else "live") for n in range(10)]
    results += [look(n, True, "unreachable" if n < 6 else "live") for n in range(8)]
    tally = ProbeTally.of(results)
    assert tally.probes == 10 and tally.outcomes == {"unreachable": 6, "live": 4}
    assert not tally.network_suspect


def test_a_redirect_not_followed_is_no_target_of_the_run_verdict() -> None:
    """A probe whose redirect was not followed (its note) is no target checked, as the scores
    count it nowhere: beside a failed target the entry was down in that run, and beside a dead
    one all its targets were dead; alone it gives no verdict, as no probe does."""
    from pipeline.store.history import STATUS_COLUMNS

    probe_row = namedtuple("probe_row", STATUS_COLUMNS)  # as a run's probes are read
    at = dt.datetime(2026, 3, 1, 3, tzinfo=dt.UTC)

    def probe(url: str, failure: str | None = None, note: str | None = None):
        return probe_row(**{**dict.fromkeys(STATUS_COLUMNS), "run_id": 7, "url": url,
                            "checked_at": at, "failure_class": failure,
                            "confirmation": failure is not None, "note": note})

    unfollowed = probe("https://api.example.com/old", note="its redirect to b.example.com was "
                       "not followed this run: that host was given up on")
    verdict = run_verdict([probe("https://api.example.com/a", "unavailable"), unfollowed])
    assert verdict is not None and (verdict.targets, verdict.failed) == (1, 1)
    assert verdict.down and not verdict.seen_once
    assert run_verdict([probe("https://api.example.com/a", "dead"), unfollowed]).all_dead
    assert run_verdict([unfollowed]) is None
    assert run_verdict([probe("https://api.example.com/a"), unfollowed]).targets == 1


def test_an_entry_is_dead_over_trusted_runs_never_over_the_clock_alone() -> None:
    """The days that make an entry dead lie between trusted verdicts: one run finding every
    target dead, then weeks of nights adding no trusted run (network-suspect, or publishing
    without probing), leaves it degraded, with no dead event; it is dead once trusted runs
    have found every target dead for the days the rule asks, and a run that finds a target
    alive starts the count again."""
    rules = LifecycleRules(failing_runs=3, dead_days=14)
    t0 = dt.datetime(2026, 3, 1, 3, tzinfo=dt.UTC)

    def dead_run(run_id: int, days: int) -> RunVerdict:
        return RunVerdict(run_id, t0 + dt.timedelta(days=days), targets=1, failed=1, dead=1)

    record = judge_lifecycle(None, RunVerdict(1, t0 - dt.timedelta(days=1), 1, 0, 0), None,
                             t0 - dt.timedelta(days=1), rules)
    once = dead_run(2, 0)
    for night in range(31):  # the same latest trusted run, published night after night
        record = judge_lifecycle(record, once, None, t0 + dt.timedelta(days=night), rules)
        assert (record.state, record.down_runs) == ("degraded", 1)

    record = judge_lifecycle(record, dead_run(3, 13), None, t0 + dt.timedelta(days=40), rules)
    assert record.state == "degraded"  # two dead runs 13 days apart: not yet
    latest = dead_run(4, 14)
    record = judge_lifecycle(record, latest, None, t0 + dt.timedelta(days=41), rules)
    assert record.state == "dead" and record.since == t0 + dt.timedelta(days=41)
    assert lifecycle_reason(record, latest, None).endswith("since 2026-03-01")

    alive = RunVerdict(5, t0 + dt.timedelta(days=15), targets=1, failed=0, dead=0)
    record = judge_lifecycle(record, alive, None, t0 + dt.timedelta(days=42), rules)
    assert (record.state, record.dead_since) == ("active", None)
    record = judge_lifecycle(record, dead_run(6, 16), None, t0 + dt.timedelta(days=60), rules)
    assert record.state == "degraded"


@pytest.mark.parametrize("base_url", [
    "https://api.example.com", "HTTPS://api.example.com", "http://api.example.com", "https:x",
    " \x01https://a.b", "ht\ttps://a.b", "https\n://a.b", "\thttps://a.b", "httpsx://a.b",
    "https", "", "//a.b", "1https://a.b", "ftp://a.b",
])
def test_https_is_read_as_urlsplit_reads_the_scheme(base_url: str) -> None:
    assert is_https(base_url) is (urlsplit(base_url).scheme.lower() == "https")


def test_a_run_that_checked_no_target_leaves_the_state_judged_before() -> None:
    """A latest trusted run with no verdict for an entry (every host given up on, or only
    redirects not followed) is no evidence: a dead, failing or degraded entry keeps its state,
    its counts and its since, and says it was not checked; a new entry is active, not probed
    yet; a curated deprecation still applies."""
    rules = LifecycleRules(failing_runs=3, dead_days=14)
    t0 = dt.datetime(2026, 3, 1, 3, tzinfo=dt.UTC)
    later = t0 + dt.timedelta(days=20)
    dead = LifecycleRecord("dead", t0, 5, t0 - dt.timedelta(days=15), judged_run_id=9)
    failing = LifecycleRecord("failing", t0, 3, None, judged_run_id=9)
    degraded = LifecycleRecord("degraded", t0, 1, None, judged_run_id=9)
    for before in (dead, failing, degraded):
        after = judge_lifecycle(before, None, None, later, rules)
        assert after == before
    assert lifecycle_reason(degraded, None, None) == (
        "some targets failed when last checked; none was checked in the latest run")
    assert lifecycle_reason(dead, None, None).endswith(f"since {t0.date() - dt.timedelta(days=15)}")
    active = judge_lifecycle(LifecycleRecord("active", t0, 0, None, 9), None, None, later, rules)
    assert lifecycle_reason(active, None, None).startswith("its targets passed when last checked")

    new = judge_lifecycle(None, None, None, later, rules)
    assert (new.state, lifecycle_reason(new, None, None)) == ("active", "not probed yet")
    gone = judge_lifecycle(dead, None, Deprecation(), later, rules)
    assert gone.state == "deprecated"
