"""`apidir validate`: every rule reported at once, naming file, line, entry and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from pipeline.catalogue import entries as catalog
from pipeline.catalogue.entries import read_catalog
from pipeline.release.publish import published_entry
from pipeline.release.validate import _line_problems as release_line_problems
from tests.conftest import REPO, WriteEntry, make_entry


def problems_of(data_dir: Path) -> list:
    entries = data_dir / "entries"
    return read_catalog([entries], entries).problems


def test_a_valid_file_has_no_problem(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry()
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert report.ok
    assert [entry.id for entry in report.entries.values()] == ["example-weather"]


@pytest.mark.parametrize(
    ("changes", "field", "rule"),
    [
        ({"category": "games"}, "category", "unknown-category"),
        ({"provider": None}, "provider", "missing-required-field"),
        ({"baseUrl": None}, "baseUrl", "missing-required-field"),
        ({"authType": "token"}, "authType", "bad-enum-value"),
        (
            {"endpoints": [{"method": "FETCH", "path": "/a"}]},
            "endpoints[0].method",
            "bad-enum-value",
        ),
        ({"pricing": {"model": "cheap"}}, "pricing.model", "bad-enum-value"),
        ({"baseUrl": "api.example.com/v1"}, "baseUrl", "bad-url"),
        ({"docsUrl": "mailto:docs@example.com"}, "docsUrl", "bad-url"),
        ({"color": "#12g456"}, "color", "bad-colour"),
        ({"colour": "#123456"}, "colour", "unknown-field"),
        ({"id": "Example_Weather"}, "id", "bad-slug"),
    ],
)
def test_each_schema_rule_names_file_entry_field_and_line(
    write_entry: WriteEntry, data_dir: Path, changes: dict, field: str, rule: str
) -> None:
    path = write_entry(make_entry(**changes), category="weather", name="example-weather")
    found = [p for p in problems_of(data_dir) if p.rule == rule]
    assert found, problems_of(data_dir)
    problem = found[0]
    assert problem.file == str(path)
    assert problem.field == field
    assert problem.entry == changes.get("id", "example-weather")
    assert problem.line is not None and problem.line >= 1
    text = str(problem)
    assert str(path) in text and field in text and rule in text


@pytest.mark.parametrize(("code", "said"), [
    ("gbp", "must be written in capitals: GBP (got 'gbp')"),
    ("XYZ", "is not an ISO 4217 currency code (e.g. USD, EUR, GBP) (got 'XYZ')"),
])
def test_a_currency_not_in_iso_4217_is_one_problem_naming_its_field(
    write_entry: WriteEntry, data_dir: Path, code: str, said: str
) -> None:
    """A pricing's currency is an ISO 4217 code as written: a lower-case or made-up one is
    one line naming file, entry and field, beside prices that are otherwise valid."""
    pricing = {"model": "freemium", "startingCentsPerMonth": 0, "currency": code,
               "tiers": [{"name": "Startup", "monthlyCents": 3000, "included": "x"}]}
    path = write_entry(make_entry(pricing=pricing))
    [problem] = problems_of(data_dir)
    assert (problem.file, problem.entry, problem.field, problem.rule, problem.message) == (
        str(path), "example-weather", "pricing.currency", "bad-currency", said)
    assert path.read_text().splitlines()[problem.line - 1].strip().startswith("currency:")


def test_line_points_at_the_offending_key(write_entry: WriteEntry, data_dir: Path) -> None:
    path = write_entry(make_entry(authType="token"))
    lines = path.read_text().splitlines()
    problem = next(p for p in problems_of(data_dir) if p.field == "authType")
    assert lines[problem.line - 1].startswith("authType:")


def test_id_must_match_file_name(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(make_entry(), name="other-name")
    rules = {p.rule for p in problems_of(data_dir)}
    assert "id-file-mismatch" in rules


def test_category_must_match_folder(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(make_entry(category="maps"), category="weather")
    problem = next(p for p in problems_of(data_dir) if p.rule == "category-folder-mismatch")
    assert problem.field == "category"
    assert "'weather'" in problem.message


def test_duplicate_id_across_files_is_reported_in_both(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    first = write_entry(make_entry())
    second = write_entry(make_entry(), category="weather", name="example-weather-copy")
    second.write_text(yaml.safe_dump(make_entry()))  # same id in a second file
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    duplicates = [p for p in report.problems if p.rule == "duplicate-id"]
    assert {p.file for p in duplicates} == {str(first), str(second)}
    assert report.entries == {}


def test_yaml_syntax_error_reports_its_line(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(text="id: broken\nname: Broken\ntags: [one, two\nprovider: X\n", name="broken")
    problem = next(p for p in problems_of(data_dir) if p.rule == "yaml-syntax")
    assert problem.entry == "broken"
    assert problem.line in (3, 4)


def test_a_file_that_is_not_a_mapping_is_reported(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(text="- just\n- a list\n", name="listy")
    assert [p.rule for p in problems_of(data_dir)] == ["not-a-mapping"]


def test_every_problem_is_reported_at_once(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(make_entry(authType="token", color="red", provider=None))
    write_entry(text="id: [\n", name="second")
    rules = [p.rule for p in problems_of(data_dir)]
    assert {"bad-enum-value", "bad-colour", "missing-required-field", "yaml-syntax"} <= set(rules)


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def test_cli_exit_status_follows_validity(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str]
) -> None:
    import os

    env = os.environ | settings_env
    path = write_entry()
    ok = run_cli("validate", env=env)
    assert ok.returncode == 0, ok.stderr
    assert "1 entry file(s) valid" in ok.stdout
    path.write_text(yaml.safe_dump(make_entry(authType="token", color="red")))
    bad = run_cli("validate", str(path), env=env)
    assert bad.returncode == 1
    assert str(path) in bad.stderr and "authType" in bad.stderr and "color" in bad.stderr
    assert "2 problem(s) in 1 file(s)" in bad.stderr


def test_the_repository_catalogue_is_valid() -> None:
    entries = REPO / "data" / "entries"
    report = read_catalog([entries], entries)
    assert report.files, "the catalogue has no entries"
    assert report.ok, "\n".join(map(str, report.problems))


def test_worker_processes_read_the_same_as_one_process(
    write_entry: WriteEntry, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "_CHUNK", 4)  # several chunks over the two workers
    for number in range(12):
        write_entry(make_entry(id=f"api-{number}"))
    write_entry(make_entry(id="bad-colour", color="red"))
    write_entry(text="id: [\n", name="broken")
    write_entry(make_entry(id="api-3"), name="api-3-copy")  # a duplicate id across workers
    entries = data_dir / "entries"
    alone = read_catalog([entries], entries, workers=1)
    spread = read_catalog([entries], entries, workers=2)
    assert spread.problems == alone.problems
    assert {"bad-colour", "yaml-syntax", "duplicate-id"} <= {p.rule for p in alone.problems}
    assert spread.entries == alone.entries and len(alone.entries) == 11


def test_the_optional_additions_are_checked_and_published(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(make_entry(openapiUrl="http://api.example.com/openapi.json",
                           statusPageUrl="https://status.example.com"))
    assert {(p.field, p.rule) for p in problems_of(data_dir)} == {("openapiUrl", "https-only")}
    write_entry(make_entry(sdks=[{"language": "Python", "url": "not a url"}]))
    assert {(p.field, p.rule) for p in problems_of(data_dir)} == {("sdks[0].url", "bad-url")}
    sdks = [{"language": "Python", "url": "https://github.com/example/example-python"}]
    write_entry(make_entry(openapiUrl="https://api.example.com/openapi.json", sdks=sdks))
    [entry] = read_catalog([data_dir / "entries"], data_dir / "entries").entries.values()
    published = entry.content()
    assert published["openapiUrl"] == "https://api.example.com/openapi.json"
    assert published["sdks"] == sdks and "statusPageUrl" not in published


def test_the_new_pricing_fields_are_checked(write_entry: WriteEntry, data_dir: Path) -> None:
    pricing = make_entry()["pricing"] | {
        "transactionFee": {"percent": 150, "fixedCents": -5},
        "monthlyMinimumCents": -1, "sandbox": "maybe"}
    pricing["freeQuota"] = pricing["freeQuota"] | {"recurring": "often"}
    write_entry(make_entry(pricing=pricing))
    found = {(p.field, p.rule) for p in problems_of(data_dir)}
    assert found == {
        ("pricing.transactionFee.percent", "out-of-range"),
        ("pricing.transactionFee.fixedCents", "out-of-range"),
        ("pricing.monthlyMinimumCents", "out-of-range"),
        ("pricing.sandbox", "bad-type"),
        ("pricing.freeQuota.recurring", "bad-type"),
    }
    fine = make_entry()["pricing"] | {"transactionFee": {"percent": 2.9, "fixedCents": 30},
                                      "monthlyMinimumCents": 0, "sandbox": True}
    write_entry(make_entry(pricing=fine))
    assert problems_of(data_dir) == []


def test_a_description_cut_at_a_comma_is_an_unknown_field_where_it_was_written(
    write_entry: WriteEntry, data_dir: Path,
) -> None:
    path = write_entry(make_entry(endpoints=None))
    with path.open("a") as handle:
        handle.write("endpoints:\n  - {method: GET, path: /forecast, description: Forecast, "
                     "hourly}\n")
    [problem] = [p for p in problems_of(data_dir) if p.rule == "unknown-field"]
    assert (problem.field, problem.entry) == ("endpoints[0].hourly", "example-weather")
    assert "description: Forecast, hourly" in path.read_text().splitlines()[problem.line - 1]
    assert "must be quoted" in problem.message


def test_unknown_nested_fields_are_found_even_when_the_entry_is_invalid(
    write_entry: WriteEntry, data_dir: Path,
) -> None:
    write_entry(make_entry(authType="token", pricing={
        "model": "freemium", "tiers": [{"name": "Free", "monthlyCents": 0,
                                        "included": "1", "000 a day": None}]}))
    rules = {(p.field, p.rule) for p in problems_of(data_dir)}
    assert {("authType", "bad-enum-value"),
            ("pricing.tiers[0].000 a day", "unknown-field")} <= rules


def test_no_entry_of_the_catalogue_has_an_unknown_field() -> None:
    entries = REPO / "data" / "entries"
    report = read_catalog([entries], entries)
    assert [str(p) for p in report.problems if p.rule == "unknown-field"] == []


@pytest.mark.parametrize(
    ("yaml_value", "field", "rule"),
    [
        (".nan", "pricing.freeQuota.amount", "not-finite"),
        (".inf", "pricing.freeQuota.amount", "not-finite"),
        ("-.inf", "pricing.freeQuota.amount", "not-finite"),
        ("100000000000000000000", "pricing.tiers[1].monthlyCents", "out-of-range"),
        ("9007199254740992", "pricing.tiers[1].monthlyCents", "out-of-range"),
    ],
)
def test_a_number_json_cannot_hold_is_one_problem_naming_its_field(
    write_entry: WriteEntry, data_dir: Path, yaml_value: str, field: str, rule: str
) -> None:
    """NaN, infinities and integers past 2**53 - 1 once passed validate, then broke every run
    (the score stage cannot read NaN back) or every publish (the release check refuses them)."""
    path = write_entry()
    key = field.rsplit(".", 1)[-1]
    text = path.read_text()
    old = {"amount": "amount: 1000", "monthlyCents": "monthlyCents: 2900"}[key]
    path.write_text(text.replace(old, f"{key}: {yaml_value}"))
    [problem] = problems_of(data_dir)
    assert (problem.entry, problem.field, problem.rule) == ("example-weather", field, rule)
    assert path.read_text().splitlines()[problem.line - 1].strip().startswith(key)
    assert "\n" not in str(problem) and str(path) in str(problem)


def test_the_largest_exact_integer_is_still_valid(write_entry: WriteEntry,
                                                  data_dir: Path) -> None:
    pricing = make_entry()["pricing"]
    pricing["tiers"][1]["monthlyCents"] = 2**53 - 1
    write_entry(make_entry(pricing=pricing))
    assert problems_of(data_dir) == []


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": "Bright Sky \x01 API"}, "name"),
        ({"description": "Forecasts\x0b for any place."}, "description"),
        ({"pricing": make_entry()["pricing"] | {"tiers": [
            {"name": "Free", "monthlyCents": 0, "included": "1,000\x1f requests/day"}]}},
         "pricing.tiers[0].included"),
        ({"endpoints": [{"method": "GET", "path": "/forecast", "description": "A\ufffe."}]},
         "endpoints[0].description"),
        ({"rateLimit": "60 requests\uffff/minute"}, "rateLimit"),
        ({"authExample": "X-Api-Key: \x00YOUR_API_KEY"}, "authExample"),
    ],
)
def test_a_character_xml_forbids_is_one_problem_with_its_line(
    write_entry: WriteEntry, data_dir: Path, changes: dict, field: str
) -> None:
    """Such a character once passed validate and then broke the Atom feed, so no release
    could be published; YAML's double-quoted escapes (`"\\x01"`) let a file hold one."""
    path = write_entry(make_entry(**changes))
    [problem] = problems_of(data_dir)
    assert (problem.entry, problem.field, problem.rule) == (
        "example-weather", field, "control-character")
    assert "\\" in path.read_text().splitlines()[problem.line - 1]  # the escape's line
    text = str(problem)
    assert "\n" not in text and str(path) in text and "[control-character]" in text
    assert all(ord(c) >= 0x20 for c in text)  # the message names the character, not holds it


def test_tabs_and_line_breaks_stay_allowed(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(make_entry(longDescription="A forecast API.\n\tUsed by the tests.\r\n"))
    assert problems_of(data_dir) == []


def test_cli_validate_refuses_a_control_character_in_one_line(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str]
) -> None:
    import os

    path = write_entry(text=yaml.safe_dump(make_entry(), sort_keys=False).replace(
        "name: Example Weather", 'name: "Bright Sky \\x01 API"'))
    done = run_cli("validate", str(path), env=os.environ | settings_env)
    assert done.returncode == 1, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "[control-character]" in line]
    assert line.startswith(f"{path}:2: entry example-weather: field name: ")


# URLs the release's check (JSON Schema `format: uri`, RFC 3986) refuses, which the entry
# check once let through: the night's publish then failed on the whole release.
URLS_THE_RELEASE_REFUSES = {
    "https://threatfox.abuse.ch/api/café": "U+00E9",
    "https://threatfox.abuse.ch/api/[v1]": "'['",
    "https://threatfox.abuse.ch/api/%zz": "'%'",
    "https://threatfox.abuse.ch/api/100%": "'%'",
    "https://threatfox.abuse.ch/api#one#two": "second '#'",
    "https://threatfox.abuse.ch:abc/api": "port 'abc'",
    "https://threatfox.abuse.ch/api/\u202e": "U+202E",
    "https://threatfox.abuse.ch/api/\x7f": "U+007F",
}
URL_FIELDS = {
    "docsUrl": lambda url: {"docsUrl": url},
    "openapiUrl": lambda url: {"openapiUrl": url},
    "statusPageUrl": lambda url: {"statusPageUrl": url},
    "sources[1]": lambda url: {"sources": ["https://example.com/docs", url]},
    "sdks[0].url": lambda url: {"sdks": [{"language": "Python", "url": url}]},
}


def _release_problems(content: dict) -> list[str]:
    """What the release's check of `apis.json` says of an entry's content once published."""
    line = orjson.dumps(published_entry(content))
    [(problems, _)] = release_line_problems([(0, line)])
    return problems


@pytest.mark.parametrize("field", URL_FIELDS)
@pytest.mark.parametrize("url", URLS_THE_RELEASE_REFUSES)
def test_a_url_the_release_check_refuses_is_refused_by_validate(
    write_entry: WriteEntry, data_dir: Path, url: str, field: str
) -> None:
    path = write_entry(make_entry(**URL_FIELDS[field](url)))
    [problem] = [p for p in problems_of(data_dir) if p.rule != "control-character"]  # U+202E
    assert (problem.entry, problem.field, problem.rule) == ("example-weather", field, "bad-url")
    assert URLS_THE_RELEASE_REFUSES[url] in problem.message
    text = str(problem)
    assert "\n" not in text and text.startswith(f"{path}:")
    if field == "docsUrl":  # what the release's check says of it, had validate let it by
        published = make_entry(docsUrl=url)
        for key in ("sources", "verified"):
            published.pop(key)
        assert any("docsUrl" in problem for problem in _release_problems(published))


def test_a_url_written_percent_encoded_passes_validate_and_the_release_check(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    url = "https://threatfox.abuse.ch/api/caf%C3%A9/%5Bv1%5D?q=100%25#one%23two"
    write_entry(make_entry(docsUrl=url, sources=[url],
                           sdks=[{"language": "Python", "url": url}]))
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert report.problems == []
    [entry] = report.entries.values()
    assert _release_problems(entry.content()) == []


# Bidirectional embedding, override and isolate controls reorder the text around them: in a
# name, the page's own title and headings; YAML takes them as they are or as an escape.
@pytest.mark.parametrize("character", ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                                       "\u2066", "\u2067", "\u2068", "\u2069"])
@pytest.mark.parametrize(("changes_of", "field"), [
    (lambda c: {"name": f"Bright Sky {c}IPA"}, "name"),
    (lambda c: {"provider": f"Example{c} Ltd"}, "provider"),
    (lambda c: {"description": f"Forecasts {c}for any place."}, "description"),
    (lambda c: {"sampleRequest": f"curl -H \"X-Note: {c}x\" "
                                 "\"https://api.example.com/v1/forecast\""}, "sampleRequest"),
    (lambda c: {"endpoints": [{"method": "GET", "path": "/forecast", "description": f"A{c}."}]},
     "endpoints[0].description"),
])
def test_a_bidirectional_control_is_refused_in_any_text(
    write_entry: WriteEntry, data_dir: Path, character: str, changes_of: Any, field: str
) -> None:
    raw = yaml.safe_dump(make_entry(**changes_of(character)), sort_keys=False,
                         allow_unicode=True)
    assert character in raw  # written as it is, not as an escape
    path = write_entry(text=raw)
    [problem] = problems_of(data_dir)
    assert (problem.entry, problem.field, problem.rule) == (
        "example-weather", field, "control-character")
    assert f"U+{ord(character):04X}" in problem.message
    text = str(problem)
    assert text.startswith(f"{path}:") and character not in text and "\n" not in text


def test_a_bidirectional_control_written_as_an_escape_is_refused(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(text=yaml.safe_dump(make_entry(), sort_keys=False).replace(
        "name: Example Weather", 'name: "Example \\u202eWeather"'))
    [problem] = problems_of(data_dir)
    assert (problem.field, problem.rule) == ("name", "control-character")


def test_the_marks_that_reorder_nothing_stay_allowed_in_prose(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(make_entry(longDescription="Forecasts in English\u200e and in Hebrew."))
    assert problems_of(data_dir) == []


@pytest.mark.parametrize("blank", [" ", "\u200b", " \u200b\u00a0", "\t\u2060", "\u3164",
                                   "\ufeff", "\u0301"])
@pytest.mark.parametrize("field", ["name", "provider", "description", "longDescription"])
def test_a_text_that_shows_nothing_is_refused(
    write_entry: WriteEntry, data_dir: Path, blank: str, field: str
) -> None:
    """A name of spaces or zero-width spaces passed the length check, and the page's title,
    heading, links, Markdown heading and llms.txt then showed nothing."""
    path = write_entry(make_entry(**{field: blank}))
    found = [p for p in problems_of(data_dir) if p.rule == "blank-text"]
    assert [(p.entry, p.field) for p in found] == [("example-weather", field)]
    assert "visible character" in found[0].message
    text = str(found[0])
    assert text.startswith(f"{path}:") and "\n" not in text


@pytest.mark.parametrize("character", ["\u200b", "\u200d", "\u200e", "\u00ad", "\ufeff",
                                       "\u2060"])
@pytest.mark.parametrize("field", ["name", "provider"])
def test_an_invisible_format_character_in_a_name_is_refused(
    write_entry: WriteEntry, data_dir: Path, character: str, field: str
) -> None:
    write_entry(make_entry(**{field: f"Example{character} Weather"}))
    [problem] = problems_of(data_dir)
    assert (problem.field, problem.rule) == (field, "invisible-character")
    assert f"U+{ord(character):04X}" in problem.message


def test_names_with_letters_of_other_scripts_stay_valid(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(make_entry(name="Météo-France Ωmega 天気 API", provider="Zürich Ämter"))
    assert problems_of(data_dir) == []


def test_a_tag_ending_in_a_line_break_is_refused(write_entry: WriteEntry, data_dir: Path) -> None:
    write_entry(make_entry(tags=["forecast\n"]))
    assert [(p.field, p.rule) for p in problems_of(data_dir)] == [("tags[0]", "tag-lower-case")]


def test_the_templates_deprecation_uncommented_validates(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """Its line once read `{on: …}`, which YAML 1.1 reads as `{True: …}`: unknown field True."""
    template = (REPO / "docs" / "entry-template.yaml").read_text()
    [line] = [line for line in template.splitlines() if line.startswith("# deprecated:")]
    entry = yaml.safe_dump(make_entry(), sort_keys=False) + line.removeprefix("# ") + "\n"
    write_entry(text=entry.replace("successor: other-entry-id, ", ""))
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert report.problems == []
    [read] = report.entries.values()
    assert read.deprecated is not None and str(read.deprecated.on) == "2027-06-30"


@pytest.mark.parametrize("deprecated", ["deprecated: {on: 2027-06-30}\n",
                                        "deprecated:\n  on: 2027-06-30\n  note: Use v2.\n"])
def test_a_bare_on_key_is_read_as_the_word(
    write_entry: WriteEntry, data_dir: Path, deprecated: str
) -> None:
    """YAML 1.1 reads a bare `on` as true; every key of an entry is a field name, and an
    editor (YAML 1.2) reads it as the word, so the catalogue does too."""
    write_entry(text=yaml.safe_dump(make_entry(), sort_keys=False) + deprecated)
    report = read_catalog([data_dir / "entries"], data_dir / "entries")
    assert report.problems == []
    [read] = report.entries.values()
    assert read.deprecated is not None and str(read.deprecated.on) == "2027-06-30"
    assert read.content()["deprecated"]["on"] == "2027-06-30"


def test_a_key_given_bare_and_quoted_is_still_a_duplicate(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(text=yaml.safe_dump(make_entry(), sort_keys=False)
                + "deprecated:\n  on: 2027-06-30\n  \"on\": 2027-07-01\n")
    [problem] = problems_of(data_dir)
    assert problem.rule == "duplicate-key" and "'on'" in problem.message


@pytest.mark.parametrize(("path", "said"), [
    ("/search?q=café", "U+00E9"), ("/items[0]", "'['"), ("/rates?share=5%", "'%'"),
    ("/users/{id}/ü", "U+00FC"), ("/search?q=new york", "spaces"),
])
def test_an_endpoint_path_that_makes_no_url_is_refused(
    write_entry: WriteEntry, data_dir: Path, path: str, said: str
) -> None:
    """The probe calls baseUrl + path and the release publishes that URL as the entry's status
    URL: one path the URL rule refuses would fail the release's check, and the whole publish."""
    entry = make_entry(endpoints=[{"method": "GET", "path": "/forecast"},
                                  {"method": "GET", "path": path}])
    written = write_entry(entry)
    [problem] = problems_of(data_dir)
    assert (problem.field, problem.rule) == ("endpoints[1].path", "endpoint-url")
    assert said in problem.message and str(problem).startswith(f"{written}:")
    if "{" not in path:  # what the release's check says of the status a probe of it makes
        content = {key: value for key, value in entry.items()
                   if key not in ("sources", "verified")}
        status = {"state": "live", "httpStatus": 200, "responseTimeMs": 80,
                  "checkedAt": "2026-11-21T02:59:00Z", "note": None,
                  "url": entry["baseUrl"] + path, "failure": None}
        line = orjson.dumps(published_entry(content, status))
        [(problems, _)] = release_line_problems([(0, line)])
        assert any("status/url" in problem for problem in problems), problems


def test_an_endpoint_path_written_percent_encoded_passes(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(make_entry(endpoints=[{"method": "GET", "path": "/search?q=caf%C3%A9"},
                                      {"method": "GET", "path": "/users/{id}/items"},
                                      {"method": "GET", "path": "/forecast"}]))
    assert problems_of(data_dir) == []
