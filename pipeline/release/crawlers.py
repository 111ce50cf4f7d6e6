"""`sitemap.xml` and `robots.txt` for crawlers, at the root of a release with pages.

The sitemap protocol wants absolute addresses, so both are made from the address the release
is served from (`APIDIR_BASE_URL`). A sitemap holds at most 50,000 addresses: a larger site
gets a sitemap index (`sitemap.xml`) over numbered sitemaps (`sitemaps/1.xml`, …). The kept
releases under `api/releases/` are copies of documents already published, so crawlers are
asked to leave them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from pipeline.release.layout import (
    RELEASES_DIR,
    ROBOTS,
    SITEMAP,
    category_page,
    entry_page,
    sitemap_part,
)
from pipeline.release.pages import PageError, site_root

SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
SITEMAP_LIMIT = 50_000  # addresses in one sitemap, by the protocol (and 50 MB)
SITEMAP_BYTES = 50 * 1024 * 1024


def page_paths(entry_ids: Iterable[str], category_ids: Iterable[str]) -> list[str]:
    """Every page of a release, relative to its root: the index (the root itself), then the
    categories and the entries."""
    categories = [category_page(category_id) for category_id in category_ids]
    return ["", *categories, *sorted(entry_page(entry_id) for entry_id in entry_ids)]


def _site_base(base_url: str) -> str:
    return base_url.rstrip("/") + "/"


def _document(kind: str, item: str, addresses: list[str]) -> bytes:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', f'<{kind} xmlns="{SITEMAP_NS}">']
    lines += [f"<{item}><loc>{escape(address)}</loc></{item}>" for address in addresses]
    lines.append(f"</{kind}>\n")
    return "\n".join(lines).encode()


def sitemap_files(paths: list[str], base_url: str, limit: int = SITEMAP_LIMIT) -> dict[str, bytes]:
    """`sitemap.xml` listing the pages at `paths` on `base_url`; past `limit` pages, a sitemap
    index over numbered sitemaps of `limit` pages each."""
    base = _site_base(base_url)
    addresses = [base + path for path in paths]
    if len(addresses) <= limit:
        return {SITEMAP: _document("urlset", "url", addresses)}
    files = {
        sitemap_part(number): _document("urlset", "url", addresses[start : start + limit])
        for number, start in enumerate(range(0, len(addresses), limit), 1)
    }
    files[SITEMAP] = _document("sitemapindex", "sitemap", [base + path for path in files])
    return files


def robots_txt(base_url: str) -> bytes:
    """Every page and document may be crawled but the kept releases; the sitemap is named."""
    root = site_root(base_url)
    return (
        "# API Directory: crawl every page and document; the kept releases are copies.\n"
        "User-agent: *\n"
        f"Disallow: {root}{RELEASES_DIR}/\n"
        "\n"
        f"Sitemap: {_site_base(base_url)}{SITEMAP}\n"
    ).encode()


def crawler_files(entry_ids: Iterable[str], category_ids: Iterable[str],
                  base_url: str) -> dict[str, bytes]:
    """The sitemap (or sitemap index and its parts) and `robots.txt` of a release."""
    paths = page_paths(entry_ids, category_ids)
    return {**sitemap_files(paths, base_url), ROBOTS: robots_txt(base_url)}


def check_sitemaps(files: Mapping[str, bytes], release: Mapping[str, bytes], base_url: str,
                   limit: int = SITEMAP_LIMIT) -> None:
    """Raise PageError unless every sitemap of `files` keeps the protocol: well-formed XML in
    its namespace, at most `limit` addresses and 50 MB, each an address on `base_url` of a
    file of the release (of a sitemap, for the index)."""
    base = _site_base(base_url)
    problems = []
    for path, data in sorted(files.items()):
        if not path.endswith(".xml"):
            continue
        try:
            root = ElementTree.fromstring(data)
        except ElementTree.ParseError as exc:
            problems.append(f"{path}: not well-formed XML: {exc}")
            continue
        kind = root.tag.removeprefix(f"{{{SITEMAP_NS}}}")
        if kind not in ("urlset", "sitemapindex") or kind == root.tag:
            problems.append(f"{path}: the root is {root.tag}, not a sitemap's")
            continue
        locations = [loc.text or "" for loc in root.iter(f"{{{SITEMAP_NS}}}loc")]
        if len(locations) > limit or len(data) > SITEMAP_BYTES:
            problems.append(f"{path}: more than {limit} addresses or 50 MB")
        for location in locations:
            target = location.removeprefix(base) or "index.html"
            if not location.startswith(base) or urlsplit(location).query or (
                target not in release and target not in files
            ):
                problems.append(f"{path}: {location} is no file of the release at {base}")
    if problems:
        raise PageError(problems)
