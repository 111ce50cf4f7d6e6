"""Each entry's page and Markdown, rendered, checked and written into the staged release; run
in the worker processes of `site`, so it loads only what drawing an entry needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.processes import paused_garbage_collection
from pipeline.release.files import Folders
from pipeline.release.fragments import links_possible, proven_macros
from pipeline.release.layout import category_page, entry_document, entry_markdown, entry_page
from pipeline.release.markdown import (
    listing,
    markdown_problems,
    nightly_markdown_parts,
    render_entry_markdown,
)
from pipeline.release.pages import (
    card_html,
    entry_badges,
    kept_key,
    link_problems,
    may_splice,
    nightly_page_parts,
    page_problems,
    part_links,
    presented_entry,
    render_entry_page,
    score_key,
    spliced,
    static_key,
    trend_of,
)

if TYPE_CHECKING:
    from markupsafe import Markup

    from pipeline.judging.day_figures import SentDay


@dataclass(frozen=True)
class SiteContext:
    """What every entry's page and Markdown are rendered and checked with; `previous` is the
    live release the staged one replaces, if any, whose pages are spliced (`spliced`)."""

    staging: Path
    common: dict[str, Any]
    release: frozenset[str]  # every path of the finished release
    root_path: str
    previous: Path | None = None
    release_line: str = ""  # `pages.release_line`, drawn and checked once for the release


@dataclass(frozen=True)
class EntrySummary:
    """What the category pages and the Markdown lists keep of an entry, and whether its page
    and Markdown were spliced into those of the previous release rather than drawn whole."""

    category: str
    score_key: tuple[int, bool, str]
    card: str  # markup
    listing: dict[str, Any]
    spliced: bool = False


_context: SiteContext | None = None

# A file of the previous release larger than this is not read: it was not drawn by a template.
PREVIOUS_FILE_LIMIT = 4 << 20
# An entry's staged document larger than this is not read for its name.
DOCUMENT_LIMIT = 32 << 20


def use_context(context: SiteContext) -> None:
    global _context
    _context = context


def write_entry_site(
    lines: Sequence[bytes],
    trends: Sequence[Sequence[SentDay]],
) -> tuple[list[EntrySummary], list[str]]:
    """Render, check and write the page and Markdown of each entry (its line of `apis.json`);
    the entries' summaries and the problems found.

    An entry whose `static_key` its page and Markdown in the previous release kept gets those
    files with only their nightly parts drawn and checked again (`spliced`)."""
    context = _context
    assert context is not None, "the site context is set before entries are written"
    common, root_path, release = context.common, context.root_path, context.release
    meta, labels = common["meta"], common["labels"]
    summaries, problems = [], []
    with (paused_garbage_collection(), Folders(context.staging) as folders,
          Folders(context.previous) if context.previous is not None else nullcontext() as before):
        for line, trend in zip(lines, trends, strict=True):
            api = presented_entry(orjson.loads(line))
            page, markdown = entry_page(api["id"]), entry_markdown(api["id"])
            badges = entry_badges(api)
            key = static_key(api, common)
            successor = successor_name(folders, api)
            html = text = None
            if before is not None and may_splice(line):
                html, text = _spliced_files(before, api, key, trend, badges, problems, successor)
            if html is None or text is None:
                drawn = render_entry_page(api, common, trend, badges, key, successor)
                problems += page_problems(page, drawn, release, root_path)
                html = drawn.encode()
                drawn = render_entry_markdown(api, meta, labels, key, successor)
                problems += markdown_problems(markdown, drawn, release)
                text = drawn.encode()
                reused = False
            else:
                reused = True
            folders.create(page, html)
            folders.create(markdown, text)
            card = card_html(api, labels, badges, successor)
            if cards_proven():  # else read in its category page, whole (`site.write_site`)
                problems += link_problems(category_page(api["category"]), part_links(card),
                                          release, root_path)
            summaries.append(
                EntrySummary(api["category"], score_key(api), card, listing(api, successor),
                             reused)
            )
    return summaries, problems


def successor_name(staged: Folders, api: Mapping[str, Any]) -> str | None:
    """The name of the entry a presented entry's lifecycle names as its successor, from the
    successor's staged document (written before any page); None without one. Read only for
    the few entries that name a successor, so a release of any size keeps no table of names."""
    successor = (api.get("lifecycle") or {}).get("successor")
    if not successor:
        return None
    document = staged.read(entry_document(successor), DOCUMENT_LIMIT)
    if document is None:
        return None
    name = orjson.loads(document).get("api", {}).get("name")
    return name if isinstance(name, str) else None


def _spliced_files(
    before: Folders, api: Mapping[str, Any], key: str, trend: Sequence[SentDay],
    badges: Markup, problems: list[str], successor: str | None = None,
) -> tuple[bytes | None, bytes | None]:
    """The bytes of the entry's page and Markdown spliced into those of the previous release,
    with the problems of their new parts added to `problems`; (None, None) unless both kept
    `key`."""
    context = _context
    assert context is not None
    page, markdown = entry_page(api["id"]), entry_markdown(api["id"])
    old_page = before.read_bytes(page, PREVIOUS_FILE_LIMIT)
    if old_page is None or not kept_key(old_page, key):  # nothing drawn for a page not kept
        return None, None
    chart = trend_of(context.common, trend)
    page_parts = nightly_page_parts(api, chart, badges, context.release_line, successor)
    if (html := spliced(old_page, page_parts)) is None:
        return None, None
    old_markdown = before.read_bytes(markdown, PREVIOUS_FILE_LIMIT)
    if old_markdown is None or not kept_key(old_markdown, key):
        return None, None
    markdown_parts = nightly_markdown_parts(api, context.common["meta"], successor)
    if (text := spliced(old_markdown, markdown_parts)) is None:
        return None, None
    # The release line was checked once for every page; a part drawn by a macro whose tags
    # balance by construction is read only for links, in the few that may hold one; the trend
    # chart is drawn from numbers and dates alone by code whose tags its tests check for every
    # count of days.
    proven = proven_parts()
    for name in NIGHTLY_PAGE_MACROS:  # every part a macro draws: the release line is not
        part = page_parts[name]
        if name in proven and not links_possible(part):
            continue
        if name == "status":
            part = part.replace(chart, "", 1)
        problems += page_problems(page, part, context.release, context.root_path)
    problems += markdown_problems(markdown, "".join(markdown_parts.values()), context.release)
    return html, text


# The macro that draws each nightly part of a page (`pages.nightly_page_parts`).
NIGHTLY_PAGE_MACROS = {
    "badges": ("_macros.html", "entry_badges"),
    "notice": ("_entry_nightly.html", "deprecation_notice"),
    "status": ("_entry_nightly.html", "status_section"),
    "score": ("_entry_nightly.html", "score_section"),
    "endpoints": ("_entry_nightly.html", "endpoints_section"),
}


@cache
def proven_parts() -> frozenset[str]:
    """The nightly parts of a page whose macros balance for any entry (`fragments`)."""
    return frozenset(name for name, (template, macro) in NIGHTLY_PAGE_MACROS.items()
                     if macro in proven_macros(template))


@cache
def cards_proven() -> bool:
    """Whether a category page's cards balance for any entry (`fragments`): each is then read
    for its links alone, as it is drawn, and its page is checked without them."""
    return "api_card" in proven_macros("_macros.html")


def check_page(path: str, data: bytes) -> list[str]:
    """The problems of a page of the release (`page_problems`)."""
    assert _context is not None
    return page_problems(path, data.decode(), _context.release, _context.root_path)
