"""Publish: build the release documents and swap them in atomically.

The whole release is written to a staging folder beside the live one, every
file is validated against the contract, and only then is the staging folder
exchanged with the live one in a single rename. A failed validation or a crash
leaves the previous release as it was.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any, get_args

import jsonschema
from pydantic import ValidationError
from sqlmodel import Session

from pipeline.catalog import Category
from pipeline.changes import Change
from pipeline.contract import (
    INTERFACE_VERSION,
    LICENSE,
    BuilderScore,
    CategoryDataset,
    CategoryIndex,
    ChangeLog,
    FullDataset,
    Meta,
    ReleaseIndex,
    Status,
    StatusState,
    Uptime,
)
from pipeline.openapi import component_schemas, render_openapi
from pipeline.store import ReleaseRow, active_entries

FULL_DATASET = "api/apis.json"
CATEGORY_INDEX = "api/categories.json"
OPENAPI = "api/openapi.json"
RELEASES_DIR = "api/releases"
RELEASE_INDEX = "api/releases.json"
CHANGES = "api/changes.json"
DEFAULT_RELEASES_KEPT = 30


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


def release_meta(version: str, generated: datetime, total: int, base_url: str) -> dict[str, Any]:
    """The `meta` every document of one release shares."""
    meta = {
        "version": version,
        "generated": generated,
        "totalAPIs": total,
        "source": f"{base_url.rstrip('/')}/{FULL_DATASET}",
        "license": LICENSE,
    }
    return Meta.model_validate(meta).model_dump(mode="json")


def build_release(
    entries: Iterable[Mapping[str, Any]],
    categories: list[Category],
    version: str,
    generated: datetime,
    base_url: str,
) -> dict[str, bytes]:
    """Every file of a release, by path relative to the output folder."""
    apis = sorted(entries, key=lambda entry: entry["id"])
    meta = release_meta(version, generated, len(apis), base_url)
    files = {FULL_DATASET: render_json({"meta": meta, "apis": apis})}
    summaries = []
    for category in categories:
        members = [api for api in apis if api["category"] == category.id]
        category_meta = meta | {
            "category": category.id,
            "label": category.label,
            "count": len(members),
        }
        files[category_file(category.id)] = render_json({"meta": category_meta, "apis": members})
        summaries.append(
            {
                "id": category.id,
                "label": category.label,
                "description": category.description,
                "count": len(members),
            }
        )
    files[CATEGORY_INDEX] = render_json({"meta": meta, "categories": summaries})
    files[OPENAPI] = render_openapi().encode()
    return files


_MODELS = {
    "FullDataset": FullDataset,
    "CategoryDataset": CategoryDataset,
    "CategoryIndex": CategoryIndex,
    "ReleaseIndex": ReleaseIndex,
    "ChangeLog": ChangeLog,
}


@cache
def _schema_validators() -> dict[str, jsonschema.protocols.Validator]:
    defs = component_schemas()
    validators = {}
    for name in _MODELS:
        schema = {"$ref": f"#/$defs/{name}", "$defs": defs}
        schema = json.loads(json.dumps(schema).replace("#/components/schemas/", "#/$defs/"))
        validators[name] = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
    return validators


def _check_document(name: str, path: str, document: Any, problems: list[str]) -> None:
    model = _MODELS[name]
    for error in _schema_validators()[name].iter_errors(document):
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        problems.append(f"{path}: {where}: {error.message} [schema]")
    try:
        model.model_validate(document)
    except ValidationError as exc:
        for error in exc.errors():
            where = "/".join(str(p) for p in error["loc"]) or "(root)"
            problems.append(f"{path}: {where}: {error['msg']} [contract]")


def validate_release(folder: Path, categories: list[Category]) -> list[str]:
    """Every contract problem of the release in `folder` (empty when it is valid)."""
    problems: list[str] = []

    def load(path: str) -> Any:
        try:
            return json.loads((folder / path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            return None

    full = load(FULL_DATASET)
    if full is not None:
        _check_document("FullDataset", FULL_DATASET, full, problems)
    index = load(CATEGORY_INDEX)
    if index is not None:
        _check_document("CategoryIndex", CATEGORY_INDEX, index, problems)
    for category in categories:
        path = category_file(category.id)
        document = load(path)
        if document is None:
            continue
        _check_document("CategoryDataset", path, document, problems)
        if full is not None and isinstance(full.get("apis"), list):
            expected = [api for api in full["apis"] if api.get("category") == category.id]
            if document.get("apis") != expected:
                problems.append(f"{path}: apis differ from {FULL_DATASET} filtered by category")
            if document.get("meta", {}).get("version") != full["meta"].get("version"):
                problems.append(f"{path}: meta.version differs from {FULL_DATASET}")
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


def _carry(source: Path, target: Path) -> None:
    """Bring a folder of the live release into the staged one: hard links, copies where needed.

    Safe because published files are never rewritten in place, only replaced by the swap.
    """
    for path in sorted(source.rglob("*")):
        destination = target / path.relative_to(source)
        if path.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)


def write_release(
    output_dir: Path,
    files: Mapping[str, bytes],
    categories: list[Category],
    carry: Iterable[str] = (),
) -> Path:
    """Stage `files` and the `carry` folders of the live release, validate, then swap them in."""
    output_dir = output_dir.absolute()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in staging_folders(output_dir):
        shutil.rmtree(stale, ignore_errors=True)
    staging = output_dir.with_name(f".{output_dir.name}.staging-{uuid.uuid4().hex[:8]}")
    try:
        for relative, data in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        for relative in carry:
            if (output_dir / relative).is_dir() and not (staging / relative).exists():
                _carry(output_dir / relative, staging / relative)
        problems = validate_release(staging, categories)
        if problems:
            raise ReleaseValidationError(problems)
        _swap_in(staging, output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return output_dir


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


def release_folder(version: str) -> str:
    return f"{RELEASES_DIR}/{version}"


def release_summary(
    entries: Sequence[Mapping[str, Any]], categories: list[Category], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """The line of `api/releases.json` describing one release."""
    by_category = Counter(entry["category"] for entry in entries)
    by_state = Counter(entry["status"]["state"] for entry in entries)
    return {
        "version": meta["version"],
        "generated": meta["generated"],
        "counts": {
            "total": len(entries),
            "byCategory": {category.id: by_category[category.id] for category in categories},
            "byState": {state: by_state[state] for state in get_args(StatusState)},
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


def history_files(
    files: Mapping[str, bytes],
    summary: dict[str, Any],
    previous: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    changes: Sequence[Change],
) -> dict[str, bytes]:
    """The release's own copy under `api/releases/<version>/`, the index, and the change log."""
    folder = release_folder(meta["version"])
    snapshot = {
        f"{folder}/{path.removeprefix('api/')}": data
        for path, data in files.items()
        if path.startswith("api/")
    }
    snapshot[RELEASE_INDEX] = render_json({"meta": meta, "releases": [summary, *previous]})
    snapshot[CHANGES] = render_json(
        {"meta": meta, "changes": [change.document() for change in changes]}
    )
    return snapshot


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
) -> ReleaseRow:
    """Publish the store's active entries as a new release and record it.

    The release is also kept under `api/releases/<version>/` with the `releases_kept - 1`
    releases before it, listed in `api/releases.json`; `changes` go to `api/changes.json`.
    """
    if releases_kept < 1:
        raise ValueError(f"releases_kept must be at least 1, not {releases_kept}")
    presented = presented or Presented()
    contents = [(row.id, row.content) for row in active_entries(session)]
    entries = assemble_entries(contents, presented.statuses, presented.scores, presented.uptimes)
    version = next_version(output_dir, now.date())
    files = build_release(entries, categories, version, now, base_url)
    from pipeline.pages import site_files  # the pages read this module's document paths

    files.update(site_files(files))  # reader pages and host files, from the same documents
    meta = release_meta(version, now, len(entries), base_url)
    previous = kept_releases(output_dir, releases_kept - 1)
    summary = release_summary(entries, categories, meta)
    files.update(history_files(files, summary, previous, meta, changes))
    carry = [release_folder(release["version"]) for release in previous]
    write_release(output_dir, files, categories, carry)
    release = ReleaseRow(version=version, generated=now, total_apis=len(entries), run_id=run_id)
    session.merge(release)
    session.commit()
    return release
