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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from pydantic import ValidationError
from sqlmodel import Session

from pipeline.catalog import Category
from pipeline.contract import (
    INTERFACE_VERSION,
    LICENSE,
    BuilderScore,
    CategoryDataset,
    CategoryIndex,
    FullDataset,
    Meta,
    Status,
    Uptime,
)
from pipeline.openapi import component_schemas, render_openapi
from pipeline.store import ReleaseRow, active_entries

FULL_DATASET = "api/apis.json"
CATEGORY_INDEX = "api/categories.json"
OPENAPI = "api/openapi.json"


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


def build_release(
    entries: Iterable[Mapping[str, Any]],
    categories: list[Category],
    version: str,
    generated: datetime,
    base_url: str,
) -> dict[str, bytes]:
    """Every file of a release, by path relative to the output folder."""
    apis = sorted(entries, key=lambda entry: entry["id"])
    meta = {
        "version": version,
        "generated": generated,
        "totalAPIs": len(apis),
        "source": f"{base_url.rstrip('/')}/{FULL_DATASET}",
        "license": LICENSE,
    }
    meta = Meta.model_validate(meta).model_dump(mode="json")
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


@cache
def _schema_validators() -> dict[str, jsonschema.protocols.Validator]:
    defs = component_schemas()
    validators = {}
    for name in ("FullDataset", "CategoryDataset", "CategoryIndex"):
        schema = {"$ref": f"#/$defs/{name}", "$defs": defs}
        schema = json.loads(json.dumps(schema).replace("#/components/schemas/", "#/$defs/"))
        validators[name] = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
    return validators


def _check_document(name: str, path: str, document: Any, problems: list[str]) -> None:
    model = {
        "FullDataset": FullDataset,
        "CategoryDataset": CategoryDataset,
        "CategoryIndex": CategoryIndex,
    }[name]
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


def write_release(output_dir: Path, files: Mapping[str, bytes], categories: list[Category]) -> Path:
    """Stage `files`, validate them, then swap them in as the live release at `output_dir`."""
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


def publish_release(
    session: Session,
    output_dir: Path,
    base_url: str,
    categories: list[Category],
    now: datetime,
    presented: Presented | None = None,
    run_id: int | None = None,
) -> ReleaseRow:
    """Publish the store's active entries as a new release and record it."""
    presented = presented or Presented()
    contents = [(row.id, row.content) for row in active_entries(session)]
    entries = assemble_entries(contents, presented.statuses, presented.scores, presented.uptimes)
    version = next_version(output_dir, now.date())
    files = build_release(entries, categories, version, now, base_url)
    from pipeline.pages import site_files  # the pages read this module's document paths

    files.update(site_files(files))  # reader pages and host files, from the same documents
    write_release(output_dir, files, categories)
    release = ReleaseRow(version=version, generated=now, total_apis=len(entries), run_id=run_id)
    session.merge(release)
    session.commit()
    return release
