"""Publish: build the release documents and swap them in atomically.

The whole release is written to a staging folder beside the live one, every
file is validated against the contract, and only then is the staging folder
exchanged with the live one in a single rename. A failed validation or a crash
leaves the previous release as it was.

The datasets (`apis.json`, one file per category) are compact JSON with one entry
per line, so a release of 100,000 entries is built, written and validated as a
stream of lines: every entry is checked once (JSON Schema and the pydantic model)
in the full dataset, and each category file is checked to hold exactly the full
dataset's lines of its category.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any, get_args

import jsonschema_rs
import orjson
from pydantic import BaseModel, ValidationError
from sqlalchemy import Text, type_coerce
from sqlmodel import Session, col, select

from pipeline.catalog import Category
from pipeline.changes import Change
from pipeline.contract import (
    INTERFACE_VERSION,
    LICENSE,
    APIEntry,
    BuilderScore,
    CategoryDataset,
    CategoryIndex,
    CategoryMeta,
    ChangeLog,
    FullDataset,
    Meta,
    ReleaseIndex,
    Status,
    StatusState,
    Uptime,
)
from pipeline.openapi import component_schemas, render_openapi
from pipeline.store import EntryRow, ReleaseRow

FULL_DATASET = "api/apis.json"
CATEGORY_INDEX = "api/categories.json"
OPENAPI = "api/openapi.json"
RELEASES_DIR = "api/releases"
RELEASE_INDEX = "api/releases.json"
CHANGES = "api/changes.json"
DEFAULT_RELEASES_KEPT = 30
# A dataset file: this line, one entry per line (a comma ends all but the last), then the meta.
DATASET_HEAD = b'{"apis":[\n'
DATASET_META = b'],"meta":'
MAX_PROBLEMS_PER_FILE = 100


class ReleaseValidationError(RuntimeError):
    """A staged release broke the contract; the live release was left untouched."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("release failed validation:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass
class Presented:
    """The presented values of the entries, by id, as the probe and score stages computed them."""

    statuses: dict[str, Status] = field(default_factory=dict)
    scores: dict[str, BuilderScore] = field(default_factory=dict)
    uptimes: dict[str, Uptime] = field(default_factory=dict)


def category_file(category_id: str) -> str:
    return f"api/categories/{category_id}.json"


def render_json(document: Any) -> bytes:
    """Deterministic JSON: sorted keys, two-space indent, UTF-8, trailing newline."""
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _compact(document: Any) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def render_dataset(meta: Mapping[str, Any], entry_lines: list[bytes]) -> bytes:
    """A dataset file from its meta and its entries, each already rendered by `entry_line`."""
    parts = [DATASET_HEAD]
    for line in entry_lines:
        parts += (line, b",\n")
    if entry_lines:
        parts[-1] = b"\n"
    parts += (DATASET_META, _compact(meta), b"}\n")
    return b"".join(parts)


def entry_line(entry: Mapping[str, Any]) -> bytes:
    """One published entry as its line of a dataset file: compact JSON, sorted keys, UTF-8."""
    return _compact(entry)


def published_entry(
    content: Mapping[str, Any],
    status: Status | None = None,
    builder_score: BuilderScore | None = None,
    uptime: Uptime | None = None,
) -> dict[str, Any]:
    """One entry as published: the curated keys it sets plus every presented value."""
    entry = dict(content)
    entry["status"] = (status or Status()).model_dump(mode="json")
    entry["builderScore"] = builder_score.model_dump(mode="json") if builder_score else None
    entry["uptime"] = uptime.model_dump(mode="json") if uptime else None
    return entry


_VERSION_RE = re.compile(r"\+(\d{8})\.(\d+)$")


def next_version(output_dir: Path, day: date) -> str:
    """`2.0.0+<yyyymmdd>.<n>`: n counts the releases published to `output_dir` on that UTC day."""
    stamp = day.strftime("%Y%m%d")
    sequence = 1
    try:
        live = json.loads((output_dir / CATEGORY_INDEX).read_text(encoding="utf-8"))
        match = _VERSION_RE.search(live["meta"]["version"])
        if match and match.group(1) == stamp:
            sequence = int(match.group(2)) + 1
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return f"{INTERFACE_VERSION}+{stamp}.{sequence}"


def release_meta(version: str, generated: datetime, base_url: str, total: int) -> dict[str, Any]:
    """The `meta` of `apis.json` (and the base of every other file's), as JSON values."""
    meta = {
        "version": version,
        "generated": generated,
        "totalAPIs": total,
        "source": f"{base_url.rstrip('/')}/{FULL_DATASET}",
        "license": LICENSE,
    }
    return Meta.model_validate(meta).model_dump(mode="json")


def _category_meta(meta: dict[str, Any], category: Category, count: int) -> dict[str, Any]:
    return meta | {"category": category.id, "label": category.label, "count": count}


def _index_document(meta: dict[str, Any], counts: Mapping[str, int],
                    categories: list[Category]) -> bytes:
    summaries = [
        {"id": c.id, "label": c.label, "description": c.description, "count": counts[c.id]}
        for c in categories
    ]
    return render_json({"meta": meta, "categories": summaries})


def build_release(
    entries: Iterable[Mapping[str, Any]],
    categories: list[Category],
    version: str,
    generated: datetime,
    base_url: str,
) -> dict[str, bytes]:
    """Every file of a release, by path relative to the output folder.

    Each entry is rendered once, as it arrives, and its line is shared by the full dataset
    and its category file. (`stream_release` writes the same files without holding them.)
    """
    lines = sorted(
        ((entry["id"], entry["category"], entry_line(entry)) for entry in entries),
        key=lambda item: item[0],
    )
    meta = release_meta(version, generated, base_url, len(lines))
    files = {FULL_DATASET: render_dataset(meta, [line for _, _, line in lines])}
    by_category: dict[str, list[bytes]] = {category.id: [] for category in categories}
    for _, category_id, line in lines:
        by_category.setdefault(category_id, []).append(line)
    del lines
    for category in categories:
        members = by_category[category.id]
        files[category_file(category.id)] = render_dataset(
            _category_meta(meta, category, len(members)), members
        )
    counts = {category_id: len(members) for category_id, members in by_category.items()}
    files[CATEGORY_INDEX] = _index_document(meta, counts, categories)
    files[OPENAPI] = render_openapi().encode()
    return files


class EntriesOutOfOrderError(ValueError):
    """`stream_release` was given entries not in strictly ascending id order."""


class _DatasetWriter:
    """The full dataset and every category file, written line by line as entries arrive."""

    def __init__(self, folder: Path, categories: list[Category], stack: ExitStack) -> None:
        def open_dataset(path: str) -> Any:
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = stack.enter_context(target.open("wb", buffering=1 << 20))
            handle.write(DATASET_HEAD)
            return handle

        self.full = open_dataset(FULL_DATASET)
        self.by_category = {c.id: open_dataset(category_file(c.id)) for c in categories}
        self.counts = {c.id: 0 for c in categories}
        self.total = 0
        self.last_id: str | None = None

    def add(self, entry: Mapping[str, Any]) -> None:
        entry_id = entry["id"]
        if self.last_id is not None and entry_id <= self.last_id:
            raise EntriesOutOfOrderError(f"{entry_id!r} came after {self.last_id!r}")
        self.last_id = entry_id
        line = entry_line(entry)
        category_id = entry["category"]
        if category_id not in self.by_category:
            raise ValueError(f"entry {entry_id!r}: category {category_id!r} is not listed")
        handle = self.by_category[category_id]
        for target, earlier in ((self.full, self.total), (handle, self.counts[category_id])):
            if earlier:
                target.write(b",\n")
            target.write(line)
        self.total += 1
        self.counts[category_id] += 1

    def finish(self, meta: dict[str, Any], categories: list[Category]) -> None:
        ends = [(self.full, self.total, meta)]
        for c in categories:
            count = self.counts[c.id]
            ends.append((self.by_category[c.id], count, _category_meta(meta, c, count)))
        for handle, count, document_meta in ends:
            handle.write(b"\n" if count else b"")
            handle.write(DATASET_META + _compact(document_meta) + b"}\n")


# Completes a staged release once its datasets are written (pages, release history):
# called with the staging folder, the release's meta and its entry count per category.
Completion = Callable[[Path, dict[str, Any], Mapping[str, int]], None]


def stream_release(
    output_dir: Path,
    entries: Iterable[Mapping[str, Any]],
    categories: list[Category],
    version: str,
    generated: datetime,
    base_url: str,
    complete: Completion | None = None,
    carry: Iterable[str] = (),
) -> int:
    """Write a release from `entries` in ascending id order straight into the staging folder
    (never holding the files in memory), validate it, swap it in; returns the entry count.

    Raises EntriesOutOfOrderError (the live release untouched) if the order is broken.
    """
    total = 0

    def write(staging: Path) -> None:
        nonlocal total
        with ExitStack() as stack:
            writer = _DatasetWriter(staging, categories, stack)
            for entry in entries:
                writer.add(entry)
            total = writer.total
            meta = release_meta(version, generated, base_url, total)
            writer.finish(meta, categories)
        _write_file(staging, CATEGORY_INDEX, _index_document(meta, writer.counts, categories))
        _write_file(staging, OPENAPI, render_openapi().encode())
        if complete is not None:
            complete(staging, meta, writer.counts)

    _stage_and_swap(output_dir, categories, write, carry)
    return total


_MODELS: dict[str, type[BaseModel]] = {
    "FullDataset": FullDataset,
    "CategoryDataset": CategoryDataset,
    "CategoryIndex": CategoryIndex,
    "APIEntry": APIEntry,
    "Meta": Meta,
    "CategoryMeta": CategoryMeta,
    "ReleaseIndex": ReleaseIndex,
    "ChangeLog": ChangeLog,
}


@cache
def _schema_validators() -> dict[str, Any]:
    """Compiled JSON Schema validators (jsonschema-rs) of the published component schemas."""
    defs = component_schemas()
    validators = {}
    for name in _MODELS:
        schema = {"$ref": f"#/$defs/{name}", "$defs": defs}
        schema = json.loads(json.dumps(schema).replace("#/components/schemas/", "#/$defs/"))
        validators[name] = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    return validators


def _check_document(
    name: str, path: str, document: Any, problems: list[str], where: str = ""
) -> None:
    """JSON Schema and pydantic problems of one document (or part, at `where`) of a file."""
    validator = _schema_validators()[name]
    if not validator.is_valid(document):
        for error in validator.iter_errors(document):
            at = "/".join(str(p) for p in (*where.split("/"), *error.instance_path) if p != "")
            problems.append(f"{path}: {at or '(root)'}: {error.message} [schema]")
    try:
        _MODELS[name].model_validate(document)
    except ValidationError as exc:
        for error in exc.errors():
            at = "/".join(str(p) for p in (*where.split("/"), *error["loc"]) if p != "")
            problems.append(f"{path}: {at or '(root)'}: {error['msg']} [contract]")


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


class _CategoryReader:
    """A category file read alongside the full dataset: each of its entry lines must be the
    next line of its category in the full dataset."""

    def __init__(self, folder: Path, category: Category, stack: ExitStack) -> None:
        self.category, self.path = category, category_file(category.id)
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
        """The full dataset's next entry of this category: the file must hold it next."""
        part = self.next_part()
        if self.problem is None and part != (True, data):
            self.problem = f"{self.path}: apis differ from {FULL_DATASET} filtered by category"
        self.count += 1

    def finish(self, full_meta: dict, problems: list[str]) -> None:
        """The file must end here with a meta that matches the full dataset's."""
        part = self.next_part()
        if self.problem is None and (part is None or part[0]):
            self.problem = f"{self.path}: apis differ from {FULL_DATASET} filtered by category"
        if self.problem is not None:
            problems.append(self.problem)
            return
        meta = _parse(part[1], self.path, "meta", problems)
        _check_document("CategoryMeta", self.path, meta, problems, "meta")
        if not isinstance(meta, dict):
            return
        if meta.get("count") != self.count:
            problems.append(f"{self.path}: meta: meta.count must equal the number of apis")
        if meta.get("category") != self.category.id:
            problems.append(f"{self.path}: meta: meta.category must be {self.category.id!r}")
        if meta.get("version") != full_meta.get("version"):
            problems.append(f"{self.path}: meta.version differs from {FULL_DATASET}")


def _validate_datasets(folder: Path, categories: list[Category], problems: list[str]) -> None:
    """One pass over `apis.json`: every entry checked against the schema and the model, and
    matched with the next line of its category file; then every meta."""
    path = FULL_DATASET
    with ExitStack() as stack:
        readers = {c.id: _CategoryReader(folder, c, stack) for c in categories}
        handle = stack.enter_context((folder / path).open("rb"))
        meta: Any = None
        count, last_id, found = 0, None, len(problems)
        for is_entry, data in _dataset_lines(handle):
            if not is_entry:
                meta = _parse(data, path, "meta", problems)
                _check_document("Meta", path, meta, problems, "meta")
                break
            entry = _parse(data, path, f"apis/{count}", problems)
            _check_document("APIEntry", path, entry, problems, f"apis/{count}")
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
            count += 1
            if len(problems) - found > MAX_PROBLEMS_PER_FILE:
                problems.append(f"{path}: more problems, not listed")
                return
        if isinstance(meta, dict) and meta.get("totalAPIs") != count:
            problems.append(f"{path}: meta: meta.totalAPIs must equal the number of apis")
        for reader in readers.values():
            reader.finish(meta if isinstance(meta, dict) else {}, problems)


def validate_release(folder: Path, categories: list[Category]) -> list[str]:
    """Every contract problem of the release in `folder` (empty when it is valid)."""
    problems: list[str] = []

    def load(path: str) -> Any:
        try:
            return json.loads((folder / path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            return None

    try:
        _validate_datasets(folder, categories, problems)
    except (OSError, _Malformed) as exc:
        problems.append(f"{FULL_DATASET}: unreadable: {exc}")
    index = load(CATEGORY_INDEX)
    if index is not None:
        _check_document("CategoryIndex", CATEGORY_INDEX, index, problems)
    load(OPENAPI)
    releases = load(RELEASE_INDEX) if (folder / RELEASE_INDEX).exists() else None
    if releases is not None:
        _check_document("ReleaseIndex", RELEASE_INDEX, releases, problems)
        for release in releases.get("releases", []):
            if not (folder / str(release.get("path", ""))).is_file():
                problems.append(f"{RELEASE_INDEX}: {release.get('path')} is missing")
    changes = load(CHANGES) if (folder / CHANGES).exists() else None
    if changes is not None:
        _check_document("ChangeLog", CHANGES, changes, problems)
    return problems


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one atomic rename (Linux renameat2); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _swap_in(staging: Path, output_dir: Path) -> None:
    if not output_dir.exists():
        staging.rename(output_dir)
        return
    if _exchange(staging, output_dir):
        shutil.rmtree(staging)
        return
    retired = output_dir.with_name(f".{output_dir.name}.old-{uuid.uuid4().hex[:8]}")
    output_dir.rename(retired)
    staging.rename(output_dir)
    shutil.rmtree(retired)


def staging_folders(output_dir: Path) -> list[Path]:
    return sorted(output_dir.parent.glob(f".{output_dir.name}.staging-*"))


def _write_file(folder: Path, relative: str, data: bytes) -> None:
    target = folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _link_tree(source: Path, target: Path, skip: Callable[[Path], bool] = lambda _: False) -> None:
    """Hard-link the files under `source` into `target` (copies where links fail), but those
    whose path relative to `source` is `skip`ped. Safe because published files are never
    rewritten in place, only replaced by the swap."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_dir() or skip(relative):
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)


def _stage_and_swap(
    output_dir: Path,
    categories: list[Category],
    write: Callable[[Path], None],
    carry: Iterable[str] = (),
) -> Path:
    """`write` the release into a fresh staging folder with the `carry` folders of the live
    release, validate it, swap it in as live."""
    output_dir = output_dir.absolute()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in staging_folders(output_dir):
        shutil.rmtree(stale, ignore_errors=True)
    staging = output_dir.with_name(f".{output_dir.name}.staging-{uuid.uuid4().hex[:8]}")
    try:
        staging.mkdir()
        write(staging)
        for relative in carry:
            if (output_dir / relative).is_dir() and not (staging / relative).exists():
                _link_tree(output_dir / relative, staging / relative)
        problems = validate_release(staging, categories)
        if problems:
            raise ReleaseValidationError(problems)
        _swap_in(staging, output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def write_release(
    output_dir: Path,
    files: Mapping[str, bytes],
    categories: list[Category],
    complete: Completion | None = None,
    carry: Iterable[str] = (),
) -> Path:
    """Stage `files`, validate them, then swap them in as the live release at `output_dir`."""

    def write(staging: Path) -> None:
        for relative, data in files.items():
            _write_file(staging, relative, data)
        if complete is not None:
            index = json.loads(files[CATEGORY_INDEX])
            counts = {c["id"]: c["count"] for c in index["categories"]}
            complete(staging, index["meta"], counts)

    return _stage_and_swap(output_dir, categories, write, carry)


def assemble_entries(
    contents: Iterable[tuple[str, Mapping[str, Any]]],
    statuses: Mapping[str, Status] | None = None,
    scores: Mapping[str, BuilderScore] | None = None,
    uptimes: Mapping[str, Uptime] | None = None,
) -> list[dict[str, Any]]:
    """Published entries from (id, curated content) pairs and the presented values by id."""
    statuses, scores, uptimes = statuses or {}, scores or {}, uptimes or {}
    return [
        published_entry(
            content, statuses.get(entry_id), scores.get(entry_id), uptimes.get(entry_id)
        )
        for entry_id, content in contents
    ]


def _active_contents(session: Session) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, curated content) of every published entry, by id, streamed from the store."""
    statement = (
        select(EntryRow.id, type_coerce(EntryRow.content, Text))  # the JSON text, parsed below
        .where(col(EntryRow.retired_at).is_(None))
        .order_by(EntryRow.id)
        .execution_options(yield_per=2000)
    )
    for entry_id, content in session.exec(statement):
        yield entry_id, orjson.loads(content) if isinstance(content, str | bytes) else content


def release_folder(version: str) -> str:
    return f"{RELEASES_DIR}/{version}"


def release_summary(
    meta: Mapping[str, Any],
    counts: Mapping[str, int],
    by_state: Mapping[str, int],
    categories: list[Category],
) -> dict[str, Any]:
    """The line of `api/releases.json` describing one release."""
    return {
        "version": meta["version"],
        "generated": meta["generated"],
        "counts": {
            "total": meta["totalAPIs"],
            "byCategory": {category.id: counts.get(category.id, 0) for category in categories},
            "byState": {state: by_state.get(state, 0) for state in get_args(StatusState)},
        },
        "path": f"{release_folder(meta['version'])}/{FULL_DATASET.removeprefix('api/')}",
    }


def kept_releases(output_dir: Path, keep: int) -> list[dict[str, Any]]:
    """The live release history's newest `keep` releases whose folders are still there."""
    try:
        index = json.loads((output_dir / RELEASE_INDEX).read_text(encoding="utf-8"))
        listed = list(index["releases"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    kept = [
        release
        for release in listed
        if isinstance(release, dict)
        and (output_dir / release_folder(str(release.get("version")))).is_dir()
    ]
    return kept[: max(keep, 0)]


def _not_in_snapshot(relative: Path) -> bool:
    """Paths under `api/` that are not one release's own documents."""
    return relative.parts[0] == "releases" or relative.as_posix() in (
        "releases.json", "changes.json", "404.json"
    )


def write_history(
    staging: Path,
    summary: dict[str, Any],
    previous: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    changes: Sequence[Change],
) -> None:
    """The staged release's own copy under `api/releases/<version>/`, the index of kept
    releases, and the change log."""
    _link_tree(staging / "api", staging / release_folder(meta["version"]), _not_in_snapshot)
    _write_file(staging, RELEASE_INDEX,
                render_json({"meta": meta, "releases": [summary, *previous]}))
    _write_file(staging, CHANGES, render_json(
        {"meta": meta, "changes": [change.document() for change in changes]}))


def write_site(staging: Path) -> None:
    """The reader pages, assets and host files, rendered from the staged documents."""
    from pipeline.pages import site_files  # the pages read this module's document paths

    # Keys name every staged file (the pages link to them); only the two documents the
    # pages are rendered from are read.
    staged = {p.relative_to(staging).as_posix(): b"" for p in staging.rglob("*") if p.is_file()}
    for path in (FULL_DATASET, CATEGORY_INDEX):
        staged[path] = (staging / path).read_bytes()
    for relative, data in site_files(staged).items():
        _write_file(staging, relative, data)


def publish_release(
    session: Session,
    output_dir: Path,
    base_url: str,
    categories: list[Category],
    now: datetime,
    presented: Presented | None = None,
    run_id: int | None = None,
    releases_kept: int = DEFAULT_RELEASES_KEPT,
    changes: Sequence[Change] = (),
    pages: bool = True,
) -> ReleaseRow:
    """Publish the store's active entries as a new release and record it.

    With the JSON go the reader pages (unless `pages` is off), the release's own copy under
    `api/releases/<version>/` with the `releases_kept - 1` releases before it, listed in
    `api/releases.json`, and `changes` in `api/changes.json`.
    """
    if releases_kept < 1:
        raise ValueError(f"releases_kept must be at least 1, not {releases_kept}")
    presented = presented or Presented()
    statuses, scores, uptimes = presented.statuses, presented.scores, presented.uptimes
    by_state: Counter[str] = Counter()

    def entries() -> Iterator[dict[str, Any]]:
        by_state.clear()
        for entry_id, content in _active_contents(session):
            status = statuses.get(entry_id)
            by_state[status.state if status else "unchecked"] += 1
            yield published_entry(content, status, scores.get(entry_id), uptimes.get(entry_id))

    version = next_version(output_dir, now.date())
    previous = kept_releases(output_dir, releases_kept - 1)
    carry = [release_folder(release["version"]) for release in previous]

    def complete(staging: Path, meta: dict[str, Any], counts: Mapping[str, int]) -> None:
        if pages:
            write_site(staging)
        summary = release_summary(meta, counts, by_state, categories)
        write_history(staging, summary, previous, meta, changes)

    try:
        total = stream_release(output_dir, entries(), categories, version, now, base_url,
                               complete, carry)
    except EntriesOutOfOrderError:  # the database sorts ids another way: sort them here
        files = build_release(entries(), categories, version, now, base_url)
        write_release(output_dir, files, categories, complete, carry)
        total = json.loads(files[CATEGORY_INDEX])["meta"]["totalAPIs"]
    release = ReleaseRow(version=version, generated=now, total_apis=total, run_id=run_id)
    session.merge(release)
    session.commit()
    return release
