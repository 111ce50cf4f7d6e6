"""The limits an entry file keeps before it is parsed, so no file can crash or swamp a run:
its place (inside the data folder, symlinks resolved), its size, its encoding, its nesting
depth and what its YAML aliases expand to (merge keys included).

Each check raises `UnsafeEntryFile` with a rule and a message (and a line where there is one);
the reader turns it into a problem of that file, and the run goes on with the others.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO

import yaml

DEFAULT_MAX_BYTES = 256 * 1024  # a full entry with samples is a few KiB
MAX_DEPTH = 32  # an entry nests five levels deep; a parser recursing on depth must not meet 10,000
MAX_NODES = 20_000  # nodes after every alias (and merge key) is expanded
# An anchor (`&name`) starts a node: after a blank, a flow indicator, a key colon or a dash.
# `&` inside a URL's query (`?a=1&b=2`) follows a letter or digit and is no anchor.
_ANCHOR = re.compile(r"(?:^|[\s\[\]{},:-])&[^\s\[\]{},]")
_DEEP_INDENT = re.compile(r"^(?: {24,}|(?:- *){8,})", re.MULTILINE)
# libyaml's safe parser when PyYAML was built with it (the wheels are): ~10x faster on big
# catalogues.
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKey(yaml.constructor.ConstructorError):
    """A key given twice in one mapping: YAML forbids it, and PyYAML would keep the last one
    without a word (a second `description:` silently replacing the first)."""


_BOOL_TAG = "tag:yaml.org,2002:bool"
_STR_TAG = "tag:yaml.org,2002:str"
# The words YAML 1.1 reads as booleans and YAML 1.2 (editors' YAML support) as words.
_YAML_11_BOOLEANS = frozenset({"on", "off", "yes", "no"})


class CatalogueLoader(_SAFE_LOADER):
    """The one loader of every YAML file the catalogue reads: the safe one, refusing a key
    given twice in a mapping (some 18 µs a file; a key a merge (`<<`) brings may be given
    again, as YAML means).

    A bare key `on`, `off`, `yes` or `no` is read as the word, as YAML 1.2 and the editors
    read it, not as a boolean (YAML 1.1): every key of a catalogue file is a field name, and
    `deprecated: {on: 2027-06-30}` means the field `on`, not `True`."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, _ in node.value:
                if (isinstance(key, yaml.ScalarNode) and key.tag == _BOOL_TAG
                        and not key.style and key.value.lower() in _YAML_11_BOOLEANS):
                    key.tag = _STR_TAG
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG:
                    if key.value in seen:
                        raise DuplicateKey(None, None, f"key {key.value!r} is given twice",
                                           key.start_mark)
                    seen.add(key.value)
        return super().construct_mapping(node, deep)


_INT_TAG = "tag:yaml.org,2002:int"


def _bounded_int(loader: CatalogueLoader, node: yaml.ScalarNode) -> int:
    """A YAML integer no longer than Python writes in decimal (4,300 digits): a decimal one
    past it fails to build already, and so does, now, one written `0x…`, `0b…` or `1:2:…`,
    which would build and break each line and text that shows it."""
    value = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    try:
        str(value)
    except ValueError:
        raise ValueError(f"an integer of {value.bit_length():,} bits, past the "
                         f"{sys.get_int_max_str_digits():,} digits a number may have") from None
    return value


CatalogueLoader.add_constructor(_INT_TAG, _bounded_int)

_CORE_TAG = "tag:yaml.org,2002:"
# The YAML tags whose values JSON cannot hold, which the safe loader builds: bytes (`!!binary`),
# a set (in no order: a list field given one was published in an order changing from run to
# run), lists of pairs (`!!omap`, `!!pairs`: tuples, that no field wants). Every other tag the
# safe loader does not know (a custom `!tag`, `!!python/…`) is refused alike, as one problem of
# its field rather than a syntax error naming no field.
_NON_JSON_TAGS = ("binary", "set", "omap", "pairs")
_PLAIN_VALUES = "entries hold plain text, numbers, lists and maps"


class RefusedTag(yaml.constructor.ConstructorError):
    """A value written with a YAML tag that builds no JSON value, at its node's mark."""


def shown_tag(tag: str) -> str:
    """A node's tag as the file writes it: `!!binary`, `!custom`."""
    if tag.startswith(_CORE_TAG):
        return f"!!{tag.removeprefix(_CORE_TAG)}"
    return tag if tag.startswith("!") else f"!<{tag}>"


def _refuse_tag(loader: CatalogueLoader, node: yaml.Node) -> Any:
    raise RefusedTag(None, None, f"YAML tag {shown_tag(node.tag)} is not allowed: {_PLAIN_VALUES}",
                     node.start_mark)


for _name in _NON_JSON_TAGS:
    CatalogueLoader.add_constructor(_CORE_TAG + _name, _refuse_tag)
CatalogueLoader.add_constructor(None, _refuse_tag)  # type: ignore[arg-type]

YAML_LOADER: type[yaml.SafeLoader] = CatalogueLoader

# What a YAML value that parses but cannot be built raises (`2026-02-30`, `!!int abc`,
# `!!bool abc`, `!!timestamp abc`): the loader gives no line for it.
VALUE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError)


class _Pinpointing(CatalogueLoader):
    """The loader again, naming the node of a value that cannot be built: read only once a
    file failed so, since the check costs on every node."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except VALUE_ERRORS as exc:
            kind = node.tag.rsplit(":", 1)[-1]
            # a scalar is quoted; a mapping or sequence (a `!!set`) is told by its kind alone
            shown = f"{node.value[:80]!r} " if isinstance(node.value, str) else "the value "
            raise yaml.constructor.ConstructorError(
                None, None, " ".join(f"{shown}cannot be read as a YAML {kind} "
                                     f"({exc})".split()), node.start_mark) from None


def unreadable_value(text: str, error: Exception) -> tuple[int | None, list[str | int], str]:
    """The line, the place (keys and item indexes) and a one-line message of the value in
    `text` that made the loader raise `error` (one of VALUE_ERRORS)."""
    try:
        yaml.load(text, Loader=_Pinpointing)
    except yaml.constructor.ConstructorError as found:
        mark = found.problem_mark
        if mark is not None:
            place = _place_of(yaml.compose(text, Loader=CatalogueLoader), mark.index)
            return mark.line + 1, place, str(found.problem)
    except Exception:  # a failure of another kind says no more than the first one did
        pass
    return None, [], " ".join(f"{type(error).__name__}: {error}".split())


_PLAIN_COLLECTIONS = frozenset(("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"))


def refused_tag_place(text: str, error: RefusedTag) -> tuple[int | None, list[str | int]]:
    """The line and the place (keys and item indexes) of the value whose tag the loader
    refused (`RefusedTag`) in `text`."""
    mark = error.problem_mark
    if mark is None:
        return None, []
    return mark.line + 1, _place_of(yaml.compose(text, Loader=CatalogueLoader), mark.index)


def _place_of(root: yaml.Node | None, index: int) -> list[str | int]:
    """The keys and item indexes leading from `root` to the node that starts at `index`
    (a walk with a stack of its own: no recursion on depth)."""
    todo: list[tuple[yaml.Node, list[str | int]]] = [] if root is None else [(root, [])]
    while todo:
        node, place = todo.pop()
        if node.start_mark.index == index and (isinstance(node, yaml.ScalarNode)
                                               or node.tag not in _PLAIN_COLLECTIONS):
            return place  # a scalar, or a collection of its own tag (`!!set`): never a key's
        if isinstance(node, yaml.MappingNode):
            todo.extend((value, [*place, str(key.value)]) for key, value in node.value)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((item, [*place, number]) for number, item in enumerate(node.value))
    return []


# The rules of files that were refused or could not be read: no id of theirs is known.
UNREAD_RULES = frozenset({"outside-data", "too-large", "not-utf8", "too-deep", "alias-bomb",
                          "unreadable", "bad-file-name"})


class UnsafeEntryFile(ValueError):
    """An entry file that breaks a limit; it is reported, never parsed."""

    def __init__(self, rule: str, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.rule, self.line = rule, line


def inside(path: Path, root: Path) -> bool:
    """`path` is `root` or under it (both absolute and normal): compared as text, as it runs
    for every file of a catalogue and pathlib's `parents` costs microseconds a call."""
    text, base = str(path), str(root)
    return text == base or text.startswith(base.rstrip(os.sep) + os.sep)


def check_place(path: Path, entries_root: Path | None) -> None:
    """A file under the entries folder must really be there: a symlink (of the file or of a
    folder on its way) that leads outside the data folder is refused, never read; one that
    leads to nothing (or to no file) is a problem of its own, never skipped."""
    if entries_root is None:
        return
    root = entries_root.absolute()
    if not inside(path.absolute(), root):
        return  # a file named outside the folder on purpose (`apidir validate FILE`)
    check_within(path, Path(os.path.realpath(root)).parent)


def check_within(path: Path, data: Path) -> None:
    """`path`, every symlink on its way followed, is inside the folder `data` (given resolved),
    and a symlink leads to a file. Paths are resolved by `os.path.realpath`, which ends where a
    link leads nowhere or in a loop (`Path.resolve` raises on a loop before Python 3.13)."""
    link = os.path.islink(path)
    target = (Path(os.path.realpath(path)) if link
              else Path(os.path.realpath(path.parent)) / path.name)
    found = _link_target(path, target) if link else None
    if not inside(target, data):
        raise UnsafeEntryFile("outside-data", f"links outside the data folder (to {target})")
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UnsafeEntryFile("unreadable", f"links to {target}, which is not a file")


def _link_target(path: Path, target: Path) -> os.stat_result:
    """What the symlink `path` leads to: a link to nothing or in a loop is told as such (a
    file the listing found, so its entry is kept as stored, never taken for deleted)."""
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            message = "links in a loop"
        elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
            message = f"links to nothing (to {target})"
        else:
            message = f"link cannot be followed: {exc.strerror or exc}"
        raise UnsafeEntryFile("unreadable", message) from None


def check_data_file(path: Path, data: Path) -> None:
    """A file the data folder `data` holds besides the entries (`categories.yaml`) keeps the
    entry files' place (`check_within`); that it is a regular file, not a pipe that would
    never end, `read_text` checks on the file it opens."""
    check_within(path, Path(os.path.realpath(data)))


# Opening without following a symlink (where the system can): a file that is one is checked in
# full before it is read; for the others, their folder's check holds.
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# Opened without waiting: a pipe named like an entry file would block its reader for ever.
_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
_SYMLINK_ERRORS = (errno.ELOOP, errno.EMLINK)  # Linux and macOS; FreeBSD


def read_placed(path: str | Path, entries_root: Path | None, limit: int,
                folders: dict[str, bool]) -> tuple[bytes, os.stat_result | None]:
    """The file's first `limit` bytes, read only once it keeps its place (`check_place`), for
    a pass over a whole catalogue at the cost of one `open` a file: each folder is judged once
    (`folders`: by name, whether it is under `entries_root` and resolves inside the data
    folder), and a file there is opened without following a symlink, so a symlink is caught
    by the open itself and then checked in full.

    With the bytes, the file's own stat when it was opened as itself (None through a symlink,
    whose target can change under an unchanged link): what `stat_placed` compares next time."""
    name = os.fspath(path)
    descriptor = None
    if _judged(name, entries_root, folders) and _NOFOLLOW:
        try:
            descriptor = os.open(name, _READ | _NOFOLLOW)
        except OSError as exc:
            if exc.errno not in _SYMLINK_ERRORS:
                raise
    own = descriptor is not None
    if descriptor is None:
        check_place(Path(name), entries_root)
        descriptor = os.open(name, _READ)
    try:
        found = _regular(descriptor)
        blocks: list[bytes] = []
        size = 0
        while size < limit and (block := os.read(descriptor, min(limit - size, 1 << 16))):
            blocks.append(block)
            size += len(block)
        return b"".join(blocks), found if own else None
    finally:
        os.close(descriptor)



def _regular(descriptor: int) -> os.stat_result:
    """The stat of the file open as `descriptor`, which must be a regular file: a pipe, a
    socket or a device is a problem of its file, never read."""
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode):
        raise UnsafeEntryFile("unreadable", "not a file (a pipe, socket or device)")
    return found


def stat_placed(path: str | Path, entries_root: Path | None,
                folders: dict[str, bool]) -> os.stat_result | None:
    """The stat of a regular file that keeps its place, without opening it (its folder judged
    as `read_placed` judges it, the file itself no symlink); None for anything else, which is
    then read in full."""
    name = os.fspath(path)
    if not _judged(name, entries_root, folders):
        return None
    try:
        found = os.lstat(name)
    except OSError:
        return None
    return found if stat.S_ISREG(found.st_mode) else None


def _judged(name: str, entries_root: Path | None, folders: dict[str, bool]) -> bool:
    """Whether the folder of file `name` keeps its place, each folder judged once a pass."""
    folder = os.path.dirname(name)
    judged = folders.get(folder)
    if judged is None:
        judged = folders[folder] = _folder_inside(folder, entries_root)
    return judged


def _folder_inside(folder: str, entries_root: Path | None) -> bool:
    """A folder under `entries_root` whose resolution (every symlink on its way followed) is
    inside the data folder: a file there, itself no symlink, keeps its place."""
    if entries_root is None:
        return False
    root = entries_root.absolute()
    absolute = Path(os.path.abspath(folder or os.curdir))
    return inside(absolute, root) and inside(absolute.resolve(), root.resolve().parent)


_PART = 1 << 20  # the most a read of a file larger than its stat said asks for at once


def _read_at_most(handle: BinaryIO, limit: int, size: int) -> bytes:
    """At most `limit` bytes of an open file whose stat gave `size`: asked for in parts no
    larger than the file (one read, as a rule) or a MiB, so a limit beyond memory or an
    index (an APIDIR_ENTRY_MAX_BYTES of 2**63) is never asked of the allocator at once."""
    parts: list[bytes] = []
    asked = min(limit, size + 1)
    while asked > 0:
        part = handle.read(asked)
        parts.append(part)
        limit -= len(part)
        if len(part) < asked:  # the end of the file
            break
        asked = min(limit, _PART)
    return b"".join(parts)


def read_text(path: Path, max_bytes: int = DEFAULT_MAX_BYTES,
              setting: str | None = "APIDIR_ENTRY_MAX_BYTES") -> str:
    """The file's text, read no further than the size limit (named by its `setting`, if one
    sets it); UTF-8 only."""
    descriptor = os.open(path, _READ)
    with open(descriptor, "rb") as handle:
        data = _read_at_most(handle, max_bytes + 1, _regular(descriptor).st_size)
    return decode_within(data, max_bytes, setting)


def decode_within(data: bytes, max_bytes: int, setting: str | None = None) -> str:
    """`data` as text, refused past the size limit or when not UTF-8: the one rule for bytes
    read from a file and bytes downloaded, so both are refused alike."""
    if len(data) > max_bytes:
        named = f" ({setting})" if setting else ""
        raise UnsafeEntryFile("too-large", f"file is larger than {max_bytes:,} bytes{named}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UnsafeEntryFile(
            "not-utf8", f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}", line
        ) from None


def check_structure(text: str, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_NODES) -> None:
    """Nesting depth and expanded size, from the parser's events (a loop, no recursion).
    Skipped for text that can neither nest deep nor hold an anchor, which is nearly all (the
    test is of an entry's depth: a larger `max_depth` only scans more often)."""
    flow_brackets = text.count("[") + text.count("{")
    if not (_ANCHOR.search(text) or flow_brackets > MAX_DEPTH or _DEEP_INDENT.search(text)):
        return
    depth = 0
    sizes: list[int] = [0]  # expanded nodes of each open collection, the document's first
    anchored: list[str | None] = [None]
    expanded: dict[str, int] = {}
    try:
        for event in yaml.parse(text, Loader=YAML_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > max_depth:
                    raise UnsafeEntryFile("too-deep", f"nested deeper than {max_depth} levels",
                                          event.start_mark.line + 1)
                sizes.append(1)
                anchored.append(event.anchor)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
                size, anchor = sizes.pop(), anchored.pop()
                if anchor is not None:
                    expanded[anchor] = size
                sizes[-1] += size
            elif isinstance(event, yaml.ScalarEvent):
                if event.anchor is not None:
                    expanded[event.anchor] = 1
                sizes[-1] += 1
            elif isinstance(event, yaml.AliasEvent):
                sizes[-1] += expanded.get(event.anchor, 1)
            if sum(sizes) > max_nodes:
                raise UnsafeEntryFile(
                    "alias-bomb",
                    f"expands to more than {max_nodes:,} values through its aliases",
                    event.start_mark.line + 1,
                )
    except yaml.YAMLError as exc:
        # libyaml's own nesting limit (1,000 levels in recent PyYAML wheels, 6.0.4) stops its
        # scanner before the parser hands over the first level past ours
        if getattr(exc, "problem", None) == "exceeded maximum nesting depth":
            mark = getattr(exc, "problem_mark", None)
            raise UnsafeEntryFile("too-deep", f"nested deeper than {max_depth} levels",
                                  mark.line + 1 if mark is not None else None) from None
        return  # the loader reports the syntax error with its line


# What the depth of JSON text is read from: brackets, and the quotes and backslashes that
# tell a bracket inside a string from one outside.
_JSON_MARK = re.compile(r'[\[\]{}"\\]')


def check_json_depth(text: str, max_depth: int) -> None:
    """The nesting depth of JSON text, read in one pass over its brackets outside strings (the
    JSON parser recurses on depth and would end in a RecursionError, not a line)."""
    depth, in_string, escaped = 0, False, -1
    for mark in _JSON_MARK.finditer(text):
        char, at = mark.group(), mark.start()
        if in_string:
            if at == escaped:
                continue
            if char == "\\":
                escaped = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, at) + 1
                raise UnsafeEntryFile("too-deep", f"nested deeper than {max_depth} levels", line)
        elif char in "]}":
            depth -= 1
