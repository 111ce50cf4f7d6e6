"""Lifecycle over a recorded history of runs (SQLite and PostgreSQL): each state is reached,
each transition and each entry added or retired is published in api/changes.json, and the
published entries carry lifecycle, https and cors; a small run is judged by witnesses."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiohttp import web
from fake_internet import FakeServer, closed_port, self_signed_context
from sqlmodel import col, select

from pipeline.contract import ChangeLog, FullDataset
from pipeline.operations import stages
from pipeline.probing.probe import ProbeResult
from pipeline.settings import Settings
from pipeline.store.history import SUSPECT_MIN_PROBES, record_probes
from pipeline.store.tables import (
    PipelineRun,
    ProbeRow,
    engine_for,
    session_scope,
    start_run,
)
from tests.conftest import WriteEntry, listed_endpoint_ids, make_entry

NOW = datetime.now(UTC)
ENTRIES = ("steady", "wobbly", "down", "gone", "old")
BASE = {entry_id: f"https://{entry_id}.example.com" for entry_id in ENTRIES}
ENDPOINTS = [{"method": "GET", "path": "/a", "description": "A."},
             {"method": "GET", "path": "/b", "description": "B."}]
# What each run sees, per entry and target: "ok", or a failure class seen on both looks.
RUNS = [
    {"steady": ("ok", "ok"), "wobbly": ("ok", "transient"), "down": ("transient", "transient"),
     "gone": ("dead", "dead"), "old": ("ok", "ok")},
    {"steady": ("ok", "ok"), "wobbly": ("ok", "transient"), "down": ("transient", "blocked"),
     "gone": ("dead", "dead"), "old": ("ok", "ok")},
    {"steady": ("ok", "ok"), "wobbly": ("ok", "ok"), "down": ("tls", "transient"),
     "gone": ("dead", "dead"), "old": ("ok", "ok")},
]
FIRST_LOOK = {"dead": (404, "online", "not_found", None),
              "blocked": (429, "online", "rate_limited", None),
              "transient": (None, "unreachable", None, "read_timeout"),
              "tls": (None, "unreachable", None, "tls")}


def looks(entry_id: str, path: str, seen: str, at: datetime,
          endpoint_id: int | None) -> list[ProbeResult]:
    """One target's probes in a run (of the endpoint `endpoint_id`): one look when fine, else
    the look and its confirmation."""
    def probe(status: int | None, outcome: str, reason: str | None, error: str | None,
              confirmation: bool = False, failure: str | None = None) -> ProbeResult:
        url = BASE[entry_id] + path
        return ProbeResult(
            url=url, entry_id=entry_id, endpoint_id=endpoint_id, checked_at=at,
            outcome=outcome,
            reason=reason, error_class=error, http_status=status,
            total_ms=90.0 if status else None, dns_ms=1.0, connect_ms=1.0, ttfb_ms=None,
            final_url=url, attempts=1, redirects=0, error=None,
            cors_allow_origin="*" if entry_id == "steady" and status else None,
            tls_version="TLSv1.3" if status else None,
            cert_expires_at=at + timedelta(days=40) if status else None,
            confirmation=confirmation, failure_class=failure)

    if seen == "ok":
        return [probe(200, "live", None, None)]
    first = FIRST_LOOK[seen]
    return [probe(*first), probe(*first, confirmation=True, failure=seen)]


def record_run(settings: Settings, run: dict[str, tuple[str, str]], at: datetime) -> None:
    with session_scope(engine_for(settings.database_url)) as session:
        record = start_run(session, "nightly")
        results = [probe for entry_id, seen in run.items()
                   for endpoint, state, endpoint_id in zip(
                       ENDPOINTS, seen, listed_endpoint_ids(session, entry_id), strict=True)
                   for probe in looks(entry_id, endpoint["path"], state, at, endpoint_id)]
        record_probes(session, record, results)


def publish(settings: Settings) -> tuple[FullDataset, ChangeLog]:
    now = datetime.now(UTC)
    stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    out = settings.output_dir
    full = FullDataset.model_validate_json((out / "api" / "apis.json").read_bytes())
    changes = ChangeLog.model_validate_json((out / "api" / "changes.json").read_bytes())
    return full, changes


def lifecycles(full: FullDataset) -> dict[str, str]:
    return {api.id: api.lifecycle.state for api in full.apis}


@pytest.fixture
def catalogue(write_entry: WriteEntry, settings_env: dict[str, str],
              monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("APIDIR_FAILING_RUNS", "3")
    monkeypatch.setenv("APIDIR_DEAD_DAYS", "2")
    for entry_id in ENTRIES:
        extra = {"deprecated": {"on": "2026-10-01", "successor": "steady",
                                "note": "Replaced by Steady."}} if entry_id == "old" else {}
        write_entry(make_entry(id=entry_id, name=entry_id.title(), baseUrl=BASE[entry_id],
                               sampleRequest=f'curl "{BASE[entry_id]}/a"', endpoints=ENDPOINTS,
                               **extra))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    return settings


def test_each_lifecycle_state_and_its_transitions_from_recorded_runs(
    catalogue: Settings, data_dir: Path,
) -> None:
    full, changes = publish(catalogue)
    assert lifecycles(full) == {"steady": "active", "wobbly": "active", "down": "active",
                                "gone": "active", "old": "deprecated"}
    assert {(e.kind, e.entry) for e in changes.events if e.kind != "release"} == {
        ("added", i) for i in ENTRIES}
    assert [(e.kind, e.version) for e in changes.events if e.kind == "release"] == [
        ("release", full.meta.version)]  # the release that publishes it is its newest event

    seen = []
    for night, run in enumerate(RUNS):
        record_run(catalogue, run, NOW - timedelta(days=len(RUNS) - night))
        full, changes = publish(catalogue)
        seen.append(lifecycles(full))
    # gone is dead once its trusted runs found every target dead for 2 days (the first and
    # the third run), never on the time passed since its first dead run alone
    assert seen == [
        {"steady": "active", "wobbly": "degraded", "down": "degraded", "gone": "degraded",
         "old": "deprecated"},
        {"steady": "active", "wobbly": "degraded", "down": "degraded", "gone": "degraded",
         "old": "deprecated"},
        {"steady": "active", "wobbly": "active", "down": "failing", "gone": "dead",
         "old": "deprecated"},
    ]
    transitions = [(e.entry, e.from_state, e.to_state) for e in reversed(changes.events)
                   if e.kind == "lifecycle"]
    assert transitions == [("down", "active", "degraded"), ("gone", "active", "degraded"),
                           ("wobbly", "active", "degraded"), ("down", "degraded", "failing"),
                           ("gone", "degraded", "dead"), ("wobbly", "degraded", "active")]

    # Publishing again without a new run judges nothing twice: no count moves on.
    full, again = publish(catalogue)
    assert lifecycles(full) == seen[-1]
    assert [e for e in again.events if e.kind == "lifecycle"] == [
        e for e in changes.events if e.kind == "lifecycle"]

    apis = {api.id: api for api in full.apis}
    assert apis["down"].status.failure in ("tls", "transient")
    assert apis["gone"].status.failure == "dead" and apis["gone"].status.state == "online"
    assert apis["gone"].lifecycle.reason.startswith("every target confirmed dead")
    assert apis["old"].lifecycle.successor == "steady"
    assert apis["down"].lifecycle.reason == "every target failed twice in 3 runs in a row"
    assert apis["wobbly"].lifecycle.reason == "2 of 2 targets passed"
    assert apis["steady"].lifecycle.reason == "2 of 2 targets passed"
    assert (apis["steady"].cors.state, apis["steady"].cors.allow_origin) == ("yes", "*")
    assert apis["wobbly"].cors.state == "no"
    assert apis["down"].cors.state == "unknown"  # nothing answered
    assert apis["steady"].https.enabled and apis["steady"].https.tls_version == "TLSv1.3"
    assert 38 <= apis["steady"].https.cert_days_left <= 40

    # A dead entry stays published until its curator retires it; retiring is an event too.
    (data_dir / "entries" / "weather" / "gone.yaml").unlink()
    with session_scope(engine_for(catalogue.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(catalogue, run_id)
    full, changes = publish(catalogue)
    assert "gone" not in lifecycles(full)
    newest, before = changes.events[:2]
    assert (newest.kind, newest.version) == ("release", full.meta.version)
    assert (before.kind, before.entry) == ("retired", "gone")
    document = json.loads((catalogue.output_dir / "api" / "changes.json").read_text())
    assert document["events"][1] == {"kind": "retired", "entry": "gone", "name": "Gone",
                                     "at": document["events"][1]["at"]}


def test_uptime_is_published_with_the_probes_and_days_it_is_counted_from(
    catalogue: Settings,
) -> None:
    """One probe makes 100 % as surely as a thousand do: the entry, its page and its Markdown
    say it is one probe on one day."""
    with session_scope(engine_for(catalogue.database_url)) as session:
        endpoint_id = listed_endpoint_ids(session, "steady")[0]
        record_probes(session, start_run(session, "nightly"),
                      looks("steady", "/a", "ok", NOW - timedelta(hours=2), endpoint_id))
    full, _ = publish(catalogue)
    apis = {api.id: api for api in full.apis}
    steady = apis["steady"].uptime
    assert (steady.last1d, steady.last7d, steady.last30d) == (1.0, 1.0, 1.0)
    one = {"probes": 1, "succeeded": 1, "days": 1}
    assert steady.evidence.model_dump() == {"last1d": one, "last7d": one, "last30d": one}
    assert apis["wobbly"].uptime is None  # never probed
    pages = catalogue.output_dir / "apis"
    assert ("100% over the last 24 hours (1 probe), 100% over 7 days (1 probe on 1 of 7 days), "
            "100% over 30 days (1 probe on 1 of 30 days).") in (pages / "steady.md").read_text()
    assert '<span class="basis">(1 probe on 1 of 30 days)</span>' in (
        pages / "steady.html").read_text()


def test_a_failing_entry_that_answers_again_is_active(catalogue: Settings) -> None:
    publish(catalogue)
    down = {"down": ("transient", "transient")}
    for night in range(3):
        record_run(catalogue, down, NOW - timedelta(days=5 - night))
        full, _ = publish(catalogue)
    assert lifecycles(full)["down"] == "failing"
    record_run(catalogue, {"down": ("ok", "transient")}, NOW - timedelta(days=1))
    full, changes = publish(catalogue)
    assert lifecycles(full)["down"] == "degraded"
    reason = next(api.lifecycle.reason for api in full.apis if api.id == "down")
    assert reason == "1 of 2 targets failed twice in the last run"
    latest = next(event for event in changes.events if event.kind != "release")
    assert (latest.kind, latest.entry, latest.from_state, latest.to_state) == (
        "lifecycle", "down", "failing", "degraded")


@pytest.fixture
def provider(https_provider: FakeServer, monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    """`https_provider`, where `/steady/a` and `/steady/b` answer 200, judged over 3 runs."""
    https_provider.routes["/steady/a"] = https_provider.routes["/steady/b"] = (
        https_provider.routes["/ok"])
    monkeypatch.setenv("APIDIR_FAILING_RUNS", "3")
    return https_provider


def loopback_catalogue(write_entry: WriteEntry, entries: dict[str, str]) -> Settings:
    """The entries (id: base address), each with two probed endpoints, ingested."""
    for entry_id, base in entries.items():
        write_entry(make_entry(id=entry_id, name=entry_id.title(), baseUrl=base,
                               sampleRequest=f'curl "{base}/a"', endpoints=ENDPOINTS))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    return settings


async def probe_and_publish(settings: Settings,
                            entry_ids: list[str] | None = None) -> tuple[FullDataset, ChangeLog]:
    """One run of the real probe stage (of `entry_ids`, or all), then the score and publish."""
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    await stages.probe_entries(settings, run_id, entry_ids)
    return publish(settings)


async def test_a_base_address_standing_in_is_up_when_its_host_answers_even_404(
    provider: FakeServer, write_entry: WriteEntry, settings_env: dict[str, str],
) -> None:
    """An entry listing only POST operations is probed at its base address alone, standing in
    for them: a REST root answering 404 (or 405) is its host answering, up and active, never
    a dead endpoint; a root answering 503 is down. A listed GET endpoint's own 404 is still a
    dead endpoint."""
    posts = [{"method": "POST", "path": "/things", "description": "Create a thing."}]
    provider.routes["/v1"] = provider.routes["/missing"]  # a REST root answering 404
    bases = {"rest-root": provider.url("/v1"), "no-get": provider.url("/method"),
             "broken-root": provider.url("/unavailable")}
    for entry_id, base in bases.items():
        write_entry(make_entry(id=entry_id, name=entry_id.title(), baseUrl=base,
                               sampleRequest=f'curl -X POST "{base}/things"', endpoints=posts))
    write_entry(make_entry(id="gone", name="Gone", baseUrl=provider.url(""),
                           sampleRequest=f'curl "{provider.url("/missing")}"',
                           endpoints=[{"method": "GET", "path": "/missing", "description": "A."}]))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    for _night in range(3):
        full, _ = await probe_and_publish(settings)
    apis = {api.id: api for api in full.apis}
    for entry_id, code in (("rest-root", 404), ("no-get", 405)):
        api = apis[entry_id]
        assert (api.status.state, api.status.http_status, api.status.failure) == (
            "online", code, None), entry_id
        assert (api.uptime.last1d, api.uptime.last7d, api.uptime.last30d) == (1.0, 1.0, 1.0)
        assert (api.lifecycle.state, api.lifecycle.reason) == ("active", "1 of 1 targets passed")
        assert api.endpoints[0].status.note == "method is POST"
        assert (api.status.stand_in, api.status.final_url) == (True, None)
        page = (settings.output_dir / "apis" / f"{entry_id}.md").read_text()
        assert "the base address, probed in place of the endpoints" in page
    broken = apis["broken-root"]
    assert (broken.status.failure, broken.uptime.last1d, broken.lifecycle.state) == (
        "transient", 0.0, "failing")
    gone = apis["gone"]
    assert (gone.status.failure, gone.uptime.last1d, gone.lifecycle.state) == (
        "dead", 0.0, "failing")
    assert gone.endpoints[0].status.failure == "dead" and gone.status.stand_in is False
    with session_scope(engine_for(settings.database_url)) as session:
        looks = session.exec(select(ProbeRow.confirmation).where(
            ProbeRow.entry_id == "rest-root")).all()
    assert looks == [False] * 3  # an answer of its host: no second look


async def test_a_redirect_to_a_sign_in_page_is_online_with_where_it_ended(
    provider: FakeServer, write_entry: WriteEntry, settings_env: dict[str, str],
) -> None:
    """A listed endpoint redirected to an HTML page at another path (302 to /login, 200
    text/html) did not answer as an API: online with its own 302, the page its final URL, not
    live. A redirect to another path that answers as an API (not a page) stays live, and says
    where it ended; the base address standing in keeps any page as its host answering."""
    async def to_login(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": "/login"})

    async def login(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(text="<html>Sign in</html>", content_type="text/html")

    async def to_v2(_r: web.BaseRequest) -> web.StreamResponse:
        return web.Response(status=301, headers={"Location": "/v2/things"})

    provider.routes |= {"/app/one": to_login, "/login": login, "/site": to_login,
                        "/v1/things": to_v2, "/v2/things": provider.routes["/ok"]}
    entries = {"sign-in": ("/app", [{"method": "GET", "path": "/one", "description": "One."}]),
               "moved": ("/v1", [{"method": "GET", "path": "/things", "description": "All."}]),
               "site": ("/site", [{"method": "POST", "path": "/x", "description": "X."}])}
    for entry_id, (base, endpoints) in entries.items():
        write_entry(make_entry(id=entry_id, name=entry_id.title(), baseUrl=provider.url(base),
                               sampleRequest=f'curl -X {endpoints[0]["method"]} '
                               f'"{provider.url(base)}{endpoints[0]["path"]}"',
                               endpoints=endpoints))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    full, _ = await probe_and_publish(settings)
    apis = {api.id: api for api in full.apis}
    sign_in = apis["sign-in"]
    assert (sign_in.status.state, sign_in.status.http_status, sign_in.status.failure) == (
        "online", 302, None)
    assert (sign_in.status.url, sign_in.status.final_url) == (
        provider.url("/app/one"), provider.url("/login"))
    assert (sign_in.endpoints[0].status.state, sign_in.endpoints[0].status.reason) == (
        "online", "redirect")
    assert f'id="final-url">{provider.url("/login")}<' in (
        settings.output_dir / "apis" / "sign-in.html").read_text()
    moved = apis["moved"]
    assert (moved.status.state, moved.status.http_status, moved.status.final_url) == (
        "live", 200, provider.url("/v2/things"))
    site = apis["site"]
    assert (site.status.state, site.status.final_url, site.status.stand_in) == (
        "live", provider.url("/login"), True)


@pytest.mark.parametrize("confirm", [True, False], ids=["confirmed", "one-look"])
async def test_an_entry_never_reached_is_failing_whether_or_not_failures_are_confirmed(
    confirm: bool, provider: FakeServer, write_entry: WriteEntry, settings_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its host refuses every connection, three runs in a row. With confirmation off one look
    decides: the failure is classed from it, so the lifecycle, the status' failure and the
    reason say what the runs saw, as they do when it is seen twice."""
    monkeypatch.setenv("APIDIR_PROBE_CONFIRM", str(confirm).lower())
    refused = f"https://127.0.0.1:{closed_port()}"
    settings = loopback_catalogue(write_entry, {"steady": provider.url("/steady"), "down": refused})
    for _night in range(3):
        full, _ = await probe_and_publish(settings)
    apis = {api.id: api for api in full.apis}
    down = apis["down"]
    assert (down.status.state, down.status.failure, down.uptime.last1d) == (
        "unreachable", "transient", 0.0)
    twice = "twice " if confirm else ""
    assert (down.lifecycle.state, down.lifecycle.reason) == (
        "failing", f"every target failed {twice}in 3 runs in a row")
    assert (apis["steady"].lifecycle.state, apis["steady"].lifecycle.reason) == (
        "active", "2 of 2 targets passed")
    assert apis["steady"].status.failure is None


async def test_every_target_answering_with_errors_is_failing_not_unanswered(
    provider: FakeServer, write_entry: WriteEntry, settings_env: dict[str, str],
) -> None:
    """Every target answers, with 503 and 429: the entry is failing, and its reason says the
    targets failed, not that none answered."""
    settings = loopback_catalogue(write_entry, {"busy": provider.url("/busy")})
    provider.routes["/busy/a"] = provider.routes["/unavailable"]
    provider.routes["/busy/b"] = always_429
    for _night in range(3):
        full, _ = await probe_and_publish(settings)
    [busy] = full.apis
    assert busy.status.state == "online" and busy.status.failure in ("transient", "blocked")
    assert (busy.lifecycle.state, busy.lifecycle.reason) == (
        "failing", "every target failed twice in 3 runs in a row")


async def always_429(_request: web.BaseRequest) -> web.StreamResponse:
    return web.Response(status=429)


WITNESS_HOSTS = [f"127.0.0.{number}" for number in range(21, 29)]  # eight other entries
SMALL_RUN_HOSTS = ["127.0.0.29", "127.0.0.30"]  # the two entries a small run probes


@pytest.mark.parametrize("outage", [True, False], ids=["network-down", "hosts-down"])
async def test_a_small_run_is_judged_by_witnesses_whether_the_network_was_down(
    outage: bool, provider: FakeServer, write_entry: WriteEntry, settings_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A run of two entries (4 targets) is too small to judge the network by its own probes:
    it also probes URLs of other entries that answered in the last trusted run, on other
    hosts, and stores nothing of them. All refused with its own (the network down): the run
    is not trusted and nothing changes. Answering while its own hosts refuse: it is trusted,
    and the two entries are unreachable."""
    context = self_signed_context(tmp_path / "tls", [*WITNESS_HOSTS, *SMALL_RUN_HOSTS])
    witnesses = await FakeServer(hosts=WITNESS_HOSTS, ssl_context=context).start()
    small = await FakeServer(hosts=SMALL_RUN_HOSTS, ssl_context=context).start()
    servers = [witnesses, small]
    try:
        for server in servers:
            server.routes["/a"] = server.routes["/b"] = server.routes["/ok"]
        bases = {f"witness-{n}": witnesses.url("", host) for n, host in enumerate(WITNESS_HOSTS)}
        bases |= {f"small-{n}": small.url("", host) for n, host in enumerate(SMALL_RUN_HOSTS)}
        settings = loopback_catalogue(write_entry, bases)
        full, _ = await probe_and_publish(settings)
        assert {api.status.state for api in full.apis} == {"live"}
        down = [witnesses, small] if outage else [small]
        servers = [server for server in servers if all(server is not d for d in down)]
        for server in down:
            await server.close()
        asked = len(witnesses.requests)
        full, changes = await probe_and_publish(settings, ["small-0", "small-1"])
    finally:
        for server in servers:
            await server.close()
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.exec(select(PipelineRun).order_by(col(PipelineRun.id).desc())).first()
        stored = set(session.exec(select(ProbeRow.entry_id).where(ProbeRow.run_id == run.id)))
    assert stored == {"small-0", "small-1"}  # the witnesses judged the network, no entry
    assert run.probes == 4 and run.probes_failed == 4
    states = {api.id: api.status.state for api in full.apis if api.id.startswith("small")}
    if outage:
        assert run.network_suspect
        assert states == {"small-0": "live", "small-1": "live"}  # the last trusted run's
        assert changes.changes == []
    else:
        assert not run.network_suspect
        assert len(witnesses.requests) - asked == SUSPECT_MIN_PROBES - 4  # one URL a host
        assert states == {"small-0": "unreachable", "small-1": "unreachable"}
        assert sorted((c.entry, c.from_state, c.to_state) for c in changes.changes) == [
            ("small-0", "live", "unreachable"), ("small-1", "live", "unreachable")]


def test_entry_pages_draw_the_last_30_days_and_show_health(catalogue: Settings) -> None:
    publish(catalogue)
    for night, run in enumerate(RUNS):  # each night publishes, as the nightly flow does
        record_run(catalogue, run, NOW - timedelta(days=len(RUNS) - night))
        publish(catalogue)
    days = [(NOW - timedelta(days=n)).date() for n in range(len(RUNS), 0, -1)]
    stages.roll_up(catalogue, days)
    full, _ = publish(catalogue)
    pages = catalogue.output_dir / "apis"
    # every probe of `gone` a confirmed 404 (fast): never up, and its 404s are no fast
    # answers: each counts as a failed probe, so Latency is 0, not a speed
    gone = next(api for api in full.apis if api.id == "gone")
    assert (gone.uptime.last7d, gone.uptime.last30d) == (0.0, 0.0)  # the last run: a day ago
    assert gone.builder_score.latency == 0
    assert "0 of 6 probes succeeded in 7 days" in gone.builder_score.reasons.latency
    assert ("0% over 7 days (6 probes on 3 of 7 days), 0% over 30 days (6 probes on 3 of 30 "
            "days).") in (pages / "gone.md").read_text()  # two targets a run, three runs
    assert "0% up" in (pages / "gone.html").read_text()
    steady = (pages / "steady.html").read_text()
    chart = steady[steady.index('<figure class="trend"'):steady.index("</figure>")]
    assert chart.count("<rect") == 1 + len(RUNS)  # the frame, then one bar a probed day
    assert "100% up" in chart and "<polyline" in chart
    assert "Lifecycle: <strong>Active</strong>" in steady
    assert 'id="cors">yes' in steady and "TLSv1.3" in steady
    wobbly = (pages / "wobbly.html").read_text()
    assert "50% up" in wobbly  # the days it lost one target of two
    down = (pages / "down.html").read_text()
    assert "Lifecycle: <strong>Failing</strong>" in down and "Failed in the last run" in down
    old = (pages / "old.html").read_text()
    assert 'href="../apis/steady.html"><bdi>Steady</bdi></a>' in old  # by its name
    weather = (catalogue.output_dir / "categories" / "weather.html").read_text()
    assert 'class="badge lifecycle-failing"' in weather and 'class="badge cors-yes"' in weather
    search = json.loads((catalogue.output_dir / "api" / "search.json").read_text())
    items = {item["id"]: item for item in search["apis"]}  # what the index's cards are built from
    assert (items["down"]["lifecycle"], items["steady"]["cors"], items["steady"]["https"]) == (
        "failing", "yes", True)


def test_a_successor_must_be_an_entry_of_the_catalogue(write_entry: WriteEntry,
                                                       data_dir: Path) -> None:
    from pipeline.catalogue.entries import read_catalog

    write_entry(make_entry(id="steady"))
    write_entry(make_entry(id="old", deprecated={"successor": "nowhere"}))
    write_entry(make_entry(id="self", deprecated={"successor": "self"}))
    entries = data_dir / "entries"
    report = read_catalog([entries], entries)
    problems = {(p.entry, p.field, p.rule): p.message for p in report.problems}
    assert problems == {
        ("old", "deprecated.successor", "unknown-successor"):
            "successor 'nowhere' is not an entry of the catalogue",
        ("self", "deprecated.successor", "unknown-successor"):
            "successor 'self' is the entry itself",
    }
    assert [e.id for e in report.entries.values()] == ["steady"]
    alone = read_catalog([entries / "weather" / "steady.yaml"], entries)
    assert alone.ok  # one file checked alone still knows the other entries


def test_a_retired_successor_leaves_its_deprecated_entry_published_without_a_dead_link(
    catalogue: Settings, data_dir: Path,
) -> None:
    """The successor's file is deleted: it is retired, the deprecated entry naming it is
    reported on every ingest (its file unchanged, not parsed again) and stays published as
    stored but for the successor, which no field names and no page links, so every later
    release still publishes."""
    full, _ = publish(catalogue)
    assert {api.id: api.lifecycle.successor for api in full.apis}["old"] == "steady"
    next((data_dir / "entries").glob("*/steady.yaml")).unlink()
    for _night in range(2):
        with session_scope(engine_for(catalogue.database_url)) as session:
            run_id = start_run(session, "nightly").id
        summary, report = stages.ingest_entries(catalogue, run_id)
        assert report.entries == {} and summary.invalid == ["old"]
        assert [(p.entry, p.field, p.rule) for p in report.problems] == [
            ("old", "deprecated.successor", "unknown-successor")]
        full, _ = publish(catalogue)
        published = {api.id: api for api in full.apis}
        assert "steady" not in published
        assert published["old"].lifecycle.state == "deprecated"
        assert published["old"].lifecycle.successor is None
        assert published["old"].deprecated.successor is None  # named nowhere in the release
    page = (catalogue.output_dir / "apis" / "old.html").read_text()
    assert "Lifecycle: <strong>Deprecated</strong>" in page and "steady.html" not in page


def test_the_atom_feed_carries_the_same_changes_and_readers_parse_it(catalogue: Settings) -> None:
    import feedparser

    from pipeline.release.feed import check_feed

    publish(catalogue)
    record_run(catalogue, RUNS[0], NOW - timedelta(hours=2))
    full, changes = publish(catalogue)
    data = (catalogue.output_dir / "changes.atom").read_bytes()
    assert check_feed(data) == []
    parsed = feedparser.parse(data)
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.version == "atom10"
    assert parsed.feed.title == "API Directory: changes"
    assert parsed.feed.updated == full.meta.generated.isoformat().replace("+00:00", "Z")
    expected = len(changes.changes) + len(changes.events)
    assert len(parsed.entries) == expected and expected > len(ENTRIES)
    titles = [entry.title for entry in parsed.entries]
    assert titles[0] == f"Release {full.meta.version}"
    assert "Gone is now degraded" in titles and "Steady added" in titles
    assert len({entry.id for entry in parsed.entries}) == expected  # unique ids
    links = {entry.title: entry.link for entry in parsed.entries}
    assert links["Gone is now degraded"] == "https://directory.test/apis/gone.html"
    stamps = [entry.updated for entry in parsed.entries]
    assert stamps == sorted(stamps, reverse=True)
    # the same item keeps its id from one release to the next (a reader shows it once)
    ids = {entry.title: entry.id for entry in parsed.entries}
    publish(catalogue)
    again = feedparser.parse((catalogue.output_dir / "changes.atom").read_bytes())
    assert {e.title: e.id for e in again.entries}["Steady added"] == ids["Steady added"]


def test_a_broken_feed_is_named_by_the_check() -> None:
    from pipeline.release.feed import check_feed

    assert check_feed(b"<feed")[0].startswith("not well-formed XML")
    problems = check_feed(b'<feed xmlns="http://www.w3.org/2005/Atom"><title>x</title>'
                          b"<entry><id>a</id><title>t</title></entry>"
                          b"<entry><id>a</id><title>t</title><updated>2026-11-23T00:00:00Z"
                          b'</updated><link href="https://x.test/"/></entry></feed>')
    assert problems == ["the feed needs exactly one id", "the feed needs exactly one updated",
                        "the feed needs an author with a name",
                        "entry 1 needs exactly one updated",
                        "entry 1 needs an alternate link (it has no content)",
                        "entry 2 repeats the id a"]


def test_changes_name_more_entries_than_one_statement_may_bind(
        write_entry: WriteEntry, ingested_store) -> None:
    """A night may change the states of more entries than a statement binds values
    (PostgreSQL: 65,535): their names are read a bounded IN list at a time."""
    from pipeline.judging.changes import _names

    write_entry(make_entry(id="steady", name="Steady API"))
    session = ingested_store()
    asked = [f"gone-{number:06d}" for number in range(70_000)] + ["steady"]
    assert _names(session, asked) == {"steady": "Steady API"}
