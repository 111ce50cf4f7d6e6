"""Ingest into a real store (SQLite file and PostgreSQL): idempotent upserts, retire-not-delete,
bad files kept."""

from __future__ import annotations

import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from sqlmodel import Session, select

from pipeline.catalogue import entries as entries_module
from pipeline.catalogue import ingest as ingest_module
from pipeline.catalogue import spool
from pipeline.catalogue.entries import CatalogReport, entry_files, read_catalog
from pipeline.catalogue.ingest import (
    EmptyCatalogError,
    IngestSummary,
    ingest_catalog,
    stored_files,
)
from pipeline.operations import stages
from pipeline.settings import Settings
from pipeline.store.tables import (
    EndpointRow,
    EntryRow,
    active_base_urls,
    active_entries,
    as_utc,
    engine_for,
    make_engine,
    session_scope,
    start_run,
)
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


def test_the_stored_base_address_follows_the_file(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    """What the probe planning reads, each entry's base address, is the one its file gives:
    when the entry is added, when its file changes it, and when a retired entry comes back
    with another."""
    write_entry(make_entry(id="kept-api", baseUrl="https://api.example.com/v2",
                           sampleRequest='curl "https://api.example.com/v2/forecast"'))
    path = write_entry()
    assert ingest(engine, data_dir).added == ["example-weather", "kept-api"]

    def stored() -> dict[str, str]:
        with Session(engine) as session:
            return active_base_urls(session)

    kept = {"kept-api": "https://api.example.com/v2"}
    assert stored() == {"example-weather": "https://api.example.com/v1", **kept}
    write_entry(make_entry(baseUrl="https://api.example.com",
                           sampleRequest='curl "https://api.example.com/forecast"'))
    assert ingest(engine, data_dir).updated == ["example-weather"]
    assert stored() == {"example-weather": "https://api.example.com", **kept}
    path.unlink()
    assert ingest(engine, data_dir).retired == ["example-weather"]
    assert stored() == kept
    write_entry()
    assert ingest(engine, data_dir).restored == ["example-weather"]
    assert stored() == {"example-weather": "https://api.example.com/v1", **kept}


def test_an_entry_holds_its_base_address_from_the_ingest_that_found_it_changed(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    """The ingest keeps when an entry's base address last changed (the provider moved its
    API): not for an entry added, nor for an edit that keeps the address, nor for an entry
    back from retirement at the address it left with; from the ingest that stores another
    address, also one brought back from retirement with it."""
    entries = data_dir / "entries"
    moments = iter(datetime(2026, 11, day, 4, tzinfo=UTC) for day in range(1, 10))

    def ingested() -> tuple[IngestSummary, dict[str, datetime | None]]:
        with Session(engine) as session:
            summary = ingest_catalog(session, read_catalog([entries], entries),
                                     now=next(moments))
            return summary, {entry_id: since and as_utc(since) for entry_id, since in
                             session.exec(select(EntryRow.id, EntryRow.base_url_since))}

    moved = {"baseUrl": "https://api.new.example/v1",
             "sampleRequest": 'curl "https://api.new.example/v1/forecast"'}
    write_entry(make_entry(id="kept-api"))
    path = write_entry()
    assert ingested()[1] == {"example-weather": None, "kept-api": None}
    write_entry(make_entry(description="Forecasts for any coordinates, hourly."))
    summary, since = ingested()
    assert summary.updated == ["example-weather"] and since["example-weather"] is None
    write_entry(make_entry(**moved))
    summary, since = ingested()  # the third ingest, on 3 November
    assert summary.updated == ["example-weather"]
    assert since == {"example-weather": datetime(2026, 11, 3, 4, tzinfo=UTC), "kept-api": None}
    write_entry(make_entry(description="Hourly forecasts, anywhere.", **moved))
    assert ingested()[1]["example-weather"] == datetime(2026, 11, 3, 4, tzinfo=UTC)
    path.unlink()
    assert ingested()[0].retired == ["example-weather"]
    write_entry(make_entry(**moved))
    summary, since = ingested()
    assert summary.restored == ["example-weather"]
    assert since["example-weather"] == datetime(2026, 11, 3, 4, tzinfo=UTC)
    path.unlink()
    ingested()
    write_entry()  # back at the address it had before it moved
    summary, since = ingested()  # the eighth ingest
    assert summary.restored == ["example-weather"]
    assert since == {"example-weather": datetime(2026, 11, 8, 4, tzinfo=UTC), "kept-api": None}


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


LATER = time.time_ns() + 3_600 * 10**9  # a pass long after the files were written


def ingest_incrementally(engine, data_dir: Path, started_ns: int | None = LATER):
    """As the ingest stage does: the stored file hashes and stats tell which files need no
    parsing, or no reading. By default the pass starts long after the files were written (as
    a nightly does), so their stats are settled and kept."""
    entries = data_dir / "entries"
    with Session(engine) as session:
        report = read_catalog([entries], entries, known=stored_files(session),
                              started_ns=started_ns)
        return report, ingest_catalog(session, report)


@pytest.fixture
def files_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The entry files whose bytes each pass reads, by name (the real reads, counted)."""
    read: list[str] = []

    def counted(path: str | Path, *args: object) -> tuple[bytes, os.stat_result | None]:
        read.append(Path(path).stem)
        return real(path, *args)

    real = entries_module.read_placed
    monkeypatch.setattr(entries_module, "read_placed", counted)
    return read


def stored_stats(engine) -> dict[str, str | None]:
    with Session(engine) as session:
        return dict(session.exec(select(EntryRow.id, EntryRow.file_stat)).all())


def test_a_settled_file_whose_stat_is_unchanged_is_not_even_read(
    engine, write_entry: WriteEntry, data_dir: Path, files_read: list[str]
) -> None:
    paths = {name: write_entry(make_entry(id=name)) for name in ("alpha", "beta")}
    ingest_incrementally(engine, data_dir)
    assert sorted(files_read) == ["alpha", "beta"] and all(stored_stats(engine).values())

    files_read.clear()
    report, summary = ingest_incrementally(engine, data_dir)
    assert files_read == [] and report.entries == {}
    assert summary.unchanged == ["alpha", "beta"] and report.stats == {}

    os.utime(paths["alpha"], (1, 1))  # touched, not changed: read, hashed, its new stat kept
    before = stored_stats(engine)
    report, summary = ingest_incrementally(engine, data_dir)
    assert files_read == ["alpha"] and report.entries == {} and summary.unchanged == ["alpha",
                                                                                       "beta"]
    after = stored_stats(engine)
    assert after["alpha"] != before["alpha"] and after["beta"] == before["beta"]
    files_read.clear()
    ingest_incrementally(engine, data_dir)
    assert files_read == []


def test_a_moved_copied_or_relatively_named_data_folder_is_the_same_catalogue(
    engine, write_entry: WriteEntry, data_dir: Path, files_read: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stored names are relative to the entries folder: an operator who moves the data folder,
    copies it to another machine, or runs from another directory changes no entry."""
    for name in ("alpha", "beta"):
        write_entry(make_entry(id=name))
    ingest_incrementally(engine, data_dir)
    with Session(engine) as session:
        before = {row.id: (row.source_file, row.updated_at) for row in session.exec(
            select(EntryRow))}
    assert {source for source, _ in before.values()} == {"weather/alpha.yaml",
                                                          "weather/beta.yaml"}

    moved = data_dir.parent / "moved"
    data_dir.rename(moved)  # same files, same inodes: not even read
    files_read.clear()
    report, summary = ingest_incrementally(engine, moved)
    assert summary.unchanged == ["alpha", "beta"] and summary.updated == summary.added == []
    assert files_read == [] and report.stats == {}

    copied = data_dir.parent / "copied"  # new inodes: read and hashed, not parsed, not updated
    shutil.copytree(moved, copied)
    report, summary = ingest_incrementally(engine, copied)
    assert summary.unchanged == ["alpha", "beta"] and summary.updated == []
    assert sorted(files_read) == ["alpha", "beta"] and report.entries == {}

    monkeypatch.chdir(copied.parent)  # named from the working directory
    files_read.clear()
    report, summary = ingest_incrementally(engine, Path("copied"))
    assert summary.unchanged == ["alpha", "beta"] and files_read == []
    with Session(engine) as session:
        after = {row.id: (row.source_file, row.updated_at) for row in session.exec(
            select(EntryRow))}
    assert after == before

    (copied / "entries" / "weather" / "beta.yaml").rename(
        copied / "entries" / "weather" / "gamma.yaml")  # a rename is still seen
    report, summary = ingest_incrementally(engine, Path("copied"))
    assert summary.retired == ["beta"] and summary.invalid == ["gamma"]


def test_a_file_rewritten_to_its_old_size_and_modification_time_is_still_seen(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    """As `cp -p` or `rsync -a` leave it: the change time moves and cannot be set back."""
    path = write_entry(make_entry(id="alpha", name="Alpha One"))
    ingest_incrementally(engine, data_dir)
    old = path.stat()
    path.write_text(path.read_text().replace("Alpha One", "Alpha Two"))
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    new = path.stat()
    assert (new.st_size, new.st_mtime_ns, new.st_ino) == (old.st_size, old.st_mtime_ns,
                                                          old.st_ino)
    _, summary = ingest_incrementally(engine, data_dir)
    assert summary.updated == ["alpha"]
    with Session(engine) as session:
        assert session.get(EntryRow, "alpha").name == "Alpha Two"


def test_a_file_changed_just_before_the_pass_is_read_again_until_it_settles(
    engine, write_entry: WriteEntry, data_dir: Path, files_read: list[str]
) -> None:
    """A second change within the clock's tick would leave its stat as it was: such a file's
    stat is not kept, and it is read (and hashed) on every pass until its change is older."""
    write_entry(make_entry(id="alpha"))
    ingest_incrementally(engine, data_dir, started_ns=None)  # right after the write
    assert stored_stats(engine) == {"alpha": None}
    files_read.clear()
    report, summary = ingest_incrementally(engine, data_dir, started_ns=None)
    assert files_read == ["alpha"] and report.entries == {} and summary.unchanged == ["alpha"]
    assert stored_stats(engine) == {"alpha": None} and report.stats == {}
    ingest_incrementally(engine, data_dir)  # later: settled, its stat kept
    assert stored_stats(engine)["alpha"] is not None


def test_a_new_reader_reads_every_file_again(
    engine, write_entry: WriteEntry, data_dir: Path, files_read: list[str],
    monkeypatch: pytest.MonkeyPatch
) -> None:
    write_entry(make_entry(id="alpha"))
    ingest_incrementally(engine, data_dir)
    files_read.clear()
    monkeypatch.setattr(entries_module, "_fingerprint_tag", lambda: "another-reader")
    ingest_incrementally(engine, data_dir)
    assert files_read == ["alpha"]


def test_a_file_over_a_lowered_size_limit_is_read_and_refused(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
    path = write_entry(make_entry(id="alpha"))
    ingest_incrementally(engine, data_dir)
    entries = data_dir / "entries"
    with Session(engine) as session:
        report = read_catalog([entries], entries, known=stored_files(session),
                              started_ns=LATER, max_bytes=path.stat().st_size - 1)
    assert [p.rule for p in report.problems] == ["too-large"] and report.unchanged == {}


def test_unchanged_files_are_not_parsed_and_changed_ones_always_are(
    engine, write_entry: WriteEntry, data_dir: Path
) -> None:
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


def test_a_symlink_inside_the_data_folder_is_hashed_through_and_seen_when_its_target_changes(
    engine, data_dir: Path
) -> None:
    """A file that is a symlink is opened only after the full check of where it leads; one
    that stays inside the data folder is hashed like any file, through the link."""
    shared = data_dir / "shared.yaml"
    shared.write_text(yaml.safe_dump(make_entry(id="alpha")))
    link = data_dir / "entries" / "weather" / "alpha.yaml"
    link.parent.mkdir(parents=True)
    link.symlink_to(shared)
    assert ingest_incrementally(engine, data_dir)[1].added == ["alpha"]
    report, summary = ingest_incrementally(engine, data_dir)
    assert report.entries == {} and list(report.unchanged.values()) == ["alpha"]
    shared.write_text(yaml.safe_dump(make_entry(id="alpha", name="Alpha Two")))
    report, summary = ingest_incrementally(engine, data_dir)
    assert summary.updated == ["alpha"] and not report.problems


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


# --- the ingest stage stores the entries a chunk at a time as they are read -------------------


def stage_ingest() -> tuple[IngestSummary, CatalogReport]:
    """The ingest stage the flows run, on the settings of the environment."""
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    return stages.ingest_entries(settings, run_id)


def stored_state(engine) -> tuple[dict[str, tuple], list[tuple]]:
    """Every entry's row and every endpoint's, but for the ids the store generates."""
    with Session(engine) as session:
        entries = {row.id: (row.category, row.name, row.content, row.content_hash,
                            row.source_file, row.retired_at is None)
                   for row in session.exec(select(EntryRow))}
        endpoints = sorted((row.entry_id, row.method, row.path, row.description, row.position,
                            row.active) for row in session.exec(select(EndpointRow)))
    return entries, endpoints


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Two entries a chunk; the sizes of the new entries' inserts, one a chunk, as they come."""
    monkeypatch.setattr(spool, "CHUNK", 2)
    inserted: list[int] = []
    original = ingest_module._insert_new

    def counted(session, new, *args):
        inserted.append(len(new))
        return original(session, new, *args)

    monkeypatch.setattr(ingest_module, "_insert_new", counted)
    return inserted


def test_the_stage_stores_a_chunk_at_a_time_what_one_pass_would(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str], tmp_path: Path,
    small_chunks: list[int],
) -> None:
    ids = [f"api-{number:02d}" for number in range(9)]
    for number, entry_id in enumerate(ids):
        endpoints = [{"method": "GET", "path": f"/items/{number}", "description": "One."},
                     {"method": "GET", "path": f"/items/{number}", "description": "Again."},
                     {"path": "/", "description": "Its root."}]
        write_entry(make_entry(id=entry_id, name=f"API {number}", endpoints=endpoints,
                               category="weather" if number % 2 else "maps",
                               sampleRequest=f'curl "https://api.example.com/v1/items/{number}"'))
    summary, report = stage_ingest()
    assert summary.added == sorted(ids) and report.ok and report.entries == {}
    assert small_chunks == [2, 2, 2, 2, 1]  # stored as read, two at a time
    engine = engine_for(settings_env["APIDIR_DATABASE_URL"])
    whole = make_engine(f"sqlite:///{tmp_path / 'whole.db'}")
    entries = data_dir / "entries"
    with Session(whole) as session:  # everything read first, then stored in one pass
        ingest_catalog(session, read_catalog([entries], entries, workers=1))
    assert stored_state(engine) == stored_state(whole)
    whole.dispose()
    with Session(engine) as session:  # the file hashes the next night compares
        assert all(row.file_hash for row in session.exec(select(EntryRow)))
    again, report = stage_ingest()
    assert again.unchanged == sorted(ids) and len(report.unchanged) == len(ids)


def test_a_bad_file_late_in_the_catalogue_keeps_its_entry_and_fails_alone(
    write_entry: WriteEntry, settings_env: dict[str, str], small_chunks: list[int]
) -> None:
    ids = ["aaa-first", *(f"api-{number}" for number in range(6))]
    for entry_id in ids:
        write_entry(make_entry(id=entry_id))
    late = write_entry(make_entry(id="zzz-last"))
    stage_ingest()
    for entry_id in ids:  # every file changed, so that every one is read again
        write_entry(make_entry(id=entry_id, name=f"{entry_id}, again"))
    write_entry(make_entry(id="yyy-new"))
    late.write_text(yaml.safe_dump(make_entry(id="zzz-last", name="Broken", authType="token")))
    summary, report = stage_ingest()
    assert (summary.updated, summary.added, summary.invalid) == (ids, ["yyy-new"], ["zzz-last"])
    assert not summary.retired and len(small_chunks) == 8  # four chunks a night
    [problem] = report.problems
    assert str(problem).startswith(f"{late}:")
    assert (problem.entry, problem.field) == ("zzz-last", "authType")
    engine = engine_for(settings_env["APIDIR_DATABASE_URL"])
    with Session(engine) as session:
        kept = session.get(EntryRow, "zzz-last")
        assert kept.name == "Example Weather" and kept.retired_at is None
        assert session.get(EntryRow, "api-5").name == "api-5, again"


def test_a_duplicate_id_read_late_withdraws_the_entry_read_early(
    write_entry: WriteEntry, settings_env: dict[str, str], small_chunks: list[int]
) -> None:
    """The first file is read (and spooled) chunks before its copy: neither is stored, and the
    stored version stays as it was; a new entry with an unknown successor is never added."""
    first = write_entry(make_entry(id="alpha", category="ai"))
    for number in range(5):
        write_entry(make_entry(id=f"api-{number}"))
    stage_ingest()
    first.write_text(yaml.safe_dump(make_entry(id="alpha", category="ai", name="Alpha Two")))
    copy = write_entry(make_entry(id="alpha", category="weather"), name="zzz-copy")
    write_entry(make_entry(id="beta", category="ai", deprecated={"successor": "nowhere"}))
    summary, report = stage_ingest()
    assert {(p.file, p.rule) for p in report.problems} >= {
        (str(first), "duplicate-id"), (str(copy), "duplicate-id")}
    assert (summary.updated, summary.added) == ([], [])
    assert summary.invalid == ["alpha", "beta", "zzz-copy"] and not summary.retired
    engine = engine_for(settings_env["APIDIR_DATABASE_URL"])
    with Session(engine) as session:
        assert session.get(EntryRow, "alpha").name == "Example Weather"
        assert session.get(EntryRow, "beta") is None


def test_a_failure_part_way_leaves_the_store_as_it_was(
    write_entry: WriteEntry, settings_env: dict[str, str], small_chunks: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chunks go in one transaction: committed once the last is stored, else not at all."""
    first = write_entry(make_entry(id="aaa-first"))
    write_entry(make_entry(id="gone"))
    stage_ingest()
    engine = engine_for(settings_env["APIDIR_DATABASE_URL"])
    before = stored_state(engine)
    first.write_text(yaml.safe_dump(make_entry(id="aaa-first", name="First, again")))
    (first.parent / "gone.yaml").unlink()
    for number in range(7):
        write_entry(make_entry(id=f"api-{number}"))
    counted = ingest_module._insert_new

    def failing(session, new, *args):
        if len(small_chunks) == 3:
            raise RuntimeError("the store went away")
        return counted(session, new, *args)

    monkeypatch.setattr(ingest_module, "_insert_new", failing)
    with pytest.raises(RuntimeError, match="went away"):
        stage_ingest()
    assert len(small_chunks) == 3  # two chunks were stored before the third failed
    assert stored_state(engine) == before
    monkeypatch.setattr(ingest_module, "_insert_new", counted)
    summary, _ = stage_ingest()
    assert summary.updated == ["aaa-first"] and summary.retired == ["gone"]
    assert len(summary.added) == 7


def test_a_catalogue_wide_edit_updates_every_entry_and_keeps_each_endpoints_row(
    engine, write_entry: WriteEntry, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changed entries are stored in bulk, chunk by chunk: an endpoint that stays keeps its
    row (its probe history), one that leaves is kept inactive, one that comes back is the same
    row active again, and a retired entry's return is a restore."""
    monkeypatch.setattr(ingest_module, "CHUNK", 2)
    endpoints = [{"method": "GET", "path": f"/things/{n}", "description": f"Thing {n}."}
                 for n in range(3)]
    things = 'curl "https://api.example.com/v1/things/0"'  # an endpoint every edit keeps
    files = {f"api-{n}": write_entry(make_entry(id=f"api-{n}", endpoints=endpoints,
                                                sampleRequest=things))
             for n in range(5)}
    ingest(engine, data_dir)
    files.pop("api-4").unlink()
    assert ingest(engine, data_dir).retired == ["api-4"]

    def rows() -> dict[tuple[str, str], tuple[int, str | None, int, bool]]:
        with Session(engine) as session:
            return {(row.entry_id, row.path): (row.id, row.description, row.position, row.active)
                    for row in session.exec(select(EndpointRow))}

    before = rows()
    edits = {
        "api-0": [{**endpoints[0], "description": "Thing zero, described anew."}, *endpoints[1:]],
        "api-1": list(reversed(endpoints)),
        "api-2": endpoints[:2],
        "api-3": [*endpoints, {"method": "GET", "path": "/more", "description": "More."}],
        "api-4": endpoints,
    }
    for entry_id, listed in edits.items():
        write_entry(make_entry(id=entry_id, name=f"{entry_id} renamed", endpoints=listed,
                               sampleRequest=things))
    summary = ingest(engine, data_dir)
    assert summary.updated == ["api-0", "api-1", "api-2", "api-3"]
    assert summary.restored == ["api-4"]
    after = rows()
    assert after["api-0", "/things/0"] == (before["api-0", "/things/0"][0],
                                           "Thing zero, described anew.", 0, True)
    assert [after["api-1", f"/things/{n}"][2] for n in range(3)] == [2, 1, 0]
    assert after["api-1", "/things/0"][0] == before["api-1", "/things/0"][0]
    assert after["api-2", "/things/2"] == (*before["api-2", "/things/2"][:3], False)
    assert after["api-3", "/more"][1:] == ("More.", 3, True)
    assert all(after["api-4", f"/things/{n}"] == before["api-4", f"/things/{n}"]
               for n in range(3))
    with Session(engine) as session:
        stored = {row.id: row for row in session.exec(select(EntryRow))}
        assert {row.name for row in stored.values()} == {f"api-{n} renamed" for n in range(5)}
        assert all(row.retired_at is None for row in stored.values())
        assert stored["api-2"].content["endpoints"] == endpoints[:2]

    write_entry(make_entry(id="api-2", name="api-2 renamed", endpoints=endpoints,
                           sampleRequest=things))
    assert ingest(engine, data_dir).updated == ["api-2"]
    assert rows()["api-2", "/things/2"] == before["api-2", "/things/2"]  # the same row, back
