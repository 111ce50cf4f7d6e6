"""Hostile entry files are normal input: a non-UTF-8 byte, an alias or merge-key bomb, deep
nesting, a huge file, a symlink out of the data folder, a file that vanishes. Each becomes one
problem naming the file (and line), `validate` and the ingest go on with the others, and the
entry keeps its last valid version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from sqlmodel import Session

from pipeline.catalogue.entries import CategoryError, load_categories, read_catalog
from pipeline.catalogue.guard import MAX_DEPTH, check_structure
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.store.tables import EntryRow, make_engine
from tests.conftest import REPO, WriteEntry, make_entry

BILLION_LAUGHS = "".join(
    ["id: lol\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
    + [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 10)]
)
MERGE_BOMB = "".join(
    ["id: merge\nm0: &m0 {a: 1, b: 2, c: 3, d: 4}\n"]
    + [f"m{n}: &m{n}\n  <<: [{', '.join([f'*m{n - 1}'] * 8)}]\n  k{n}: {n}\n"
       for n in range(1, 12)]
)


def problems_of(data_dir: Path, **options: int) -> list:
    entries = data_dir / "entries"
    return read_catalog([entries], entries, **options).problems


def only_problem(data_dir: Path, **options: int):
    problems = problems_of(data_dir, **options)
    assert len(problems) == 1, problems
    return problems[0]


def test_a_non_utf8_byte_is_one_problem_with_its_line(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    path = write_entry(name="latin")
    path.write_bytes(path.read_bytes().replace(b"Example Inc.", b"Caf\xe9 Inc."))
    write_entry(make_entry(id="fine"), name="fine")
    problem = only_problem(data_dir)
    assert (problem.file, problem.rule) == (str(path), "not-utf8")
    assert problem.line == next(i for i, line in enumerate(path.read_bytes().splitlines(), 1)
                                if b"\xe9" in line)
    assert "0xe9" in problem.message


@pytest.mark.parametrize(("text", "name"), [(BILLION_LAUGHS, "lol"), (MERGE_BOMB, "merge")])
def test_alias_and_merge_key_bombs_are_refused_before_they_expand(
    write_entry: WriteEntry, data_dir: Path, text: str, name: str
) -> None:
    write_entry(text=text, name=name)
    started = time.perf_counter()
    problem = only_problem(data_dir)
    assert problem.rule == "alias-bomb"
    assert problem.line is not None and problem.line > 1
    assert time.perf_counter() - started < 5  # refused, not expanded (9**10 values)


def test_anchors_that_expand_little_stay_allowed() -> None:
    check_structure("a: &base {x: 1}\nb:\n  <<: *base\n  y: 2\nurl: https://h/?a=1&b=2\n")


@pytest.mark.parametrize("shape", ["flow", "block"])
def test_deep_nesting_is_refused_without_crashing_the_process(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str], shape: str
) -> None:
    deep = 50_000
    text = ("id: deep\nx: " + "[" * deep + "]" * deep + "\n" if shape == "flow"
            else "id: deep\nx:\n" + "".join("  " * n + "k:\n" for n in range(1, 300)))
    write_entry(text=text, name="deep")
    write_entry(make_entry(id="fine"), name="fine")
    # a real process: a parser recursing on depth would kill it with a signal
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate"], cwd=REPO,
                          env=os.environ | settings_env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert "deep.yaml" in done.stderr and "[too-deep]" in done.stderr
    assert f"deeper than {MAX_DEPTH} levels" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_huge_file_is_refused_and_its_entry_keeps_its_last_valid_version(
    write_entry: WriteEntry, data_dir: Path, tmp_path: Path
) -> None:
    path = write_entry()
    engine = make_engine(f"sqlite:///{tmp_path / 'apidir.db'}")
    entries = data_dir / "entries"
    with Session(engine) as session:
        ingest_catalog(session, read_catalog([entries], entries))
        huge = make_entry(description="x" * (2 * 1024 * 1024))
        path.write_text(yaml.safe_dump(huge))
        report = read_catalog([entries], entries, max_bytes=256 * 1024)
        assert [(p.rule, p.file) for p in report.problems] == [("too-large", str(path))]
        summary = ingest_catalog(session, report)
        assert summary.invalid == ["example-weather"]
        stored = session.get(EntryRow, "example-weather")
        assert stored.content["description"] == make_entry()["description"]
    engine.dispose()


def test_the_size_limit_is_a_setting(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry()
    assert problems_of(data_dir) == []
    assert only_problem(data_dir, max_bytes=1024).rule == "too-large"


def test_a_symlink_out_of_the_data_folder_is_never_read(
    write_entry: WriteEntry, data_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secrets" / "outside.yaml"
    outside.parent.mkdir()
    outside.write_text(yaml.safe_dump(make_entry(id="outside", description="leaked text")))
    link = data_dir / "entries" / "weather" / "outside.yaml"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    folder_link = data_dir / "entries" / "maps"
    folder_link.symlink_to(outside.parent, target_is_directory=True)
    report = read_catalog([data_dir / "entries", folder_link / "outside.yaml"],
                          data_dir / "entries")
    assert report.entries == {}
    assert {(p.file, p.rule) for p in report.problems} == {
        (str(link), "outside-data"), (str(folder_link / "outside.yaml"), "outside-data")}
    assert all("leaked" not in p.message for p in report.problems)


def test_a_link_inside_the_data_folder_is_read(write_entry: WriteEntry, data_dir: Path) -> None:
    shared = data_dir / "shared.yaml"
    shared.write_text(yaml.safe_dump(make_entry()))
    (data_dir / "entries" / "weather").mkdir(parents=True, exist_ok=True)
    (data_dir / "entries" / "weather" / "example-weather.yaml").symlink_to(shared)
    assert problems_of(data_dir) == []


def test_a_file_that_vanishes_before_it_is_read_is_one_problem(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    gone = write_entry(make_entry(id="gone"), name="gone")
    write_entry(make_entry(id="kept"), name="kept")
    gone.unlink()  # listed by the caller, gone when read
    entries = data_dir / "entries"
    report = read_catalog([entries / "weather" / "kept.yaml", gone], entries)
    assert [(p.file, p.rule) for p in report.problems] == [(str(gone), "unreadable")]
    assert [e.id for e in report.entries.values()] == ["kept"]


def test_the_nightly_ingest_goes_on_past_every_hostile_file(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str], tmp_path: Path
) -> None:
    """The ingest stage the flows run, in a process of its own with a memory cap."""
    write_entry(make_entry(id="fine"), name="fine")
    write_entry(text=BILLION_LAUGHS, name="lol")
    write_entry(text=MERGE_BOMB, name="merge")
    write_entry(text="id: deep\nx: " + "[" * 30_000 + "]" * 30_000 + "\n", name="deep")
    (data_dir / "entries" / "weather" / "latin.yaml").write_bytes(b"id: caf\xe9\n")
    (data_dir / "entries" / "weather" / "huge.yaml").write_bytes(b"#" * (3 * 1024 * 1024))
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from pipeline.operations.stages import ingest_entries\n"
        "from pipeline.settings import Settings\n"
        "from pipeline.store.tables import engine_for, session_scope, start_run\n"
        "settings = Settings()\n"
        "with session_scope(engine_for(settings.database_url)) as session:\n"
        "    run_id = start_run(session, 'nightly').id\n"
        "summary, report = ingest_entries(settings, run_id)\n"
        "print(sorted(summary.added), sorted(summary.invalid))\n"
        "print(sorted({p.rule for p in report.problems}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=os.environ | settings_env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    added, rules = done.stdout.splitlines()
    assert added == "['fine'] ['deep', 'huge', 'latin', 'lol', 'merge']"
    assert rules == "['alias-bomb', 'not-utf8', 'too-deep', 'too-large']"


# `data/categories.yaml` keeps the limits of an entry file: its problem is one line naming it.

def categories_error(data_dir: Path) -> str:
    """The one line `load_categories` refuses the data folder's categories file with."""
    with pytest.raises(CategoryError) as raised:
        load_categories(data_dir / "categories.yaml")
    message = str(raised.value)
    assert "\n" not in message, message
    assert message.startswith(f"{data_dir / 'categories.yaml'}:"), message
    return message


def link_categories(data_dir: Path, target: Path) -> None:
    (data_dir / "categories.yaml").unlink()
    (data_dir / "categories.yaml").symlink_to(target)


def test_a_categories_file_linked_out_of_the_data_folder_is_never_read(
    data_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secrets" / "categories.yaml"
    outside.parent.mkdir()
    outside.write_text((REPO / "data" / "categories.yaml").read_text()
                       .replace("label: ", "label: leaked "))
    link_categories(data_dir, outside)
    message = categories_error(data_dir)
    assert message.endswith(f"links outside the data folder (to {outside}) [outside-data]")
    assert "leaked" not in message


def test_a_categories_file_linked_to_dev_zero_is_refused_at_once(data_dir: Path) -> None:
    link_categories(data_dir, Path("/dev/zero"))
    started = time.perf_counter()
    assert categories_error(data_dir).endswith("[outside-data]")
    assert time.perf_counter() - started < 5


def test_a_categories_file_linked_inside_the_data_folder_is_read(data_dir: Path) -> None:
    shared = data_dir / "shared" / "categories.yaml"
    shared.parent.mkdir()
    shared.write_text((REPO / "data" / "categories.yaml").read_text())
    link_categories(data_dir, shared)
    assert len(load_categories(data_dir / "categories.yaml")) == 14


@pytest.mark.parametrize(("text", "rule"), [
    (BILLION_LAUGHS, "alias-bomb"),
    ("- " * 50 + "x\n", "too-deep"),
    ("#" * (3 * 1024 * 1024), "too-large"),
])
def test_a_hostile_categories_file_is_one_problem(data_dir: Path, text: str, rule: str) -> None:
    (data_dir / "categories.yaml").write_text(text)
    assert categories_error(data_dir).endswith(f"[{rule}]")


def test_a_categories_file_not_utf8_names_its_line(data_dir: Path) -> None:
    path = data_dir / "categories.yaml"
    path.write_bytes(path.read_bytes().replace(b"label: Weather", b"label: Caf\xe9"))
    line = next(i for i, text in enumerate(path.read_bytes().splitlines(), 1) if b"\xe9" in text)
    message = categories_error(data_dir)
    assert message.startswith(f"{path}:{line}: not UTF-8: byte 0xe9 at offset ")
    assert message.endswith("[not-utf8]")


def test_a_category_missing_a_field_is_one_line_naming_the_category_and_field(
    data_dir: Path
) -> None:
    path = data_dir / "categories.yaml"
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, text in enumerate(lines) if text.startswith("- id: weather"))
    del lines[at + 1]  # its label
    path.write_text("".join(lines))
    assert categories_error(data_dir) == (
        f"{path}:{at + 1}: category weather: field label: Field required")


@pytest.mark.parametrize("text", ["", "ai: AI\n", "- ai\n", "[1, 2\n"])
def test_a_categories_file_of_the_wrong_shape_is_one_line(data_dir: Path, text: str) -> None:
    (data_dir / "categories.yaml").write_text(text)
    categories_error(data_dir)


# A symlink to nothing, in a loop or to no file: a problem of its file, whose entry is kept.

@pytest.mark.parametrize("target", ["/nonexistent/example-weather.yaml", "gone.yaml", "loop"])
def test_a_link_to_nothing_is_a_problem_and_its_entry_is_kept(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str], target: str
) -> None:
    """Through the nightly ingest stage, twice: the second pass finds the link (a file it
    knows by its stat and hash) where the valid file was."""
    from pipeline.operations.stages import ingest_entries
    from pipeline.settings import Settings
    from pipeline.store.tables import engine_for, session_scope, start_run

    path = write_entry()
    write_entry(make_entry(id="fine"), name="fine")
    settings = Settings()

    def ingest() -> tuple:
        with session_scope(engine_for(settings.database_url)) as session:
            run_id = start_run(session, "nightly").id
        return ingest_entries(settings, run_id)

    assert ingest()[0].added == ["example-weather", "fine"]
    path.unlink()
    if target == "loop":
        (path.parent / "other.yml").symlink_to(path.name)
    path.symlink_to(path.name.replace("example-weather.yaml", "other.yml")
                    if target == "loop" else target)
    summary, report = ingest()
    assert "example-weather" in summary.invalid and summary.retired == []
    assert {(p.file, p.rule) for p in report.problems} >= {(str(path), "unreadable")}
    message = next(p.message for p in report.problems if p.file == str(path))
    assert message == ("links in a loop" if target == "loop" else
                       f"links to nothing (to {path.parent / target})")
    with session_scope(engine_for(settings.database_url)) as session:
        stored = session.get(EntryRow, "example-weather")
        assert stored.retired_at is None
        assert stored.content["description"] == make_entry()["description"]


def test_a_link_to_a_folder_or_a_pipe_is_a_problem_never_a_wait(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry()
    folder = data_dir / "entries" / "weather"
    os.mkfifo(data_dir / "pipe")
    (folder / "piped.yaml").symlink_to(data_dir / "pipe")
    (folder / "folder.yaml").symlink_to(data_dir / "entries")
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert sorted((Path(p.file).name, p.rule, p.message) for p in report.problems) == [
        ("folder.yaml", "unreadable", f"links to {data_dir / 'entries'}, which is not a file"),
        ("piped.yaml", "unreadable", f"links to {data_dir / 'pipe'}, which is not a file")]


def test_a_pipe_named_like_an_entry_file_is_a_problem_and_its_entry_is_kept(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str]
) -> None:
    """A pipe where an entry file was (not a link: the file itself) is listed and refused
    without a wait for a writer that never comes; its entry is kept as stored."""
    from pipeline.operations.stages import ingest_entries
    from pipeline.settings import Settings
    from pipeline.store.tables import engine_for, session_scope, start_run

    path = write_entry()
    settings = Settings()

    def ingest() -> tuple:
        with session_scope(engine_for(settings.database_url)) as session:
            run_id = start_run(session, "nightly").id
        return ingest_entries(settings, run_id)

    assert ingest()[0].added == ["example-weather"]
    path.unlink()
    os.mkfifo(path)
    summary, report = ingest()
    assert (summary.invalid, summary.retired) == (["example-weather"], [])
    assert [(p.file, p.rule, p.message) for p in report.problems] == [
        (str(path), "unreadable", "not a file (a pipe, socket or device)")]
    with session_scope(engine_for(settings.database_url)) as session:
        assert session.get(EntryRow, "example-weather").retired_at is None


def test_a_too_large_categories_file_names_no_entry_setting(data_dir: Path) -> None:
    path = data_dir / "categories.yaml"
    path.write_text(path.read_text() + "#" * (300 * 1024) + "\n")
    with pytest.raises(CategoryError, match="larger than 262,144 bytes") as refused:
        load_categories(path)
    assert "APIDIR_ENTRY_MAX_BYTES" not in str(refused.value)


# An entry file's name that is not UTF-8: a problem of that file, under its name escaped.

def not_utf8_name(folder: Path, data: bytes) -> str:
    """Write a file named `bad\\xffname.yaml` in `folder`; the name a report gives it."""
    with open(os.fsencode(folder) + b"/bad\xffname.yaml", "wb") as file:
        file.write(data)
    return f"{folder}/bad\\xffname.yaml"


def test_a_file_name_not_utf8_is_a_problem_of_that_file(
    write_entry: WriteEntry, data_dir: Path, tmp_path: Path
) -> None:
    fine = write_entry()
    shown = not_utf8_name(fine.parent, fine.read_bytes())
    entries = data_dir / "entries"
    report = read_catalog([entries], entries)
    assert [(p.file, p.entry, p.rule) for p in report.problems] == [
        (shown, "bad\\xffname", "bad-file-name")]
    assert str(report.problems[0]).encode("utf-8")  # storable, printable: no lone surrogate
    assert "not UTF-8" in report.problems[0].message
    # never read: its copy of a valid entry makes that one no duplicate
    assert [entry.id for entry in report.entries.values()] == ["example-weather"]
    engine = make_engine(f"sqlite:///{tmp_path / 'apidir.db'}")
    with Session(engine) as session:
        summary = ingest_catalog(session, report)
        assert (summary.added, summary.invalid) == (["example-weather"], ["bad\\xffname"])
        json.dumps(asdict(summary), ensure_ascii=False).encode("utf-8")
    engine.dispose()
