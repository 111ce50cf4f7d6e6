"""Publish: build the release documents from the store and stage them for the swap.

The datasets (`apis.json`, one file per category, the search index) are compact JSON with one
entry per line, so a release of 100,000 entries is built and written as a stream of lines,
never held in memory, and so are the entry documents (`api/apis/{id}.json`); `swap` validates
the staged release and swaps it in.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter, deque
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from itertools import islice
from pathlib import Path, PurePosixPath
from typing import Any, get_args

import orjson
from pydantic import BaseModel
from sqlalchemy import Text, func, type_coerce
from sqlmodel import Session, col, select

from pipeline.catalogue.entries import Category
from pipeline.contract import (
    INTERFACE_VERSION,
    LICENSE,
    SLUG_PATTERN,
    BuilderScore,
    Cors,
    EndpointStatus,
    Https,
    Lifecycle,
    Meta,
    Status,
    StatusState,
    Uptime,
)
from pipeline.judging.changes import Change, Event, curated_deprecations, release_event
from pipeline.judging.health import deprecated_reason, is_https
from pipeline.judging.present import Presented, PresentedValues
from pipeline.judging.rollup import entry_trends
from pipeline.processes import in_order, worker_pool
from pipeline.release.feed import FeedLinks, feed_items, render_feed
from pipeline.release.files import Folders, keep_only
from pipeline.release.hosting import host_files, renamed_ids
from pipeline.release.layout import (
    CATEGORY_INDEX,
    CHANGES,
    CHANGES_FEED,
    DATASET_HEAD,
    DATASET_META,
    ENTRY_DOCUMENTS,
    ENTRY_HEAD,
    ENTRY_META,
    ENTRY_PAGES,
    FULL_DATASET,
    OPENAPI,
    RELEASE_INDEX,
    RELEASES_DIR,
    SEARCH_INDEX,
    Completion,
    category_file,
    entry_document,
    folder_version,
    release_folder,
)
from pipeline.release.openapi import render_openapi
from pipeline.release.pages import site_root
from pipeline.release.search import search_line
from pipeline.release.site import SiteReport, write_site
from pipeline.release.swap import (
    complete_staged,
    link_tree,
    publish_lock,
    stage_and_swap,
    stage_redirects,
    write_file,
)
from pipeline.release.validate import (
    CHECK_CHUNK,
    PARALLEL_CHECK_FROM,
    ReleaseValidationError,
    entry_faults,
)
from pipeline.store.tables import (
    EntryEvent,
    EntryRow,
    PipelineRun,
    ReleaseRow,
    active_entry_ids,
    as_utc,
    endpoint_key,
    in_lists,
)

log = logging.getLogger(__name__)
DEFAULT_RELEASES_KEPT = 30


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


def entry_document_bytes(line: bytes, meta: bytes) -> bytes:
    """`api/apis/{id}.json` from the entry's dataset line and the release's compact meta."""
    return ENTRY_HEAD + line + ENTRY_META + meta + b"}\n"


_SLUG = re.compile(SLUG_PATTERN)


def checked_id(entry: Mapping[str, Any]) -> str:
    """The entry's id, which names its files: a slug, or ValueError before anything is written."""
    entry_id = entry["id"]
    if not isinstance(entry_id, str) or not _SLUG.fullmatch(entry_id):
        raise ValueError(f"entry id {entry_id!r} is not a slug; it would name files of the release")
    return entry_id


DEFAULT_STALE_DAYS = 180


def stale_provenance(provenance: Mapping[str, Any] | None, as_of: date | None,
                     stale_days: int = DEFAULT_STALE_DAYS) -> dict[str, Any] | None:
    """The curated provenance with `stale` set as of `as_of`: checked more than `stale_days`
    days before, or never (no verified date)."""
    if provenance is None:
        return None
    verified = provenance.get("verified")
    stale = None if as_of is None else (
        verified is None or (as_of - date.fromisoformat(verified)).days > stale_days)
    return {**provenance, "stale": stale}


def _json_form(value: BaseModel | Mapping[str, Any] | None, without_nulls: bool = False) -> Any:
    """A presented value as published: a model dumped in JSON mode, or a value in that form
    already (`WrittenValues`); `without_nulls` leaves out its null fields."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=without_nulls)
    if value is not None and without_nulls:
        return {name: item for name, item in value.items() if item is not None}
    return value


def endpoints_with_status(
    endpoints: Sequence[Mapping[str, Any]],
    statuses: Mapping[int, EndpointStatus | Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """The listed endpoints, each with the status of its row (by the position of the first
    endpoint listed with its `endpoint_key`): operations sharing a method and path are one
    probe target, so each of them shows that target's status. One the statuses do not know
    is published as curated."""
    first: dict[tuple[str, str], int] = {}
    listed = []
    for position, endpoint in enumerate(endpoints):
        row = first.setdefault(endpoint_key(endpoint.get("method"), endpoint.get("path")),
                               position)
        status = statuses.get(row)
        listed.append(endpoint if status is None else {**endpoint, "status": _json_form(status)})
    return listed


def published_entry(
    content: Mapping[str, Any],
    status: Status | Mapping[str, Any] | None = None,
    builder_score: BuilderScore | Mapping[str, Any] | None = None,
    uptime: Uptime | Mapping[str, Any] | None = None,
    as_of: date | None = None,
    stale_days: int = DEFAULT_STALE_DAYS,
    endpoint_statuses: Mapping[int, EndpointStatus | Mapping[str, Any]] | None = None,
    lifecycle: Lifecycle | None = None,
    https: Https | Mapping[str, Any] | None = None,
    cors: Cors | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One entry as published: the curated keys it sets plus every presented value (a model,
    or its JSON form), each endpoint with its own status. Without measurements, HTTPS is read
    off the base address, CORS is unknown and the lifecycle is the curated one (deprecated,
    else active)."""
    entry = dict(content)
    if "provenance" in entry:
        entry["provenance"] = stale_provenance(entry["provenance"], as_of, stale_days)
    if endpoint_statuses is not None and entry.get("endpoints"):
        entry["endpoints"] = endpoints_with_status(entry["endpoints"], endpoint_statuses)
    entry["status"] = _json_form(status or Status())
    entry["builderScore"] = _json_form(builder_score)
    entry["uptime"] = _json_form(uptime)
    deprecated = content.get("deprecated")
    if lifecycle is None and deprecated:  # the provider's word, said as a judged one is
        lifecycle = Lifecycle(state="deprecated", reason=deprecated_reason(deprecated.get("on")),
                              successor=deprecated.get("successor"))
    elif lifecycle is None:
        lifecycle = Lifecycle(state="active", reason="not judged from probes yet")
    entry["lifecycle"] = _json_form(lifecycle, without_nulls=True)
    https = https or Https(enabled=is_https(content["baseUrl"]))
    entry["https"] = _json_form(https, without_nulls=True)
    entry["cors"] = _json_form(cors or Cors(state="unknown"), without_nulls=True)
    return entry


def without_absent_successors(entry: dict[str, Any], held: Container[str]) -> dict[str, Any]:
    """The published entry with a successor that is not among `held`, the ids the release
    holds, left out of its lifecycle and its deprecation: the contract's successor is an entry
    the directory lists, and the entry's page and Markdown link it (one retired, or one the
    release's check leaves out, `LeftOut`, is named nowhere in the release)."""
    for key in ("lifecycle", "deprecated"):
        value = entry.get(key)
        successor = value.get("successor") if isinstance(value, Mapping) else None
        if successor is not None and successor not in held:
            entry[key] = {name: item for name, item in value.items() if name != "successor"}
    return entry


_VERSION_RE = re.compile(r"\+(\d{8})\.(\d+)$")


def next_version(output_dir: Path, day: date, taken: Iterable[str] = ()) -> str:
    """`2.0.0+<yyyymmdd>.<n>`: n follows the live release's and every `taken` version of that
    UTC day (the store's, the kept folders'), so no two releases share a version."""
    stamp = day.strftime("%Y%m%d")
    known = list(taken)
    try:
        live = json.loads((output_dir / CATEGORY_INDEX).read_text(encoding="utf-8"))
        known.append(str(live["meta"]["version"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    with suppress(OSError):
        known += [folder_version(folder.name) for folder in (output_dir / RELEASES_DIR).iterdir()]
    sequence = 0
    for version in known:
        match = _VERSION_RE.search(version)
        if match and match.group(1) == stamp:
            sequence = max(sequence, int(match.group(2)))
    return f"{INTERFACE_VERSION}+{stamp}.{sequence + 1}"


def stored_versions(session: Session, day: date) -> list[str]:
    """The versions of the releases the store recorded on `day` (UTC)."""
    pattern = f"%+{day.strftime('%Y%m%d')}.%"
    statement = select(ReleaseRow.version).where(col(ReleaseRow.version).like(pattern))
    return list(session.exec(statement))


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
    """Every file of a release, by path relative to the output folder, but its `_headers`,
    which names what the staged release holds (`stage_and_swap` writes it).

    Each entry is rendered once, as it arrives, and its line is shared by the full dataset,
    its category file and its entry document. (`stream_release` writes the same files without
    holding them.)
    """
    claims: list[tuple[str, tuple[str, ...]]] = []

    def row_of(entry: Mapping[str, Any]) -> tuple[str, str, bytes, bytes]:
        if entry.get("formerIds"):
            claims.append((entry["id"], tuple(entry["formerIds"])))
        return checked_id(entry), entry["category"], entry_line(entry), search_line(entry)

    rows = sorted(map(row_of, entries), key=lambda item: item[0])
    ids = {row[0] for row in rows}
    meta = release_meta(version, generated, base_url, len(rows))
    files = {
        FULL_DATASET: render_dataset(meta, [row[2] for row in rows]),
        SEARCH_INDEX: render_dataset(meta, [row[3] for row in rows]),
    }
    compact_meta = _compact(meta)
    by_category: dict[str, list[bytes]] = {category.id: [] for category in categories}
    for entry_id, category_id, line, _ in rows:
        by_category.setdefault(category_id, []).append(line)
        files[entry_document(entry_id)] = entry_document_bytes(line, compact_meta)
    del rows
    for category in categories:
        members = by_category[category.id]
        files[category_file(category.id)] = render_dataset(
            _category_meta(meta, category, len(members)), members
        )
    counts = {category_id: len(members) for category_id, members in by_category.items()}
    files[CATEGORY_INDEX] = _index_document(meta, counts, categories)
    files[OPENAPI] = render_openapi(base_url).encode()
    files.update(host_files(site_root(base_url), renamed_ids(claims, ids), files.__contains__))
    return files


class EntriesOutOfOrderError(ValueError):
    """`stream_release` was given entries not in strictly ascending id order."""


# The rule a left-out entry is recorded under among the run's errors.
LEFT_OUT_RULE = "release-contract"
_FAULTS_TOLD = 3  # of a left-out entry's refused fields, those its line tells


@dataclass(frozen=True)
class LeftOut:
    """A stored entry the release's own check refused (a value stored before a stricter rule,
    or written into the store by hand), left out so that every other entry is published."""

    entry: str
    faults: tuple[tuple[str, str], ...]  # (field, what is wrong)
    file: str | None = None  # the entry file it was stored from

    def reason(self) -> str:
        told = "; ".join(f"field {field}: {what}" for field, what in self.faults[:_FAULTS_TOLD])
        more = len(self.faults) - _FAULTS_TOLD
        return told + (f"; and {more} more" if more > 0 else "")

    def problem(self) -> dict[str, Any]:
        """As one of the run's errors (the shape of the catalogue's `Problem`)."""
        return {"file": self.file, "line": None, "entry": self.entry,
                "field": ", ".join(field for field, _ in self.faults), "rule": LEFT_OUT_RULE,
                "message": f"{self.reason()}; left out of the release"}

    def __str__(self) -> str:
        return left_out_line(self.problem())


def left_out_line(problem: Mapping[str, Any]) -> str:
    """One line telling a left-out entry (`LeftOut.problem`): entry, file, fields, and why."""
    where = f" ({problem['file']})" if problem.get("file") else ""
    return f"entry {problem['entry']}{where}: {problem['message']}"


class TooManyLeftOut(ReleaseValidationError):
    """More stored entries broke the release's contract than passed it: leaving them out would
    replace the live release with one that lacks most of the catalogue, so nothing is
    published (the live release stands) and the operator fixes the store or the entries."""

    def __init__(self, left_out: Sequence[LeftOut], published: int) -> None:
        stored = len(left_out) + published
        share = ("the one stored entry breaks" if stored == 1 else
                 f"every one of the {stored:,} stored entries breaks" if not published else
                 f"{len(left_out):,} of the {stored:,} stored entries, more than half, break")
        RuntimeError.__init__(
            self, f"{share} the release's contract: nothing was published and the live release "
            f"is unchanged; first: {left_out[0]}")
        self.problems = [str(item) for item in left_out]


def too_many_left_out(left_out: int, published: int) -> bool:
    """Whether a release would leave out more entries than it publishes (every one, at worst):
    rather a stale release than one that lacks most of the catalogue."""
    return left_out > published


@dataclass(frozen=True, slots=True)
class _Row:
    """One entry as the release writes it: its id and category, its line of the datasets and
    its line of the search index."""

    entry_id: Any
    category: Any
    line: bytes
    search: bytes
    former_ids: tuple[str, ...] = ()


def _row(entry: Mapping[str, Any]) -> _Row:
    return _Row(entry.get("id"), entry.get("category"), entry_line(entry), search_line(entry),
                tuple(entry.get("formerIds") or ()))


def _release_faults(row: _Row, faults: list[tuple[str, str]],
                    category_ids: Container[str]) -> list[tuple[str, str]]:
    """What keeps a row out of the release: what its check refused (`entry_faults`), else a
    category that is not one of the release's."""
    if not faults and row.category not in category_ids:
        return [("category", f"{row.category!r} is not one of the release's")]
    return faults


def _checked(rows: Iterable[_Row]) -> Iterator[tuple[_Row, list[tuple[str, str]]]]:
    """Each row with what the release's check refuses in it (`entry_faults`), in order: here,
    one at a time, until the rows reach `PARALLEL_CHECK_FROM` bytes (most releases end
    before), then in worker processes a chunk at a time (a large release). No row waits for
    the workers to start: each is checked and handed on as it is read, so none is held longer
    than it takes to write it."""
    rows = iter(rows)
    size = 0
    for row in rows:
        yield row, entry_faults([row.line])[0]
        size += len(row.line)
        if size >= PARALLEL_CHECK_FROM:
            break
    else:
        return
    waiting: deque[list[_Row]] = deque()

    def chunks() -> Iterator[tuple[list[bytes]]]:
        while chunk := list(islice(rows, CHECK_CHUNK)):
            waiting.append(chunk)
            yield ([row.line for row in chunk],)

    with worker_pool() as pool:
        for faults in in_order(pool, entry_faults, chunks(), ahead=8):
            yield from zip(waiting.popleft(), faults, strict=True)


class _DatasetWriter:
    """The full dataset, every category file and the search index, written line by line as
    entries arrive; the ids are kept (in order) to name the entry documents."""

    def __init__(self, folder: Path, categories: list[Category], stack: ExitStack) -> None:
        def open_dataset(path: str) -> Any:
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = stack.enter_context(target.open("wb", buffering=1 << 20))
            handle.write(DATASET_HEAD)
            return handle

        self.full = open_dataset(FULL_DATASET)
        self.search = open_dataset(SEARCH_INDEX)
        self.by_category = {c.id: open_dataset(category_file(c.id)) for c in categories}
        self.counts = {c.id: 0 for c in categories}
        self.total = 0
        self.ids: list[str] = []

    def add(self, row: _Row) -> None:
        """Write an entry the release's check passed, its category one of the release's."""
        entry_id = checked_id({"id": row.entry_id})
        if self.ids and entry_id <= self.ids[-1]:
            raise EntriesOutOfOrderError(f"{entry_id!r} came after {self.ids[-1]!r}")
        self.ids.append(entry_id)
        category_id = row.category
        handle = self.by_category[category_id]
        for target, earlier, data in ((self.full, self.total, row.line),
                                      (self.search, self.total, row.search),
                                      (handle, self.counts[category_id], row.line)):
            if earlier:
                target.write(b",\n")
            target.write(data)
        self.total += 1
        self.counts[category_id] += 1

    def finish(self, meta: dict[str, Any], categories: list[Category]) -> None:
        ends = [(self.full, self.total, meta), (self.search, self.total, meta)]
        for c in categories:
            count = self.counts[c.id]
            ends.append((self.by_category[c.id], count, _category_meta(meta, c, count)))
        for handle, count, document_meta in ends:
            handle.write(b"\n" if count else b"")
            handle.write(DATASET_META + _compact(document_meta) + b"}\n")


def write_entry_documents(folder: Path, ids: Sequence[str], meta: Mapping[str, Any]) -> None:
    """`api/apis/{id}.json` of every entry, from the lines of the written full dataset, read
    back as a stream: the meta ends the dataset, so it is known once every entry is written."""
    compact_meta = _compact(meta)
    documents = folder / ENTRY_DOCUMENTS
    documents.mkdir(parents=True, exist_ok=True)
    paths = [entry_document(entry_id) for entry_id in ids]
    # A reused folder's documents of entries now gone.
    keep_only(documents, {os.path.basename(path) for path in paths})
    with Folders(folder) as files, (folder / FULL_DATASET).open("rb") as dataset:
        dataset.readline()  # DATASET_HEAD
        for path, line in zip(paths, dataset, strict=False):
            files.create(path, entry_document_bytes(line.rstrip(b"\n").removesuffix(b","),
                                                    compact_meta))


def stream_release(
    output_dir: Path,
    entries: Iterable[Mapping[str, Any]],
    categories: list[Category],
    version: str,
    generated: datetime,
    base_url: str,
    complete: Completion | None = None,
    carry: Iterable[str] = (),
    reuse: Collection[str] = (ENTRY_DOCUMENTS,),
    keep_spare: bool = True,
    before_swap: Callable[[int], None] = lambda _: None,
    left_out: Callable[[list[LeftOut]], list[LeftOut]] = lambda found: found,
) -> int:
    """Write a release from `entries` in ascending id order straight into the staging folder
    (never holding the files in memory), validate it, swap it in; returns the entry count.
    `reuse`: the folders whose files `complete` and this overwrite in place in the spare
    (`stage_and_swap`); `keep_spare`: whether the release swapped out is kept as the next one;
    `before_swap` is given the entry count once the release is valid, just before the swap.

    Each entry is checked as it is written (`entry_faults`, the release's own check): one it
    refuses, or whose category is not one of `categories`, is left out: `left_out` is given
    them all once every entry is written (never when none is) and returns them as the
    operator is told of them (their files named). Raises TooManyLeftOut when more entries are
    left out than written, and EntriesOutOfOrderError if the order is broken (the live release
    untouched either way).
    """
    total = 0

    def write(staging: Path) -> None:
        nonlocal total
        refused: list[LeftOut] = []
        claims: list[tuple[str, tuple[str, ...]]] = []  # the written entries' formerIds
        with ExitStack() as stack:
            writer = _DatasetWriter(staging, categories, stack)
            for row, found in _checked(map(_row, entries)):
                if faults := _release_faults(row, found, writer.by_category):
                    refused.append(LeftOut(str(row.entry_id), tuple(faults)))
                else:
                    writer.add(row)
                    if row.former_ids:
                        claims.append((str(row.entry_id), row.former_ids))
            total = writer.total
            if refused:
                told = left_out(refused)
                if too_many_left_out(len(told), total):
                    raise TooManyLeftOut(told, total)
            meta = release_meta(version, generated, base_url, total)
            writer.finish(meta, categories)
        write_entry_documents(staging, writer.ids, meta)
        write_file(staging, CATEGORY_INDEX, _index_document(meta, writer.counts, categories))
        write_file(staging, OPENAPI, render_openapi(base_url).encode())
        # with or without the pages, whose 404 page is drawn over the bare one
        for relative, data in host_files(site_root(base_url)).items():
            write_file(staging, relative, data)
        if complete is not None:
            complete_staged(complete, staging, meta, writer.counts, categories)
        if claims:  # redirected to the files the release holds, once they are all written
            stage_redirects(staging, renamed_ids(claims, set(writer.ids)))

    stage_and_swap(output_dir, categories, write, carry, reuse, keep_spare,
                   lambda: before_swap(total), entries_checked=True)
    return total


def assemble_entries(
    contents: Iterable[tuple[str, Mapping[str, Any]]],
    statuses: Mapping[str, Status] | None = None,
    scores: Mapping[str, BuilderScore] | None = None,
    uptimes: Mapping[str, Uptime] | None = None,
    as_of: date | None = None,
    stale_days: int = DEFAULT_STALE_DAYS,
    endpoints: Mapping[str, Mapping[int, EndpointStatus]] | None = None,
) -> list[dict[str, Any]]:
    """Published entries from (id, curated content) pairs and the presented values by id."""
    statuses, scores, uptimes = statuses or {}, scores or {}, uptimes or {}
    endpoints = endpoints or {}
    return [
        published_entry(
            content, statuses.get(entry_id), scores.get(entry_id), uptimes.get(entry_id),
            as_of, stale_days, endpoints.get(entry_id),
        )
        for entry_id, content in contents
    ]


def _active_contents(session: Session) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, curated content) of every published entry, by id, streamed from the store an IN
    list at a time. The ids are ordered here, by code points: a PostgreSQL database in a
    collation that ignores punctuation (glibc's en_US.UTF-8) sorts `openai` before
    `open-meteo`, and the release is written in code-point order (`stream_release`)."""
    return _contents(session, active_entry_ids(session))


def _contents(session: Session, ids: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, curated content) of each of `ids`, in their order, an IN list at a time."""
    for chunk in in_lists(ids):
        statement = select(EntryRow.id, type_coerce(EntryRow.content, Text)).where(
            col(EntryRow.id).in_(chunk))  # the JSON text, parsed below
        contents = dict(session.exec(statement).all())
        for entry_id in chunk:
            content = contents[entry_id]  # an entry retired meanwhile keeps its row
            yield entry_id, orjson.loads(content) if isinstance(content, str | bytes) else content


def held_successors(
    session: Session,
    entry_of: Callable[[str, Mapping[str, Any]], dict[str, Any]],
    category_ids: Container[str],
) -> frozenset[str]:
    """The successors the curators of the published entries named that the release will
    hold: active entries (`curated_deprecations`) that its check passes, as `stream_release`
    checks them (`entry_of` builds an entry as published). Found before any entry is
    written, since an entry comes before its successor in id order as often as after it."""
    named = sorted({deprecation.successor for deprecation in
                    curated_deprecations(session).values() if deprecation.successor is not None})
    # A successor's own successor is a slug of an active entry, or left out: never a fault.
    rows = [_row(without_absent_successors(entry_of(entry_id, content), ()))
            for entry_id, content in _contents(session, named)]
    faults = entry_faults([row.line for row in rows])
    return frozenset(row.entry_id for row, found in zip(rows, faults, strict=True)
                     if not _release_faults(row, found, category_ids))


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


def listed_folder(release: Mapping[str, Any]) -> str:
    """The folder of a release listed in `api/releases.json`: the one its `path` names, so a
    release kept from before folder names were made safe (`2.0.0+20261121.1/`) stays where it
    is; the folder its version names when the path is not a kept release's dataset."""
    parts = PurePosixPath(str(release.get("path", ""))).parts
    kept = RELEASES_DIR.split("/")
    if len(parts) == len(kept) + 2 and list(parts[:-2]) == kept and parts[-2] != "..":
        return "/".join(parts[:-1])
    return release_folder(str(release.get("version")))


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
        if isinstance(release, dict) and (output_dir / listed_folder(release)).is_dir()
    ]
    return kept[: max(keep, 0)]


def _not_in_snapshot(relative: Path) -> bool:
    """Paths under `api/` that are not one release's own documents, or that only present its
    full dataset again (entry documents, the search index: a copy per kept release of 100,000
    entry documents would cost 100,000 links at every publish)."""
    return relative.parts[0] in ("releases", "apis") or relative.as_posix() in (
        "releases.json", "changes.json", "404.json", "search.json"
    )


def write_history(
    staging: Path,
    summary: dict[str, Any],
    previous: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    changes: Sequence[Change],
    events: Sequence[Event] = (),
    base_url: str = "",
    pages: bool = True,
    descriptions: Mapping[str, str] | None = None,
) -> None:
    """The staged release's own copy under `api/releases/<folder>/`, the index of kept
    releases, and the change log (state changes and catalogue events) with its feed, whose
    links name only what this release holds (its entry documents are staged; with `pages`,
    its pages are drawn next) and whose items of entries added say what each API does
    (`descriptions`, by id)."""
    link_tree(staging / "api", staging / release_folder(meta["version"]), _not_in_snapshot)
    kept = [summary, *previous]
    write_file(staging, RELEASE_INDEX, render_json({"meta": meta, "releases": kept}))
    change_log = {"meta": meta, "changes": [change.document() for change in changes],
                  "events": [event.document() for event in events]}
    write_file(staging, CHANGES, render_json(change_log))
    items = feed_items(changes, events)
    named = {item.holder for item in items if item.holder}  # the entries the feed links
    links = FeedLinks(
        base_url, {str(release["version"]): str(release["path"]) for release in kept},
        frozenset(entry_id for entry_id in named
                  if (staging / entry_document(entry_id)).is_file()),
        pages)
    counts = {str(release["version"]): release.get("counts") for release in kept}
    write_file(staging, CHANGES_FEED, render_feed(meta, items, links, counts, descriptions))


class ReleaseNotRecorded(RuntimeError):
    """A release was swapped in but the store refused its record afterwards: it is live, and
    publishing again would publish another release, not this one (the next publish records
    it, `record_live_release`)."""

    def __init__(self, version: str, error: BaseException) -> None:
        reason = next(iter(str(error).splitlines()), "") or type(error).__name__
        super().__init__(f"release {version} is live but the store could not record it "
                         f"({reason}); the next publish records it")
        self.version = version


# The stamps' precision: the published documents and both stores keep microseconds.
STAMP_STEP = timedelta(microseconds=1)


def live_meta(output_dir: Path) -> dict[str, Any] | None:
    """The live release's meta (None: no readable release there)."""
    try:
        meta = json.loads((output_dir / CATEGORY_INDEX).read_text(encoding="utf-8"))["meta"]
        return Meta.model_validate(meta).model_dump(mode="python", by_alias=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def newest_recorded_stamp(session: Session) -> datetime | None:
    """When the newest release the store recorded was generated (None: it recorded none)."""
    return as_utc(session.exec(select(func.max(ReleaseRow.generated))).one())


def record_live_release(session: Session, output_dir: Path) -> ReleaseRow | None:
    """Record the live release if the store lacks it and it is newer than every release the
    store holds: a publish whose record was refused after its swap (`ReleaseNotRecorded`) left
    it live, and its release event belongs in the change log. Returns the row added."""
    meta = live_meta(output_dir)
    if meta is None or session.get(ReleaseRow, meta["version"]) is not None:
        return None
    newest = newest_recorded_stamp(session)
    if newest is not None and newest >= meta["generated"]:
        return None  # an older release, from before this store
    row = ReleaseRow(version=meta["version"], generated=meta["generated"],
                     total_apis=meta["totalAPIs"])
    session.add(row)
    log.warning("release %s is live but was not recorded; recording it now", row.version)
    return row


def earliest_stamp(session: Session, output_dir: Path) -> datetime | None:
    """The earliest moment the next release may be stamped: just after the newest release
    (recorded, or live) and no earlier than the newest catalogue event. `api/releases.json` and
    the change log list them newest first, so a release stamped by a clock set back behind
    them would fail validation until the clock caught up. None: nothing to follow."""
    moments = [newest_recorded_stamp(session)]
    meta = live_meta(output_dir)
    moments.append(None if meta is None else meta["generated"])
    after_releases = max((moment for moment in moments if moment is not None), default=None)
    if after_releases is not None:
        after_releases += STAMP_STEP
    last_event = as_utc(session.exec(select(func.max(EntryEvent.at))).one())
    return max((moment for moment in (after_releases, last_event) if moment is not None),
               default=None)


@dataclass(frozen=True)
class Published:
    """A release just published: its record, how its pages were drawn (None without), and the
    stored entries its check refused, left out of it."""

    release: ReleaseRow
    pages: SiteReport | None = None
    left_out: tuple[LeftOut, ...] = ()

    def __str__(self) -> str:
        line = f"published {self.release.version}: {self.release.total_apis:,} entries"
        if self.left_out:
            line += f" ({len(self.left_out):,} left out: the release's check refused them)"
        return line + (f"; {self.pages}" if self.pages is not None else "")


def _state_of(status: Status | Mapping[str, Any] | None) -> str:
    """The state a presented status (a model or its JSON form) counts under in a release."""
    if not status:
        return "unchecked"
    return status["state"] if isinstance(status, Mapping) else status.state


def _source_files(session: Session, ids: Sequence[str]) -> dict[str, str]:
    """The entry file each of `ids` was stored from, by id."""
    files: dict[str, str] = {}
    for chunk in in_lists(ids):
        statement = select(EntryRow.id, EntryRow.source_file).where(col(EntryRow.id).in_(chunk))
        files.update(session.exec(statement).all())
    return files


def publish_release(
    session: Session,
    output_dir: Path,
    base_url: str,
    categories: list[Category],
    now: datetime,
    presented: PresentedValues | None = None,
    run_id: int | None = None,
    releases_kept: int = DEFAULT_RELEASES_KEPT,
    changes: Sequence[Change] = (),
    pages: bool = True,
    stale_days: int = DEFAULT_STALE_DAYS,
    events: Sequence[Event] = (),
    spare: bool = True,
    entries_dir: Path | None = None,
) -> Published:
    """Publish the store's active entries as a new release and record it (in the run's record
    too, with `run_id`), the record written before the swap and committed after it.

    With the JSON go the reader pages (unless `pages` is off), the release's own copy under
    `api/releases/<folder>/` (`release_folder`) with the `releases_kept - 1` releases before
    it, listed in `api/releases.json`, and `changes` and `events` in `api/changes.json`.
    With `spare`, the release replaced is kept beside the output folder for the next publish to
    write over (`stage_and_swap`); without, it is deleted and each publish writes new files.

    A stored entry the release's check refuses is left out of every file (`stream_release`),
    with the state changes and events it holds (those of its former ids too), and named in
    `Published.left_out` and, with `run_id`, among the run's errors (its file under
    `entries_dir`, else as stored); more left out than published refuses the release
    (TooManyLeftOut). An entry naming it as its successor is published without naming it
    (`without_absent_successors`), as one naming a retired entry.
    """
    if releases_kept < 1:
        raise ValueError(f"releases_kept must be at least 1, not {releases_kept}")
    values = presented or Presented()
    by_state: Counter[str] = Counter()
    drawn: SiteReport | None = None  # the pages of the release that was swapped in

    left_out: list[LeftOut] = []

    def entry_of(entry_id: str, content: Mapping[str, Any]) -> dict[str, Any]:
        entry = values.published(entry_id)
        return published_entry(content, entry.status, entry.score, entry.uptime, now.date(),
                               stale_days, entry.endpoints, entry.lifecycle, entry.https,
                               entry.cors)

    successors: frozenset[str] = frozenset()  # those the release holds (`held_successors`)
    # What each entry the feed tells of as added does, kept as the entries stream past.
    added = {event.holder for event in events if event.kind == "added"}
    descriptions: dict[str, str] = {}

    def entries() -> Iterator[dict[str, Any]]:
        by_state.clear()
        for entry_id, content in _active_contents(session):
            entry = entry_of(entry_id, content)
            by_state[_state_of(entry["status"])] += 1
            if entry_id in added and isinstance(entry.get("description"), str):
                descriptions[entry_id] = entry["description"]
            yield without_absent_successors(entry, successors)

    # The version, the staging and the swap under one lock: two publishers never take the
    # same version or remove each other's staging folder.
    with publish_lock(output_dir):
        version = next_version(output_dir, now.date(), stored_versions(session, now.date()))
        previous = kept_releases(output_dir, releases_kept - 1)
        carry = [listed_folder(release) for release in previous]
        successors = held_successors(session, entry_of, {c.id for c in categories})

        def leave_out(found: list[LeftOut]) -> list[LeftOut]:
            """Name each left-out entry's file, and take it out of the counts by state."""
            files = _source_files(session, [item.entry for item in found])

            def told(file: str | None) -> str | None:
                return file if file is None or entries_dir is None else str(entries_dir / file)

            left_out[:] = [replace(item, file=told(files.get(item.entry))) for item in found]
            for item in left_out:
                by_state[_state_of(values.published(item.entry).status)] -= 1
            return left_out

        def complete(staging: Path, meta: dict[str, Any], counts: Mapping[str, int]) -> None:
            nonlocal drawn
            summary = release_summary(meta, counts, by_state, categories)
            # No change or event shows of what is absent: those its entry holds, a rename's
            # too, whatever id they tell of.
            gone = {item.entry for item in left_out}
            published = [release_event(version, now),
                         *(event for event in events if event.holder not in gone)]
            kept = [change for change in changes if change.holder not in gone]
            write_history(staging, summary, previous, meta, kept, published, base_url, pages,
                          descriptions)
            if pages:  # after the history: pages link the change log and its feed
                drawn = write_site(staging, base_url, entry_trends(session, now.date()),
                                   previous=output_dir)

        # The entries come in code-point order on every database (`_active_contents`). The
        # entry documents and, with the pages, each entry's page and Markdown are written
        # over the files of the release before last (`put_file`).
        reuse = (ENTRY_DOCUMENTS, ENTRY_PAGES) if pages else (ENTRY_DOCUMENTS,)
        release = ReleaseRow(version=version, generated=now, total_apis=0, run_id=run_id)

        def record(total: int) -> None:
            """Write the release's record (and its run's) before the swap, taking the store's
            write lock: a store that refuses it refuses the release while the live one stands,
            and once swapped in, only the commit is left to do."""
            release.total_apis = total
            session.add(release)
            if run_id is not None:
                run = session.get(PipelineRun, run_id)
                run.release_version, run.entries_published = version, total
                run.errors = [*(error for error in run.errors or []  # not twice, if retried
                                if error.get("rule") != LEFT_OUT_RULE),
                              *(item.problem() for item in left_out)]
                session.add(run)
            session.flush()

        stream_release(output_dir, entries(), categories, version, now, base_url,
                       complete, carry, reuse if spare else (), spare, record, leave_out)
        try:
            session.commit()
        except Exception as error:
            session.rollback()
            raise ReleaseNotRecorded(version, error) from error
    return Published(release, drawn, tuple(left_out))
