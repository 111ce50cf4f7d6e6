"""The Atom feed of changes (RFC 4287): what `api/changes.json` says, for feed readers.

Built with the standard library's ElementTree, so every text is escaped by the XML writer,
and checked before the swap (`check_feed`) for what RFC 4287 requires of a feed and of
each entry, so a broken feed refuses the release like any other broken document.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from xml.etree import ElementTree

from pipeline.contract import xml_safe

ATOM = "http://www.w3.org/2005/Atom"
ElementTree.register_namespace("", ATOM)
FEED_TITLE = "API Directory: changes"
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


def _item(document: Mapping[str, Any], base_url: str) -> tuple[str, str, str, str]:
    """(title, summary, link, kind) of one change or event document."""
    kind = document.get("kind", "state")
    name, entry = document.get("name"), document.get("entry")
    page = f"{base_url}/apis/{entry}.html" if entry else f"{base_url}/index.html"
    if kind == "state":
        return (f"{name}: {document['from']} → {document['to']}",
                f"{name} went from {document['from']} to {document['to']} in the latest check.",
                page, kind)
    if kind == "lifecycle":
        return (f"{name} is now {document['to']}",
                f"{name}'s lifecycle went from {document['from']} to {document['to']}.",
                page, kind)
    if kind == "added":
        return f"{name} added", f"{name} was added to the directory.", page, kind
    if kind == "retired":
        return (f"{name} retired", f"{name} was retired from the directory.",
                f"{base_url}/index.html", kind)
    version = document.get("version", "")
    folder = version.replace("+", "_")
    return (f"Release {version}", f"Release {version} was published.",
            f"{base_url}/api/releases/{folder}/apis.json", kind)


def render_feed(meta: Mapping[str, Any], items: Sequence[Mapping[str, Any]],
                base_url: str) -> bytes:
    """The feed of `items` (state changes and events as published in changes.json, newest
    first), updated at the release's `meta.generated`."""
    base_url = base_url.rstrip("/")
    feed = ElementTree.Element(_q("feed"))
    _sub(feed, "id", f"{base_url}/changes.atom")
    _sub(feed, "title", FEED_TITLE)
    _sub(feed, "subtitle", "Entries that changed state or lifecycle, entries added and "
                           "retired, and new releases.")
    _sub(feed, "updated", meta["generated"])
    author = _sub(feed, "author")
    _sub(author, "name", "API Directory")
    _sub(author, "uri", f"{base_url}/index.html")
    _sub(feed, "link", rel="self", type="application/atom+xml",
         href=f"{base_url}/changes.atom")
    _sub(feed, "link", rel="alternate", type="application/json",
         href=f"{base_url}/api/changes.json")
    _sub(feed, "rights", meta["license"])
    for document in items:
        title, summary, link, kind = _item(document, base_url)
        identity = "|".join(str(document.get(key, "")) for key in
                            ("kind", "entry", "from", "to", "at", "version"))
        entry = _sub(feed, "entry")
        _sub(entry, "id", uuid.uuid5(_ID_SPACE, identity).urn)
        _sub(entry, "title", title)
        _sub(entry, "updated", document["at"])
        _sub(entry, "link", rel="alternate", type="text/html", href=link)
        _sub(entry, "category", term=kind)
        _sub(entry, "summary", summary)
    ElementTree.indent(feed)
    return ElementTree.tostring(feed, encoding="utf-8", xml_declaration=True) + b"\n"


def feed_items(changes: Sequence[Mapping[str, Any]],
               events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """State changes and events as one list, newest first."""
    items = [*changes, *events]
    return sorted(items, key=lambda item: item["at"], reverse=True)


def check_feed(data: bytes) -> list[str]:
    """What RFC 4287 requires and `data` lacks: a well-formed `feed` with one id, title and
    updated, an author (for the feed, which every entry inherits), and each entry with one
    id (unique), title, updated and an alternate link."""
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
    return problems
