"""The site of a release: the reader pages, the Markdown for agents and the files for crawlers,
written into the staged release from its documents.

A release of 100,000 entries is streamed: the entries are read line by line from the staged
`apis.json`, and each entry's page and Markdown are rendered, checked and written at once
(in one worker process per core from `PARALLEL_FROM` entries on). Only what the category pages
and `llms.txt` list of each entry is kept: its card and its listing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import orjson

from pipeline.judging.day_figures import SentDay
from pipeline.processes import in_order, paused_garbage_collection, worker_count, worker_pool
from pipeline.release.crawlers import check_sitemaps, crawler_files
from pipeline.release.entry_site import (
    SiteContext,
    cards_proven,
    check_page,
    use_context,
    write_entry_site,
)
from pipeline.release.files import dataset_lines, dataset_meta, keep_only
from pipeline.release.layout import (
    CATEGORY_INDEX,
    ENTRY_PAGES,
    FULL_DATASET,
    INDEX_PAGE,
    LLMS_TXT,
    NOT_FOUND_PAGE,
    SEARCH_INDEX,
    category_markdown,
    category_page,
    entry_markdown,
    entry_page,
)
from pipeline.release.markdown import check_markdown, listing_files
from pipeline.release.pages import (
    PageError,
    asset_files,
    category_outline,
    page_context,
    page_problems,
    release_line,
    render_pages,
    site_root,
)
from pipeline.release.swap import write_file

# From this many entries on, pages are rendered in one worker process per core.
PARALLEL_FROM = 5000
_CHUNK = 200


def staged_paths(staging: Path) -> set[str]:
    """Every file of the staged release, relative to it."""
    found = set()
    for folder, _, names in os.walk(staging):
        relative = os.path.relpath(folder, staging)
        prefix = "" if relative == "." else relative.replace(os.sep, "/") + "/"
        found.update(prefix + name for name in names)
    return found


def _chunks(lines: Iterator[bytes], trends: Mapping[str, Sequence[SentDay]],
            ids: Sequence[str]) -> Iterator[tuple[list[bytes], list[Sequence[SentDay]]]]:
    position = 0
    while chunk := list(islice(lines, _CHUNK)):
        chunk_ids = ids[position : position + len(chunk)]
        position += len(chunk)
        yield chunk, [trends.get(entry_id, ()) for entry_id in chunk_ids]


@dataclass(frozen=True)
class SiteReport:
    """How many entries the site drew, and of them how many it spliced into the pages of the
    previous release (`entry_site.write_entry_site`)."""

    entries: int
    spliced: int

    def __str__(self) -> str:
        return (f"pages of {self.entries:,} entries, {self.spliced:,} spliced into the previous "
                "release's")


def write_site(staging: Path, base_url: str,
               trends: Mapping[str, Sequence[SentDay]] | None = None,
               workers: int | None = None, previous: Path | None = None) -> SiteReport:
    """The reader pages and assets, the Markdown for agents (`llms.txt`, one file
    per entry and category) and the sitemap and `robots.txt` for crawlers, rendered from the
    staged documents; each page's, Markdown file's and sitemap's links are checked. Raises
    PageError naming every page with a problem.

    `workers`: processes rendering the entries (default: one per core from `PARALLEL_FROM`
    entries on, else this process alone). `previous`: the live release this one replaces,
    whose entry pages are reused where only their nightly parts changed."""
    trends = trends or {}
    root_path = site_root(base_url)
    index = orjson.loads((staging / CATEGORY_INDEX).read_bytes())
    categories = list(index["categories"])
    category_ids = [category["id"] for category in categories]
    ids = [orjson.loads(line)["id"] for line in dataset_lines(staging / SEARCH_INDEX)]
    meta = dataset_meta(staging / SEARCH_INDEX)
    # A reused folder (`stage_and_swap`) loses the files of entries gone before the release's
    # paths are listed: no page may link to them.
    pages_folder = staging / ENTRY_PAGES
    pages_folder.mkdir(parents=True, exist_ok=True)
    keep_only(pages_folder, {os.path.basename(path) for entry_id in ids
                             for path in (entry_page(entry_id), entry_markdown(entry_id))})
    assets, asset_paths = asset_files()
    crawlers = crawler_files(ids, category_ids, base_url)
    release = frozenset({
        *staged_paths(staging), *assets, *crawlers, INDEX_PAGE, NOT_FOUND_PAGE, LLMS_TXT,
        *map(category_page, category_ids), *map(category_markdown, category_ids),
        *map(entry_page, ids), *map(entry_markdown, ids),
    })
    common = page_context(meta, categories, asset_paths)
    line = release_line(meta)
    context = SiteContext(staging, common, release, root_path,
                          previous if previous is not None and previous.is_dir() else None, line)
    for folder in {os.path.dirname(path) for path in (entry_page("x"), entry_markdown("x"))}:
        (staging / folder).mkdir(parents=True, exist_ok=True)
    if workers is None:
        workers = worker_count() if len(ids) >= PARALLEL_FROM else 1
    cards: dict[str, list[tuple[tuple[int, bool, str], str]]] = {c: [] for c in category_ids}
    # Every entry page spliced gets the release line drawn here: checked once, for them all.
    listings, problems = [], page_problems(entry_page("*"), line, release, root_path)
    reused = 0
    chunks = _chunks(dataset_lines(staging / FULL_DATASET), trends, ids)
    pool = None
    if workers > 1:
        pool = worker_pool(workers, use_context, (context,))
    else:
        use_context(context)
    try:
        with paused_garbage_collection():
            for summaries, found in in_order(pool, write_entry_site, chunks, workers * 4):
                problems += found
                for summary in summaries:
                    cards.setdefault(summary.category, []).append((summary.score_key,
                                                                   summary.card))
                    listings.append(summary.listing)
                    reused += summary.spliced
        ordered = {category: [card for _, card in sorted(members, key=lambda m: m[0])]
                   for category, members in cards.items()}
        del cards
        site = {**assets, **render_pages(context.common, ordered, root_path)}
        pages = [(path, data) for path, data in site.items() if path.endswith(".html")]
        if cards_proven():  # each card's links were read as it was drawn
            outlines = {category_page(category["id"]): category_outline(
                common, category, len(ordered[category["id"]])).encode()
                for category in categories}
            pages = [(path, outlines.get(path, data)) for path, data in pages]
        del ordered
        if pool is None:
            checked = [check_page(path, data) for path, data in pages]
        else:
            checked = list(pool.map(check_page, *zip(*pages, strict=True)))
    finally:
        if pool is not None:
            pool.shutdown()
    problems += [problem for found in checked for problem in found]
    if problems:
        raise PageError(sorted(problems))
    markdown = listing_files(meta, categories, listings)
    listed = dict.fromkeys(release, b"")
    check_markdown(markdown, listed)
    check_sitemaps(crawlers, listed, base_url)
    for relative, data in {**markdown, **crawlers, **site}.items():
        write_file(staging, relative, data)
    return SiteReport(len(ids), reused)
