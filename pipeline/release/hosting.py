"""How a static host serves a release: headers per path, the JSON 404 under `api/`, and the
`404.html` every release carries for any other missing address.

One set of rules, written three ways: the `_headers` and `_redirects` files published at
the root of every release (Netlify / Cloudflare Pages style hosts), the nginx site config
under `deploy/nginx/` (kept in step by the tests, which compare its answers with these
rules), and `apidir serve`, which reads the published `_headers` and `_redirects` back.

Caching by path: what never changes under its name (a kept release's folder, the assets named
by a hash of their content) is cached for a year as immutable; the live documents, replaced by
each release, are reused for five minutes and then revalidated by ETag, so a new release is
seen within five minutes and an unchanged document costs a 304.

A `_headers` rule applies to the path asked for, whatever the answer: a rule for all of
`/api/releases/*` would have such a host send a miss there (a release not yet published) as
immutable, and a client keep the 404 for a year. So `_headers` names immutable only what the
release holds and no later release can take (`release_header_rules`): each asset file, each
kept folder of the newest release's day, and the earlier days' folders by the shortest
beginnings of their dates that no later day shares (`kept_folder_patterns`); any other path
there gets the host's own short, revalidated caching.

No two rules give one path the same header: Cloudflare Pages joins the values of such a
header with a comma (two `max-age`s in one `Cache-Control`) while others keep one of them;
and a path cannot be exempted from a matching rule (Cloudflare's `! Name` detaches a header,
but Netlify does not know it), so no rule spans the kept folders for theirs to override.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from html import escape
from pathlib import Path

from pipeline.contract import ErrorBody, NotFoundError
from pipeline.release.layout import (
    ASSETS_DIR,
    CATEGORY_INDEX,
    CHANGES,
    CHANGES_FEED,
    FULL_DATASET,
    LLMS_TXT,
    NOT_FOUND_PAGE,
    OPENAPI,
    RELEASE_INDEX,
    RELEASES_DIR,
    ROBOTS,
    SEARCH_INDEX,
    SITEMAP,
    entry_document,
    entry_markdown,
    entry_page,
)

NOT_FOUND_JSON = "api/404.json"
HEADERS_FILE = "_headers"
REDIRECTS_FILE = "_redirects"
# The renamed entries' redirects as an nginx map (`deploy/nginx/apidir.conf` includes it).
RENAMED_MAP = "_renamed.map"

# Pages load only their own stylesheet and script; nothing from elsewhere, no inline code.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'"
)
# A header may also forbid framing, which a <meta> policy cannot.
HEADER_CSP = PAGE_CSP + "; frame-ancestors 'none'"

LIVE_CACHE = "public, max-age=300, must-revalidate"
IMMUTABLE_CACHE = "public, max-age=31536000, immutable"

# The methods of a read-only release, and what a page on another origin may send and read:
# a conditional or ranged GET needs a preflight (If-None-Match, If-Range and a Range of more
# than one range are no simple headers), and a script reads the ETag, the Content-Range of a
# 206 and Accept-Ranges only when they are exposed (Last-Modified is readable anyway).
ALLOWED_METHODS = "GET, HEAD, OPTIONS"
CORS_HEADERS: tuple[tuple[str, str], ...] = (
    ("Access-Control-Allow-Origin", "*"),
    ("Access-Control-Allow-Methods", ALLOWED_METHODS),
    ("Access-Control-Allow-Headers",
     "If-None-Match, If-Modified-Since, If-Match, If-Unmodified-Since, Range, If-Range"),
    ("Access-Control-Max-Age", "86400"),
    ("Access-Control-Expose-Headers", "ETag, Last-Modified, Content-Range, Accept-Ranges"),
)

# Paths that each release replaces (its kept release folders and assets are immutable:
# `release_header_rules`).
LIVE_PATHS: tuple[str, ...] = (
    "/",
    "/index.html",
    "/categories/*",
    "/apis/*",
    "/api/categories/*",
    "/api/apis/*",
    "/sitemaps/*",
    *(f"/{path}" for path in (FULL_DATASET, CATEGORY_INDEX, OPENAPI, RELEASE_INDEX, CHANGES,
                              NOT_FOUND_JSON, SEARCH_INDEX, CHANGES_FEED, LLMS_TXT, SITEMAP,
                              ROBOTS, NOT_FOUND_PAGE)),
)


@dataclass(frozen=True)
class HeaderRule:
    """Headers a host adds to every response whose path matches `pattern` (`*` matches all)."""

    pattern: str
    headers: tuple[tuple[str, str], ...]


# The rules of every release; `release_header_rules` adds those of what it holds for good.
HEADER_RULES: tuple[HeaderRule, ...] = (
    HeaderRule(
        "/*",
        (
            ("Content-Security-Policy", HEADER_CSP),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "strict-origin-when-cross-origin"),
        ),
    ),
    HeaderRule("/api/*", (*CORS_HEADERS, ("Content-Type", "application/json; charset=utf-8"))),
    *(HeaderRule(pattern, (("Cache-Control", LIVE_CACHE),)) for pattern in LIVE_PATHS),
)

# Cloudflare Pages reads at most this many rules from `_headers`.
HOST_RULE_LIMIT = 100
# A name a host's URL pattern holds as it is: no splat, placeholder, space or escape.
PATTERN_SAFE_NAME = re.compile(r"[A-Za-z0-9._+~-]+")


def _by_number(name: str) -> list[int | str]:
    """Orders release folders by their numbers (`…_20261121.10` after `…_20261121.9`)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"([0-9]+)", name)]


# A kept release's folder: its version's interface and separator, the UTC day it was published
# on and its number that day (`2.0.0_20261121.3`; `+` for a folder from before safe names).
DATED_FOLDER = re.compile(r"(?P<stem>.+[_+])(?P<day>[0-9]{8})\.[0-9]+")


def closed_beginning(day: str, newest: str) -> str | None:
    """The shortest beginning of the date `day` (yyyymmdd) that no date from `newest` on
    begins with (`202610` for 20261015 when the newest is 20261121), or None for `newest`
    itself, whose next release takes the next number."""
    return next((day[:length] for length in range(1, len(day) + 1)
                 if day[:length] < newest[:length]), None)


def kept_folder_patterns(names: Iterable[str]) -> list[str]:
    """The URL patterns that make the kept release folders `names` immutable, newest first,
    and nothing a later release could take.

    A release is named by the UTC day it is published on, so no release can come to a day
    before the newest folder's: the folders of those days take one pattern per closed
    beginning of their dates (`/api/releases/2.0.0_202610*`: all of October 2026, whatever
    of it is kept, pruned or never published), the newest day's one per folder
    (`/api/releases/2.0.0_20261121.3/*`), as does a folder not named by a release. A year
    of nightly releases takes fewer than ten patterns, not 365. Each has one `*`, which
    Cloudflare Pages and Netlify both take inside a name, matching across slashes. A name a
    pattern could not hold as it is gets none: its files are revalidated, never kept wrongly."""
    safe = sorted((name for name in names if PATTERN_SAFE_NAME.fullmatch(name)),
                  key=_by_number, reverse=True)
    dated = {name: match for name in safe if (match := DATED_FOLDER.fullmatch(name))}
    newest = max((match["day"] for match in dated.values()), default="")
    spans = {f"{match['stem']}{beginning}" for match in dated.values()
             if (beginning := closed_beginning(match["day"], newest)) is not None}
    patterns: list[str] = []
    for name in safe:
        span = next((span for span in spans if name.startswith(span)), None)
        pattern = f"/{RELEASES_DIR}/{name}/*" if span is None else f"/{RELEASES_DIR}/{span}*"
        if pattern not in patterns:
            patterns.append(pattern)
    return patterns


def immutable_patterns(release: Path) -> list[str]:
    """The URL patterns of what never changes in the release at `release`: one per asset file
    (`/assets/<name>`), then those of its kept release folders (`kept_folder_patterns`, a
    published folder never changing), newest first. A name a pattern could not hold as it is
    gets none: its files are revalidated, never kept wrongly."""
    assets = sorted(path.name for path in _listed(release / ASSETS_DIR) if path.is_file())
    kept = (path.name for path in _listed(release / RELEASES_DIR) if path.is_dir())
    return [*(f"/{ASSETS_DIR}/{name}" for name in assets if PATTERN_SAFE_NAME.fullmatch(name)),
            *kept_folder_patterns(kept)]


def _listed(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:  # a release without pages has no assets; a bare one, no history
        return []


def release_header_rules(release: Path) -> tuple[HeaderRule, ...]:
    """The rules of the release at `release`: those of every release, and a year-long
    immutable `Cache-Control` for each of its asset files and kept release folders and nothing
    else, so a path there that is not yet published gets no year-long 404. At 100,000 entries
    as at ten, a rule per folder or span of days, not per file; past the host's limit (more
    releases on the newest day than it has room for) the oldest go without (revalidated
    rather than cached for the year)."""
    room = HOST_RULE_LIMIT - len(HEADER_RULES)
    return (*HEADER_RULES,
            *(HeaderRule(pattern, (("Cache-Control", IMMUTABLE_CACHE),))
              for pattern in immutable_patterns(release)[:room]))


# Netlify semantics: a rule applies only where no file matches the path.
REDIRECT_RULES: tuple[tuple[str, str, int], ...] = (("/api/*", "/" + NOT_FOUND_JSON, 404),)


def matching_headers(path: str, rules: Iterable[HeaderRule] = HEADER_RULES
                     ) -> list[tuple[str, str]]:
    """Every header the rules give the URL path `path`, in order, repeats included."""
    return [header for rule in rules if fnmatch.fnmatchcase(path, rule.pattern)
            for header in rule.headers]


def headers_for(path: str, rules: Iterable[HeaderRule] = HEADER_RULES) -> dict[str, str]:
    """The headers the rules give the URL path `path` (where two rules set one header, which
    the shipped rules never do, the later wins)."""
    return dict(matching_headers(path, rules))


def render_headers_file(rules: Iterable[HeaderRule] = HEADER_RULES) -> bytes:
    lines = ["# Response headers per path (Netlify / Cloudflare Pages `_headers` format)."]
    for rule in rules:
        lines.append(rule.pattern)
        lines.extend(f"  {name}: {value}" for name, value in rule.headers)
    return ("\n".join(lines) + "\n").encode()


# RFC 9110 §5.1 and §5.5: a name is a token; a value holds no control character but a tab.
HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """The lines of a host file with their numbers as an editor counts them: split at line
    feeds only (str.splitlines also splits at \\x1c or \\x85, which would then go unseen)."""
    for number, line in enumerate(text.split("\n"), 1):
        yield number, line.removesuffix("\r")


def parse_headers_file(text: str) -> list[HeaderRule]:
    """Rules from a `_headers` file: a path line, then indented `Name: value` lines.

    A header no client could read is refused here, with its line, rather than sent: a name
    that is not a token, a value with a control character (which aiohttp refuses to send,
    closing every connection).
    """
    rules: list[tuple[str, list[tuple[str, str]]]] = []
    for number, line in numbered_lines(text):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            rules.append((line.strip(), []))
            continue
        name, colon, value = line.strip(" \t").partition(":")
        name, value = name.strip(" \t"), value.strip(" \t")
        if not colon or not rules:
            raise ValueError(f"line {number}: expected 'Name: value' under a path")
        if not HEADER_NAME.fullmatch(name):
            raise ValueError(f"line {number}: {name!r} is not a header name (letters, digits "
                             "and !#$%&'*+-.^_`|~ only)")
        if CONTROL_CHARACTER.search(value):
            raise ValueError(f"line {number}: a control character in the value of {name}")
        rules[-1][1].append((name, value))
    return [HeaderRule(pattern, tuple(headers)) for pattern, headers in rules]


def renamed_rules(renamed: Mapping[str, str],
                  holds: Callable[[str], bool] = lambda _: True) -> list[tuple[str, str, int]]:
    """A permanent redirect from each former id's document, page and Markdown to those of the
    entry now holding it (`renamed`: former id to new id), so links to the old id keep
    working; only to a file the release `holds` (a release without pages has none)."""
    return [(f"/{address(former)}", f"/{address(taker)}", 301)
            for former, taker in sorted(renamed.items())
            for address in (entry_document, entry_page, entry_markdown)
            if holds(address(taker))]


def render_redirects_file(rules: Iterable[tuple[str, str, int]] = REDIRECT_RULES) -> bytes:
    lines = ["# A renamed entry's former addresses redirect to its own; a path under /api/ with "
             "no file answers with the JSON 404 body (`_redirects`)."]
    lines.extend(f"{source}  {target}  {status}" for source, target, status in rules)
    return ("\n".join(lines) + "\n").encode()


def parse_redirects_file(text: str) -> list[tuple[str, str, int]]:
    """Rules from a `_redirects` file: `source target status` on each line."""
    rules = []
    for number, line in numbered_lines(text):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or not re.fullmatch(r"[0-9]{3}", parts[2]):
            raise ValueError(f"line {number}: expected 'source target status'")
        rules.append((parts[0], parts[1], int(parts[2])))
    return rules


def not_found_document() -> bytes:
    """The body of every 404 under `api/`: what was not found and where to look instead."""
    body = ErrorBody(
        error=NotFoundError(
            message=(
                "No such document in this release. The full dataset is api/apis.json; "
                "one API is api/apis/{id}.json with an id from api/search.json; a category "
                "is api/categories/{categoryId}.json with one of categoryIds."
            )
        )
    )
    return (json.dumps(body.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()


# What a reader who missed can still fetch from a release without pages: its JSON documents.
BARE_NOT_FOUND_LINKS: tuple[tuple[str, str], ...] = (
    (FULL_DATASET, "every API"),
    (CATEGORY_INDEX, "the categories"),
    (OPENAPI, "the interface description"),
)


def bare_not_found_page(root_path: str) -> bytes:
    """The `404.html` of a release published without its reader pages (which draws its own
    over it): the shipped nginx site and `apidir serve` answer any missing address outside
    `api/` with `404.html`, and without one nginx sent its own page, the preview bare text.
    It stands alone (that release has no stylesheet); its links start at `root_path`, the
    site's path on its host, since a host serves it at any depth."""
    links = "\n".join(
        f'<li><a href="{escape(root_path + path)}">{escape(path)}</a>: {text}</li>'
        for path, text in BARE_NOT_FOUND_LINKS
    )
    return (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(PAGE_CSP)}">\n'
        "<title>Not found · API Directory</title>\n</head>\n<body>\n<main>\n"
        "<h1>Not found</h1>\n<p>No document of the API Directory has this address. "
        "This release publishes its data as JSON:</p>\n"
        f"<ul>\n{links}\n</ul>\n</main>\n</body>\n</html>\n"
    ).encode()


def render_renamed_map(rules: Iterable[tuple[str, str, int]]) -> bytes:
    """The redirects of `rules` as the lines of an nginx `map` of `$uri` to the new address
    (ids are slugs: nothing to quote but the addresses themselves)."""
    lines = ["# A renamed entry's former addresses and where they moved (nginx map lines)."]
    lines.extend(f'"{source}" "{target}";' for source, target, _ in rules)
    return ("\n".join(lines) + "\n").encode()


def renamed_ids(claims: Iterable[tuple[str, Iterable[str]]],
                published: Container[str]) -> dict[str, str]:
    """Each former id of the published entries (`claims`: id, its formerIds) that names no
    published entry itself, and the entry now holding it: the addresses to redirect."""
    return {former: entry_id for entry_id, former_ids in claims for former in former_ids
            if former not in published}


def redirect_files(renamed: Mapping[str, str] | None = None,
                   holds: Callable[[str], bool] = lambda _: True) -> dict[str, bytes]:
    """`_redirects` and `_renamed.map`: each former id of `renamed` (former id to the id of
    an entry the release publishes) redirected to the files the release `holds`, listed
    before the 404 rule (a host takes the first rule that matches)."""
    moved = renamed_rules(renamed or {}, holds)
    return {REDIRECTS_FILE: render_redirects_file([*moved, *REDIRECT_RULES]),
            RENAMED_MAP: render_renamed_map(moved)}


def host_files(root_path: str, renamed: Mapping[str, str] | None = None,
               holds: Callable[[str], bool] = lambda _: True) -> dict[str, bytes]:
    """The files a release carries for its static host, with or without its pages (whose
    own `404.html` replaces the bare one), but `_headers`, which names what the staged release
    holds (`release_header_rules`) and is written once it is whole; `root_path` is the site's
    path on its host. `renamed` and `holds`: as `redirect_files` takes them; a release with
    pages has its redirects written again once they are drawn (`swap.stage_redirects`)."""
    return {
        **redirect_files(renamed, holds),
        NOT_FOUND_JSON: not_found_document(),
        NOT_FOUND_PAGE: bare_not_found_page(root_path),
    }
