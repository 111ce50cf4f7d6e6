"""Ingest into a real store (SQLite file and PostgreSQL): idempotent upserts, retire-not-delete,
bad files kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sqlmodel import Session, select

from pipeline.catalogue.entries import entry_files, read_catalog
from pipeline.catalogue.ingest import EmptyCatalogError, ingest_catalog
from pipeline.store.tables import EndpointRow, EntryRow, active_entries, make_engine
from tests.conftest import WriteEntry, make_entry


@pytest.fixture
def engine(database_url: str):
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def ingest(engine, data_dir: Path):
    entries = data_dir / "entries"
    with Session(engine) as session:
        return ingest_catalog(session, read_catalog([entries], entries))


def test_database_file_is_created_with_its_folder(tmp_path: Path) -> None:
    make_engine(f"sqlite:///{tmp_path / 'var' / 'store.db'}").dispose()
    assert (tmp_path / "var" / "store.db").is_file()


def test_ingest_is_idempotent(engine, write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry()
    first = ingest(engine, data_dir)
    second = ingest(engine, data_dir)
    assert first.added == ["example-weather"]
    assert second.added == [] and second.updated == [] and second.unchanged == ["example-weather"]
    with Session(engine) as session:
        assert len(session.exec(select(EntryRow)).all()) == 1
        assert len(session.exec(select(EndpointRow)).all()) == 3


def test_a_changed_file_updates_the_entry_and_its_endpoints(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry()
    ingest(engine, data_dir)
    endpoints = [
        {"method": "GET", "path": "/forecast", "description": "Forecast."},
        {"method": "POST", "path": "/alerts", "description": "Create an alert."},
    ]
    write_entry(make_entry(name="Renamed", endpoints=endpoints))
    summary = ingest(engine, data_dir)
    assert summary.updated == ["example-weather"]
    with Session(engine) as session:
        row = session.get(EntryRow, "example-weather")
        assert row.name == "Renamed" and row.content["endpoints"] == endpoints
        rows = session.exec(select(EndpointRow).order_by(EndpointRow.path)).all()
        state = {(r.method, r.path): r.active for r in rows}
    # the endpoint that left the entry is kept, inactive, so its probe history stays linked
    assert state == {
        ("POST", "/alerts"): True,
        ("GET", "/current"): False,
        ("GET", "/forecast"): True,
        ("GET", "/stations/{stationId}"): False,
    }


def test_a_removed_file_retires_the_entry_and_keeps_it(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    kept = write_entry(make_entry(id="kept-api"))
    gone = write_entry()
    ingest(engine, data_dir)
    gone.unlink()
    summary = ingest(engine, data_dir)
    assert summary.retired == ["example-weather"]
    with Session(engine) as session:
        row = session.get(EntryRow, "example-weather")
        assert row is not None and row.retired_at is not None
        assert [r.id for r in active_entries(session)] == ["kept-api"]
        assert (
            len(
                session.exec(
                    select(EndpointRow).where(EndpointRow.entry_id == "example-weather")
                ).all()
            )
            == 3
        )
    assert kept.exists()
    # the file comes back: the entry is restored, not duplicated
    write_entry()
    summary = ingest(engine, data_dir)
    assert summary.restored == ["example-weather"]
    with Session(engine) as session:
        assert [r.id for r in active_entries(session)] == ["example-weather", "kept-api"]


def test_an_invalid_file_keeps_the_last_valid_version(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    path = write_entry()
    write_entry(make_entry(id="other-api"))
    ingest(engine, data_dir)
    path.write_text(yaml.safe_dump(make_entry(name="Broken", authType="token")))
    summary = ingest(engine, data_dir)
    assert summary.invalid == ["example-weather"]
    assert summary.retired == []
    assert any(error["field"] == "authType" for error in summary.errors)
    with Session(engine) as session:
        row = session.get(EntryRow, "example-weather")
        assert row.name == "Example Weather" and row.retired_at is None
    path.write_text("id: example-weather\nname: [unclosed\n")
    summary = ingest(engine, data_dir)
    assert summary.invalid == ["example-weather"] and summary.retired == []


def test_an_empty_catalogue_never_retires_everything(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    path = write_entry()
    ingest(engine, data_dir)
    path.unlink()
    with pytest.raises(EmptyCatalogError):
        ingest(engine, data_dir)
    with Session(engine) as session:
        assert [r.id for r in active_entries(session)] == ["example-weather"]


# --- incremental ingest: an unchanged file is not parsed again --------------------------------


def ingest_incrementally(engine, data_dir: Path):
    """As the ingest stage does: the stored file hashes tell which files need no parsing."""
    from pipeline.catalogue.ingest import stored_file_hashes

    entries = data_dir / "entries"
    with Session(engine) as session:
        report = read_catalog([entries], entries, known=stored_file_hashes(session))
        return report, ingest_catalog(session, report)


def test_unchanged_files_are_not_parsed_and_changed_ones_always_are(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    import os

    paths = {name: write_entry(make_entry(id=name)) for name in ("alpha", "beta", "gamma", "delta")}
    report, summary = ingest_incrementally(engine, data_dir)
    assert sorted(e.id for e in report.entries.values()) == sorted(paths)  # all parsed once
    assert summary.added == sorted(paths)

    report, summary = ingest_incrementally(engine, data_dir)
    assert report.entries == {} and sorted(report.unchanged.values()) == sorted(paths)
    assert summary.unchanged == sorted(paths) and not summary.retired

    os.utime(paths["alpha"], (1, 1))  # touched, not changed
    paths["beta"].write_text(yaml.safe_dump(make_entry(id="beta", name="Beta Two")))  # edited
    paths["gamma"].unlink()  # deleted
    renamed = paths["delta"].with_name("epsilon.yaml")  # renamed, with its id
    paths["delta"].rename(renamed)
    renamed.write_text(renamed.read_text().replace("id: delta", "id: epsilon"))
    report, summary = ingest_incrementally(engine, data_dir)
    assert sorted(e.id for e in report.entries.values()) == ["beta", "epsilon"]
    assert list(report.unchanged.values()) == ["alpha"]
    assert (summary.updated, summary.added, summary.retired) == (["beta"], ["epsilon"],
                                                                 ["delta", "gamma"])
    assert summary.unchanged == ["alpha"]
    with Session(engine) as session:
        assert session.get(EntryRow, "beta").name == "Beta Two"

    # A comment changes the bytes, not the entry: parsed once, unchanged, then skipped.
    paths["alpha"].write_text(paths["alpha"].read_text() + "# checked again\n")
    report, summary = ingest_incrementally(engine, data_dir)
    assert [e.id for e in report.entries.values()] == ["alpha"]
    assert "alpha" in summary.unchanged and not summary.updated
    report, _ = ingest_incrementally(engine, data_dir)
    assert report.entries == {}


def test_an_unchanged_file_swapped_for_a_symlink_out_of_data_is_refused(
    engine, write_entry: WriteEntry, data_dir: Path, tmp_path: Path
) -> None:
    path = write_entry(make_entry(id="alpha"))
    ingest_incrementally(engine, data_dir)
    outside = tmp_path / "outside.yaml"
    outside.write_bytes(path.read_bytes())  # the same bytes, now outside the data folder
    path.unlink()
    path.symlink_to(outside)
    report, summary = ingest_incrementally(engine, data_dir)
    assert report.unchanged == {} and [p.rule for p in report.problems] == ["outside-data"]
    assert summary.invalid == ["alpha"] and not summary.retired  # the stored entry is kept


def test_a_duplicate_id_beside_an_unchanged_file_makes_both_invalid(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(make_entry(id="alpha"))
    ingest_incrementally(engine, data_dir)
    write_entry(make_entry(id="alpha", category="maps",
                           sampleRequest='curl "https://api.example.com/v1/forecast"'))
    report, summary = ingest_incrementally(engine, data_dir)
    assert {p.rule for p in report.problems} == {"duplicate-id"}
    assert report.unchanged == {} and summary.invalid == ["alpha"] and not summary.retired


def test_the_walk_finds_what_a_glob_would_and_never_enters_a_symlinked_folder(
    tmp_path: Path,
) -> None:
    """The nightly walks the entries folder from its listings alone: the same files, in the
    same order, as pathlib's recursive glob, symlinked files included, symlinked folders not."""
    entries, outside = tmp_path / "data" / "entries", tmp_path / "outside"
    for folder in (entries / "a" / "deeper", entries / "a-b", outside):
        folder.mkdir(parents=True)
    for name in ("z.yaml", "a.yml", "a/b.yaml", "a/deeper/c.yaml", "a-b/d.yaml", ".hidden.yaml",
                 "notes.txt", "a/.yaml"):
        (entries / name).write_text("id: x\n")
    (outside / "secret.yaml").write_text("id: secret\n")
    (entries / "linked-folder").symlink_to(outside, target_is_directory=True)
    (entries / "linked.yaml").symlink_to(outside / "secret.yaml")
    (entries / "folder.yaml").mkdir()  # a folder named like an entry is no entry

    globbed = sorted(p for p in entries.rglob("*") if p.suffix in (".yaml", ".yml")
                     and p.is_file())
    walked = entry_files([entries])
    assert walked == globbed
    assert entries / "linked.yaml" in walked
    assert not any("secret" in str(path) or "linked-folder" in str(path) for path in walked)
    assert [p.relative_to(entries).as_posix() for p in walked][:3] == [
        ".hidden.yaml", "a/b.yaml", "a/deeper/c.yaml"]
