"""Hostile YAML inside an entry file that keeps every limit: values YAML parses but cannot
build, a key given twice, a character YAML forbids, JSON nested past any parser, text that
drives a pattern to backtrack. Each is one problem of its file, in one line naming the field
where there is one; `validate` and the ingest go on with the other files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.catalogue.entries import read_catalog
from tests.conftest import REPO, WriteEntry, make_entry


def problems_of(data_dir: Path) -> list:
    entries = data_dir / "entries"
    return read_catalog([entries], entries).problems


def entry_text(**changes: object) -> str:
    return yaml.safe_dump(make_entry(**changes), sort_keys=False)


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        ("verified: 2026-02-30", "verified",
         "'2026-02-30' cannot be read as a YAML timestamp (day is out of range for month)"),
        ("verified: !!int abc", "verified", "'abc' cannot be read as a YAML int"),
        ("verified: !!bool abc", "verified", "'abc' cannot be read as a YAML bool"),
        ("sources:\n  - url: https://example.com/docs\n    checked: !!timestamp abc",
         "sources[0].checked", "'abc' cannot be read as a YAML timestamp"),
    ],
)
def test_a_value_yaml_cannot_build_is_a_problem_of_its_field(
    write_entry: WriteEntry, data_dir: Path, value: str, field: str, message: str
) -> None:
    """A value that parses but cannot be built (a date past its month's end, a tag that does
    not fit its text) is one problem naming its line and field; the other files are read."""
    entry = make_entry()
    del entry["verified"], entry["sources"]
    text = yaml.safe_dump(entry, sort_keys=False).rstrip("\n")
    path = write_entry(text=f"{text}\n{value}\n", name="example-weather")
    write_entry(make_entry(id="fine"), name="fine")
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    [problem] = report.problems
    assert (problem.file, problem.rule, problem.field) == (str(path), "yaml-value", field)
    assert problem.message.startswith(message) and "\n" not in problem.message
    assert problem.line == len(text.splitlines()) + value.count("\n") + 1
    assert [entry.id for entry in report.entries.values()] == ["fine"]


def test_a_set_is_refused_for_a_list(write_entry: WriteEntry, data_dir: Path) -> None:
    """A YAML set (`!!set`) has no order: taken as the list it stands for (tags), it was
    published in an order that changed from run to run. It is one problem of its field."""
    text = entry_text(tags=None).rstrip("\n")
    path = write_entry(text=f"{text}\ntags: !!set {{weather: null, forecast: null}}\n",
                       name="example-weather")
    [problem] = problems_of(data_dir)
    assert (problem.file, problem.rule, problem.field) == (str(path), "yaml-tag", "tags")
    assert problem.message == ("YAML tag !!set is not allowed: entries hold plain text, "
                               "numbers, lists and maps")
    assert problem.line == len(text.splitlines()) + 1


def validated(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """`apidir validate` of the entries of `data_dir`, as a contributor runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "validate", str(data_dir / "entries")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "APIDIR_DATA_DIR": str(data_dir)})


def plain_date_entry(entry_id: str) -> str:
    """A valid entry's text with its verified date written as entries write it: a plain
    date, which YAML builds as one."""
    text = entry_text(id=entry_id)
    assert "verified: '2026-11-21'\n" in text
    return text.replace("verified: '2026-11-21'\n", "verified: 2026-11-21\n")


@pytest.mark.parametrize(("value", "field", "tag"), [
    ("x: !!binary aGVsbG8=", "x", "!!binary"),
    ("name: !!binary RXhhbXBsZSBXZWF0aGVy", "name", "!!binary"),
    ("tags: !!omap [{weather: 1}, {forecast: 2}]", "tags", "!!omap"),
    ("tags: !!pairs [{weather: 1}]", "tags", "!!pairs"),
    ("tags: [forecast, !lower Weather]", "tags[1]", "!lower"),
    ("name: !!python/object/apply:os.getcwd []", "name", "!!python/object/apply:os.getcwd"),
    ("name: !<tag:example.com,2026:name> Example Weather", "name",
     "!<tag:example.com,2026:name>"),
])
def test_a_tag_building_no_json_value_is_one_problem_naming_it(
    write_entry: WriteEntry, data_dir: Path, value: str, field: str, tag: str
) -> None:
    """A value written with a tag that builds what JSON cannot hold (bytes, pairs) or that the
    loader does not know is one problem naming its line, field and tag: `!!binary` ended as
    "Extra inputs are not permitted (got b'hello')", or passed as text on a known field; a
    custom tag was a syntax error naming no field. Plain dates still read as dates."""
    key = value.split(":", 1)[0]
    text = entry_text(**{key: None}).rstrip("\n")
    path = write_entry(text=f"{text}\n{value}\n", name="example-weather")
    write_entry(text=plain_date_entry("fine"), name="fine")
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    [problem] = report.problems
    assert (problem.file, problem.line, problem.entry, problem.field, problem.rule) == (
        str(path), len(text.splitlines()) + 1, "example-weather", field, "yaml-tag")
    assert problem.message == (f"YAML tag {tag} is not allowed: entries hold plain text, "
                               "numbers, lists and maps")
    assert [entry.id for entry in report.entries.values()] == ["fine"]


def test_a_date_tagged_for_a_text_field_is_one_problem_naming_its_tag(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """`!!timestamp` builds a date: on a field of text it is told as its tag, not as pydantic's
    "Input should be a valid string (got datetime.date(2026, 11, 1))"; on a date field, as
    `verified`, it is a date as a plain one is."""
    text = plain_date_entry("example-weather").replace(
        "verified: 2026-11-21", "verified: !!timestamp 2026-11-21")
    row = next(row for row in text.splitlines() if row.startswith("name: "))
    path = write_entry(text=text.replace(row, "name: !!timestamp 2026-11-01"),
                       name="example-weather")
    [problem] = problems_of(data_dir)
    line = text.splitlines().index(row) + 1
    assert (problem.file, problem.line, problem.entry, problem.field, problem.rule) == (
        str(path), line, "example-weather", "name", "yaml-tag")
    assert problem.message == ("YAML tag !!timestamp is not allowed: the field holds text; "
                               "write the date as text, quoted ('2026-11-01')")


@pytest.mark.parametrize(("row", "field", "written"), [
    ("description: 2026-11-01", "description", "2026-11-01"),
    ("rateLimit: 2026-11-01 10:00:00", "rateLimit", "2026-11-01 10:00:00"),
    ("  description: 2026-11-01", "endpoints[1].description", "2026-11-01"),
])
def test_validate_tells_a_plain_date_on_a_text_field_as_a_date_to_quote(
    write_entry: WriteEntry, data_dir: Path, row: str, field: str, written: str
) -> None:
    """A plain date where text is wanted is built as a date by YAML: `validate` said pydantic's
    "Input should be a valid string (got datetime.date(2026, 11, 1))"; it says what to write."""
    lines = plain_date_entry("example-weather").splitlines()
    key = row.split(":", 1)[0]
    at = [index for index, line in enumerate(lines) if line.startswith(f"{key}:")
          or line.startswith(f"- {key.strip()}:")][1 if field.startswith("endpoints") else 0]
    lines[at] = lines[at][:lines[at].index(key.strip())] + row.strip()
    path = write_entry(text="\n".join(lines) + "\n", name="example-weather")
    done = validated(data_dir)
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        f"{path}:{at + 1}: entry example-weather: field {field}: a date where text is wanted: "
        f"quote it ('{written}') [bad-type]")
    assert "Traceback" not in done.stderr and "datetime" not in done.stderr


def test_validate_tells_a_refused_tag_in_one_line(write_entry: WriteEntry,
                                                  data_dir: Path) -> None:
    text = entry_text().rstrip("\n")
    path = write_entry(text=f"{text}\nx: !!binary aGVsbG8=\n", name="example-weather")
    done = validated(data_dir)
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == (
        f"{path}:{len(text.splitlines()) + 1}: entry example-weather: field x: YAML tag "
        "!!binary is not allowed: entries hold plain text, numbers, lists and maps [yaml-tag]")
    assert "Traceback" not in done.stderr and "b'hello'" not in done.stderr


def test_a_key_given_twice_is_refused_not_silently_replaced(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """YAML forbids a key given twice; PyYAML would keep the second `description`. A key a
    merge (`<<`) brings may be given again, as YAML means."""
    text = entry_text()
    path = write_entry(text=f"{text}description: A second one.\n", name="example-weather")
    merged = "base: &base {a: 1, b: 2}\nother:\n  <<: *base\n  a: 3\n"
    write_entry(text=entry_text(id="merged").replace("id: merged\n", f"id: merged\n{merged}"),
                name="merged")
    problems = problems_of(data_dir)
    twice = [p for p in problems if p.rule == "duplicate-key"]
    assert [(p.file, p.line, p.message) for p in twice] == [
        (str(path), len(text.splitlines()) + 1,
         "key 'description' is given twice: the first would be lost")]
    assert not [p for p in problems if p.file.endswith("merged.yaml")
                and p.rule in ("duplicate-key", "yaml-syntax")]


def test_a_character_yaml_forbids_is_one_line_with_its_line(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    text = entry_text()
    path = write_entry(text=text.replace("name: Example Weather", "name: Example\x00Weather"),
                       name="example-weather")
    [problem] = problems_of(data_dir)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if row.startswith("name:"))
    assert (problem.file, problem.line, problem.rule, problem.message) == (
        str(path), line, "yaml-syntax", "YAML does not allow the character #x0000")


def test_a_sample_response_nested_past_any_parser_is_a_problem_of_its_field(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """JSON nested 50,000 deep in `sampleResponse` (a block of text, which the file's own
    nesting limit does not see) is reported, and its credential check goes on."""
    write_entry(make_entry(sampleResponse="[" * 50_000 + "]" * 50_000))
    problems = problems_of(data_dir)
    assert [(p.field, p.rule, p.message) for p in problems] == [
        ("sampleResponse", "sample-response-json", "nests too deeply to parse as JSON")]


def test_a_long_text_of_address_like_words_is_checked_in_linear_time(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """`ab.ab.ab.…` made the hedge pattern try every label from every label (a 100 KB field
    took 36 s, a 256 KB file minutes). `validate` of a 240 KB one ends within a generous
    bound (a guard against the square, not a speed target) and finds nothing to say."""
    write_entry(make_entry(longDescription="ab." * 80_000))
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "validate", str(data_dir / "entries")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"APIDIR_DATA_DIR": str(data_dir), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_endpoint_path_of_unclosed_braces_is_refused_in_linear_time(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """`{{{…` made the placeholder pattern scan to the path's end from every brace (a 40 KB
    path took 6 s, 200 KB minutes) before `validate` refused it, in a line holding the whole
    path. It is refused within a generous bound (a guard against the square, not a speed
    target), in short lines naming the field."""
    endpoints = [{"method": "GET", "path": "/" + "{" * 200_000, "description": "Braces."}]
    write_entry(make_entry(endpoints=endpoints))
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "validate", str(data_dir / "entries")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={"APIDIR_DATA_DIR": str(data_dir), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "field endpoints[0].path" in done.stdout + done.stderr
    assert all(len(line) < 1000 for line in (done.stdout + done.stderr).splitlines())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("  label: AI & Machine Learning\n", "  label: AI & Machine Learning\n  label: AI\n"),
         ":4: key 'label' is given twice: the first would be lost [duplicate-key]"),
        (("  label: AI & Machine Learning\n", "  label: !!int abc\n"),
         ":3: field [0].label: 'abc' cannot be read as a YAML int (invalid literal for int() "
         "with base 10: 'abc') [yaml-value]"),
    ],
)
def test_categories_yaml_refuses_the_same_yaml_in_one_line(
    data_dir: Path, change: tuple[str, str], message: str
) -> None:
    from pipeline.catalogue.entries import CategoryError, load_categories

    path = data_dir / "categories.yaml"
    text = path.read_text()
    assert "\n- id: ai\n" + change[0] in text  # the first category, after one comment line
    path.write_text(text.replace(change[0], change[1], 1))
    with pytest.raises(CategoryError) as refused:
        load_categories(path)
    assert str(refused.value) == f"{path}{message}"


@pytest.mark.parametrize(("label", "message"), [
    ('"AI \\u202e& Machine Learning"', "holds U+202E"),
    ('"AI\\u200b& Machine Learning"', "holds U+200B"),
    ('"\\u200b "', "shows nothing: it needs at least one visible character"),
])
def test_a_category_label_that_would_hide_or_reorder_text_is_refused(
    data_dir: Path, label: str, message: str
) -> None:
    from pipeline.catalogue.entries import CategoryError, load_categories

    path = data_dir / "categories.yaml"
    text = path.read_text()
    path.write_text(text.replace("  label: AI & Machine Learning\n", f"  label: {label}\n", 1))
    with pytest.raises(CategoryError) as refused:
        load_categories(path)
    assert str(refused.value).startswith(f"{path}:3: category ai: field label: {message}")
    assert "\n" not in str(refused.value)


def test_a_category_key_the_file_misspells_is_refused(data_dir: Path) -> None:
    """A category's key the contract does not know (`colour:`, a misspelt `lable:`) is refused
    in one line naming its line, category and key, as an entry file's is: it was passed over
    without a word."""
    from pipeline.catalogue.entries import CategoryError, load_categories

    path = data_dir / "categories.yaml"
    text = path.read_text()
    path.write_text(text.replace("  label: AI & Machine Learning\n",
                                 "  label: AI & Machine Learning\n  colour: red\n", 1))
    with pytest.raises(CategoryError) as refused:
        load_categories(path)
    assert str(refused.value) == (f"{path}:4: category ai: field colour: Extra inputs are not "
                                  "permitted (got 'red')")


HUGE_HEX = "0x" + "f" * 5000  # an integer of 20,000 bits: past the 4,300 digits of `repr`
PAST = "past the 4,300 digits a number may have"


@pytest.mark.parametrize(("change", "field", "said"), [
    (("name: Example Weather", f"name: {HUGE_HEX}"), "name", "an integer of 20,000 bits"),
    (("id: example-weather", f"id: {HUGE_HEX}"), "id", "an integer of 20,000 bits"),
    (("name: Example Weather", "name: " + ":".join(["59"] * 3000)), "name",
     "an integer of 17,721 bits"),
    (("pricing:\n", f"pricing:\n  ? 0b{'1' * 15000}\n  : 1\n"), None,
     "an integer of 15,000 bits"),
])
def test_an_integer_too_long_to_write_is_a_problem_of_its_field(
    write_entry: WriteEntry, data_dir: Path, change: tuple[str, str], field: str | None,
    said: str
) -> None:
    """YAML builds an integer of any size from `0x…`, `0b…` or `1:2:…` (sexagesimal), where a
    decimal one past 4,300 digits fails to build; Python's `repr` of it raised, and
    `validate` and the ingest stopped on an unexpected error. It fails to build as the
    decimal one does: a problem of its line and field; the other files are read."""
    text = entry_text(pricing={"model": "free"})
    assert change[0] in text
    write_entry(text=text.replace(change[0], change[1], 1), name="example-weather")
    write_entry(make_entry(id="fine"), name="fine")
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert [entry.id for entry in report.entries.values()] == ["fine"]
    [problem] = report.problems
    assert (problem.rule, problem.field) == ("yaml-value", field)
    assert problem.message.endswith(f"cannot be read as a YAML int ({said}, {PAST})")


def test_a_category_of_an_integer_too_long_to_write_is_one_line(data_dir: Path) -> None:
    from pipeline.catalogue.entries import CategoryError, load_categories

    path = data_dir / "categories.yaml"
    path.write_text(path.read_text().replace("  label: AI & Machine Learning\n",
                                             f"  label: {HUGE_HEX}\n", 1))
    with pytest.raises(CategoryError) as refused:
        load_categories(path)
    assert str(refused.value).startswith(f"{path}:3: field [0].label: '0xfff")
    assert str(refused.value).endswith(f"(an integer of 20,000 bits, {PAST}) [yaml-value]")
