"""Markdown for agents: `llms.txt` at the root of a release (the llms.txt convention: an H1,
a summary, then sections of links) and a Markdown rendering of each entry and category beside
its page, which names it as its alternate.

Rendered by Jinja2 from the same documents as the pages. Every value a template prints is
escaped for Markdown unless a filter made it Markdown itself (`code`, `fence`, `autolink`,
`path`), so text from entries (`[x](javascript:…)`, `<script>`, a leading `#`) shows as text in
any Markdown reader, and code goes in spans and fences longer than any backtick run inside.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from pipeline.release.layout import (
    CATEGORY_INDEX,
    FULL_DATASET,
    LLMS_TXT,
    OPENAPI,
    SEARCH_INDEX,
    category_file,
    category_markdown,
    category_page,
    entry_document,
    entry_markdown,
    entry_page,
)
from pipeline.release.pages import (
    SHARED_FILTERS,
    SHARED_GLOBALS,
    TEMPLATES,
    DocumentEnvironment,
    PageError,
    macro_text,
    notice_due,
    shown_sample,
)


class Markdown(str):
    """Text that is Markdown already: printed as it is, never escaped again."""


_SPECIAL = re.compile(r"([\\`*_\[\]<>|~])")
_ENTITY = re.compile(r"&(?=#?\w+;)")
# What makes a line a heading, a list item or a rule when it starts it.
_BLOCK_START = re.compile(r"^(?:#{1,6}(?=\s|$)|[+-](?=\s|$)|[-=]+\s*$)")
_ORDERED_START = re.compile(r"^(\d{1,9})([.)])(?=\s|$)")
# What closes a heading when it ends one: a run of `#` after a space (`# Channel #` is the
# heading "Channel").
_CLOSING_HASHES = re.compile(r"(?<=\s)#+$")
# What may make markup anywhere in a text, and what may when it starts one.
_MARKUP_CHARACTER = re.compile(r"[\\`*_\[\]<>|~&]")
_MARKUP_START = re.compile(r"[#+=-]|\d")
_SAFE_PATH = re.compile(r"^[a-z0-9][a-z0-9./-]*$")
_BACKTICKS = re.compile(r"`+")


# Texts escaped already (`markdown_text`): labels, reasons, dates and states recur on every
# entry's Markdown, some 40 texts each. Only short ones are kept, at most `_ESCAPED_LIMIT`.
_ESCAPED: dict[str, str] = {}
_ESCAPED_LIMIT, _ESCAPED_LENGTH = 16_384, 200


def markdown_text(value: Any) -> str:
    """`value` as inline Markdown text that reads as written: on one line, with every
    character that could make markup (emphasis, links, HTML, code, entities; a heading, list
    or rule at the start; the closing `#`s of a heading at the end) backslash-escaped."""
    if isinstance(value, Markdown):
        return value
    if value is None:
        return ""
    if type(value) is int:  # digits, perhaps after a minus: never markup
        return str(value)
    if type(value) is not str:
        return _escaped(str(value))
    if (escaped := _ESCAPED.get(value)) is None:
        escaped = _escaped(value)
        if len(value) <= _ESCAPED_LENGTH:
            if len(_ESCAPED) >= _ESCAPED_LIMIT:
                _ESCAPED.clear()
            _ESCAPED[value] = escaped
    return escaped


def _escaped(value: str) -> str:
    """`markdown_text` of a text."""
    text = " ".join(value.split())
    if not _MARKUP_CHARACTER.search(text):
        if not _MARKUP_START.match(text) and not text.endswith("#"):
            return text
    else:
        text = _ENTITY.sub(r"\\&", _SPECIAL.sub(r"\\\1", text))
    text = _BLOCK_START.sub(lambda match: "\\" + match.group(), text, count=1)
    if text.endswith("#"):
        text = _CLOSING_HASHES.sub(r"\\\g<0>", text, count=1)
    return _ORDERED_START.sub(r"\1\\\2", text)


def strong_mention(mention: tuple[str, str, str]) -> Markdown:
    """A text split around a mention (`auth_mention`), with the mention in bold: each part
    escaped as `markdown_text`, keeping the spaces that join them."""
    before, said, after = (markdown_text(part) for part in mention)
    if before and mention[0][-1].isspace():
        before += " "
    if after and mention[2][0].isspace():
        after = " " + after
    return Markdown(f"{before}**{said}**{after}")


def code_span(value: Any) -> Markdown:
    """`value` on one line as inline code, fenced by more backticks than any run inside."""
    text = " ".join(str(value).split())
    if "`" not in text:  # most: a method and path, an address
        return Markdown(f"`{text}`")
    fence = "`" * (max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markdown(f"{fence}{pad}{text}{pad}{fence}")


def code_block(value: Any, info: str = "") -> Markdown:
    """`value` as a fenced code block, its lines kept, with a fence no line inside can close."""
    text = str(value).replace("\r\n", "\n").strip("\n")
    fence = "`" * max(3, max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    return Markdown(f"{fence}{info}\n{text}\n{fence}")


def sample_block(text: str) -> Markdown:
    """A sample response as a code block: indented and marked as JSON when it is JSON."""
    shown, is_json = shown_sample(text)
    return code_block(shown, "json" if is_json else "")


# An absolute http(s) address that makes a Markdown autolink: its scheme in any case, as in
# a URL (and as the page's link takes it).
_AUTOLINK = re.compile(r"https?://[^\s<>`]+", re.IGNORECASE)


def autolink(url: Any) -> Markdown:
    """An absolute http(s) address as a Markdown autolink; anything else as inline code."""
    text = str(url)
    if _AUTOLINK.fullmatch(text):
        return Markdown(f"<{text}>")
    return code_span(text)


def link_path(path: str) -> Markdown:
    """A path of the release (made from slugs) as a link target."""
    if not _SAFE_PATH.match(path.removeprefix("../")):
        raise ValueError(f"not a path of the release: {path!r}")
    return Markdown(path)


def relative(target: str, start: str) -> str:
    """The path of the release file `target` as linked from the file `start` (both from the
    release's root)."""
    return "../" * start.count("/") + target


@cache
def environment() -> Environment:
    env = DocumentEnvironment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=False,
        finalize=markdown_text,
        undefined=StrictUndefined,
        auto_reload=False,  # rendered thousands of times a run: no check of the files each time
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        code=code_span,
        strong_mention=strong_mention,
        fence=code_block,
        autolink=autolink,
        path=link_path,
        sample=sample_block,
        markdown=Markdown,  # a part drawn by a macro of the templates
    )
    env.filters.update(SHARED_FILTERS)
    env.globals.update(
        SHARED_GLOBALS,
        relative=relative,
        category_markdown=category_markdown,
        entry_markdown=entry_markdown,
        entry_document=entry_document,
        entry_page=entry_page,
        category_page=category_page,
        category_file=category_file,
        FULL_DATASET=FULL_DATASET,
        SEARCH_INDEX=SEARCH_INDEX,
        CATEGORY_INDEX=CATEGORY_INDEX,
        OPENAPI=OPENAPI,
    )
    return env


def by_name(api: Mapping[str, Any]) -> tuple[str, str]:
    """The order of the Markdown lists: by name, then id."""
    return api["name"].lower(), api["id"]


def listing(api: Mapping[str, Any], successor_name: str | None = None) -> dict[str, Any]:
    """What `llms.txt` and a category's Markdown say of a presented entry (kept for every
    entry while the entries stream), with the name of its successor if it has one."""
    score, lifecycle = api.get("builderScore"), api.get("lifecycle")
    return {
        "id": api["id"], "name": api["name"], "category": api["category"],
        "description": api.get("description"), "provider": api.get("provider"),
        "status": {"state": api["status"]["state"]},
        "builderScore": score and {"grade": score["grade"], "label": score["label"],
                                   "provisional": score.get("provisional")},
        # said only when not active, as an entry's card shows it
        "lifecycle": {"state": lifecycle["state"], "successor": lifecycle.get("successor"),
                      "successorName": successor_name}
        if lifecycle and lifecycle["state"] != "active" else None,
    }


def render_entry_markdown(api: Mapping[str, Any], meta: Mapping[str, Any],
                          labels: Mapping[str, str], key: str = "",
                          successor_name: str | None = None) -> str:
    """The Markdown of one presented entry; `key` is its `static_key`, which the file keeps;
    `successor_name` the name of the entry its lifecycle names as successor."""
    here = entry_markdown(api["id"])
    return environment().get_template("entry.md").render(
        meta=meta, api=api, category=labels.get(api["category"]), here=here, static_key=key,
        successor_name=successor_name)


def nightly_markdown_parts(api: Mapping[str, Any], meta: Mapping[str, Any],
                           successor_name: str | None = None) -> dict[str, str]:
    """The marked parts of an entry's Markdown, by the name of their marks, drawn as
    `render_entry_markdown` draws them: a notice only where it marks one (`notice_due`)."""
    parts = {
        "status": nightly_macro("status_part")(api, successor_name),
        "score": nightly_macro("score_part")(api),
        "endpoints": nightly_macro("endpoints_part")(api),
        "release": nightly_macro("release_part")(api, meta, entry_markdown(api["id"])),
    }
    if notice_due(api):
        parts["notice"] = nightly_macro("notice_part")(api, successor_name)
    return parts


@cache
def nightly_macro(name: str) -> Callable[..., str]:
    """A macro of the Markdown's nightly parts as its text (`macro_text`), looked up once a
    process."""
    return macro_text(environment().get_template("_entry_nightly.md").module, name)


def listing_files(meta: Mapping[str, Any], categories: Sequence[Mapping[str, Any]],
                  listings: Iterable[Mapping[str, Any]]) -> dict[str, bytes]:
    """`llms.txt` and the Markdown of every category, from every entry's `listing`."""
    env = environment()
    by_category: dict[str, list[Mapping[str, Any]]] = {c["id"]: [] for c in categories}
    for api in sorted(listings, key=by_name):
        by_category.setdefault(api["category"], []).append(api)
    files = {
        LLMS_TXT: env.get_template("llms.txt").render(
            meta=meta, categories=categories, by_category=by_category, here=LLMS_TXT),
    }
    for category in categories:
        here = category_markdown(category["id"])
        files[here] = env.get_template("category.md").render(
            meta=meta, category=category, apis=by_category[category["id"]], here=here)
    return {path: text.encode() for path, text in files.items()}


# A link of the templates; text from entries has every `]` escaped, so it never makes one.
# (`](` first and the escape looked for behind it: a pattern that starts with a literal is
# searched for that literal, not tried at every character.)
_LINK = re.compile(r"\]\((?<!\\\]\()([^()\s]+)\)")
# A fenced code block (CommonMark): its opening fence of three or more backticks or tildes,
# then every line up to a closing fence of the same character at least as long, or the end.
_FENCED_CODE = re.compile(
    r"^ {0,3}(?:(`{3,})[^`\n]*|(~{3,})[^\n]*)"
    r"(?:.*?\n {0,3}(?(1)\1`*|\2~*)[ \t]*(?=\n|\Z)|.*)",
    re.MULTILINE | re.DOTALL,
)
# A backslash escape, or a code span: a backtick run, then the shortest text within its
# paragraph up to a run of the same length. A run without one is literal backticks.
_ESCAPE_OR_CODE_SPAN = re.compile(
    r"\\.|(`+)(?!`)(?:(?:[^\n]|\n(?![ \t]*\n))+?(?<!`)\1(?!`))?", re.DOTALL)


def _code_left_out(match: re.Match[str]) -> str:
    """A code span as a space (its text is no link, and joins no link around it); an escape or
    literal backticks as written."""
    matched = match.group()
    return " " if match.group(1) and len(matched) > len(match.group(1)) else matched


def outside_code(text: str) -> str:
    """Markdown text with its fenced code blocks and code spans left out: CommonMark reads
    no link inside code, where text from entries (samples, auth headers, addresses) is kept
    as written, `](` and all."""
    if "`" not in text and "~~~" not in text:
        return text
    text = _FENCED_CODE.sub("", text)
    return _ESCAPE_OR_CODE_SPAN.sub(_code_left_out, text) if "`" in text else text


def markdown_problems(path: str, text: str, release: Container[str]) -> list[str]:
    """Every link of the Markdown file at `path` to a path that is not one of `release`.

    Only a file with such a target is read again without its code (`outside_code`, some
    fifty times slower than the scan for links): `](` in code is rare, and no link."""
    folder = posixpath.dirname(path)

    def missing(targets: list[str]) -> list[str]:
        return [target for target in targets
                if posixpath.normpath(posixpath.join(folder, target)) not in release]

    targets = missing(_LINK.findall(text))
    if targets:
        targets = missing(_LINK.findall(outside_code(text)))
    return [f"{path}: link to {target} leads to no file of the release" for target in targets]


def check_markdown(files: Mapping[str, bytes], release: Mapping[str, bytes]) -> None:
    """Raise PageError when a Markdown file links to a path that is not a file of the release."""
    problems = []
    for path, data in sorted(files.items()):
        problems += markdown_problems(path, data.decode("utf-8"), release)
    if problems:
        raise PageError(problems)
