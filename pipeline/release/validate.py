"""The release checked against the contract before the swap.

The datasets (`apis.json`, one file per category, the search index) are compact JSON with one
entry per line, so a release of 100,000 entries is validated as a stream of lines: every entry
is checked once (JSON Schema and the pydantic model) in the full dataset, each category file is
checked to hold exactly the full dataset's lines of its category, the search index to hold
each entry's search item (itself checked), and each entry document its entry's line. In a
large release, each entry's own checks run in worker processes, one per core, beside the
matching of its line in the other files (`PARALLEL_CHECK_FROM`). A release written from the
store runs them as it writes each entry instead (`entry_faults`), leaving out one they refuse,
and its validation checks the rest.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, nullcontext
from functools import cache
from itertools import islice, repeat
from pathlib import Path
from typing import Any, TypeAlias

import orjson
from pydantic import BaseModel, ValidationError

from pipeline.catalogue.entries import Category
from pipeline.contract import (
    SLUG_PATTERN,
    APIEntry,
    CategoryDataset,
    CategoryIndex,
    CategoryMeta,
    ChangeLog,
    EntryDocument,
    ErrorBody,
    FullDataset,
    Meta,
    ReleaseIndex,
    SchemaValidator,
    SearchIndex,
    SearchItem,
)
from pipeline.processes import in_order, worker_pool
from pipeline.release.feed import check_feed
from pipeline.release.files import dataset_lines
from pipeline.release.hosting import (
    HEADERS_FILE,
    NOT_FOUND_JSON,
    REDIRECTS_FILE,
    HeaderRule,
    immutable_patterns,
    parse_headers_file,
    parse_redirects_file,
)
from pipeline.release.layout import (
    CATEGORY_INDEX,
    CHANGES,
    CHANGES_FEED,
    DATASET_HEAD,
    DATASET_META,
    ENTRY_DOCUMENTS,
    ENTRY_HEAD,
    ENTRY_META,
    FULL_DATASET,
    NOT_FOUND_PAGE,
    OPENAPI,
    RELEASE_INDEX,
    SEARCH_INDEX,
    category_file,
    entry_document,
)
from pipeline.release.openapi import component_schemas
from pipeline.release.search import search_item

MAX_PROBLEMS_PER_FILE = 100
# From a full dataset this large on (some 5,000 entries), its entries' own checks run in
# worker processes, a chunk of lines at a time.
PARALLEL_CHECK_FROM = 32 << 20
CHECK_CHUNK = 200


class ReleaseValidationError(RuntimeError):
    """A staged release broke the contract; the live release was left untouched."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("release failed validation:\n  " + "\n  ".join(problems))
        self.problems = problems


_MODELS: dict[str, type[BaseModel]] = {
    "FullDataset": FullDataset,
    "CategoryDataset": CategoryDataset,
    "CategoryIndex": CategoryIndex,
    "APIEntry": APIEntry,
    "Meta": Meta,
    "CategoryMeta": CategoryMeta,
    "ReleaseIndex": ReleaseIndex,
    "ChangeLog": ChangeLog,
    "SearchIndex": SearchIndex,
    "SearchItem": SearchItem,
    "EntryDocument": EntryDocument,
    "ErrorBody": ErrorBody,
}
_SLUG = re.compile(SLUG_PATTERN)


@cache
def _schema_validators() -> dict[str, Any]:
    """Compiled JSON Schema validators (jsonschema-rs) of the published component schemas:
    the validator whose `format: uri` check the contract's URL rule runs too."""
    defs = component_schemas()
    validators = {}
    for name in _MODELS:
        schema = {"$ref": f"#/$defs/{name}", "$defs": defs}
        schema = json.loads(json.dumps(schema).replace("#/components/schemas/", "#/$defs/"))
        validators[name] = SchemaValidator(schema, validate_formats=True)
    return validators


# (where, what is wrong, which check) of each problem of a document
Faults: TypeAlias = list[tuple[str, str, str]]


def _faults(name: str, document: Any, where: str = "") -> Faults:
    """(where, what is wrong, which check: `schema` or `contract`) of each JSON Schema and
    pydantic problem of one document (or part, at `where`)."""
    found = []
    validator = _schema_validators()[name]
    if not validator.is_valid(document):
        for error in validator.iter_errors(document):
            at = "/".join(str(p) for p in (*where.split("/"), *error.instance_path) if p != "")
            found.append((at or "(root)", error.message, "schema"))
    try:
        _MODELS[name].model_validate(document)
    except ValidationError as exc:
        for error in exc.errors():
            at = "/".join(str(p) for p in (*where.split("/"), *error["loc"]) if p != "")
            found.append((at or "(root)", error["msg"], "contract"))
    return found


def _check_document(
    name: str, path: str, document: Any, problems: list[str], where: str = ""
) -> None:
    """JSON Schema and pydantic problems of one document (or part, at `where`) of a file."""
    problems += _told(path, _faults(name, document, where))


def _told(path: str, faults: Faults) -> list[str]:
    """`_faults` as the problems of the file at `path`."""
    return [f"{path}: {at}: {message} [{check}]" for at, message, check in faults]


def _entry_checked(entry: Any, where: str = "") -> tuple[Faults, Faults | None]:
    """An entry's own faults (`_faults`: JSON Schema and the model), and its search item's,
    None where the entry has faults (its item is not made of an invalid entry)."""
    faults = _faults("APIEntry", entry, where)
    return faults, None if faults else _faults("SearchItem", search_item(entry), where)


class _Malformed(ValueError):
    """A dataset file that is not in the one-entry-per-line layout."""


def _dataset_lines(handle: Any) -> Iterator[tuple[bool, bytes]]:
    """(True, entry line) for each entry of a dataset file, then (False, meta); the framing
    (head, commas, meta, end) is checked, so valid lines make a valid JSON document."""
    if handle.readline() != DATASET_HEAD:
        raise _Malformed(f"does not start with {DATASET_HEAD!r}")
    previous: bytes | None = None
    for line in handle:
        if not line.endswith(b"\n"):
            raise _Malformed("does not end with a newline")
        if line.startswith(DATASET_META):
            if previous is not None:
                if previous.endswith(b","):
                    raise _Malformed("a comma follows the last entry")
                yield True, previous
            if not line.endswith(b"}\n") or handle.read(1):
                raise _Malformed("text follows the meta object")
            yield False, line[len(DATASET_META) : -2]
            return
        if previous is not None:
            if not previous.endswith(b","):
                raise _Malformed("an entry line does not end with a comma")
            yield True, previous[:-1]
        previous = line[:-1]
    raise _Malformed("ends before its meta")


def _parse(data: bytes, path: str, where: str, problems: list[str]) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        problems.append(f"{path}: {where}: not JSON: {exc}")
        return None


class _FollowingReader:
    """A dataset file read alongside the full dataset, line for line with what it derives from
    it; its first difference is its one problem (`differs`)."""

    differs = "apis differ"

    def __init__(self, folder: Path, path: str, stack: ExitStack) -> None:
        self.path = path
        self.problem: str | None = None
        self.count = 0
        try:
            self.lines = _dataset_lines(stack.enter_context((folder / self.path).open("rb")))
        except OSError as exc:
            self.problem = f"{self.path}: unreadable: {exc}"

    def next_part(self) -> tuple[bool, bytes] | None:
        if self.problem is not None:
            return None
        try:
            return next(self.lines, None)
        except _Malformed as exc:
            self.problem = f"{self.path}: unreadable: {exc}"
            return None

    def expect(self, data: bytes) -> None:
        """The file must hold `data` as its next entry line."""
        part = self.next_part()
        if self.problem is None and part != (True, data):
            self.problem = f"{self.path}: {self.differs}"
        self.count += 1

    def end_meta(self, problems: list[str]) -> Any:
        """The file must end here: its meta (parsed), or None after reporting its problem."""
        part = self.next_part()
        if self.problem is None and (part is None or part[0]):
            self.problem = f"{self.path}: {self.differs}"
        if self.problem is not None:
            problems.append(self.problem)
            return None
        return _parse(part[1], self.path, "meta", problems)


class _SearchReader(_FollowingReader):
    """`api/search.json`: each line must be the search item of the full dataset's entry at the
    same place, and each item valid."""

    differs = f"apis differ from the search items of {FULL_DATASET}'s entries"

    def __init__(self, folder: Path, stack: ExitStack) -> None:
        super().__init__(folder, SEARCH_INDEX, stack)

    def expect_item(self, entry: dict, problems: list[str], checked: list[str] | None) -> None:
        """The entry's search item must be next; `checked` are the problems of the item itself
        (`_line_problems`), None where its entry is invalid (already reported)."""
        problems += checked or ()
        self.expect(orjson.dumps(search_item(entry), option=orjson.OPT_SORT_KEYS))

    def finish(self, full_meta: dict, problems: list[str]) -> None:
        meta = self.end_meta(problems)
        if meta is None:
            return
        _check_document("Meta", self.path, meta, problems, "meta")
        if meta != full_meta:
            problems.append(f"{self.path}: meta differs from {FULL_DATASET}'s")


class _EntryDocuments:
    """`api/apis/{id}.json` checked alongside the full dataset: each must hold its entry's line
    and the one meta of every entry document (the full dataset's), the first is checked whole
    against the schema, and the folder holds no other file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._root = os.fspath(folder)  # joined as text: a Path per document cost 20 µs
        self.count = 0
        self.meta: bytes | None = None

    def expect(self, entry_id: Any, data: bytes, problems: list[str]) -> None:
        if not isinstance(entry_id, str) or not _SLUG.fullmatch(entry_id):
            return  # no file can be named by it; the entry's own check reports the id
        path = entry_document(entry_id)
        try:
            with open(os.path.join(self._root, path), "rb") as file:
                document = file.read()
        except OSError as exc:
            problems.append(f"{path}: unreadable: {exc}")
            return
        self.count += 1
        head = ENTRY_HEAD + data + ENTRY_META
        if not document.startswith(head) or not document.endswith(b"}\n"):
            problems.append(f"{path}: api differs from its entry in {FULL_DATASET}")
            return
        meta = document[len(head) : -2]
        if self.meta is None:
            self.meta = meta
            _check_document("EntryDocument", path, _parse(document, path, "(root)", problems),
                            problems)
        elif meta != self.meta:
            problems.append(f"{path}: meta differs from {FULL_DATASET}'s")

    def finish(self, full_meta: dict, problems: list[str]) -> None:
        if self.meta is not None and orjson.loads(self.meta) != full_meta:
            problems.append(f"{ENTRY_DOCUMENTS}: meta differs from {FULL_DATASET}'s")
        try:
            with os.scandir(self.folder / ENTRY_DOCUMENTS) as found:
                held = sum(1 for _ in found)
        except FileNotFoundError:
            held = 0
        if held > self.count:
            problems.append(f"{ENTRY_DOCUMENTS}: {held - self.count} file(s) that are no "
                            "entry's document")


class _CategoryReader(_FollowingReader):
    """A category file read alongside the full dataset: each of its entry lines must be the
    next line of its category in the full dataset."""

    differs = f"apis differ from {FULL_DATASET} filtered by category"

    def __init__(self, folder: Path, category: Category, stack: ExitStack) -> None:
        self.category = category
        super().__init__(folder, category_file(category.id), stack)

    def finish(self, full_meta: dict, problems: list[str]) -> None:
        """The file must end here with a meta that matches the full dataset's."""
        meta = self.end_meta(problems)
        if meta is None:
            return
        _check_document("CategoryMeta", self.path, meta, problems, "meta")
        if not isinstance(meta, dict):
            return
        if meta.get("count") != self.count:
            problems.append(f"{self.path}: meta: meta.count must equal the number of apis")
        if meta.get("category") != self.category.id:
            problems.append(f"{self.path}: meta: meta.category must be {self.category.id!r}")
        if meta.get("version") != full_meta.get("version"):
            problems.append(f"{self.path}: meta.version differs from {FULL_DATASET}")


def _line_problems(lines: list[tuple[int, bytes]]) -> list[tuple[list[str], list[str] | None]]:
    """The contract problems of entry lines of the full dataset, each with its place: the
    entry's (JSON Schema and the model), and its search item's, None where the entry is invalid.
    Each entry's own checks, apart from matching its line in the other files: run in worker
    processes for a large release."""
    found = []
    for count, data in lines:
        try:
            entry = orjson.loads(data)
        except orjson.JSONDecodeError:
            entry = None  # reported by the reader of the lines, then checked as it is
        own, item_faults = _entry_checked(entry, f"apis/{count}")
        found.append((_told(FULL_DATASET, own),
                      None if item_faults is None else _told(SEARCH_INDEX, item_faults)))
    return found


def entry_faults(lines: Sequence[bytes]) -> list[list[tuple[str, str]]]:
    """What the release's check refuses in each entry line, as (field, what is wrong): the
    entry's JSON Schema and model problems, else its search item's; empty where it passes.
    `stream_release` runs it on each entry as it writes it (in worker processes for a large
    release), so that an entry refused is left out of the release rather than failing it, and
    `validate_release` then skips it (`entries_checked`): each entry is checked once."""
    found = []
    for data in lines:
        faults, item_faults = _entry_checked(orjson.loads(data))
        faults = faults or [(f"{at} (search item)", message, check)
                            for at, message, check in item_faults or ()]
        by_field: dict[str, str] = {}
        for at, message, check in faults:  # the contract's words where both checks speak
            if at not in by_field or check == "contract":
                by_field[at] = message.removeprefix("Value error, ")
        found.append(list(by_field.items()))
    return found


def _entry_lines(path: Path) -> Iterator[tuple[list[tuple[int, bytes]]]]:
    """The entry lines of a full dataset with their places, a chunk at a time, read apart from
    the reader that checks its framing (`_dataset_lines`), which meets any break first."""
    lines, count = dataset_lines(path), 0
    while chunk := list(islice(lines, CHECK_CHUNK)):
        yield ([(count + n, data) for n, data in enumerate(chunk)],)
        count += len(chunk)


def _validate_datasets(folder: Path, categories: list[Category], problems: list[str],
                       entries_checked: bool = False) -> None:
    """One pass over `apis.json`: every entry checked against the schema and the model (unless
    `entries_checked`: each was as it was written, `entry_faults`), and matched with the next
    line of its category file and of the search index, and with its entry document; then
    every meta."""
    path = FULL_DATASET
    documents = _EntryDocuments(folder)
    large = (folder / path).stat().st_size >= PARALLEL_CHECK_FROM and not entries_checked
    with ExitStack() as stack:
        pool = stack.enter_context(worker_pool() if large else nullcontext())
        # Each entry line's own problems, in the order of the lines.
        checked: Iterator[tuple[list[str], list[str] | None]] = (
            repeat(([], [])) if entries_checked else
            (line for chunk in in_order(pool, _line_problems, _entry_lines(folder / path),
                                        ahead=8)
             for line in chunk))
        readers = {c.id: _CategoryReader(folder, c, stack) for c in categories}
        search = _SearchReader(folder, stack)
        handle = stack.enter_context((folder / path).open("rb"))
        meta: Any = None
        count, last_id, found = 0, None, len(problems)
        for is_entry, data in _dataset_lines(handle):
            if not is_entry:
                meta = _parse(data, path, "meta", problems)
                _check_document("Meta", path, meta, problems, "meta")
                break
            entry = _parse(data, path, f"apis/{count}", problems)
            entry_problems, item_problems = next(checked)
            problems += entry_problems
            entry = entry if isinstance(entry, dict) else {}
            entry_id = entry.get("id")
            if not isinstance(entry_id, str) or (last_id is not None and entry_id <= last_id):
                problems.append(f"{path}: apis/{count}: apis must be sorted by id with no id twice")
            else:
                last_id = entry_id
            reader = readers.get(entry.get("category"))
            if reader is None:
                problems.append(f"{path}: apis/{count}: category is not one of the release's")
            else:
                reader.expect(data)
            search.expect_item(entry, problems, item_problems)
            documents.expect(entry_id, data, problems)
            count += 1
            if len(problems) - found > MAX_PROBLEMS_PER_FILE:
                problems.append(f"{path}: more problems, not listed")
                return
        if isinstance(meta, dict) and meta.get("totalAPIs") != count:
            problems.append(f"{path}: meta: meta.totalAPIs must equal the number of apis")
        full_meta = meta if isinstance(meta, dict) else {}
        for reader in readers.values():
            reader.finish(full_meta, problems)
        search.finish(full_meta, problems)
        documents.finish(full_meta, problems)


def dataset_problems(folder: Path, categories: list[Category],
                     entries_checked: bool = False) -> list[str]:
    """The contract problems of the release's datasets alone (the full dataset, the category
    files, the search index, the entry documents): what a release is checked for before its
    history and pages are written. `entries_checked`: each entry's own check already ran
    (`entry_faults`), so the files are checked to agree with each other and the metas."""
    problems: list[str] = []
    try:
        _validate_datasets(folder, categories, problems, entries_checked)
    except (OSError, _Malformed) as exc:
        problems.append(f"{FULL_DATASET}: unreadable: {exc}")
    return problems


def _immutable_beyond_release(rules: Sequence[HeaderRule], folder: Path) -> list[str]:
    """The `_headers` rules that make a path immutable other than an asset file or a kept
    release folder of the release in `folder` (`hosting.immutable_patterns`)."""
    held = set(immutable_patterns(folder))
    return [f"{HEADERS_FILE}: {rule.pattern} is cached as immutable but is no asset or kept "
            "release folder of the release: a miss there would be kept for a year"
            for rule in rules if rule.pattern not in held
            and any(name.lower() == "cache-control" and "immutable" in value.lower()
                    for name, value in rule.headers)]


def host_file_problems(folder: Path) -> list[str]:
    """Problems of the files every release carries for its host, with or without pages: the
    `_headers` and `_redirects` a host reads, the JSON 404 body that `api/openapi.json`
    declares and the nginx config sends, and the `404.html` it sends for any other miss. A host
    rule leading to no file of the release is one: the host would answer a miss with a miss; so
    is an immutable rule for what the release does not hold for good: the host would have a
    client keep a miss there for a year."""
    problems = []
    for path, parse in ((HEADERS_FILE, parse_headers_file),
                        (REDIRECTS_FILE, parse_redirects_file)):
        try:
            rules = parse((folder / path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            continue
        if path == HEADERS_FILE:
            problems += _immutable_beyond_release(rules, folder)
        if path == REDIRECTS_FILE:
            problems += [f"{path}: {source} leads to {target}, which is no file of the release"
                         for source, target, _ in rules
                         if not (folder / target.lstrip("/")).is_file()]
    try:
        body = json.loads((folder / NOT_FOUND_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{NOT_FOUND_JSON}: unreadable: {exc}")
    else:
        _check_document("ErrorBody", NOT_FOUND_JSON, body, problems)
    if not (folder / NOT_FOUND_PAGE).is_file():
        problems.append(f"{NOT_FOUND_PAGE}: missing (hosts answer a miss outside api/ with it)")
    return problems


def validate_release(folder: Path, categories: list[Category],
                     entries_checked: bool = False) -> list[str]:
    """Every contract problem of the release in `folder` (empty when it is valid);
    `entries_checked` as for `dataset_problems`."""
    problems = dataset_problems(folder, categories, entries_checked)

    def load(path: str) -> Any:
        try:
            return json.loads((folder / path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            return None

    index = load(CATEGORY_INDEX)
    if index is not None:
        _check_document("CategoryIndex", CATEGORY_INDEX, index, problems)
    load(OPENAPI)
    problems += host_file_problems(folder)
    releases = load(RELEASE_INDEX) if (folder / RELEASE_INDEX).exists() else None
    if releases is not None:
        _check_document("ReleaseIndex", RELEASE_INDEX, releases, problems)
        for release in releases.get("releases", []):
            if not (folder / str(release.get("path", ""))).is_file():
                problems.append(f"{RELEASE_INDEX}: {release.get('path')} is missing")
    changes = load(CHANGES) if (folder / CHANGES).exists() else None
    if changes is not None:
        _check_document("ChangeLog", CHANGES, changes, problems)
    if (folder / CHANGES_FEED).exists():
        problems.extend(f"{CHANGES_FEED}: {problem}"
                        for problem in check_feed((folder / CHANGES_FEED).read_bytes(),
                                                  folder))
    return problems

