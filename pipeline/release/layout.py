"""Where each file of a release lives: names only, read by every module that writes,
reads or links the release's files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FULL_DATASET = "api/apis.json"
CATEGORY_INDEX = "api/categories.json"
OPENAPI = "api/openapi.json"
RELEASES_DIR = "api/releases"
RELEASE_INDEX = "api/releases.json"
CHANGES = "api/changes.json"
SEARCH_INDEX = "api/search.json"
ENTRY_DOCUMENTS = "api/apis"
# Each entry's page and Markdown, beside the release's other pages.
ENTRY_PAGES = "apis"
# A dataset file: this line, one entry per line (a comma ends all but the last), then the meta.
DATASET_HEAD = b'{"apis":[\n'
DATASET_META = b'],"meta":'
# An entry document: this, the entry's line of the full dataset, then ENTRY_META, the meta, "}".
ENTRY_HEAD = b'{"api":'
ENTRY_META = b',"meta":'
# The files for readers, agents and crawlers at the root of a release with pages.
LLMS_TXT = "llms.txt"
SITEMAP = "sitemap.xml"
ROBOTS = "robots.txt"
NOT_FOUND_PAGE = "404.html"
INDEX_PAGE = "index.html"
# The pages' stylesheet, script and icon, each named by a hash of its content.
ASSETS_DIR = "assets"
# The changes as an Atom feed: at the root, since every path under api/ is served as JSON.
CHANGES_FEED = "changes.atom"

# Completes a staged release once its datasets are written (pages, release history):
# called with the staging folder, the release's meta and its entry count per category.
Completion = Callable[[Path, dict[str, Any], Mapping[str, int]], None]


def category_file(category_id: str) -> str:
    return f"api/categories/{category_id}.json"


# SemVer's build-metadata `+` is mangled by some object stores and CDNs (read as a space, or
# escaped twice), so a kept release's folder writes it `_`, which SemVer never uses: the folder
# name and the version map one to one (`2.0.0_20261121.1` holds `2.0.0+20261121.1`).
FOLDER_BUILD_SEPARATOR = "_"


def release_folder_name(version: str) -> str:
    """The folder name of a kept release: its version, safe for any static host."""
    return version.replace("+", FOLDER_BUILD_SEPARATOR)


def folder_version(name: str) -> str:
    """The version a kept release's folder holds (a folder from before safe names is named by
    the version itself)."""
    return name.replace(FOLDER_BUILD_SEPARATOR, "+")
def entry_document(entry_id: str) -> str:
    return f"{ENTRY_DOCUMENTS}/{entry_id}.json"


def entry_page(entry_id: str) -> str:
    return f"{ENTRY_PAGES}/{entry_id}.html"


def category_page(category_id: str) -> str:
    return f"categories/{category_id}.html"


def entry_markdown(entry_id: str) -> str:
    return f"{ENTRY_PAGES}/{entry_id}.md"


def category_markdown(category_id: str) -> str:
    return f"categories/{category_id}.md"


def sitemap_part(number: int) -> str:
    return f"sitemaps/{number}.xml"


def release_folder(version: str) -> str:
    return f"{RELEASES_DIR}/{release_folder_name(version)}"
