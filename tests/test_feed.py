"""The Atom feed stays well-formed XML whatever text an entry's store holds: a character XML
1.0 forbids, kept from before `validate` refused it, is dropped, never written."""

from __future__ import annotations

from datetime import UTC, datetime
from xml.etree import ElementTree

import pytest

from pipeline.operations import stages
from pipeline.release.feed import ATOM, check_feed, render_feed
from pipeline.settings import Settings
from pipeline.store.tables import EntryRow, engine_for, session_scope, start_run
from tests.conftest import WriteEntry, make_entry

META = {"generated": "2026-11-21T03:00:00Z", "license": "CC BY 4.0"}


@pytest.mark.parametrize("odd", ["\x01", "\x00", "\x1f", "\ufffe", "\uffff", "\ud800"])
def test_a_stored_name_with_a_character_xml_forbids_makes_a_well_formed_feed(odd: str) -> None:
    items = [{"kind": "added", "entry": "bright-sky", "name": f"Bright Sky {odd}API",
              "at": "2026-11-21T03:00:00Z"},
             {"entry": "bright-sky", "name": f"Bright{odd} Sky", "from": "live",
              "to": "unreachable", "at": "2026-11-20T03:00:00Z"}]
    data = render_feed(META, items, "https://directory.test")
    assert check_feed(data) == []
    feed = ElementTree.fromstring(data)
    titles = [entry.findtext(f"{{{ATOM}}}title") for entry in feed.iter(f"{{{ATOM}}}entry")]
    assert titles == ["Bright Sky API added", "Bright Sky: live → unreachable"]


def test_tabs_and_line_breaks_are_kept() -> None:
    items = [{"kind": "added", "entry": "a", "name": "A\tB", "at": "2026-11-21T03:00:00Z"}]
    feed = ElementTree.fromstring(render_feed(META, items, "https://directory.test"))
    assert feed.find(f"{{{ATOM}}}entry/{{{ATOM}}}title").text == "A\tB added"


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
