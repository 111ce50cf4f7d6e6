"""Release history and the change log: kept releases, retention, state changes newest first."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import Session, delete, select

from pipeline.catalogue.entries import load_categories, read_catalog
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.contract import Status
from pipeline.judging.changes import recent_changes, record_state_changes, run_changes
from pipeline.judging.present import Presented
from pipeline.operations import stages
from pipeline.release.hosting import HEADERS_FILE
from pipeline.release.layout import (
    CHANGES,
    FULL_DATASET,
    RELEASE_INDEX,
    RELEASES_DIR,
    folder_version,
    release_folder,
    release_folder_name,
)
from pipeline.release.publish import publish_release
from pipeline.release.validate import validate_release
from pipeline.settings import Settings
from pipeline.store.tables import ReleaseRow, engine_for, session_scope, start_run, utcnow
from tests.conftest import REPO, WriteEntry, make_entry

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
CATEGORIES = load_categories(REPO / "data" / "categories.yaml")


@pytest.fixture
def session(write_entry: WriteEntry, ingested_store):
    write_entry(make_entry())
    write_entry(make_entry(id="other-maps", name="Other Maps", category="maps",
                           baseUrl="https://maps.example.org",
                           sampleRequest='curl "https://maps.example.org/forecast"'))
    return ingested_store()


def status(state: str, at: datetime) -> Status:
    code = {"live": 200, "online": 401, "unreachable": None}[state]
    return Status(state=state, http_status=code, checked_at=at,
                  url="https://api.example.com/v1/forecast")


def publish(session: Session, out: Path, at: datetime, kept: int = 30, **statuses: str):
    presented = Presented(statuses={entry.replace("_", "-"): status(state, at)
                                    for entry, state in statuses.items()})
    changes = record_state_changes(session, presented.statuses, at)
    release = publish_release(session, out, "https://directory.test", CATEGORIES, at, presented,
                              releases_kept=kept,
                              changes=recent_changes(session, at - timedelta(days=30))).release
    return release, changes


def read(out: Path, path: str) -> dict:
    return json.loads((out / path).read_text(encoding="utf-8"))


def test_each_release_is_kept_and_listed_newest_first(session: Session, tmp_path: Path) -> None:
    out = tmp_path / "public"
    first, _ = publish(session, out, T0, example_weather="live")
    snapshot = (out / FULL_DATASET).read_bytes()
    second, _ = publish(session, out, T0 + timedelta(hours=1), example_weather="unreachable")
    index = read(out, RELEASE_INDEX)
    assert [r["version"] for r in index["releases"]] == [second.version, first.version]
    assert index["meta"]["version"] == second.version
    kept = out / release_folder(first.version)
    assert (kept / "apis.json").read_bytes() == snapshot  # unchanged by the later release
    assert (kept / "categories" / "maps.json").is_file() and (kept / "openapi.json").is_file()
    # the entry documents and the search index present the dataset again: not kept twice
    assert (out / "api" / "apis" / "other-maps.json").is_file()
    assert not (kept / "apis").exists() and not (kept / "search.json").exists()
    assert (out / release_folder(second.version) / "apis.json").read_bytes() == (
        out / FULL_DATASET).read_bytes()
    newest = index["releases"][0]
    assert newest["path"] == f"{release_folder(second.version)}/apis.json"
    assert newest["counts"]["total"] == 2
    assert newest["counts"]["byState"] == {"live": 0, "online": 0, "unreachable": 1,
                                           "unchecked": 1}
    assert newest["counts"]["byCategory"]["maps"] == 1
    assert newest["counts"]["byCategory"]["ai"] == 0
    assert validate_release(out, CATEGORIES) == []


def test_only_the_last_n_releases_are_kept(session: Session, tmp_path: Path) -> None:
    out = tmp_path / "public"
    versions = [publish(session, out, T0 + timedelta(hours=n), kept=2)[0].version
                for n in range(4)]
    index = read(out, RELEASE_INDEX)
    assert [r["version"] for r in index["releases"]] == versions[:1:-1]
    assert sorted(p.name for p in (out / RELEASES_DIR).iterdir()) == sorted(
        release_folder_name(version) for version in versions[2:])


def test_a_release_folder_removed_by_hand_leaves_the_index(session: Session, tmp_path) -> None:
    out = tmp_path / "public"
    first, _ = publish(session, out, T0)
    second, _ = publish(session, out, T0 + timedelta(hours=1))
    shutil.rmtree(out / release_folder(first.version))
    third, _ = publish(session, out, T0 + timedelta(hours=2))
    index = read(out, RELEASE_INDEX)
    assert [r["version"] for r in index["releases"]] == [third.version, second.version]


def test_an_index_listing_a_missing_release_fails_validation(session, tmp_path: Path) -> None:
    out = tmp_path / "public"
    release, _ = publish(session, out, T0)
    shutil.rmtree(out / release_folder(release.version))
    problems = validate_release(out, CATEGORIES)
    assert problems == [
        f"{HEADERS_FILE}: /{release_folder(release.version)}/* is cached as immutable but is "
        "no asset or kept release folder of the release: a miss there would be kept for a year",
        f"{RELEASE_INDEX}: {release_folder(release.version)}/apis.json is missing",
        f"changes.atom: https://directory.test/{release_folder(release.version)}/apis.json "
        "names no file of the release"]


def test_release_folders_have_no_plus_and_name_their_version_one_to_one(
    session: Session, tmp_path: Path
) -> None:
    out = tmp_path / "public"
    first, _ = publish(session, out, T0)
    second, _ = publish(session, out, T0 + timedelta(hours=1))
    assert "+" in first.version  # the version itself stays SemVer with build metadata
    folders = sorted(p.name for p in (out / RELEASES_DIR).iterdir())
    assert folders == ["2.0.0_20261121.1", "2.0.0_20261121.2"]
    assert [folder_version(name) for name in folders] == [first.version, second.version]
    for release in read(out, RELEASE_INDEX)["releases"]:
        assert "+" not in release["path"]
        kept = read(out, release["path"])
        assert kept["meta"]["version"] == release["version"]
    for version in ("2.0.0+20261121.1", "2.0.0+20991231.17", "2.1.0-rc.1+build.5"):
        assert folder_version(release_folder_name(version)) == version
        assert "+" not in release_folder_name(version)


def test_a_release_kept_under_its_old_folder_name_stays_where_it_is(
    session: Session, tmp_path: Path
) -> None:
    """A release published before safe folder names sits in `2.0.0+<day>.<n>/`: later
    releases carry it there, list it with its own path, and never reuse its version."""
    out = tmp_path / "public"
    old, _ = publish(session, out, T0)
    old_folder = f"{RELEASES_DIR}/{old.version}"
    (out / release_folder(old.version)).rename(out / old_folder)
    index = read(out, RELEASE_INDEX)
    index["releases"][0]["path"] = f"{old_folder}/apis.json"
    (out / RELEASE_INDEX).write_text(json.dumps(index), encoding="utf-8")
    snapshot = (out / old_folder / "apis.json").read_bytes()

    new, _ = publish(session, out, T0 + timedelta(minutes=5))
    assert new.version == old.version.removesuffix(".1") + ".2"
    listed = read(out, RELEASE_INDEX)["releases"]
    assert [(r["version"], r["path"]) for r in listed] == [
        (new.version, f"{release_folder(new.version)}/apis.json"),
        (old.version, f"{old_folder}/apis.json"),
    ]
    assert (out / old_folder / "apis.json").read_bytes() == snapshot
    assert not (out / release_folder(old.version)).exists()
    assert validate_release(out, CATEGORIES) == []


def test_at_least_one_release_is_kept(session: Session, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="releases_kept"):
        publish(session, tmp_path / "public", T0, kept=0)


def test_state_changes_are_recorded_and_published_newest_first(session, tmp_path) -> None:
    out = tmp_path / "public"
    _, first = publish(session, out, T0, example_weather="live", other_maps="online")
    assert first == []  # a first check is not a change
    _, down = publish(session, out, T0 + timedelta(hours=1), example_weather="unreachable",
                      other_maps="online")
    assert [(c.entry_id, c.from_state, c.to_state, c.direction) for c in down] == [
        ("example-weather", "live", "unreachable", "down")]
    assert down[0].name == "Example Weather"
    _, up = publish(session, out, T0 + timedelta(hours=2), example_weather="live",
                    other_maps="live")
    assert {(c.entry_id, c.direction) for c in up} == {("example-weather", "up"),
                                                      ("other-maps", "changed")}
    changes = read(out, CHANGES)["changes"]
    assert [(c["entry"], c["from"], c["to"]) for c in changes[-1:]] == [
        ("example-weather", "live", "unreachable")]
    assert len(changes) == 3
    assert [c["at"] for c in changes] == sorted((c["at"] for c in changes), reverse=True)
    assert changes[0]["at"] == "2026-11-21T05:00:00Z"


def test_unchecked_statuses_change_nothing(session: Session) -> None:
    record_state_changes(session, {"example-weather": status("live", T0)}, T0)
    assert record_state_changes(session, {"example-weather": Status()}, T0) == []
    later = T0 + timedelta(hours=1)
    changed = record_state_changes(session, {"example-weather": status("online", later)}, later)
    assert [(c.from_state, c.to_state, c.at) for c in changed] == [("live", "online", later)]


def test_a_runs_changes_are_read_back_as_it_recorded_them(session: Session) -> None:
    """The nightly's summary and alerts read the run's changes from the store: each run's own,
    in the order recorded, named as recorded."""
    first, second = start_run(session, "nightly"), start_run(session, "nightly")
    later = T0 + timedelta(hours=1)
    record_state_changes(session, {"example-weather": status("live", T0)}, T0, first.id)
    mine = record_state_changes(session, {"example-weather": status("unreachable", later)},
                                later, second.id)
    assert mine and run_changes(session, second.id) == mine
    assert run_changes(session, first.id) == []


def publish_now(settings: Settings, now: datetime) -> ReleaseRow:
    """The publish stage, its clock reading `now`."""
    published, _ = stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    return published.release


@pytest.fixture
def catalogue(write_entry: WriteEntry, settings_env: dict[str, str], data_dir: Path) -> Settings:
    """The settings of a store that will ingest one entry (`ingest`)."""
    write_entry(make_entry())
    return Settings()


def ingest(settings: Settings, now: datetime) -> None:
    entries = settings.entries_dir
    with session_scope(engine_for(settings.database_url)) as session:
        ingest_catalog(session, read_catalog([entries], entries), now=now)


def test_a_clock_set_back_publishes_after_the_last_release(catalogue: Settings) -> None:
    """A clock stepped back behind the last release (by its time source) no longer fails every
    publish until it catches up: the release is stamped just after the last one."""
    ahead = utcnow() + timedelta(hours=1)
    ingest(catalogue, ahead)
    first = publish_now(catalogue, ahead)
    second = publish_now(catalogue, utcnow())  # the clock an hour behind the first release
    assert second.generated > first.generated
    index = read(catalogue.output_dir, RELEASE_INDEX)
    assert [r["version"] for r in index["releases"]] == [second.version, first.version]
    assert validate_release(catalogue.output_dir, CATEGORIES) == []


def test_a_clock_set_back_publishes_after_the_last_catalogue_event(catalogue: Settings) -> None:
    """Entries added by an ingest whose clock was ahead: the release's event is stamped no
    earlier than theirs, so the change log stays newest first."""
    ahead = utcnow() + timedelta(hours=1)
    ingest(catalogue, ahead)
    release = publish_now(catalogue, utcnow())
    assert release.generated >= ahead
    events = read(catalogue.output_dir, CHANGES)["events"]
    assert [event["kind"] for event in events] == ["release", "added"]
    assert validate_release(catalogue.output_dir, CATEGORIES) == []


def test_a_live_release_the_store_did_not_record_is_recorded_by_the_next_publish(
    catalogue: Settings,
) -> None:
    """A release swapped in whose record the store then refused stays live; the next publish
    records it, so the change log tells of both releases."""
    ingest(catalogue, utcnow())
    unrecorded = publish_now(catalogue, utcnow())
    with session_scope(engine_for(catalogue.database_url)) as session:
        session.exec(delete(ReleaseRow))
    latest = publish_now(catalogue, utcnow())
    with session_scope(engine_for(catalogue.database_url)) as session:
        recorded = sorted(session.exec(select(ReleaseRow.version)))
    assert recorded == sorted([unrecorded.version, latest.version])
    events = read(catalogue.output_dir, CHANGES)["events"]
    assert [e["version"] for e in events if e["kind"] == "release"] == [
        latest.version, unrecorded.version]
