"""The Atom feed stays well-formed XML whatever text an entry's store holds: a character XML
1.0 forbids, kept from before `validate` refused it, is dropped, never written."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree

import pytest

from pipeline.catalogue.entries import load_categories
from pipeline.judging.changes import (
    CheckedState,
    recent_changes,
    recent_events,
    record_state_changes,
)
from pipeline.operations import stages
from pipeline.release.feed import ATOM, FeedItem, FeedLinks, check_feed, render_feed
from pipeline.release.layout import entry_document, entry_page
from pipeline.release.publish import publish_release
from pipeline.settings import Settings
from pipeline.store.history import plan_targets, record_probes
from pipeline.store.tables import EntryRow, engine_for, session_scope, start_run
from tests.conftest import WriteEntry, make_entry
from tests.site_release import publish_sample_release
from tests.test_history import result
from tests.test_publish import store_refused_value

META = {"generated": "2026-11-21T03:00:00Z", "license": "CC BY 4.0"}


@pytest.mark.parametrize("odd", ["\x01", "\x00", "\x1f", "\ufffe", "\uffff", "\ud800"])
def test_a_stored_name_with_a_character_xml_forbids_makes_a_well_formed_feed(odd: str) -> None:
    items = [{"kind": "added", "entry": "bright-sky", "name": f"Bright Sky {odd}API",
              "at": "2026-11-21T03:00:00Z"},
             {"entry": "bright-sky", "name": f"Bright{odd} Sky", "from": "live",
              "to": "unreachable", "at": "2026-11-20T03:00:00Z"}]
    data = render_feed(META, [FeedItem(item) for item in items],
                       FeedLinks("https://directory.test"))
    assert check_feed(data) == []
    feed = ElementTree.fromstring(data)
    titles = [entry.findtext(f"{{{ATOM}}}title") for entry in feed.iter(f"{{{ATOM}}}entry")]
    assert titles == ["Bright Sky API added", "Bright Sky: live → unreachable"]


def test_tabs_and_line_breaks_are_kept() -> None:
    items = [{"kind": "added", "entry": "a", "name": "A\tB", "at": "2026-11-21T03:00:00Z"}]
    feed = ElementTree.fromstring(render_feed(META, [FeedItem(item) for item in items],
                                              FeedLinks("https://directory.test")))
    assert feed.find(f"{{{ATOM}}}entry/{{{ATOM}}}title").text == "A\tB added"


def test_a_releases_item_says_what_the_release_holds() -> None:
    """A release's item tells a feed reader how many APIs the release holds and how they
    stand, from its line in `api/releases.json`; a release no longer listed there, or whose
    line read back holds no count, is only said to be published."""
    items = [FeedItem({"kind": "release", "version": version, "at": at}) for version, at in
             (("2.0.0+20261121.1", "2026-11-21T03:00:00Z"),
              ("2.0.0+20261120.1", "2026-11-20T03:00:00Z"),
              ("2.0.0+20261119.1", "2026-11-19T03:00:00Z"))]
    counts = {"2.0.0+20261121.1": {"total": 162, "byCategory": {"ai": 10}, "byState": {
        "live": 120, "online": 30, "unreachable": 1, "unchecked": 11}},
        "2.0.0+20261119.1": {"total": "162", "byState": [1]}}
    feed = ElementTree.fromstring(render_feed(META, items, FeedLinks("https://directory.test"),
                                              counts))
    summaries = [entry.findtext(f"{{{ATOM}}}summary") for entry in feed.iter(f"{{{ATOM}}}entry")]
    assert summaries == [
        "Release 2.0.0+20261121.1 was published with 162 APIs: 120 live, 30 online, "
        "1 unreachable and 11 not checked.",
        "Release 2.0.0+20261120.1 was published.", "Release 2.0.0+20261119.1 was published."]


def test_an_added_entrys_item_says_what_the_api_does() -> None:
    """An entry's item of being added tells a feed reader what the API does, in the entry's
    own description as the release holds it; one without a description says it was added."""
    items = [FeedItem({"kind": "added", "entry": entry, "name": name,
                       "at": "2026-11-21T03:00:00Z"})
             for entry, name in (("bright-sky", "Bright Sky"), ("bare", "Bare"))]
    descriptions = {"bright-sky": "Free weather data from the German Weather Service."}
    feed = ElementTree.fromstring(render_feed(
        META, items, FeedLinks("https://directory.test", entries=frozenset({"bright-sky"})),
        descriptions=descriptions))
    summaries = [entry.findtext(f"{{{ATOM}}}summary") for entry in feed.iter(f"{{{ATOM}}}entry")]
    assert summaries == ["Bright Sky was added to the directory. Free weather data from the "
                         "German Weather Service.", "Bare was added to the directory."]


def test_a_published_releases_item_says_what_it_holds(tmp_path: Path) -> None:
    release = publish_sample_release(tmp_path)
    total = json.loads((release.folder / "api" / "apis.json").read_text())["meta"]["totalAPIs"]
    feed = ElementTree.fromstring((release.folder / "changes.atom").read_bytes())
    summaries = [entry.findtext(f"{{{ATOM}}}summary") for entry in feed.iter(f"{{{ATOM}}}entry")
                 if entry.find(f"{{{ATOM}}}category").get("term") == "release"]
    assert summaries == [f"Release 2.0.0+20261121.1 was published with {total:,} APIs: 1 live, "
                         f"1 online, 1 unreachable and {total - 3:,} not checked."]


def test_a_release_publishes_an_entry_stored_with_a_control_character(
    write_entry: WriteEntry, settings_env: dict[str, str]
) -> None:
    """The entry's name was stored before `validate` refused it: the release is published and
    its feed parses, without the character."""
    write_entry(make_entry(id="bright-sky", name="Bright Sky API"))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    with session_scope(engine_for(settings.database_url)) as session:
        row = session.get(EntryRow, "bright-sky")
        row.name = "Bright Sky \x01 API"
        row.content = row.content | {"name": row.name}
        session.add(row)
    now = datetime.now(UTC)
    stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    data = (settings.output_dir / "changes.atom").read_bytes()
    assert check_feed(data) == []
    titles = [entry.findtext(f"{{{ATOM}}}title")
              for entry in ElementTree.fromstring(data).iter(f"{{{ATOM}}}entry")]
    assert "Bright Sky  API added" in titles


TYPES = {".html": "text/html", ".json": "application/json", ".atom": "application/atom+xml"}


def feed_addresses(data: bytes) -> list[tuple[str, str | None]]:
    """Every address the feed names, its links' and its author's, with the type it gives."""
    feed = ElementTree.fromstring(data)
    links = [(link.get("href"), link.get("type")) for link in feed.iter(f"{{{ATOM}}}link")]
    return links + [(uri.text, None) for uri in feed.iter(f"{{{ATOM}}}uri")]


def publish_night(settings: Settings, answer: tuple[str, int | None] | None) -> None:
    """Ingest, record `answer` (outcome, HTTP status) as the probe of `gone-api`, publish."""
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    now = datetime.now(UTC)
    if answer is not None:
        with session_scope(engine_for(settings.database_url)) as session:
            target = next(t for t in plan_targets(session) if t.entry_id == "gone-api")
            record_probes(session, start_run(session, "nightly"),
                          [result(target.url, *answer, entry="gone-api",
                                  endpoint=target.endpoint_id, at=now)])
    stages.publish_now(settings, stages.score_entries_now(settings, now), now)


@pytest.mark.parametrize("pages", [True, False])
def test_every_link_of_the_feed_resolves_in_the_release_that_publishes_it(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    pages: bool
) -> None:
    """Releases are pruned and an entry is retired while the feed still lists their items:
    each link names a file of the release publishing the feed, with that file's type."""
    monkeypatch.setenv("APIDIR_RELEASES_KEPT", "2")
    monkeypatch.setenv("APIDIR_PUBLISH_PAGES", str(pages).lower())
    write_entry(make_entry(id="bright-sky", name="Bright Sky"))
    gone = write_entry(make_entry(id="gone-api", name="Gone", baseUrl="https://gone.example.org",
                                  sampleRequest='curl "https://gone.example.org/forecast"'))
    settings = Settings()
    output = Path(settings_env["APIDIR_OUTPUT_DIR"])
    root = settings_env["APIDIR_BASE_URL"] + "/"
    for night, answer in enumerate([("live", 200), ("unreachable", None), None, None]):
        if answer is None:
            gone.unlink(missing_ok=True)  # retired: its added event and change stay listed
        publish_night(settings, answer)
        data = (output / "changes.atom").read_bytes()
        assert check_feed(data) == []
        for address, media_type in feed_addresses(data):
            assert address.startswith(root), address
            path = output / address.removeprefix(root)
            assert path.is_file(), (night, address)
            assert media_type in (None, TYPES[path.suffix]), (address, media_type)
    feed = ElementTree.fromstring((output / "changes.atom").read_bytes())
    links = {entry.findtext(f"{{{ATOM}}}title"): entry.find(f"{{{ATOM}}}link").get("href")
             for entry in feed.iter(f"{{{ATOM}}}entry")}
    releases = [link for title, link in links.items() if title.startswith("Release ")]
    # the two newest link their kept dataset; the two pruned, the change log listing them
    assert [link.removeprefix(root) for link in releases[2:]] == ["api/changes.json"] * 2
    pruned = {title.removeprefix("Release ") for title, link in links.items()
              if title.startswith("Release ") and link == root + "api/changes.json"}
    log = json.loads((output / "api" / "changes.json").read_text())
    assert len(pruned) == 2 and pruned <= {event.get("version") for event in log["events"]}
    assert all(link.startswith(root + "api/releases/") for link in releases[:2])
    assert {"Gone added", "Gone retired", "Gone: live → unreachable"} <= set(links)
    added = [entry.findtext(f"{{{ATOM}}}summary") for entry in feed.iter(f"{{{ATOM}}}entry")
             if entry.findtext(f"{{{ATOM}}}title") == "Bright Sky added"]
    assert added == [f"Bright Sky was added to the directory. {make_entry()['description']}"]


def test_the_check_names_an_address_of_the_feed_that_the_release_lacks(tmp_path: Path) -> None:
    """A feed linking a pruned release refuses its release, as a page with a dead link does."""
    links = FeedLinks("https://directory.test/dir", {"2.0.0+20261121.2": "api/releases/"
                                                     "2.0.0_20261121.2/apis.json"},
                      frozenset({"bright-sky"}))
    items = [{"kind": "release", "version": "2.0.0+20261121.2", "at": "2026-11-21T04:00:00Z"},
             {"kind": "added", "entry": "bright-sky", "name": "Bright Sky",
              "at": "2026-11-21T03:00:00Z"}]
    data = render_feed(META, [FeedItem(item) for item in items], links)
    for path in ("changes.atom", "api/changes.json", "index.html", "apis/bright-sky.html"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    assert check_feed(data) == []
    assert check_feed(data, tmp_path) == [
        "https://directory.test/dir/api/releases/2.0.0_20261121.2/apis.json names no file of "
        "the release"]


def ingest(settings: Settings) -> None:
    """The catalogue's files ingested, as a night's run does."""
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)


def went_down(settings: Settings, entry_id: str) -> None:
    """The entry checked live two hours ago, then unreachable an hour ago."""
    now = datetime.now(UTC)
    with session_scope(engine_for(settings.database_url)) as session:
        for hours, state in ((2, "live"), (1, "unreachable")):
            at = now - timedelta(hours=hours)
            record_state_changes(session, {entry_id: CheckedState(state, at)}, at)


def renamed_catalogue(settings: Settings, write_entry: WriteEntry,
                      category: str = "weather") -> None:
    """`old-sky` added and checked live, then unreachable, then renamed `bright-sky`
    (`formerIds`): its added event and its state change are held by `bright-sky` since, still
    telling of `old-sky`, in `category`; `other-api` stands beside it, in weather."""
    old = write_entry(make_entry(id="old-sky", name="Bright Sky"))
    write_entry(make_entry(id="other-api", name="Other", baseUrl="https://other.example.org",
                           sampleRequest='curl "https://other.example.org/forecast"'))
    ingest(settings)
    went_down(settings, "old-sky")
    old.unlink()
    write_entry(make_entry(id="bright-sky", name="Bright Sky", formerIds=["old-sky"],
                           category=category))
    ingest(settings)


def feed_entries(data: bytes) -> dict[str, tuple[str, str]]:
    """Each entry of the feed, by title: its link and summary."""
    return {entry.findtext(f"{{{ATOM}}}title"): (entry.find(f"{{{ATOM}}}link").get("href"),
                                                entry.findtext(f"{{{ATOM}}}summary"))
            for entry in ElementTree.fromstring(data).iter(f"{{{ATOM}}}entry")}


def test_the_items_of_a_former_id_are_left_out_with_the_entry_holding_them(
    write_entry: WriteEntry, settings_env: dict[str, str]
) -> None:
    """The entry that took `old-sky` over is left out of the release (its check refused it):
    what it holds of `old-sky` (its added event, its state change, the rename) is left out of
    the change log and the feed with it, as its own items are."""
    settings = Settings()
    renamed_catalogue(settings, write_entry)
    store_refused_value(settings, "bright-sky", baseUrl="https://api.example.com/%zz")
    now = datetime.now(UTC)
    published, _ = stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    assert [item.entry for item in published.left_out] == ["bright-sky"]
    log = json.loads((settings.output_dir / "api" / "changes.json").read_text())
    assert log["changes"] == []
    assert [(event["kind"], event.get("entry")) for event in log["events"]] == [
        ("release", None), ("added", "other-api")]
    titles = set(feed_entries((settings.output_dir / "changes.atom").read_bytes()))
    assert titles == {"Other added", f"Release {published.release.version}"}


def test_a_release_of_other_categories_leaves_out_the_items_of_a_former_id_with_its_holder(
    write_entry: WriteEntry, settings_env: dict[str, str]
) -> None:
    """A release of the weather category alone: `bright-sky`, in maps, is left out, and with
    it what it holds of `old-sky`, which was in weather."""
    settings = Settings()
    renamed_catalogue(settings, write_entry, category="maps")
    now = datetime.now(UTC)
    weather = [c for c in load_categories(settings.categories_file) if c.id == "weather"]
    since = now - timedelta(days=1)
    with session_scope(engine_for(settings.database_url)) as session:
        published = publish_release(
            session, settings.output_dir, settings.base_url, weather, now,
            changes=recent_changes(session, since), events=recent_events(session, since))
    assert [item.entry for item in published.left_out] == ["bright-sky"]
    log = json.loads((settings.output_dir / "api" / "changes.json").read_text())
    assert log["changes"] == []
    assert [(event["kind"], event.get("entry")) for event in log["events"]] == [
        ("release", None), ("added", "other-api")]


@pytest.mark.parametrize("pages", [True, False])
def test_the_items_of_a_former_id_link_the_entry_holding_them_and_name_that_id(
    write_entry: WriteEntry, settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    pages: bool
) -> None:
    """`old-sky`'s items link the page of `bright-sky`, which holds them (its document in a
    release without pages), not the directory's home: the release holds no `old-sky`; each
    is named `old-sky` (the store keeps no name of an id taken over) and says where it is
    listed now."""
    monkeypatch.setenv("APIDIR_PUBLISH_PAGES", str(pages).lower())
    settings = Settings()
    renamed_catalogue(settings, write_entry)
    now = datetime.now(UTC)
    stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    output = settings.output_dir
    data = (output / "changes.atom").read_bytes()
    assert check_feed(data, output) == []
    log = json.loads((output / "api" / "changes.json").read_text())
    told = sorted((item.get("kind", "state"), item["entry"])
                  for item in [*log["changes"], *log["events"]] if item.get("entry"))
    assert told == [("added", "bright-sky"), ("added", "old-sky"), ("added", "other-api"),
                    ("retired", "old-sky"), ("state", "old-sky")]
    holder = f"{settings_env['APIDIR_BASE_URL']}/" + (
        entry_page("bright-sky") if pages else entry_document("bright-sky"))
    entries = feed_entries(data)
    for title in ("old-sky added", "old-sky: live → unreachable"):
        link, summary = entries[title]
        assert link == holder, title
        assert "old-sky" in summary and "bright-sky" in summary, summary
    for title in ("Bright Sky renamed from old-sky", "old-sky renamed to bright-sky"):
        assert entries[title][0] == holder


def test_the_items_of_an_id_merged_into_a_live_entry_name_that_id_not_the_live_entry(
    write_entry: WriteEntry, settings_env: dict[str, str]
) -> None:
    """`old-sky` (Old Sky) went down and was retired; long after, `bright-sky` (Bright Sky,
    live) takes it over (`formerIds`): the change log and the feed tell `old-sky` added,
    unreachable and retired, never Bright Sky retired or unreachable."""
    settings = Settings()
    old = write_entry(make_entry(id="old-sky", name="Old Sky", baseUrl="https://old.example.org",
                                 sampleRequest='curl "https://old.example.org/forecast"'))
    write_entry(make_entry(id="bright-sky", name="Bright Sky"))
    ingest(settings)
    went_down(settings, "old-sky")
    old.unlink()
    ingest(settings)  # old-sky retired
    write_entry(make_entry(id="bright-sky", name="Bright Sky", formerIds=["old-sky"]))
    ingest(settings)  # merged: neither id told again
    now = datetime.now(UTC)
    published, _ = stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    output = settings.output_dir
    log = json.loads((output / "api" / "changes.json").read_text())
    assert [(change["entry"], change["name"], change["to"]) for change in log["changes"]] == [
        ("old-sky", "old-sky", "unreachable")]
    assert sorted((event["kind"], event["entry"], event["name"]) for event in log["events"]
                  if event["kind"] != "release") == [
        ("added", "bright-sky", "Bright Sky"), ("added", "old-sky", "old-sky"),
        ("retired", "old-sky", "old-sky")]
    entries = feed_entries((output / "changes.atom").read_bytes())
    assert set(entries) == {"Bright Sky added", "old-sky added", "old-sky retired",
                            "old-sky: live → unreachable",
                            f"Release {published.release.version}"}
    assert entries["old-sky retired"][1] == (
        "old-sky was retired from the directory. Its history is held by bright-sky now.")


def test_a_rename_moved_by_a_later_rename_says_each_id_once() -> None:
    """`first` renamed `second`, then `third`: the first rename's halves, held by `third`, are
    named `second` (the id they tell of), and their text does not say it twice."""
    at = "2026-11-20T03:00:00Z"
    items = [FeedItem({"kind": "added", "entry": "second", "name": "second",
                       "renamedFrom": "first", "at": at}, "third"),
             FeedItem({"kind": "retired", "entry": "first", "name": "second",
                       "renamedTo": "second", "at": at}, "third")]
    data = render_feed(META, items, FeedLinks("https://directory.test", entries=frozenset(
        {"third"})))
    assert feed_entries(data) == {
        "second renamed from first": ("https://directory.test/" + entry_page("third"),
                                      "first was renamed second; its history carries over. "
                                      "Its history is held by third now."),
        "first renamed to second": ("https://directory.test/" + entry_page("third"),
                                    "first was renamed second. It was listed as first then; "
                                    "it is listed as third now.")}
