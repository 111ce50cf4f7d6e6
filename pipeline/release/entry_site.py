"""Each entry's page and Markdown, rendered, checked and written into the staged release; run
in the worker processes of `site`, so it loads only what drawing an entry needs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from pipeline.catalogue.entries import paused_garbage_collection
from pipeline.release.layout import entry_markdown
from pipeline.release.markdown import listing, markdown_problems, render_entry_markdown
from pipeline.release.pages import (
    card_html,
    entry_badges,
    entry_page,
    page_problems,
    presented_entry,
    render_entry_page,
    score_key,
)

if TYPE_CHECKING:
    from pipeline.judging.day_figures import DayFigures


@dataclass(frozen=True)
class SiteContext:
    """What every entry's page and Markdown are rendered and checked with."""

    staging: Path
    common: dict[str, Any]
    release: frozenset[str]  # every path of the finished release
    root_path: str


@dataclass(frozen=True)
class EntrySummary:
    """What the category pages and the Markdown lists keep of an entry."""

    category: str
    score_key: tuple[int, bool, str]
    card: str  # markup
    listing: dict[str, Any]


_context: SiteContext | None = None


def use_context(context: SiteContext) -> None:
    global _context
    _context = context


def write_entry_site(
    lines: Sequence[bytes],
    trends: Sequence[Sequence[DayFigures]],
) -> tuple[list[EntrySummary], list[str]]:
    """Render, check and write the page and Markdown of each entry (its line of `apis.json`);
    the entries' summaries and the problems found."""
    context = _context
    assert context is not None, "the site context is set before entries are written"
    meta, labels = context.common["meta"], context.common["labels"]
    summaries, problems = [], []
    folders = FolderFiles(context.staging)
    with paused_garbage_collection(), folders:
        for line, trend in zip(lines, trends, strict=True):
            api = presented_entry(orjson.loads(line))
            page, markdown = entry_page(api["id"]), entry_markdown(api["id"])
            badges = entry_badges(api)
            html = render_entry_page(api, context.common, trend, badges)
            text = render_entry_markdown(api, meta, labels)
            problems += page_problems(page, html, context.release, context.root_path)
            problems += markdown_problems(markdown, text, context.release)
            folders.create(page, html.encode())
            folders.create(markdown, text.encode())
            summaries.append(
                EntrySummary(api["category"], score_key(api), card_html(api, labels, badges),
                             listing(api))
            )
    return summaries, problems


class FolderFiles:
    """New files created under a folder by a descriptor of their own folder, opened once: two
    files an entry, so the path is not walked for each and no buffered file object is made."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, int] = {}

    def create(self, relative: str, data: bytes) -> None:
        folder, name = os.path.split(relative)
        if folder not in self.folders:
            self.folders[folder] = os.open(os.path.join(self.root, folder), os.O_RDONLY)
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666,
                         dir_fd=self.folders[folder])
        try:
            written = memoryview(data)
            while written:
                written = written[os.write(target, written):]
        finally:
            os.close(target)

    def __enter__(self) -> FolderFiles:
        return self

    def __exit__(self, *_: object) -> None:
        for descriptor in self.folders.values():
            os.close(descriptor)
        self.folders.clear()


def check_page(path: str, data: bytes) -> list[str]:
    """The problems of a page of the release (`page_problems`)."""
    assert _context is not None
    return page_problems(path, data.decode(), _context.release, _context.root_path)
