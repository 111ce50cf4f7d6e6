"""Reading and validating the curated input: `data/categories.yaml` and the entry files.

Every problem is collected, never raised, so a contributor sees all of them at
once, each naming the file (with its line), the entry and the field.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import date
from functools import cache, lru_cache
from pathlib import Path
from typing import Annotated, Any, NamedTuple, get_args

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from pipeline.catalogue.draft import todo_fields
from pipeline.catalogue.guard import (
    DEFAULT_MAX_BYTES,
    UNREAD_RULES,
    VALUE_ERRORS,
    YAML_LOADER,
    DuplicateKey,
    RefusedTag,
    UnsafeEntryFile,
    check_data_file,
    check_place,
    check_structure,
    read_placed,
    read_text,
    refused_tag_place,
    shown_tag,
    stat_placed,
    unreadable_value,
)
from pipeline.catalogue.lint import format_character, lint_entry, visible
from pipeline.contract import BIDI_CONTROL, CATEGORY_IDS, XML_FORBIDDEN, EntryContent, Uri
from pipeline.processes import paused_garbage_collection, worker_count, worker_pool

log = logging.getLogger(__name__)

ENTRY_SUFFIXES = (".yaml", ".yml")


def _compose(text: str) -> yaml.Node | None:
    return yaml.compose(text, Loader=YAML_LOADER)


class EntryFile(EntryContent):
    """One curated entry file: the published content plus the pages its facts come from and
    the day they were checked (published as the entry's provenance)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[Uri] | None = Field(
        default=None, description="The pages each fact was checked on: the provider's own "
        "reference, pricing and rate-limit pages first.")
    verified: date | None = Field(
        default=None, description="The day the facts were last checked against the sources "
        "(YYYY-MM-DD).")

    def content(self) -> dict[str, Any]:
        """The publishable part, as JSON values, with only the keys the file sets; the
        curator's `sources` and `verified` are published as `provenance`."""
        content = self.model_dump(mode="json", exclude_unset=True,
                                  exclude={"sources", "verified"})
        if self.sources or self.verified:
            content["provenance"] = {"verified": self.verified and self.verified.isoformat(),
                                     "sources": list(self.sources or []) or None}
        return content


def shown_label(text: str) -> str:
    """A label of the site (a category's label or description): at least one visible
    character, and no bidirectional control or invisible format character, which would leave
    a heading empty or reorder the text around it."""
    if not visible(text):
        raise ValueError("shows nothing: it needs at least one visible character")
    found = BIDI_CONTROL.search(text)
    character = found.group() if found is not None else format_character(text)
    if character is not None:
        raise ValueError(f"holds U+{ord(character):04X}, an invisible control or format "
                         "character: remove it")
    return text


ShownLabel = Annotated[str, AfterValidator(shown_label)]


class Category(BaseModel):
    # a key the file misspells (`lable:`) is refused, as in an entry file, not passed over
    model_config = ConfigDict(extra="forbid")

    id: str
    label: ShownLabel
    description: ShownLabel


@dataclass(frozen=True)
class Problem:
    """One broken rule in one file."""

    file: str
    line: int | None
    entry: str | None
    field: str | None
    rule: str
    message: str

    def sort_key(self) -> tuple[str, int, str, str, str]:
        """By file, then line (a problem of the whole file first), then rule."""
        return (self.file, self.line or 0, self.rule, self.field or "", self.message)

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        entry, field = self.entry or "?", self.field or "-"
        return f"{where}: entry {entry}: field {field}: {self.message} [{self.rule}]"


@dataclass
class CatalogReport:
    """What reading a set of entry files found: the valid entries and every problem."""

    entries: dict[Path, EntryFile] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # The entry files found, by name (paths as text: a night's pass over 100,000 unchanged
    # files makes no Path of them).
    files: list[str] = field(default_factory=list)
    # With `known` files, by name: each file's hash, and the files not parsed since their hash
    # (or their stat) is the one stored (with their id: the file name, as a stored entry's id
    # always is); the stat to store of each file whose bytes were read, where it differs from
    # the one stored (None: not to be trusted next time, see `file_stat`).
    digests: dict[str, str] = field(default_factory=dict)
    unchanged: dict[str, str] = field(default_factory=dict)
    stats: dict[str, str | None] = field(default_factory=dict)

    # Files the checks across files (a duplicate id, an unknown successor) found invalid once
    # every file was read: their entries, if handed on as they were read, are not to be stored.
    withdrawn: set[Path] = field(default_factory=set)
    # The entries folder the names were found under (as given), if read as a catalogue.
    root: str | None = None

    def stored_name(self, name: str) -> str:
        """A file's name as the store keeps it: relative to the entries folder, with `/`, so a
        data folder moved, copied or named from another working directory is the same
        catalogue, not every entry moved; a file outside that folder keeps its name."""
        if self.root is None:
            return name
        prefix = os.path.join(self.root, "")
        if not name.startswith(prefix):
            return name
        relative = name[len(prefix):]
        return relative if os.sep == "/" else relative.replace(os.sep, "/")

    @property
    def ok(self) -> bool:
        return not self.problems

    def withdraw(self, path: Path) -> None:
        self.entries.pop(path, None)
        self.withdrawn.add(path)

    def invalid_ids(self) -> set[str]:
        """Ids (by file name) of the files that have at least one problem."""
        bad = {p.file for p in self.problems}
        return {file_stem(name) for name in self.files if name in bad} if bad else set()


class CategoryError(ValueError):
    """`categories.yaml` does not define exactly the 14 categories of the contract; the
    message is one line naming the file (and its line, category and field where known)."""


def load_categories(path: Path) -> list[Category]:
    """The 14 categories in reading order; raises CategoryError naming the file when wrong.

    The file keeps the entry files' limits (`guard`): inside the data folder that holds it
    (symlinks followed), a bounded size, UTF-8, a bounded nesting and alias expansion."""
    try:
        check_data_file(path, path.parent)
        text = read_text(path, setting=None)
        check_structure(text)
        raw = yaml.load(text, Loader=YAML_LOADER)
    except UnsafeEntryFile as exc:
        raise _category_error(path, exc.line, f"{exc} [{exc.rule}]") from None
    except OSError as exc:
        raise _category_error(path, None, f"cannot be read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, *VALUE_ERRORS) as exc:
        found = yaml_problem(text, exc)
        field = f"field {found.field}: " if found.field else ""
        raise _category_error(path, found.line, f"{field}{found.message} [{found.rule}]"
                              ) from None
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise _category_error(path, None, "must be a list of categories, each a mapping of "
                              "id, label and description")
    categories = [_category(path, text, index, item) for index, item in enumerate(raw)]
    ids = [c.id for c in categories]
    if sorted(ids) != sorted(CATEGORY_IDS):
        raise CategoryError(
            f"{path}: must list each of {', '.join(CATEGORY_IDS)} once; found {', '.join(ids)}"
        )
    return categories


class YamlProblem(NamedTuple):
    """What a YAML file's loader refused, in one line: its line and field where known."""

    line: int | None
    field: str | None
    rule: str
    message: str


def yaml_problem(text: str, error: Exception) -> YamlProblem:
    """`error`, which the loader raised reading `text` (a YAMLError or one of VALUE_ERRORS), as
    one problem: a key given twice, a tag building no JSON value (`!!binary`), a character
    YAML does not allow, a syntax error, or a value that parses but cannot be built
    (`2026-02-30`, `!!int abc`)."""
    if isinstance(error, DuplicateKey):
        mark = error.problem_mark
        return YamlProblem(mark.line + 1 if mark else None, None, "duplicate-key",
                           f"{error.problem}: the first would be lost")
    if isinstance(error, RefusedTag):
        line, place = refused_tag_place(text, error)
        return YamlProblem(line, _field_name(place) if place else None, "yaml-tag",
                           str(error.problem))
    if isinstance(error, yaml.reader.ReaderError):  # NUL and the like
        return YamlProblem(text.count("\n", 0, error.position) + 1, None, "yaml-syntax",
                           f"YAML does not allow the character #x{error.character:04x}")
    if isinstance(error, yaml.YAMLError):
        mark = getattr(error, "problem_mark", None)
        reason = getattr(error, "problem", None) or str(error)
        return YamlProblem(mark.line + 1 if mark is not None else None, None, "yaml-syntax",
                           " ".join(f"YAML syntax error: {reason}".split()))
    line, place, reason = unreadable_value(text, error)
    return YamlProblem(line, _field_name(place) if place else None, "yaml-value", reason)


def _category(path: Path, text: str, index: int, item: dict[str, Any]) -> Category:
    """One category of the file; its first problem as a CategoryError naming its line,
    category and field (pydantic's own message spans lines)."""
    try:
        return Category.model_validate(item)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        name = item.get("id") if isinstance(item.get("id"), str) else f"#{index + 1}"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        got = (f" (got {first['input']!r})" if first["type"] != "missing"
               and not isinstance(first.get("input"), dict | list) else "")
        line = _node_line(_compose(text), (index, *first["loc"]))
        raise _category_error(path, line, f"category {name}: field {_field_name(first['loc'])}: "
                              f"{first['msg'].removeprefix('Value error, ')}{got}{more}") from None


def _category_error(path: Path, line: int | None, message: str) -> CategoryError:
    where = str(path) if line is None else f"{path}:{line}"
    return CategoryError(f"{where}: {message}")


def entry_files(paths: Iterable[Path]) -> list[Path]:
    """Entry files named by `paths`: files as given, folders searched recursively (not into
    symlinked folders), in path order."""
    return [Path(name) for name in entry_names(paths)]


def entry_names(paths: Iterable[Path]) -> list[str]:
    """`entry_files` as text, without making a Path of each (5 µs a file)."""
    found: set[str] = set()
    for path in paths:
        if path.is_dir():
            found.update(_walk(os.fspath(path)))
        else:
            found.add(os.fspath(path))
    # By their parts: the separator as the lowest character sorts the names as their lists of
    # parts would, without making the lists (a fifth of a 100,000-file walk).
    return sorted(found, key=lambda name: name.replace(os.sep, "\0"))


def file_stem(name: str) -> str:
    """`Path(name).stem`, from the text."""
    return os.path.splitext(os.path.basename(name))[0]


def _walk(folder: str) -> Iterator[str]:
    """The entry files under `folder`, from the directory listings alone (a catalogue of
    100,000 files is walked every night). Whatever is named like one is listed: a symlink to
    nothing (or to no file), a pipe, a socket, a device is a problem of its file, which keeps
    its entry; skipped, it would look deleted and its entry be retired."""
    folders = [folder]
    while folders:
        with os.scandir(folders.pop()) as listing:
            for item in listing:
                if item.is_dir(follow_symlinks=False):
                    folders.append(item.path)
                elif os.path.splitext(item.name)[1] in ENTRY_SUFFIXES:
                    yield item.path


def _node_line(node: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """1-based line of the key (or item) that `loc` points to in a composed YAML tree."""
    return _node_at(node, loc)[0]


def _node_at(node: yaml.Node | None, loc: Sequence[int | str]
             ) -> tuple[int | None, yaml.Node | None]:
    """The 1-based line of the key (or item) that `loc` points to in a composed YAML tree (of
    the nearest one on its way, when it is not there), and its value's node (None then)."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if kv[0].value == part), None)
            if match is None:
                return line, None
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line, None
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line, None
    return line, node


# A tag written before a value, after its anchor if it has one (`&a !!timestamp 2026-11-01`).
_WRITTEN_TAG = re.compile(r"(?:&\S+\s+)?(!\S*)")


def date_for_text_problem(tree: yaml.Node | None, text: str, loc: Sequence[int | str],
                          built: date) -> tuple[str, str]:
    """The rule and words for the date `built` at `loc`, where its field holds text: written
    `!!timestamp`, it was built as a date on purpose and is told as its tag (`yaml-tag`); a
    plain date is a wrong type (`bad-type`), told as the date it is rather than pydantic's
    "valid string (got datetime.date(…))". Either way, quoted it is the text meant."""
    node = _node_at(tree, loc)[1]
    written = node.value if isinstance(node, yaml.ScalarNode) else built.isoformat()
    if node is not None and _WRITTEN_TAG.match(text, node.start_mark.index):
        return "yaml-tag", (f"YAML tag {shown_tag(node.tag)} is not allowed: the field holds "
                            f"text; write the date as text, quoted ('{written}')")
    return "bad-type", f"a date where text is wanted: quote it ('{written}')"


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
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return "out-of-range"
    if kind == "finite_number":
        return "not-finite"
    if kind == "value_error" and top in ("baseUrl", "docsUrl", "sources", "openapiUrl",
                                         "statusPageUrl", "sdks"):
        return "bad-url"
    if kind == "value_error" and loc[-1:] == ("currency",):
        return "bad-currency"
    return "bad-type"


def read_entry_file(
    path: Path, entries_root: Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[str, EntryFile | None, list[Problem]]:
    """Parse and validate one entry file, once it keeps the limits of `guard`.

    Returns the id it declares (else its file name), the entry (None when invalid) and its problems.
    """
    file = str(path)
    stem = path.stem
    text: str | None = None  # None until the file is read: what a YAML problem points into
    try:
        check_place(path, entries_root)
        text = read_text(path, max_bytes)
        check_structure(text)
        raw = yaml.load(text, Loader=YAML_LOADER)
    except UnsafeEntryFile as exc:
        return stem, None, [Problem(file, exc.line, stem, None, exc.rule, str(exc))]
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return stem, None, [Problem(file, None, stem, None, "unreadable", reason)]
    except RecursionError:
        return stem, None, [Problem(file, None, stem, None, "too-deep", "nested too deeply")]
    except (yaml.YAMLError, *VALUE_ERRORS, MemoryError) as exc:
        if text is None:  # the read itself failed: a size limit beyond memory, say
            return stem, None, [Problem(file, None, stem, None, "unreadable",
                                        f"cannot be read ({type(exc).__name__}: {exc})")]
        if isinstance(exc, MemoryError):
            raise
        found = yaml_problem(text, exc)
        return stem, None, [Problem(file, found.line, stem, found.field, found.rule,
                                    found.message)]
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
    trees: list[yaml.Node | None] = []  # composed only when a problem needs its line

    def tree() -> yaml.Node | None:
        if not trees:
            trees.append(_compose(text))
        return trees[0]

    def problem(loc: Sequence[int | str], rule: str, message: str) -> None:
        problems.append(
            Problem(file, _node_line(tree(), loc), entry_id, _field_name(loc), rule, message)
        )

    drafts = list(todo_fields(raw))
    for loc in drafts:
        problem(loc, "draft-todo", "still a draft: fill it from the provider's own pages")
    entry: EntryFile | None = None
    try:
        entry = EntryFile.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            loc = error["loc"]
            if any(loc[: len(todo)] == todo for todo in drafts):
                continue  # the TODO says it already
            if error["type"] == "string_type" and isinstance(error.get("input"), date):
                problem(loc, *date_for_text_problem(tree(), text, loc, error["input"]))
                continue
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
    for loc, character in xml_forbidden(raw, text):
        problem(loc, "control-character", f"holds U+{ord(character):04X}, a character XML "
                "forbids (the Atom feed could not carry it): remove it")
    for loc, character in bidi_controls(raw, text):
        problem(loc, "control-character", f"holds U+{ord(character):04X}, a bidirectional "
                "control that would reorder the text around it on the pages: remove it")
    for loc in unknown_fields(raw, EntryFile, nested_only=True):
        problem(loc, "unknown-field", f"unknown field {loc[-1]!r} (in a {{...}} mapping, "
                "text with a comma must be quoted, or YAML cuts it there)")
    if raw.get("id") is not None and raw.get("id") != stem:
        problem(
            ("id",), "id-file-mismatch", f"id {raw.get('id')!r} must equal the file name {stem!r}"
        )
    if entries_root is not None and _resolved(path.parent.parent) == _resolved(entries_root):
        folder = path.parent.name
        if raw.get("category") is not None and raw.get("category") != folder:
            problem(
                ("category",),
                "category-folder-mismatch",
                f"category {raw.get('category')!r} must equal its folder {folder!r}",
            )
    return entry_id, (entry if not problems else None), problems


def xml_forbidden(raw: Any, text: str) -> Iterator[tuple[tuple[int | str, ...], str]]:
    """Each text of the file (a value or a key, at any depth) that holds a character XML 1.0
    forbids, with the first such character: it would pass the models and later break the
    Atom feed, and so every release. YAML refuses them written as they are, so they come only
    from a double-quoted escape (`"\\x01"`): a file without a backslash is not walked."""
    if "\\" in text:
        yield from _found_in(raw, (), XML_FORBIDDEN)


def bidi_controls(raw: Any, text: str) -> Iterator[tuple[tuple[int | str, ...], str]]:
    """Each text of the file (a value or a key, at any depth) that holds a bidirectional
    embedding, override or isolate control (`BIDI_CONTROL`), with the first one: in a name it
    would reorder the page's own text around it, in a sample make the code read otherwise
    than it runs. YAML takes them written as they are, or as an escape (`"\\u202e"`)."""
    if "\\" in text or BIDI_CONTROL.search(text):
        yield from _found_in(raw, (), BIDI_CONTROL)


def _found_in(value: Any, loc: tuple[int | str, ...], pattern: re.Pattern[str]
              ) -> Iterator[tuple[tuple[int | str, ...], str]]:
    if isinstance(value, str):
        found = pattern.search(value)
        if found is not None:
            yield loc, found.group()
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and (found := pattern.search(key)) is not None:
                yield (*loc, key), found.group()
            yield from _found_in(item, (*loc, key), pattern)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _found_in(item, (*loc, index), pattern)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds (itself, or inside Optional / list), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


def unknown_fields(raw: Any, model: type[BaseModel], nested_only: bool = False,
                   loc: tuple[int | str, ...] = ()) -> list[tuple[int | str, ...]]:
    """Where `raw` holds keys its model does not know, at any depth. The models ignore such
    keys (a published file may carry fields of a later version), so an entry file's mistake
    there would vanish silently: `pricing: {details: 1,000 a day}` in a flow mapping, say."""
    if not isinstance(raw, dict):
        return []
    fields = {(field.alias or name): field for name, field in model.model_fields.items()}
    found: list[tuple[int | str, ...]] = []
    for key, value in raw.items():
        field = fields.get(key)
        if field is None:
            if not nested_only:
                found.append((*loc, key))
            continue
        inner = _model_in(field.annotation)
        if inner is None:
            continue
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            at = (*loc, key) if index is None else (*loc, key, index)
            found.extend(unknown_fields(item, inner, loc=at))
    return found


@lru_cache(maxsize=256)
def _resolved(folder: Path) -> Path:
    return folder.resolve()


EntryReading = tuple[str, EntryFile | None, list[Problem]]
# From this many files on, reading is spread over worker processes (YAML parsing is CPU-bound).
PARALLEL_FROM = 5000
_CHUNK = 500


def _read_chunk(
    paths: list[Path], entries_root: Path | None, max_bytes: int = DEFAULT_MAX_BYTES
) -> list[EntryReading]:
    with paused_garbage_collection():
        return [read_entry_file(path, entries_root, max_bytes) for path in paths]


def _read_all(
    files: list[Path], entries_root: Path | None, workers: int | None, max_bytes: int
) -> Iterator[EntryReading]:
    """`read_entry_file` of every file, in order; in `workers` processes for large catalogues,
    with a few chunks ahead at most, so what is read waits in memory only until it is used."""
    if workers is None:
        workers = worker_count() if len(files) >= PARALLEL_FROM else 1
    if workers <= 1:
        for start in range(0, len(files), _CHUNK):
            yield from _read_chunk(files[start : start + _CHUNK], entries_root, max_bytes)
        return
    chunks = [files[start : start + _CHUNK] for start in range(0, len(files), _CHUNK)]
    done = 0  # chunks handed on
    try:
        with worker_pool(workers) as pool:
            ahead: deque[Future[list[EntryReading]]] = deque()
            while done < len(chunks):
                while len(ahead) < 2 * workers and done + len(ahead) < len(chunks):
                    ahead.append(pool.submit(_read_chunk, chunks[done + len(ahead)],
                                             entries_root, max_bytes))
                readings = ahead.popleft().result()
                done += 1
                yield from readings
    except BrokenProcessPool as exc:  # e.g. a __main__ that cannot be re-imported
        log.warning("reading entry files in this process: worker processes failed (%s)", exc)
        for chunk in chunks[done:]:
            yield from _read_chunk(chunk, entries_root, max_bytes)


class KnownFile(NamedTuple):
    """What the store holds of an entry file as the last ingest read it (and the successor its
    entry names, checked across files though the file is not read again)."""

    hash: str
    stat: str | None
    successor: str | None = None
    former_ids: tuple[str, ...] = ()


# A file changed this close before a pass starts is read again next time, whatever its stat:
# a second change within the file system's clock tick would leave the stat as it was (git's
# "racily clean" files). Two seconds cover the coarsest clocks of the common file systems.
SETTLE_NS = 2_000_000_000


def read_catalog(
    paths: Iterable[Path],
    entries_root: Path | None = None,
    workers: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    known: Mapping[str, KnownFile] | None = None,
    keep: Callable[[Path, EntryFile], None] | None = None,
    started_ns: int | None = None,
) -> CatalogReport:
    """Read every entry file under `paths`, checking each one and the ids across files.

    `workers`: processes that parse the files (default: one per core from
    `PARALLEL_FROM` files on, else this process alone); `max_bytes`: the size limit of a file;
    `known`: what is stored of each file by its stored name — a file whose stat is the one
    stored is not even read, one whose hash is unchanged is not parsed again (both listed in
    `unchanged`), and every file's hash is kept in `digests`; `keep`: given each valid entry as
    it is read, instead of `entries` holding them all (a large catalogue's entries need not
    fit in memory at once) — those the checks across files then find invalid are listed in
    `withdrawn`;
    `started_ns`: when the pass starts (`time.time_ns()`, the default), for `file_stat`.
    """
    paths = list(paths)
    report = CatalogReport(files=entry_names(paths),
                           root=None if entries_root is None else os.fspath(entries_root))
    by_id: dict[str, list[str]] = defaultdict(list)  # the files of each id, by name
    deprecated: list[tuple[Path, str, str]] = []  # (file, id, successor)
    claims: list[tuple[Path, str, tuple[str, ...]]] = []  # (file, id, formerIds)
    valid: set[str] = set()  # of the files read, with no entries_root to list the others
    listed = to_read = _refuse_misnamed(report)
    if known is not None:
        settled_before = (time.time_ns() if started_ns is None else started_ns) - SETTLE_NS
        folders: dict[str, bool] = {}
        to_read = []
        for name in listed:
            stored = known.get(report.stored_name(name))
            if stored is not None and stored.stat is not None:
                found = stat_placed(name, entries_root, folders)
                if (found is not None and found.st_size <= max_bytes
                        and file_stat(found) == stored.stat):
                    report.digests[name] = stored.hash
                    _unchanged(report, name, stored, by_id, deprecated, claims)
                    continue
            digest, found = file_digest(name, entries_root, max_bytes, folders)
            if digest is not None:
                report.digests[name] = digest
                stat = (file_stat(found) if found is not None
                        and found.st_ctime_ns < settled_before else None)
                if stored is None or (digest, stat) != stored[:2]:
                    report.stats[name] = stat
                if stored is not None and stored.hash == digest:
                    _unchanged(report, name, stored, by_id, deprecated, claims)
                    continue
            to_read.append(name)
    with paused_garbage_collection():
        paths_to_read = [Path(name) for name in to_read]
        readings = _read_all(paths_to_read, entries_root, workers, max_bytes)
        for path, (entry_id, entry, problems) in zip(paths_to_read, readings, strict=True):
            report.problems.extend(problems)
            if entry is not None:
                if entries_root is None:
                    valid.add(str(path))
                if entry.deprecated and entry.deprecated.successor is not None:
                    deprecated.append((path, entry.id, entry.deprecated.successor))
                if entry.former_ids:
                    claims.append((path, entry.id, tuple(entry.former_ids)))
                if keep is None:
                    report.entries[path] = entry
                else:
                    keep(path, entry)
            if not any(problem.rule in UNREAD_RULES for problem in problems):
                by_id[entry_id].append(str(path))
    for entry_id, names_with_id in by_id.items():
        if len(names_with_id) < 2:
            continue
        for name in names_with_id:
            others = ", ".join(other for other in names_with_id if other != name)
            report.problems.append(
                Problem(
                    name,
                    _id_line(Path(name)),
                    entry_id,
                    "id",
                    "duplicate-id",
                    f"id {entry_id!r} is also used by {others}",
                )
            )
            report.withdraw(Path(name))
            report.unchanged.pop(name, None)
    whole = entries_root is not None and paths == [entries_root]
    _check_successors(report, deprecated, by_id, valid, entries_root,
                      report.files if whole else None, claims)
    _check_former_ids(report, claims, by_id, entries_root, report.files if whole else None)
    report.problems.sort(key=Problem.sort_key)
    return report


def _refuse_misnamed(report: CatalogReport) -> list[str]:
    """The files of `report` to read: all but those whose name is not UTF-8, each of which is
    a problem of its own under its name with the bytes escaped (`bad\\xffname.yaml`), and
    listed so. Never read: its id cannot be its name, and the name as Python holds it (lone
    surrogates) could be neither stored, logged nor printed."""
    misnamed = [index for index, name in enumerate(report.files) if not _utf8(name)]
    if not misnamed:
        return report.files
    to_read = [name for name in report.files if _utf8(name)]
    for index in misnamed:
        report.files[index] = shown = os.fsencode(report.files[index]).decode(
            "utf-8", "backslashreplace")
        report.problems.append(Problem(shown, None, file_stem(shown), None, "bad-file-name",
                                       "the file name is not UTF-8: rename the file to its "
                                       "entry's id"))
    return to_read


def _utf8(name: str) -> bool:
    """A name the file system gave as UTF-8 (one that is not holds lone surrogates)."""
    if name.isascii():
        return True
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unchanged(report: CatalogReport, name: str, stored: KnownFile,
               by_id: dict[str, list[str]], deprecated: list[tuple[Path, str, str]],
               claims: list[tuple[Path, str, tuple[str, ...]]]) -> None:
    """A file not parsed again: its id (its file name), successor and former ids still take
    part in the checks across files."""
    report.unchanged[name] = stem = file_stem(name)
    by_id[stem].append(name)
    if stored.successor is not None:
        deprecated.append((Path(name), stem, stored.successor))
    if stored.former_ids:
        claims.append((Path(name), stem, stored.former_ids))


def file_stat(found: os.stat_result) -> str:
    """What tells a file unchanged without reading it, as git's index does: its inode, size,
    modification and change times (the change time moves with every write and cannot be set
    back, so a copy that keeps the old modification time is still seen), under the reader's
    fingerprint (a new reader parses every file again)."""
    return (f"{_fingerprint_tag()}:{found.st_ino}:{found.st_size}:{found.st_mtime_ns}:"
            f"{found.st_ctime_ns}")


@cache
def reader_fingerprint() -> bytes:
    """A digest of the code that turns a file into an entry (its models, checks and lints):
    when that code changes, every file is parsed again, once."""
    package = Path(__file__).parent
    sources = [package.parent / "contract.py", *sorted(package.glob("*.py"))]
    return hashlib.sha256(b"".join(source.read_bytes() for source in sources)).digest()


def file_digest(path: str | Path, entries_root: Path | None,
                max_bytes: int = DEFAULT_MAX_BYTES,
                folders: dict[str, bool] | None = None) -> tuple[str | None, os.stat_result | None]:
    """The hash of a file's bytes under the reader's fingerprint, and the file's own stat
    (`read_placed`); no hash for a file that cannot be read within the limits (it is parsed,
    so the problem is reported). A symlink leading outside the data folder is refused here
    too, before a byte of it is read (`folders`: the folders judged so far in this pass)."""
    try:
        data, found = read_placed(path, entries_root, max_bytes + 1,
                                  {} if folders is None else folders)
    except (OSError, UnsafeEntryFile):
        return None, None
    if len(data) > max_bytes:
        return None, None
    digest = _fingerprinted().copy()
    digest.update(data)
    return digest.hexdigest(), found


@cache
def _fingerprint_tag() -> str:
    return reader_fingerprint().hex()[:16]


@cache
def _fingerprinted() -> Any:
    """A hash that has taken in the reader's fingerprint, to be copied for each file."""
    return hashlib.sha256(reader_fingerprint())


def _check_successors(report: CatalogReport, deprecated: list[tuple[Path, str, str]],
                      by_id: Mapping[str, list[str]], valid: Collection[str],
                      entries_root: Path | None, listed: Sequence[str] | None = None,
                      claims: Sequence[tuple[Path, str, tuple[str, ...]]] = ()) -> None:
    """A deprecated entry's successor (of `deprecated`: file, id, successor) must be another
    entry of the catalogue: its file under `entries_root` (`listed`: those files, where the pass
    read the whole folder), so one file can be checked alone; else a `valid` file read
    (`by_id`: the files of each id, by name). A successor that is a former id an entry of
    `claims` (file, id, formerIds) lists is refused naming that entry's id, the one to write:
    the successor is published, linked and judged by the id that has the entry's files."""
    deprecated = [(path, entry_id, successor) for path, entry_id, successor in deprecated
                  if path not in report.withdrawn]
    if not deprecated:
        return
    if listed is None and entries_root is not None:
        listed = entry_names([entries_root])
    known = ({file_stem(name) for name in listed}
             if listed is not None
             else {entry_id for entry_id, names in by_id.items()
                   if any(name in valid and Path(name) not in report.withdrawn
                          for name in names)})
    carriers = {former: (taker, claimant) for claimant, taker, former_ids in claims
                for former in former_ids}
    for path, entry_id, successor in deprecated:
        if successor != entry_id and successor in known:
            continue
        taker, claimant = carriers.get(successor, (None, None))
        why = ("is the entry itself" if successor == entry_id else
               f"is a former id of {taker!r} ({claimant}): name {taker!r}, the id it has now"
               if taker is not None else "is not an entry of the catalogue")
        try:
            line = _node_line(_compose(read_text(path)), ("deprecated", "successor"))
        except (OSError, yaml.YAMLError, UnsafeEntryFile):
            line = None
        report.problems.append(Problem(str(path), line, entry_id, "deprecated.successor",
                                       "unknown-successor", f"successor {successor!r} {why}"))
        report.withdraw(path)
        report.unchanged.pop(str(path), None)


def _check_former_ids(report: CatalogReport, claims: list[tuple[Path, str, tuple[str, ...]]],
                      by_id: Mapping[str, list[str]], entries_root: Path | None,
                      listed: Sequence[str] | None = None) -> None:
    """Each former id an entry claims (of `claims`: file, id, formerIds) names no entry of
    the catalogue (its files under `entries_root`, `listed` where the pass read the whole
    folder; else the files read, `by_id`), is claimed once in its list and by no other entry:
    its history and its addresses can pass to one entry alone."""
    claims = [claim for claim in claims if claim[0] not in report.withdrawn]
    if not claims:
        return
    if listed is None and entries_root is not None:
        listed = entry_names([entries_root])
    files_of: dict[str, list[str]] = defaultdict(list)
    for name in listed if listed is not None else [n for ns in by_id.values() for n in ns]:
        files_of[file_stem(name)].append(name)
    claimants: dict[str, list[str]] = defaultdict(list)
    for path, _, former_ids in claims:
        for former_id in dict.fromkeys(former_ids):
            claimants[former_id].append(str(path))
    for path, entry_id, former_ids in claims:
        problems = []
        for index, former_id in enumerate(former_ids):
            others = [name for name in claimants[former_id] if name != str(path)]
            if former_id == entry_id:
                why = "is the entry's own id"
            elif files_of.get(former_id):
                why = (f"is the id of an entry of the catalogue ({files_of[former_id][0]}): "
                       "a former id must be retired, its file removed")
            elif former_id in former_ids[:index]:
                why = "is listed twice"
            elif others:
                why = f"is also claimed by {', '.join(others)}: one entry alone takes it over"
            else:
                continue
            problems.append((index, f"former id {former_id!r} {why}"))
        if not problems:
            continue
        try:
            tree = _compose(read_text(path))
        except (OSError, yaml.YAMLError, UnsafeEntryFile):
            tree = None
        for index, message in problems:
            report.problems.append(Problem(
                str(path), _node_line(tree, ("formerIds", index)) if tree else None, entry_id,
                f"formerIds[{index}]", "bad-former-id", message))
        report.withdraw(path)
        report.unchanged.pop(str(path), None)


def _id_line(path: Path) -> int | None:
    try:
        return _node_line(_compose(read_text(path)), ("id",))
    except (OSError, yaml.YAMLError, UnsafeEntryFile):
        return None
