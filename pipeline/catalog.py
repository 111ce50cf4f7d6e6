"""Reading and validating the curated input: `data/categories.yaml` and the entry files.

Every problem is collected, never raised, so a contributor sees all of them at
once, each naming the file (with its line), the entry and the field.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.contract import CATEGORY_IDS, EntryContent, Uri
from pipeline.lint import lint_entry

ENTRY_SUFFIXES = (".yaml", ".yml")


class EntryFile(EntryContent):
    """One curated entry file: the published content plus internal provenance fields."""

    model_config = ConfigDict(extra="forbid")

    sources: list[Uri] | None = None
    verified: date | None = None

    def content(self) -> dict[str, Any]:
        """The publishable part, as JSON values, with only the keys the file sets."""
        return self.model_dump(mode="json", exclude_unset=True, exclude={"sources", "verified"})


class Category(BaseModel):
    id: str
    label: str
    description: str


@dataclass(frozen=True, order=True)
class Problem:
    """One broken rule in one file."""

    file: str
    line: int | None
    entry: str | None
    field: str | None
    rule: str
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        entry, field = self.entry or "?", self.field or "-"
        return f"{where}: entry {entry}: field {field}: {self.message} [{self.rule}]"


@dataclass
class CatalogReport:
    """What reading a set of entry files found: the valid entries and every problem."""

    entries: dict[Path, EntryFile] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def invalid_ids(self) -> set[str]:
        """Ids (by file name) of the files that have at least one problem."""
        bad = {p.file for p in self.problems}
        return {path.stem for path in self.files if str(path) in bad}


class CategoryError(ValueError):
    """`categories.yaml` does not define exactly the 14 categories of the contract."""


def load_categories(path: Path) -> list[Category]:
    """The 14 categories in reading order; raises CategoryError naming the file when wrong."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        categories = [Category.model_validate(item) for item in raw]
    except (OSError, yaml.YAMLError, TypeError, ValidationError) as exc:
        raise CategoryError(f"{path}: {exc}") from exc
    ids = [c.id for c in categories]
    if sorted(ids) != sorted(CATEGORY_IDS):
        raise CategoryError(
            f"{path}: must list each of {', '.join(CATEGORY_IDS)} once; found {', '.join(ids)}"
        )
    return categories


def entry_files(paths: Iterable[Path]) -> list[Path]:
    """Entry files named by `paths`: files as given, folders searched recursively."""
    found: set[Path] = set()
    for path in paths:
        if path.is_dir():
            found.update(p for p in path.rglob("*") if p.suffix in ENTRY_SUFFIXES and p.is_file())
        else:
            found.add(path)
    return sorted(found)


def _node_line(node: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """1-based line of the key (or item) that `loc` points to in a composed YAML tree."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                return line
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _field_name(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "-"


def _rule_of(error: dict[str, Any]) -> str:
    kind, loc = error["type"], error["loc"]
    top = loc[0] if loc else None
    if kind == "missing":
        return "missing-required-field"
    if kind == "extra_forbidden":
        return "unknown-field"
    if kind == "literal_error":
        return "unknown-category" if loc == ("category",) else "bad-enum-value"
    if kind == "string_pattern_mismatch":
        return {"id": "bad-slug", "color": "bad-colour"}.get(str(top), "bad-format")
    if kind == "value_error" and top in ("baseUrl", "docsUrl", "sources"):
        return "bad-url"
    return "bad-type"


def read_entry_file(
    path: Path, entries_root: Path | None = None
) -> tuple[str, EntryFile | None, list[Problem]]:
    """Parse and validate one entry file.

    Returns the id it declares (else its file name), the entry (None when invalid) and its problems.
    """
    file = str(path)
    stem = path.stem
    try:
        text = path.read_text(encoding="utf-8")
        tree = yaml.compose(text)
        raw = yaml.safe_load(text)
    except OSError as exc:
        return stem, None, [Problem(file, None, stem, None, "unreadable", str(exc))]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        message = f"YAML syntax error: {reason}"
        return stem, None, [Problem(file, line, stem, None, "yaml-syntax", message)]
    if not isinstance(raw, dict):
        return (
            stem,
            None,
            [
                Problem(
                    file, 1, stem, None, "not-a-mapping", "the file must hold one mapping of fields"
                )
            ],
        )

    entry_id = raw["id"] if isinstance(raw.get("id"), str) else stem
    problems: list[Problem] = []

    def problem(loc: Sequence[int | str], rule: str, message: str) -> None:
        problems.append(
            Problem(file, _node_line(tree, loc), entry_id, _field_name(loc), rule, message)
        )

    entry: EntryFile | None = None
    try:
        entry = EntryFile.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            loc = error["loc"]
            message = error["msg"]
            if error["type"] == "value_error":
                message = message.removeprefix("Value error, ")
            if (
                error["type"] != "missing"
                and "input" in error
                and not isinstance(error["input"], dict | list)
            ):
                message = f"{message} (got {error['input']!r})"
            problem(loc, _rule_of(error), message)

    if entry is not None:
        for loc, rule, message in lint_entry(entry):
            problem(loc, rule, message)
    if raw.get("id") is not None and raw.get("id") != stem:
        problem(
            ("id",), "id-file-mismatch", f"id {raw.get('id')!r} must equal the file name {stem!r}"
        )
    if entries_root is not None and path.parent.parent.resolve() == entries_root.resolve():
        folder = path.parent.name
        if raw.get("category") is not None and raw.get("category") != folder:
            problem(
                ("category",),
                "category-folder-mismatch",
                f"category {raw.get('category')!r} must equal its folder {folder!r}",
            )
    return entry_id, (entry if not problems else None), problems


def read_catalog(paths: Iterable[Path], entries_root: Path | None = None) -> CatalogReport:
    """Read every entry file under `paths`, checking each one and the ids across files."""
    report = CatalogReport(files=entry_files(paths))
    by_id: dict[str, list[Path]] = defaultdict(list)
    for path in report.files:
        entry_id, entry, problems = read_entry_file(path, entries_root)
        report.problems.extend(problems)
        if entry is not None:
            report.entries[path] = entry
        by_id[entry_id].append(path)
    for entry_id, paths_with_id in by_id.items():
        if len(paths_with_id) < 2:
            continue
        for path in paths_with_id:
            others = ", ".join(str(p) for p in paths_with_id if p != path)
            report.problems.append(
                Problem(
                    str(path),
                    _id_line(path),
                    entry_id,
                    "id",
                    "duplicate-id",
                    f"id {entry_id!r} is also used by {others}",
                )
            )
            report.entries.pop(path, None)
    report.problems.sort()
    return report


def _id_line(path: Path) -> int | None:
    try:
        return _node_line(yaml.compose(path.read_text(encoding="utf-8")), ("id",))
    except (OSError, yaml.YAMLError):
        return None
