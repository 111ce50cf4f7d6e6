"""The Atom feed of changes (RFC 4287): what `api/changes.json` says, for feed readers.

Built with the standard library's ElementTree, so every text is escaped by the XML writer,
and checked before the swap (`check_feed`) for what RFC 4287 requires of a feed and of
each entry, so a broken feed refuses the release like any other broken document.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from xml.etree import ElementTree

from pipeline.contract import xml_safe
from pipeline.judging.changes import Change, Event
from pipeline.release.layout import (
    CHANGES,
    CHANGES_FEED,
    FULL_DATASET,
    INDEX_PAGE,
    entry_document,
    entry_page,
)
from pipeline.release.pages import STATE_LABELS

ATOM = "http://www.w3.org/2005/Atom"
ElementTree.register_namespace("", ATOM)
FEED_TITLE = "API Directory: changes"
HTML, JSON = "text/html", "application/json"
# Ids stay the same across releases (a reader shows an item once): a UUID from its content.
_ID_SPACE = uuid.UUID("9a4f3c1e-5b7d-4e2a-8c6f-1d2e3f4a5b6c")


def _q(name: str) -> str:
    return f"{{{ATOM}}}{name}"


def _sub(parent: ElementTree.Element, name: str, text: str | None = None,
         **attributes: str) -> ElementTree.Element:
    """A child element; its texts lose the characters XML 1.0 forbids, which ElementTree
    would write as they are (a name stored before `validate` refused them would otherwise
    make the feed, and so the release, not well-formed)."""
    safe = {key: xml_safe(value) for key, value in attributes.items()}
    element = ElementTree.SubElement(parent, _q(name), safe)
    if text is not None:
        element.text = xml_safe(text)
    return element


@dataclass(frozen=True)
class FeedLinks:
    """What the release publishing the feed holds, so that every link of the feed resolves in
    it: a reader keeps showing an item as long as the feed lists it (`APIDIR_CHANGES_DAYS`),
    while an older release is pruned (`APIDIR_RELEASES_KEPT`) and an entry retired meanwhile.

    `kept`: each kept release's version and the path of its dataset (as `api/releases.json`
    lists it); `entries`: the ids of the entries the release holds (of those the feed links at
    least: each item's holder, `FeedItem.holder`); `pages`: whether the release has reader pages."""

    base_url: str
    kept: Mapping[str, str] = field(default_factory=dict)
    entries: frozenset[str] = frozenset()
    pages: bool = True

    def _at(self, path: str) -> str:
        return f"{self.base_url.rstrip('/')}/{path}"

    def home(self) -> tuple[str, str]:
        """The directory itself: its index page, or its full dataset in a release of JSON
        alone."""
        if self.pages:
            return self._at(INDEX_PAGE), HTML
        return self._at(FULL_DATASET), JSON

    def entry(self, entry_id: str | None) -> tuple[str, str]:
        """An entry's event links what a feed reader opens in a browser, the entry's page (its
        document without pages); an entry the release no longer holds, the directory."""
        if entry_id is None or entry_id not in self.entries:
            return self.home()
        if self.pages:
            return self._at(entry_page(entry_id)), HTML
        return self._at(entry_document(entry_id)), JSON

    def release(self, version: str) -> tuple[str, str]:
        """A release links its own dataset while it is kept; once pruned, the change log,
        which still lists the release's event (the feed's items are its own): the current
        dataset is newer data than the item tells of."""
        return self._at(self.kept.get(version, CHANGES)), JSON


@dataclass(frozen=True)
class FeedItem:
    """A state change or event as `api/changes.json` publishes it (`document`), and the entry
    holding it (`held_by`): a rename moves an entry's history to the entry taking its id over,
    each item still telling of the id it was about, which the release no longer holds."""

    document: Mapping[str, Any]
    held_by: str | None = None

    @property
    def holder(self) -> str | None:
        """The entry whose page the item links: the one holding it, else the new id a
        rename's retired half names, else its own (None: a release's event)."""
        return (self.held_by or self.document.get("renamedTo")
                or self.document.get("entry"))


def _count(value: object) -> int | None:
    """A count as a kept release's line states it, if it is one (the file is read back)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _release_told(version: str, counts: object) -> str:
    """What a release's item says: how many APIs the release holds and how they stand, from
    its `counts` in `api/releases.json` (a release no longer listed: only that it was out)."""
    if not isinstance(counts, Mapping) or (total := _count(counts.get("total"))) is None:
        return f"Release {version} was published."
    by_state = counts.get("byState")
    states = [f"{n:,} {STATE_LABELS.get(state, str(state)).lower()}"
              for state, n in (by_state.items() if isinstance(by_state, Mapping) else ())
              if _count(n)]
    held = f"{total:,} API{'' if total == 1 else 's'}"
    if states:
        held += ": " + (", ".join(states[:-1]) + " and " if len(states) > 1 else "") + states[-1]
    return f"Release {version} was published with {held}."


def _item(item: FeedItem, links: FeedLinks, counts: Mapping[str, object],
          descriptions: Mapping[str, str]) -> tuple[str, str, tuple[str, str], str]:
    """(title, summary, (link, its media type), kind) of one change or event: an entry's
    links the entry holding it, and its text names the id it tells of (by that id where a
    rename moved it since, `changes._name`) and the entry holding it now, and, added, what
    the API does (`descriptions`, by id); a release's tells what it holds (`counts`, by
    version)."""
    document = item.document
    kind = document.get("kind", "state")
    if kind == "release":
        version = document.get("version", "")
        return (f"Release {version}", _release_told(version, counts.get(version)),
                links.release(version), kind)
    entry, holder = document.get("entry"), item.holder
    title, summary = _told(document)
    if kind == "added" and (description := descriptions.get(str(holder))):
        summary += f" {description}"
    if holder not in (entry, document.get("renamedTo")):
        # an item named by its own id (moved by a rename) need not say that id again
        summary += (f" Its history is held by {holder} now." if document.get("name") == entry
                    else f" It was listed as {entry} then; it is listed as {holder} now.")
    retired = kind == "retired" and holder == entry  # its history held by no entry
    return title, summary, links.home() if retired else links.entry(holder), kind


def _told(document: Mapping[str, Any]) -> tuple[str, str]:
    """(title, summary) of an entry's change or event."""
    kind = document.get("kind", "state")
    name, entry = document.get("name"), document.get("entry")
    if kind == "state":
        return (f"{name}: {document['from']} → {document['to']}",
                f"{name} went from {document['from']} to {document['to']} in the latest check.")
    if kind == "lifecycle":
        return (f"{name} is now {document['to']}",
                f"{name}'s lifecycle went from {document['from']} to {document['to']}.")
    if kind == "added" and (former := document.get("renamedFrom")):
        # named by its id where a later rename moved it: the id is said once
        said = f"{former} was renamed {entry}" if name == entry else (
            f"{name} is listed as {entry}, no longer as {former}")
        return f"{name} renamed from {former}", f"{said}; its history carries over."
    if kind == "added":
        return f"{name} added", f"{name} was added to the directory."
    if kind == "retired" and (taker := document.get("renamedTo")):
        return f"{entry} renamed to {taker}", (
            f"{entry} was renamed {taker}." if name == taker
            else f"{name} is listed as {taker}, no longer as {entry}.")
    return f"{name} retired", f"{name} was retired from the directory."


def render_feed(meta: Mapping[str, Any], items: Sequence[FeedItem], links: FeedLinks,
                counts: Mapping[str, object] | None = None,
                descriptions: Mapping[str, str] | None = None) -> bytes:
    """The feed of `items` (state changes and events as published in changes.json, newest
    first), updated at the release's `meta.generated`, each linking a file of the release
    (`links`); a release's item says what it holds, from `counts` by version (the kept
    releases' in `api/releases.json`), an entry's of being added what the API does, from
    `descriptions` by id (those the release holds)."""
    base_url = links.base_url.rstrip("/")
    feed = ElementTree.Element(_q("feed"))
    _sub(feed, "id", f"{base_url}/changes.atom")
    _sub(feed, "title", FEED_TITLE)
    _sub(feed, "subtitle", "Entries that changed state or lifecycle, entries added and "
                           "retired, and new releases.")
    _sub(feed, "updated", meta["generated"])
    author = _sub(feed, "author")
    _sub(author, "name", "API Directory")
    _sub(author, "uri", links.home()[0])
    _sub(feed, "link", rel="self", type="application/atom+xml",
         href=f"{base_url}/changes.atom")
    _sub(feed, "link", rel="alternate", type="application/json",
         href=f"{base_url}/api/changes.json")
    _sub(feed, "rights", meta["license"])
    for item in items:
        document = item.document
        title, summary, (link, media_type), kind = _item(item, links, counts or {},
                                                         descriptions or {})
        identity = "|".join(str(document.get(key, "")) for key in
                            ("kind", "entry", "from", "to", "at", "version"))
        entry = _sub(feed, "entry")
        _sub(entry, "id", uuid.uuid5(_ID_SPACE, identity).urn)
        _sub(entry, "title", title)
        _sub(entry, "updated", document["at"])
        _sub(entry, "link", rel="alternate", type=media_type, href=link)
        _sub(entry, "category", term=kind)
        _sub(entry, "summary", summary)
    ElementTree.indent(feed)
    return ElementTree.tostring(feed, encoding="utf-8", xml_declaration=True) + b"\n"


def feed_items(changes: Sequence[Change], events: Sequence[Event]) -> list[FeedItem]:
    """State changes and events as one list, newest first, each with the entry holding it."""
    items = [FeedItem(item.document(), item.holder) for item in (*changes, *events)]
    return sorted(items, key=lambda item: item.document["at"], reverse=True)


def check_feed(data: bytes, release: Path | None = None) -> list[str]:
    """What RFC 4287 requires and `data` lacks: a well-formed `feed` with one id, title and
    updated, an author (for the feed, which every entry inherits), and each entry with one
    id (unique), title, updated and an alternate link; with `release`, the folder the feed
    is published in, every address it names there that holds no file."""
    try:
        feed = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        return [f"not well-formed XML: {exc}"]
    if feed.tag != _q("feed"):
        return [f"the root element is {feed.tag}, not an Atom feed"]
    problems = []
    for name in ("id", "title", "updated"):
        if len(feed.findall(_q(name))) != 1:
            problems.append(f"the feed needs exactly one {name}")
    if feed.find(f"{_q('author')}/{_q('name')}") is None:
        problems.append("the feed needs an author with a name")
    seen: set[str] = set()
    for number, entry in enumerate(feed.findall(_q("entry")), start=1):
        for name in ("id", "title", "updated"):
            if len(entry.findall(_q(name))) != 1:
                problems.append(f"entry {number} needs exactly one {name}")
        identity = entry.findtext(_q("id"))
        if identity in seen:
            problems.append(f"entry {number} repeats the id {identity}")
        seen.add(identity or "")
        if not any(link.get("rel", "alternate") == "alternate"
                   for link in entry.findall(_q("link"))):
            problems.append(f"entry {number} needs an alternate link (it has no content)")
    if release is not None:
        problems += [f"{address} names no file of the release"
                     for address in _missing_addresses(feed, release)]
    return problems


def _missing_addresses(feed: ElementTree.Element, release: Path) -> list[str]:
    """The addresses on the feed's own base (its `self` link's folder) that name no file in
    `release`: a reader keeps an item for weeks, so its link must outlive the release that
    wrote it."""
    own = next((link.get("href", "") for link in feed.iter(_q("link"))
                if link.get("rel") == "self"), "")
    base = own.removesuffix(CHANGES_FEED)
    if not own or base == own:
        return []
    addresses = [link.get("href", "") for link in feed.iter(_q("link"))]
    addresses += [uri.text or "" for uri in feed.iter(_q("uri"))]
    return sorted({address for address in addresses if address.startswith(base)
                   and not _holds(release, address.removeprefix(base))})


def _holds(release: Path, path: str) -> bool:
    """Whether `path` (relative, as in an address) names a file inside `release`."""
    parts = PurePosixPath(path).parts
    return bool(parts) and ".." not in parts and not path.startswith("/") and (
        release.joinpath(*parts).is_file())
