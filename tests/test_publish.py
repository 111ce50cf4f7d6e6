"""Publishing: contract-valid files, consistent categories, atomic swap, deterministic output."""

from __future__ import annotations

import fnmatch
import json
import re
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import jsonschema
import orjson
import pandas as pd
import pytest
from fake_internet import FakeServer
from sqlmodel import Session

from pipeline.catalogue.entries import load_categories, read_catalog
from pipeline.contract import CATEGORY_IDS, EntryDocument, FullDataset, SearchIndex
from pipeline.judging.score import HISTORY_COLUMNS, score_entries
from pipeline.operations import stages
from pipeline.release import publish as publish_module
from pipeline.release import search as search_module
from pipeline.release import validate as validate_module
from pipeline.release.hosting import (
    HEADERS_FILE,
    HOST_RULE_LIMIT,
    IMMUTABLE_CACHE,
    NOT_FOUND_JSON,
    REDIRECTS_FILE,
    HeaderRule,
    host_files,
    parse_headers_file,
    release_header_rules,
    render_headers_file,
)
from pipeline.release.layout import (
    CATEGORY_INDEX,
    ENTRY_DOCUMENTS,
    FULL_DATASET,
    NOT_FOUND_PAGE,
    OPENAPI,
    RELEASES_DIR,
    SEARCH_INDEX,
    category_file,
    entry_document,
    entry_page,
    release_folder,
)
from pipeline.release.openapi import component_schemas
from pipeline.release.publish import (
    EntriesOutOfOrderError,
    TooManyLeftOut,
    assemble_entries,
    build_release,
    next_version,
    publish_release,
    stream_release,
)
from pipeline.release.swap import side_folders, staging_folders, write_release
from pipeline.release.validate import (
    MAX_PROBLEMS_PER_FILE,
    ReleaseValidationError,
    host_file_problems,
    validate_release,
)
from pipeline.settings import Settings
from pipeline.store.tables import (
    EntryRow,
    active_entries,
    engine_for,
    session_scope,
    start_run,
)
from tests.conftest import REPO, ingested_session, make_entry

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
CATEGORIES = load_categories(REPO / "data" / "categories.yaml")


@pytest.fixture(scope="module")
def catalogue_entries() -> list[dict]:
    """The real catalogue as published entries (no probe or score yet)."""
    entries = REPO / "data" / "entries"
    report = read_catalog([entries], entries)
    return assemble_entries((e.id, e.content()) for e in report.entries.values())


def release(entries: list[dict], version: str = "2.0.0+20261121.1") -> dict[str, bytes]:
    return build_release(entries, CATEGORIES, version, NOW, "https://directory.test")


def read(folder: Path, path: str) -> dict:
    return json.loads((folder / path).read_text(encoding="utf-8"))


def test_release_has_every_file_and_valid_meta(tmp_path: Path, catalogue_entries) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    full = read(out, FULL_DATASET)
    assert full["meta"] == {
        "version": "2.0.0+20261121.1",
        "generated": "2026-11-21T03:00:00Z",
        "totalAPIs": len(catalogue_entries),
        "source": "https://directory.test/api/apis.json",
        "license": "CC BY 4.0",
    }
    assert [api["id"] for api in full["apis"]] == sorted(api["id"] for api in catalogue_entries)
    for category in CATEGORY_IDS:
        assert (out / category_file(category)).is_file()
    assert (out / OPENAPI).is_file() and (out / CATEGORY_INDEX).is_file()


def test_each_category_file_is_the_full_dataset_filtered(tmp_path: Path, catalogue_entries) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    full = read(out, FULL_DATASET)
    index = {c["id"]: c for c in read(out, CATEGORY_INDEX)["categories"]}
    total = 0
    for category in CATEGORIES:
        document = read(out, category_file(category.id))
        expected = [api for api in full["apis"] if api["category"] == category.id]
        assert document["apis"] == expected
        assert document["meta"]["count"] == len(expected) == index[category.id]["count"]
        assert document["meta"]["category"] == category.id
        assert document["meta"]["label"] == category.label
        assert document["meta"]["version"] == full["meta"]["version"]
        total += len(expected)
    assert total == full["meta"]["totalAPIs"] == len(full["apis"])


def test_empty_categories_still_get_a_file(tmp_path: Path, catalogue_entries) -> None:
    only_ai = [api for api in catalogue_entries if api["category"] == "ai"]
    out = write_release(tmp_path / "public", release(only_ai), CATEGORIES)
    payments = read(out, category_file("payments"))
    assert payments["apis"] == [] and payments["meta"]["count"] == 0


def test_every_published_file_validates_against_its_schema(
    tmp_path: Path, catalogue_entries
) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    published_openapi = read(out, OPENAPI)
    defs = published_openapi["components"]["schemas"]
    assert defs == json.loads(json.dumps(component_schemas()))

    def check(path: str, name: str) -> None:
        schema = {"$ref": f"#/components/schemas/{name}", "components": {"schemas": defs}}
        jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        ).validate(read(out, path))

    check(FULL_DATASET, "FullDataset")
    check(CATEGORY_INDEX, "CategoryIndex")
    check(SEARCH_INDEX, "SearchIndex")
    for category in CATEGORY_IDS:
        check(category_file(category), "CategoryDataset")
    for api in catalogue_entries:
        check(entry_document(api["id"]), "EntryDocument")
    FullDataset.model_validate(read(out, FULL_DATASET))
    SearchIndex.model_validate(read(out, SEARCH_INDEX))


def test_each_entry_has_its_document_and_a_line_in_the_search_index(
    tmp_path: Path, catalogue_entries
) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    full = read(out, FULL_DATASET)
    for api in full["apis"]:
        document = read(out, entry_document(api["id"]))
        assert document == {"meta": full["meta"], "api": api}  # the whole entry, as published
        assert EntryDocument.model_validate(document).api.id == api["id"]
    assert len(list((out / ENTRY_DOCUMENTS).iterdir())) == len(full["apis"])
    search = read(out, SEARCH_INDEX)
    assert search["meta"] == full["meta"]
    assert search["apis"] == [search_module.search_item(api) for api in full["apis"]]
    openai = next(item for item in search["apis"] if item["id"] == "openai")
    assert {"id", "name", "provider", "category", "tags", "state"} <= set(openai)
    sizes = [len(line) for line in (out / SEARCH_INDEX).read_bytes().splitlines()[1:-1]]
    assert max(sizes) < 700 and sum(sizes) / len(sizes) < 500  # a few hundred bytes an entry
    assert (out / SEARCH_INDEX).stat().st_size < (out / FULL_DATASET).stat().st_size / 5


def test_a_provisional_grade_s_search_item_says_what_its_own_latency_waits_for(
    tmp_path: Path
) -> None:
    """The index's card says why a grade is provisional as the category page's card does: the
    search item of a provisional entry carries what its Latency waits for, from its own probes
    and days so far, not the rule alone; a confirmed grade's item carries nothing of it."""
    entries = REPO / "data" / "entries"
    report = read_catalog([entries], entries)
    contents = {entry.id: entry.content() for entry in report.entries.values()
                if entry.id in ("frankfurter", "openai", "stripe")}
    rows = [("frankfurter", "https://api.frankfurter.dev/v1/latest",
             NOW - timedelta(hours=6 * step), "live", 80.0, 1) for step in range(10)]
    rows += [("openai", "https://api.openai.com/v1/models", NOW - timedelta(hours=step),
              "online", 300.0, 1) for step in range(2)]  # 2 probes on 1 day, Stripe none
    history = pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))
    scores = {entry_id: score.contract()
              for entry_id, score in score_entries(contents, history, NOW).items()}
    published = assemble_entries(sorted(contents.items()), scores=scores)
    out = write_release(tmp_path / "public", release(published), CATEGORIES)
    items = {item["id"]: item for item in read(out, SEARCH_INDEX)["apis"]}
    rule = "Latency is graded after 5 probes on 3 days within 7 days"
    assert items["openai"]["provisional"] is True
    assert items["openai"]["provisionalWhy"] == f"{rule}, 2 probes on 1 day so far"
    assert items["stripe"]["provisionalWhy"] == f"{rule}, none so far"
    assert items["frankfurter"]["provisional"] is False
    assert "provisionalWhy" not in items["frankfurter"]
    SearchIndex.model_validate(read(out, SEARCH_INDEX))


def test_fields_the_contract_does_not_know_yet_reach_the_entry_document(
    tmp_path: Path, catalogue_entries
) -> None:
    grown = [dict(api, lifecycle={"state": "active"}) for api in catalogue_entries]
    out = write_release(tmp_path / "public", release(grown), CATEGORIES)
    api = read(out, entry_document(grown[0]["id"]))["api"]
    assert api["lifecycle"] == {"state": "active"}


def test_an_entry_id_that_is_not_a_slug_names_no_file(tmp_path: Path, catalogue_entries) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    hostile = dict(catalogue_entries[0], id="../../escaped")
    with pytest.raises(TooManyLeftOut, match=r"entry \.\./\.\./escaped: field id: "):
        stream_release(out, [hostile], CATEGORIES, "2.0.0+20261121.2", NOW, "https://d.test")
    with pytest.raises(ValueError, match="not a slug"):
        release([hostile])
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert staging_folders(out) == []


def test_a_wrong_search_index_or_entry_document_refuses_the_release(
    tmp_path: Path, catalogue_entries, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "public"
    stream_release(out, sorted(catalogue_entries, key=lambda api: api["id"]), CATEGORIES,
                   "2.0.0+20261121.1", NOW, "https://directory.test")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    ordered = sorted(catalogue_entries, key=lambda api: api["id"])

    def publish_again() -> list[str]:
        with pytest.raises(ReleaseValidationError) as failure:
            stream_release(out, iter(ordered), CATEGORIES, "2.0.0+20261121.2", NOW,
                           "https://directory.test")
        assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
        return failure.value.problems

    real_item = search_module.search_item
    with monkeypatch.context() as patch:  # the writer drops a field the index must carry
        patch.setattr(search_module, "search_item",
                      lambda entry: {k: v for k, v in real_item(entry).items() if k != "tags"})
        assert publish_again() == [
            f"{SEARCH_INDEX}: apis differ from the search items of {FULL_DATASET}'s entries"]
    with monkeypatch.context() as patch:  # both sides agree on an item the schema refuses
        wrong = lambda entry: real_item(entry) | {"grade": "excellent"}  # noqa: E731
        patch.setattr(search_module, "search_item", wrong)
        patch.setattr(validate_module, "search_item", wrong)
        problems = publish_again()  # each entry is left out for it, so none is published
        assert len(problems) == len(ordered)
        assert all(f"entry {api['id']}: field grade (search item): " in problem
                   for api, problem in zip(ordered, problems, strict=True)), problems[:3]
    real_document = publish_module.entry_document_bytes
    with monkeypatch.context() as patch:  # one document carries another meta
        patch.setattr(publish_module, "entry_document_bytes", lambda line, meta: real_document(
            line, meta.replace(b"2.0.0+", b"2.0.1+") if b'"id":"openai"' in line else meta))
        assert publish_again() == [
            f"{entry_document('openai')}: meta differs from {FULL_DATASET}'s"]


def test_validation_finds_a_missing_changed_or_stray_entry_document(
    tmp_path: Path, catalogue_entries
) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    (out / entry_document("openai")).unlink()
    changed = out / entry_document("frankfurter")
    changed.write_bytes(changed.read_bytes().replace(b'"name":"Frankfurter"', b'"name":"Other"'))
    (out / ENTRY_DOCUMENTS / "stray.json").write_text("{}")
    problems = validate_release(out, CATEGORIES)
    assert any(p.startswith(f"{entry_document('openai')}: unreadable:") for p in problems)
    assert f"{entry_document('frankfurter')}: api differs from its entry in {FULL_DATASET}" \
        in problems
    assert problems[-1] == f"{ENTRY_DOCUMENTS}: 1 file(s) that are no entry's document"
    assert len(problems) == 3


def test_a_release_without_its_host_files_is_refused(tmp_path: Path, catalogue_entries) -> None:
    """Every release carries `_headers`, `_redirects`, the JSON 404 body its OpenAPI document
    declares and a `404.html`, pages or not: one without them, or whose 404 rule leads
    nowhere, is not swapped in (the nginx config's `error_page 404 /api/404.json` or
    `/404.html` would lead nowhere)."""
    files = release(catalogue_entries)
    assert {REDIRECTS_FILE, NOT_FOUND_JSON, NOT_FOUND_PAGE} <= files.keys()
    out = write_release(tmp_path / "public", files, CATEGORIES)
    assert parse_headers_file((out / HEADERS_FILE).read_text())  # written once it is staged
    (out / NOT_FOUND_JSON).unlink()
    (out / NOT_FOUND_PAGE).unlink()
    (out / HEADERS_FILE).unlink()
    (out / REDIRECTS_FILE).write_text("/api/*  /api/missing.json  404\n")
    problems = validate_release(out, CATEGORIES)
    assert [p.split(":")[0] for p in problems] == [HEADERS_FILE, REDIRECTS_FILE, NOT_FOUND_JSON,
                                                   NOT_FOUND_PAGE]
    assert problems[1] == (f"{REDIRECTS_FILE}: /api/* leads to /api/missing.json, which is no "
                           "file of the release")
    (out / NOT_FOUND_JSON).write_text('{"error": {}}')
    assert any(p.startswith(f"{NOT_FOUND_JSON}: error") for p in validate_release(out, CATEGORIES))
    without = {path: data for path, data in files.items() if path != NOT_FOUND_JSON}
    with pytest.raises(ReleaseValidationError, match=NOT_FOUND_JSON):
        write_release(out, without, CATEGORIES)


def cache_controls(rules: list[HeaderRule], path: str) -> list[str]:
    """Every `Cache-Control` the rules give the URL path `path`: Cloudflare Pages sends them
    all, joined with a comma."""
    return [value for rule in rules if fnmatch.fnmatchcase(path, rule.pattern)
            for name, value in rule.headers if name.lower() == "cache-control"]


def test_headers_make_immutable_only_the_kept_folders_and_assets_the_release_holds(
    tmp_path: Path, stored_catalogue
) -> None:
    """A host applies a `_headers` rule to the path asked for, whatever the answer: with
    `/api/releases/*` immutable, a miss there (the next release, not yet published) or under
    `/assets/` (an asset a new page will name) was kept by a client for a year. Only each
    kept release folder and asset file is immutable, each path has one `Cache-Control` at
    most, and a release without pages has its own rules."""
    out = tmp_path / "public"

    def publish(hours: int, pages: bool = True) -> str:
        return publish_release(stored_catalogue, out, "https://directory.test", CATEGORIES,
                               NOW + timedelta(hours=hours), pages=pages).release.version

    kept = [release_folder(publish(hours)) for hours in (0, 1)]
    rules = parse_headers_file((out / HEADERS_FILE).read_text())
    assets = sorted(path.name for path in (out / "assets").iterdir())
    assert len(assets) >= 3
    for path in [*(f"/{folder}/apis.json" for folder in kept),
                 *(f"/assets/{name}" for name in assets)]:
        assert cache_controls(rules, path) == [IMMUTABLE_CACHE], path
    upcoming = release_folder(next_version(out, NOW.date()))
    misses = [f"/{upcoming}/apis.json", f"/{upcoming}/categories/ai.json",
              "/assets/missing.css", "/assets/site.000000000000.css", f"/{RELEASES_DIR}/x"]
    for path in misses:
        assert IMMUTABLE_CACHE not in cache_controls(rules, path), path
    files = ["/" + p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()]
    for path in [*files, *misses, "/"]:
        assert len(cache_controls(rules, path)) <= 1, path
    assert len(rules) < 100  # Cloudflare Pages reads no more; a rule per folder, not per file

    publish(2, pages=False)
    rules = parse_headers_file((out / HEADERS_FILE).read_text())
    assert not (out / "assets").exists()
    assert all(cache_controls(rules, f"/assets/{name}") == [] for name in assets)
    assert cache_controls(rules, f"/{kept[0]}/apis.json") == [IMMUTABLE_CACHE]
    assert validate_release(out, CATEGORIES) == []


def test_every_kept_folder_stays_immutable_past_the_host_s_rule_limit(tmp_path: Path) -> None:
    """Cloudflare Pages reads 100 rules of `_headers`: with one per kept folder, the oldest
    went without their immutable rule past some 75 kept releases, where nginx keeps them all.
    The folders of the days before the newest release's share a rule per span of days no
    later release can take; nothing a later release could take is made immutable."""
    out = tmp_path / "public"
    newest = NOW.date()
    kept = [f"2.0.0_{newest - timedelta(days=days):%Y%m%d}.{number}"
            for days in range(1, 400) for number in (1, 2)]
    kept += [f"2.0.0_{newest:%Y%m%d}.{number}" for number in (1, 2, 3)]
    for folder in kept:
        (out / RELEASES_DIR / folder).mkdir(parents=True)
        (out / RELEASES_DIR / folder / "apis.json").write_text("{}\n")
    for path, data in host_files("/").items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(data)
    rules = list(release_header_rules(out))
    (out / HEADERS_FILE).write_bytes(render_headers_file(rules))
    assert len(rules) <= HOST_RULE_LIMIT
    for folder in kept:
        assert cache_controls(rules, f"/{RELEASES_DIR}/{folder}/apis.json") == [
            IMMUTABLE_CACHE], folder
    for upcoming in (f"2.0.0_{newest:%Y%m%d}.4", f"2.0.0_{newest + timedelta(days=1):%Y%m%d}.1",
                     f"2.1.0_{newest:%Y%m%d}.1", f"2.0.0_{newest:%Y%m%d}.10"):
        assert cache_controls(rules, f"/{RELEASES_DIR}/{upcoming}/apis.json") == [], upcoming
    assert host_file_problems(out) == []


def test_an_immutable_rule_for_what_the_release_does_not_hold_is_refused(
    tmp_path: Path, catalogue_entries
) -> None:
    """A `_headers` that makes all of `/api/releases/` or `/assets/` immutable, or a release
    folder gone, would have a host's client keep a miss there for a year."""
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    assert validate_release(out, CATEGORIES) == []
    for pattern in (f"/{RELEASES_DIR}/*", "/assets/*", f"/{RELEASES_DIR}/2.0.0_20200101.1/*"):
        (out / HEADERS_FILE).write_text(f"{pattern}\n  Cache-Control: {IMMUTABLE_CACHE}\n")
        assert validate_release(out, CATEGORIES) == [
            f"{HEADERS_FILE}: {pattern} is cached as immutable but is no asset or kept release "
            "folder of the release: a miss there would be kept for a year"]


def test_a_release_that_breaks_the_contract_leaves_the_old_one(
    tmp_path: Path, catalogue_entries
) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    broken = [dict(api) for api in catalogue_entries]
    broken[0]["color"] = "not-a-colour"
    with pytest.raises(ReleaseValidationError) as failure:
        write_release(out, release(broken, "2.0.0+20261121.2"), CATEGORIES)
    assert "color" in str(failure.value)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert staging_folders(out) == []


@pytest.mark.parametrize("breaks_the_contract", [True, False], ids=["broken", "valid"])
def test_pages_that_fail_over_a_release_report_the_contract_where_it_is_broken(
    tmp_path: Path, catalogue_entries, breaks_the_contract: bool
) -> None:
    """The pages (`complete`) stop on a value outside the contract: the contract's problems
    are the error then; over a valid release, the pages' own error is."""
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    entries = [dict(api) for api in catalogue_entries]
    if breaks_the_contract:
        entries[0]["color"] = "not-a-colour"

    def pages(staging: Path, meta: dict, counts: dict) -> None:
        raise KeyError("a value the pages have no label for")

    expected = ReleaseValidationError if breaks_the_contract else KeyError
    with pytest.raises(expected) as failure:
        write_release(out, release(entries, "2.0.0+20261121.2"), CATEGORIES, complete=pages)
    assert ("color" in str(failure.value)) is breaks_the_contract
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert staging_folders(out) == []


class Interrupted(Exception):
    pass


class InterruptedFiles(Mapping[str, bytes]):
    """A release whose writing is cut off after `after` files."""

    def __init__(self, files: dict[str, bytes], after: int) -> None:
        self.files, self.after = files, after

    def __getitem__(self, key: str) -> bytes:
        return self.files[key]

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[str]:
        for count, key in enumerate(self.files):
            if count == self.after:
                raise Interrupted("writer stopped mid-release")
            yield key


def test_an_interrupted_write_leaves_the_old_release(tmp_path: Path, catalogue_entries) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    files = release(catalogue_entries[:3], "2.0.0+20261121.2")
    with pytest.raises(Interrupted):
        write_release(out, InterruptedFiles(files, after=5), CATEGORIES)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_stale_staging_folder_from_a_crash_is_cleared(tmp_path: Path, catalogue_entries) -> None:
    out = tmp_path / "public"
    stale = tmp_path / ".public.staging-deadbeef"
    (stale / "api").mkdir(parents=True)
    (stale / "api" / "apis.json").write_text("{half")
    write_release(out, release(catalogue_entries), CATEGORIES)
    assert not stale.exists()
    assert read(out, FULL_DATASET)["meta"]["totalAPIs"] == len(catalogue_entries)


def test_output_is_deterministic(tmp_path: Path, catalogue_entries) -> None:
    first = release(catalogue_entries)
    second = release(list(reversed(catalogue_entries)))
    assert first == second
    lines = first[FULL_DATASET].decode().splitlines()
    assert lines[0] == '{"apis":[' and lines[-1].startswith('],"meta":{')
    entries = [json.loads(line.removesuffix(",")) for line in lines[1:-1]]
    assert [e["id"] for e in entries] == sorted(api["id"] for api in catalogue_entries)
    for line, entry in zip(lines[1:-1], entries, strict=True):  # compact, sorted keys
        assert line.removesuffix(",") == json.dumps(
            entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )


def tampered(tmp_path: Path, entries: list[dict], path: str, change) -> list[str]:
    """Problems of a written release after `change(lines)` edits one file's lines."""
    out = write_release(tmp_path / "public", release(entries), CATEGORIES)
    target = out / path
    lines = target.read_bytes().splitlines(keepends=True)
    target.write_bytes(b"".join(change(lines)))
    return validate_release(out, CATEGORIES)


def test_validation_finds_a_category_file_that_lost_an_entry(
    tmp_path: Path, catalogue_entries
) -> None:
    problems = tampered(tmp_path, catalogue_entries, category_file("ai"),
                        lambda lines: [lines[0], *lines[2:]])
    assert problems == [
        f"{category_file('ai')}: apis differ from {FULL_DATASET} filtered by category"
    ]


def test_validation_finds_an_entry_line_that_breaks_the_contract(
    tmp_path: Path, catalogue_entries
) -> None:
    def break_third(lines: list[bytes]) -> list[bytes]:
        entry = json.loads(lines[3].rstrip(b",\n"))
        entry["authType"] = "token"
        return [*lines[:3], json.dumps(entry).encode() + b",\n", *lines[4:]]

    problems = tampered(tmp_path, catalogue_entries, FULL_DATASET, break_third)
    assert any(p.startswith(f"{FULL_DATASET}: apis/2/authType:") and "[schema]" in p
               for p in problems)
    assert any(p.startswith(f"{FULL_DATASET}: apis/2/authType:") and "[contract]" in p
               for p in problems)


def test_a_written_row_is_let_go_of_before_the_release_is_written_to_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each row is freed once written, not held to the last entry: those checked here (the
    first 200, up to `PARALLEL_CHECK_FROM`) and those checked in the workers' chunks of 200
    alike."""
    import sys

    lines = [orjson.dumps({"id": f"entry-{number:03}"}) for number in range(3 * 200 + 1)]
    rows = (publish_module._Row(f"entry-{number:03}", "weather", line, b"{}")
            for number, line in enumerate(lines))
    monkeypatch.setattr(publish_module, "PARALLEL_CHECK_FROM", 200 * len(lines[0]))
    here, in_workers = lines[0], lines[250]
    held = sys.getrefcount(here), sys.getrefcount(in_workers)
    checked = publish_module._checked(rows)
    for _ in range(2 * 200 + 1):  # past the chunk of 200 (rows 200-399) row 250 was in
        next(checked)
    after = sys.getrefcount(here), sys.getrefcount(in_workers)
    assert after == held  # no row holds either line any more
    assert sum(1 for _ in checked) == len(lines) - (2 * 200 + 1)


def test_no_row_waits_for_the_check_s_workers_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rows before a large release's check moves to its workers (`PARALLEL_CHECK_FROM`
    bytes: some 6,000 entries, 117 MiB held at a 100k release's peak when they waited) are
    checked here and handed on one at a time: the first is written when one row was read,
    not once the rows reached the threshold; the rest go to the workers with the same
    faults found."""
    lines = [orjson.dumps({"id": f"entry-{number}"}) for number in range(40)]
    lines[3] = b'{"id": "entry-3", "name": 5}'
    lines[30] = b'{"id": "entry-30", "name": 5}'
    read: list[int] = []

    def rows() -> Iterator[publish_module._Row]:
        for number, line in enumerate(lines):
            read.append(number)
            yield publish_module._Row(f"entry-{number}", "weather", line, b"{}")

    monkeypatch.setattr(publish_module, "PARALLEL_CHECK_FROM", 10 * len(lines[0]))
    monkeypatch.setattr(publish_module, "CHECK_CHUNK", 4)
    checked = publish_module._checked(rows())
    head = [next(checked)]
    assert (head[0][0].entry_id, read) == ("entry-0", [0])
    head += [next(checked) for _ in range(9)]
    assert read == list(range(10))  # the tenth row reaches the threshold: still none ahead
    rest = list(checked)
    assert [row.entry_id for row, _ in rest] == [f"entry-{n}" for n in range(10, 40)]
    found = [faults for _, faults in head + rest]
    assert found == publish_module.entry_faults(lines)  # what one check of them all finds
    assert found[3] != found[4] and found[30] != found[31]  # "name" is no string in two


def test_a_large_release_s_entries_are_checked_in_worker_processes_with_the_same_problems(
    tmp_path: Path, catalogue_entries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From `PARALLEL_CHECK_FROM` bytes of full dataset on, each entry's own checks (the schema
    and the model, of it and of its search item) run in worker processes beside the matching
    of its line in the other files: the problems found, in their order, are those found in one
    process."""
    def break_some(lines: list[bytes]) -> list[bytes]:
        changed = list(lines)
        for place, field, value in ((3, "authType", "token"), (6, "color", "not-a-colour")):
            entry = json.loads(lines[place].rstrip(b",\n"))
            changed[place] = json.dumps(entry | {field: value}).encode() + b",\n"
        changed[9] = b"{not JSON},\n"
        return changed

    in_one = tampered(tmp_path, catalogue_entries, FULL_DATASET, break_some)
    pools, worker_pool = [], validate_module.worker_pool

    def counted_pool() -> ProcessPoolExecutor:
        pools.append(worker_pool())
        return pools[-1]

    monkeypatch.setattr(validate_module, "worker_pool", counted_pool)
    monkeypatch.setattr(validate_module, "PARALLEL_CHECK_FROM", 0)
    assert validate_release(tmp_path / "public", CATEGORIES) == in_one
    assert len(pools) == 1
    assert any(p.startswith(f"{FULL_DATASET}: apis/2/authType:") and "[contract]" in p
               for p in in_one)
    assert any(p.startswith(f"{FULL_DATASET}: apis/5/color:") for p in in_one)
    assert any(p.startswith(f"{FULL_DATASET}: apis/8: not JSON") for p in in_one)


def test_validation_finds_broken_framing_and_order(tmp_path: Path, catalogue_entries) -> None:
    no_comma = tampered(tmp_path, catalogue_entries, FULL_DATASET,
                        lambda lines: [lines[0], lines[1].replace(b",\n", b"\n"), *lines[2:]])
    assert no_comma == [f"{FULL_DATASET}: unreadable: an entry line does not end with a comma"]
    swapped = tampered(tmp_path, catalogue_entries, FULL_DATASET,
                       lambda lines: [lines[0], lines[2], lines[1], *lines[3:]])
    assert f"{FULL_DATASET}: apis/1: apis must be sorted by id with no id twice" in swapped


def test_version_counts_releases_of_the_same_day(tmp_path: Path, catalogue_entries) -> None:
    out = tmp_path / "public"
    day = date(2026, 11, 21)
    assert next_version(out, day) == "2.0.0+20261121.1"
    write_release(out, release(catalogue_entries, next_version(out, day)), CATEGORIES)
    assert next_version(out, day) == "2.0.0+20261121.2"
    assert next_version(out, date(2026, 11, 22)) == "2.0.0+20261122.1"


def test_version_follows_kept_folders_of_either_name(tmp_path: Path) -> None:
    """A kept folder names its version with `_` for `+`, or, from before, with `+` itself."""
    out = tmp_path / "public"
    day = date(2026, 11, 21)
    (out / RELEASES_DIR / "2.0.0_20261121.3").mkdir(parents=True)
    assert next_version(out, day) == "2.0.0+20261121.4"
    (out / RELEASES_DIR / "2.0.0+20261121.5").mkdir()
    (out / RELEASES_DIR / "2.0.0_20261122.9").mkdir()
    assert next_version(out, day) == "2.0.0+20261121.6"


def test_a_streamed_release_equals_the_built_one(tmp_path: Path, catalogue_entries) -> None:
    ordered = sorted(catalogue_entries, key=lambda api: api["id"])
    total = stream_release(tmp_path / "public", iter(ordered), CATEGORIES, "2.0.0+20261121.1",
                           NOW, "https://directory.test")
    built = release(catalogue_entries)
    assert total == len(catalogue_entries)
    assert {path: (tmp_path / "public" / path).read_bytes() for path in built} == built


def test_a_stream_out_of_id_order_leaves_the_old_release(
    tmp_path: Path, catalogue_entries
) -> None:
    out = write_release(tmp_path / "public", release(catalogue_entries), CATEGORIES)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    backwards = sorted(catalogue_entries, key=lambda api: api["id"], reverse=True)
    with pytest.raises(EntriesOutOfOrderError):
        stream_release(out, backwards, CATEGORIES, "2.0.0+20261121.2", NOW, "https://d.test")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert staging_folders(out) == []


@pytest.fixture
def stored_catalogue(tmp_path: Path) -> Iterator[Session]:
    """The real catalogue ingested into a SQLite file."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ingested_session(url, REPO / "data" / "entries") as session:
        yield session


def test_publish_release_streams_the_store(tmp_path: Path, stored_catalogue) -> None:
    out = tmp_path / "public"
    record = publish_release(stored_catalogue, out, "https://directory.test", CATEGORIES,
                             NOW).release
    contents = [(row.id, row.content) for row in active_entries(stored_catalogue)]
    expected = release(assemble_entries(contents, as_of=NOW.date()), record.version)
    on_disk = read_catalog([REPO / "data" / "entries"]).entries
    assert record.total_apis == len(contents) == len(on_disk)
    expected.pop(NOT_FOUND_PAGE)  # the release's pages draw their own over the bare one
    assert {path: (out / path).read_bytes() for path in expected} == expected


def test_a_database_that_sorts_ids_its_own_way_is_read_in_code_point_order(
    postgres_server: str, write_entry, data_dir: Path,
) -> None:
    """A PostgreSQL database whose collation ignores punctuation (as glibc's en_US.UTF-8 does)
    sorts `openai` before `open-meteo`; the release reads the entries in code-point order
    all the same, the order it streams them in."""
    from sqlalchemy import text

    from pipeline.release.publish import _active_contents
    from tests.postgres_server import PUNCTUATION_IGNORED, scratch_database

    ids = ["openai", "open-meteo", "open-ai2", "a0-api"]
    for entry_id in ids:
        write_entry(make_entry(id=entry_id))
    with (
        scratch_database(postgres_server, PUNCTUATION_IGNORED) as url,
        ingested_session(url, data_dir / "entries") as session,
    ):
        by_server = session.exec(text("SELECT id FROM entry ORDER BY id")).scalars().all()
        assert by_server == ["a0-api", "openai", "open-ai2", "open-meteo"]
        assert [entry_id for entry_id, _ in _active_contents(session)] == sorted(ids)


def test_a_release_is_staged_in_the_release_before_last_its_entry_files_written_in_place(
    tmp_path: Path, stored_catalogue
) -> None:
    """From the third publish on, a release is staged in the spare (the release before last):
    its entry documents, pages and Markdown overwrite the files of the same entries in place
    (their inodes kept), those of an entry gone are removed, and the history the live release
    shares by hard links is never written through. The release is valid and whole."""
    out = tmp_path / "public"

    def publish(hours: int) -> str:
        version = publish_release(stored_catalogue, out, "https://directory.test", CATEGORIES,
                                  NOW + timedelta(hours=hours)).release.version
        for thread in threading.enumerate():
            if thread.name == "apidir-remove-retired":
                thread.join(timeout=60)
        return version

    first = publish(0)
    kept = [entry_document("openai"), entry_page("openai")]
    inodes = [(out / path).stat().st_ino for path in kept]
    first_dataset = (out / FULL_DATASET).read_bytes()
    publish(1)
    assert len(side_folders(out, "spare")) == 1 and side_folders(out, "retired") == []
    gone = stored_catalogue.get(EntryRow, "frankfurter")
    gone.retired_at = NOW
    stored_catalogue.commit()
    publish(2)
    assert [(out / path).stat().st_ino for path in kept] == inodes
    # What the spare held besides (its datasets, its history) was moved aside and deleted.
    assert side_folders(out, "retired") == [] and len(side_folders(out, "spare")) == 1
    assert not (out / entry_document("frankfurter")).exists()
    assert not (out / entry_page("frankfurter")).exists()
    assert (out / release_folder(first) / "apis.json").read_bytes() == first_dataset
    assert validate_release(out, CATEGORIES) == []
    ids = {row.id for row in active_entries(stored_catalogue)}
    assert {path.stem for path in (out / ENTRY_DOCUMENTS).iterdir()} == ids
    assert {path.name for path in (out / "apis").iterdir()} == {
        f"{entry_id}.{suffix}" for entry_id in ids for suffix in ("html", "md")}


def test_a_release_broken_everywhere_lists_a_bounded_number_of_problems(
    tmp_path: Path, catalogue_entries
) -> None:
    broken = [dict(api, color="not-a-colour") for api in catalogue_entries]
    with pytest.raises(ReleaseValidationError) as failure:
        write_release(tmp_path / "public", release(broken), CATEGORIES)
    problems = failure.value.problems
    assert problems[-1] == f"{FULL_DATASET}: more problems, not listed"
    assert len(problems) <= MAX_PROBLEMS_PER_FILE + 4
    assert all("color" in p for p in problems[:-1])


def test_provenance_is_published_and_flagged_stale_past_its_age(
    tmp_path: Path, write_entry, data_dir: Path
) -> None:
    from tests.conftest import make_entry

    write_entry(make_entry(id="fresh", verified="2026-11-01"), name="fresh")
    write_entry(make_entry(id="old", verified="2026-01-02"), name="old")
    write_entry(make_entry(id="undated", verified=None), name="undated")
    with ingested_session(f"sqlite:///{tmp_path / 'apidir.db'}", data_dir / "entries") as session:
        publish_release(session, tmp_path / "public", "https://directory.test", CATEGORIES,
                        NOW, stale_days=180)
    published = {a["id"]: a for a in read(tmp_path / "public", FULL_DATASET)["apis"]}
    assert published["fresh"]["provenance"] == {
        "verified": "2026-11-01", "sources": ["https://docs.example.com/api"], "stale": False}
    assert published["old"]["provenance"]["stale"] is True  # 323 days before NOW
    assert published["undated"]["provenance"] == {
        "verified": None, "sources": ["https://docs.example.com/api"], "stale": True}
    page = (tmp_path / "public" / "apis" / "old.html").read_text()
    assert "stale: facts due for a re-check" in page and "2026-01-02" in page


def test_validate_stale_lists_entries_past_their_age(
    write_entry, data_dir: Path, settings_env: dict[str, str]
) -> None:
    import os
    import subprocess
    import sys

    from tests.conftest import make_entry

    write_entry(make_entry(id="fresh", verified="2099-01-01"), name="fresh")
    write_entry(make_entry(id="old", verified="2020-01-02"), name="old")
    write_entry(make_entry(id="undated", verified=None), name="undated")
    write_entry(make_entry(id="year-one", verified="0001-01-01"), name="year-one")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", "--stale"],
                          cwd=REPO, env=os.environ | settings_env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    said = [re.sub(r", [0-9,]+ days ago", ", N days ago", line.split(": ", 1)[1].split(" (")[0])
            for line in lines[1:-1]]  # the days counted from the command's own today (UTC)
    assert said == ["entry undated: never verified",  # the undated first, then the oldest
                    "entry year-one: verified 0001-01-01, N days ago",
                    "entry old: verified 2020-01-02, N days ago"]
    assert lines[-1] == "3 stale entries" and "fresh" not in done.stdout


def test_each_endpoint_is_published_with_its_own_status(
    tmp_path: Path, write_entry, data_dir: Path
) -> None:
    from pipeline.contract import EndpointStatus
    from pipeline.judging.present import Presented
    from tests.conftest import make_entry

    write_entry(make_entry())
    presented = Presented(endpoints={"example-weather": {
        0: EndpointStatus(state="live", http_status=200, response_time_ms=120,
                          checked_at=NOW).model_dump(mode="json"),
        2: EndpointStatus(note="path has placeholders").model_dump(mode="json"),
    }})
    with ingested_session(f"sqlite:///{tmp_path / 'apidir.db'}", data_dir / "entries") as session:
        publish_release(session, tmp_path / "public", "https://directory.test", CATEGORIES,
                        NOW, presented)
    [api] = read(tmp_path / "public", FULL_DATASET)["apis"]
    first, second, third = api["endpoints"]
    assert first["status"]["state"] == "live" and first["status"]["httpStatus"] == 200
    assert "status" not in second  # nothing known of it: published as curated
    assert third["status"] == {"state": "unchecked", "httpStatus": None, "responseTimeMs": None,
                               "checkedAt": None, "reason": None,
                               "note": "path has placeholders", "failure": None}
    page = (tmp_path / "public" / "apis" / "example-weather.html").read_text()
    assert "not probed: path has placeholders" in page and "HTTP 200, 120 ms" in page


def ingested_settings() -> Settings:
    """The settings of `settings_env`, once the store ingested the entries written."""
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    return settings


def publish_from_store(settings: Settings) -> Path:
    """Score the store's entries from their history and publish them now; the output folder."""
    now = datetime.now(UTC)
    stages.publish_now(settings, stages.score_entries_now(settings, now), now)
    return settings.output_dir


def published_endpoints(out: Path, entry_id: str) -> dict[str, list[dict]]:
    """The entry's endpoints as each JSON file of the release in `out` holds them: the full
    dataset, its category's file and its own document."""
    listed = {path: read(out, path)["apis"] for path in (FULL_DATASET, category_file("weather"))}
    endpoints = {path: next(api for api in apis if api["id"] == entry_id)["endpoints"]
                 for path, apis in listed.items()}
    endpoints[entry_document(entry_id)] = read(out, entry_document(entry_id))["api"]["endpoints"]
    return endpoints


async def test_operations_sharing_a_method_and_path_each_show_their_target_s_status(
    https_provider: FakeServer, write_entry, settings_env: dict[str, str]
) -> None:
    """Operations listed with the same method and path (one path taking several queries) are
    one probe target, probed once a run: each of them is published with that target's status,
    in every file that holds the entry, and the score counts every operation listed."""
    base = https_provider.url("/v1")
    https_provider.routes["/v1/search"] = https_provider.routes["/ok"]
    write_entry(make_entry(baseUrl=base, sampleRequest=f'curl "{base}/search?q=rain"',
                           endpoints=[
        {"method": "GET", "path": "/search", "description": "Search by place."},
        {"method": "GET", "path": "/search", "description": "Search by station."},
        {"method": "POST", "path": "/query", "description": "Query: forecast."},
        {"method": "POST", "path": "/query", "description": "Query: alerts."},
    ]))
    settings = ingested_settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    await stages.probe_entries(settings, run_id)
    assert https_provider.hits["/v1/search"] == 1

    out = publish_from_store(settings)
    for path, endpoints in published_endpoints(out, "example-weather").items():
        by_search, by_station, forecast, alerts = (endpoint["status"] for endpoint in endpoints)
        assert (by_search["state"], by_search["httpStatus"]) == ("live", 200), path
        assert by_station == by_search, path
        assert (forecast["state"], forecast["note"]) == ("unchecked", "method is POST"), path
        assert alerts == forecast, path
    [api] = read(out, FULL_DATASET)["apis"]
    assert api["builderScore"]["evidence"]["depth"]["endpoints"] == 4
    markdown = (out / "apis" / "example-weather.md").read_text()
    assert "Search by station. Status: Live, HTTP 200" in markdown
    assert "Query: alerts. Status: Not checked, not probed: method is POST." in markdown
    page = (out / "apis" / "example-weather.html").read_text()
    assert page.count("HTTP 200") >= 2 and page.count("not probed: method is POST") == 2


def test_an_endpoint_the_prober_never_calls_says_why_before_any_probe_run(
    write_entry, settings_env: dict[str, str]
) -> None:
    """A new store, or probing off: no run has planned the entry yet, and an endpoint that no
    run would call is published with the prober's reason all the same."""
    write_entry(make_entry())  # GET /forecast, GET /current, GET /stations/{stationId}
    write_entry(make_entry(id="example-alerts", name="Example Alerts", endpoints=[
        {"method": "GET", "path": "/alerts", "description": "Active alerts."},
        {"method": "POST", "path": "/alerts", "description": "Subscribe to alerts."}],
        sampleRequest='curl "https://api.example.com/v1/alerts"'))
    out = publish_from_store(ingested_settings())
    for path, (forecast, _, station) in published_endpoints(out, "example-weather").items():
        assert (forecast["status"]["state"], forecast["status"]["note"]) == ("unchecked", None)
        assert (station["status"]["state"], station["status"]["note"]) == (
            "unchecked", "path has placeholders"), path
    for path, endpoints in published_endpoints(out, "example-alerts").items():
        assert [e["status"]["note"] for e in endpoints] == [None, "method is POST"], path
    markdown = (out / "apis" / "example-alerts.md").read_text()
    assert "Subscribe to alerts. Status: Not checked, not probed: method is POST." in markdown


@pytest.mark.parametrize(("field", "value", "where"), [
    ("endpoints", {0: {"state": "live", "httpStatus": 42}}, "endpoints/0/status/httpStatus"),
    ("https", {"enabled": True, "certDaysLeft": "soon"}, "https/certDaysLeft"),
    ("uptime", {"last1d": 1.5, "last7d": None, "last30d": None}, "uptime/last1d"),
    ("status", {"state": "maybe"}, "status/state"),
], ids=["endpoint status", "https", "uptime", "status"])
def test_a_presented_value_outside_the_contract_fails_the_release_before_its_swap(
    tmp_path: Path, write_entry, data_dir: Path, field: str, value: dict, where: str
) -> None:
    """The score stage hands its values over in their JSON form, unchecked: one outside the
    contract (a bug) fails the release where it is published, naming the entry and field,
    and the release being served stays as it was."""
    from pipeline.judging.present import Presented
    from tests.conftest import make_entry

    write_entry(make_entry())
    out = tmp_path / "public"
    plural = {"status": "statuses", "uptime": "uptimes"}.get(field, field)
    with ingested_session(f"sqlite:///{tmp_path / 'apidir.db'}", data_dir / "entries") as session:
        publish_release(session, out, "https://directory.test", CATEGORIES, NOW, Presented())
        before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
        with pytest.raises(ReleaseValidationError) as failure:
            publish_release(session, out, "https://directory.test", CATEGORIES, NOW,
                            Presented(**{plural: {"example-weather": value}}))
    assert any("example-weather" in problem and where in problem
               for problem in failure.value.problems), failure.value.problems
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def store_refused_value(settings: Settings, entry_id: str, **values: str) -> None:
    """Write values into an entry's stored content that the release's check refuses, as a
    version of the product before its stricter rules, or a hand in the store, left them."""
    from pipeline.store.tables import engine_for, session_scope

    with session_scope(engine_for(settings.database_url)) as session:
        row = session.get(EntryRow, entry_id)
        row.content = row.content | values
        session.add(row)


def test_a_stored_entry_the_release_refuses_is_left_out_and_the_others_published(
    write_entry, settings_env: dict[str, str]
) -> None:
    """One stored entry holds a base address the release's `format: uri` check refuses: the
    release publishes every other entry, leaves it out of every file and count, and the run's
    record names its id, file and field."""
    from pipeline.operations import stages
    from pipeline.release.layout import LLMS_TXT, category_markdown
    from pipeline.store.tables import PipelineRun, engine_for, session_scope, start_run

    for entry_id in ("alpha-weather", "bad-weather", "zeta-weather"):
        write_entry(make_entry(id=entry_id, name=entry_id.replace("-", " ").title()))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    store_refused_value(settings, "bad-weather", baseUrl="https://api.example.com/caf\u00e9",
                        docsUrl="https://api.example.com/%zz")
    now = datetime.now(UTC)
    published, _ = stages.publish_now(settings, stages.score_entries_now(settings, now), now,
                                      run_id)
    out = settings.output_dir
    kept = ["alpha-weather", "zeta-weather"]
    dataset = read(out, FULL_DATASET)
    assert [api["id"] for api in dataset["apis"]] == kept and dataset["meta"]["totalAPIs"] == 2
    assert [api["id"] for api in read(out, category_file("weather"))["apis"]] == kept
    assert [api["id"] for api in read(out, SEARCH_INDEX)["apis"]] == kept
    index = {c["id"]: c["count"] for c in read(out, CATEGORY_INDEX)["categories"]}
    assert index["weather"] == 2 and sum(index.values()) == 2
    counts = read(out, "api/releases.json")["releases"][0]["counts"]
    assert counts["total"] == 2 and sum(counts["byState"].values()) == 2
    assert not (out / entry_document("bad-weather")).exists()
    assert not (out / entry_page("bad-weather")).exists()
    assert not (out / "apis" / "bad-weather.md").exists()
    for text in ((out / LLMS_TXT).read_text(), (out / category_markdown("weather")).read_text(),
                 (out / "categories" / "weather.html").read_text(),
                 (out / "changes.atom").read_text(),
                 (out / "api" / "changes.json").read_text()):
        assert "bad-weather" not in text and "alpha-weather" in text
    assert validate_release(out, CATEGORIES) == []
    file = str(settings.entries_dir / "weather" / "bad-weather.yaml")
    told, = published.left_out
    assert str(told).startswith(f"entry bad-weather ({file}): field baseUrl: holds U+00E9")
    assert "field docsUrl: holds a '%' not followed by two hex digits" in str(told)
    assert "(1 left out: the release's check refused them)" in str(published)
    with session_scope(engine_for(settings.database_url)) as session:
        run = session.get(PipelineRun, run_id)
        assert run.entries_published == 2 and run.release_version == published.release.version
        problem, = (error for error in run.errors if error["entry"] == "bad-weather")
    assert problem["file"] == file and problem["field"] == "baseUrl, docsUrl"
    assert problem["rule"] == "release-contract"
    assert problem["message"].endswith("; left out of the release")


def test_an_entry_whose_successor_is_left_out_is_published_without_naming_it(
    write_entry, settings_env: dict[str, str]
) -> None:
    """Two deprecated entries, one before and one after it in id order, name a successor the
    release's check refuses: the successor is left out, and both are published with no
    successor in their lifecycle or deprecation (the contract's successor is an entry the
    directory lists), so no file of the release names it and no page links to it."""
    from pipeline.release.layout import LLMS_TXT, category_markdown, entry_markdown
    from pipeline.store.tables import engine_for, session_scope, start_run

    deprecated = {"on": "2026-10-01", "successor": "middle-weather", "note": "moved"}
    for entry_id in ("alpha-weather", "zeta-weather"):
        write_entry(make_entry(id=entry_id, name=entry_id.replace("-", " ").title(),
                               deprecated=deprecated))
    for entry_id in ("middle-weather", "other-weather"):
        write_entry(make_entry(id=entry_id, name=entry_id.replace("-", " ").title()))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    store_refused_value(settings, "middle-weather", baseUrl="https://api.example.com/%zz")
    now = datetime.now(UTC)
    published, _ = stages.publish_now(settings, stages.score_entries_now(settings, now), now,
                                      run_id)
    assert [item.entry for item in published.left_out] == ["middle-weather"]
    out = settings.output_dir
    kept = ["alpha-weather", "other-weather", "zeta-weather"]
    assert [api["id"] for api in read(out, FULL_DATASET)["apis"]] == kept
    for entry_id in ("alpha-weather", "zeta-weather"):
        api = read(out, entry_document(entry_id))["api"]
        assert api["lifecycle"]["state"] == "deprecated" and "successor" not in api["lifecycle"]
        assert api["deprecated"] == {"on": "2026-10-01", "note": "moved"}
        for path in (entry_page(entry_id), entry_markdown(entry_id)):
            assert "middle-weather" not in (out / path).read_text()
    for path in (FULL_DATASET, category_file("weather"), SEARCH_INDEX, LLMS_TXT,
                 category_markdown("weather"), "categories/weather.html"):
        assert "middle-weather" not in (out / path).read_text(), path
    assert validate_release(out, CATEGORIES) == []


def test_a_large_release_checks_its_entries_in_worker_processes_as_it_writes_them(
    tmp_path: Path, catalogue_entries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past `PARALLEL_CHECK_FROM` bytes the entries are checked in worker processes, a chunk at
    a time, in order: the same entry is left out, the same release written."""
    ordered = sorted(catalogue_entries, key=lambda api: api["id"])
    broken = ordered[len(ordered) // 2]["id"]
    entries = [dict(api, baseUrl="https://api.example.com/%zz") if api["id"] == broken
               else api for api in ordered]
    found: dict[str, list] = {}

    def publish(folder: str) -> bytes:
        def told(left_out: list) -> list:
            found[folder] = [str(item) for item in left_out]
            return left_out

        out = tmp_path / folder
        stream_release(out, iter(entries), CATEGORIES, "2.0.0+20261121.1", NOW,
                       "https://directory.test", left_out=told)
        return (out / FULL_DATASET).read_bytes()

    here = publish("here")
    monkeypatch.setattr(publish_module, "PARALLEL_CHECK_FROM", 4096)
    monkeypatch.setattr(publish_module, "CHECK_CHUNK", 7)
    assert publish("in-workers") == here
    assert found["here"] == found["in-workers"] == [
        f"entry {broken}: field baseUrl: holds a '%' not followed by two hex digits: write a "
        "'%' itself as %25; left out of the release"]
