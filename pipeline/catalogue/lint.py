"""Data lint: rules an entry must keep beyond the schema, so published data is usable as is."""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from collections.abc import Iterator
from urllib.parse import urlsplit

from pipeline.catalogue.credentials import credential_findings
from pipeline.contract import BIDI_CONTROL, EntryContent, absolute_uri

Loc = tuple[int | str, ...]
Lint = tuple[Loc, str, str]  # (field location, rule, message)

TAG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # whole: `$` would also end before a "\n"
SENTENCE_BREAK = re.compile(r"[.!?]\s+[A-Z0-9]")
URL = re.compile(r"https?://[^\s\"'<>]+")
# Words that point away from a fact instead of stating it: a field says something or is left out.
# An address (`example.com/pricing`) is tried only where a run of name characters starts, its
# labels taken once (possessive) and its path at most 300 characters: the pattern stays linear,
# where `\b(?:[\w-]+\.)+` tried every label of `ab.ab.ab.…` from every label (a 100 KB text
# took 36 s).
HEDGE = re.compile(
    r"\bnot (?:re)?stated\b|\brestated\b|\bpricing page\b|\bsee the (?:docs|documentation)\b"
    r"|\b(?:is|are|as) (?:only )?(?:listed|published|shown|advertised) (?:only )?on\b"
    r"|(?<![\w.-])(?:[\w-]+\.)++[a-z]{2,}/\S{0,300}?(?:pricing|fees)\b",
    re.IGNORECASE,
)


def _sample_request(entry: EntryContent) -> Iterator[Lint]:
    text = entry.sample_request
    if text is None:
        return
    try:
        words = shlex.split(text)
    except ValueError as exc:
        yield ("sampleRequest",), "sample-request-shell", f"is not a valid shell command: {exc}"
        return
    if not words or words[0] != "curl":
        yield ("sampleRequest",), "sample-request-curl", "must be a curl command"
        return
    urls = [word for word in words[1:] if URL.fullmatch(word)] or URL.findall(text)
    base_host = urlsplit(entry.base_url).hostname
    if not urls:
        yield ("sampleRequest",), "sample-request-url", "holds no http(s) URL"
    elif urlsplit(urls[0]).hostname != base_host:
        yield (
            ("sampleRequest",),
            "sample-request-host",
            f"URL host {urlsplit(urls[0]).hostname!r} is not the baseUrl host {base_host!r}",
        )


def _sample_response(entry: EntryContent) -> Iterator[Lint]:
    if entry.sample_response is None:
        return
    try:
        json.loads(entry.sample_response)
    except ValueError as exc:
        yield ("sampleResponse",), "sample-response-json", f"does not parse as JSON: {exc}"
    except RecursionError:
        yield ("sampleResponse",), "sample-response-json", "nests too deeply to parse as JSON"


def _addresses(entry: EntryContent) -> Iterator[Lint]:
    for name, value in (
        ("baseUrl", entry.base_url),
        ("docsUrl", entry.docs_url),
        ("openapiUrl", entry.openapi_url),
        ("statusPageUrl", entry.status_page_url),
    ):
        if value is not None and urlsplit(value).scheme != "https":
            yield (name,), "https-only", f"must be an https URL (got {value!r})"
        if value is not None and "@" in urlsplit(value).netloc:
            yield (name,), "url-credentials", "must not hold a user name or password"
        if value is not None and not _usable_port(value):
            yield (name,), "url-port", f"must have a port from 1 to 65535 (got {value!r})"
    if entry.base_url.endswith("/"):
        yield ("baseUrl",), "base-url-slash", "must not end with '/' (paths start with one)"
    for index, endpoint in enumerate(entry.endpoints or []):
        if endpoint.path is not None and not endpoint.path.startswith("/"):
            yield (
                ("endpoints", index, "path"),
                "endpoint-path-slash",
                f"must start with '/' (got {endpoint.path!r})",
            )
        elif endpoint.path is not None and (problem := _endpoint_url_problem(entry, endpoint.path)):
            yield ("endpoints", index, "path"), "endpoint-url", problem


def _usable_port(url: str) -> bool:
    """Whether `url`'s port, if it names one, is one a server can listen on: the URL rule takes
    any digits (`:0`, `:99999`), but the probe could never reach such an address, nor a reader."""
    try:
        return urlsplit(url).port != 0
    except ValueError:  # over 65535
        return False


_PLACEHOLDER = re.compile(r"\{[^}]*\}")


def _endpoint_url_problem(entry: EntryContent, path: str) -> str | None:
    """Why baseUrl + `path` (its `{placeholders}` filled) is no URL, if it is not: the probe
    calls that URL and the release publishes it as the entry's status URL, which the release's
    check holds to the URL rule, so one such path would fail the whole publish."""
    url = entry.base_url.rstrip("/") + _PLACEHOLDER.sub("x", path)
    try:
        absolute_uri(url)
    except ValueError as exc:
        return f"{exc} (in {url!r}, the URL it makes with baseUrl, which the release publishes)"
    return None


def _text(entry: EntryContent) -> Iterator[Lint]:
    description = entry.description
    if description is not None:
        stripped = description.strip()
        if not stripped.endswith((".", "!", "?")) or SENTENCE_BREAK.search(stripped[:-1]):
            yield ("description",), "one-sentence", "must be exactly one sentence"
    for index, tag in enumerate(entry.tags or []):
        if not TAG.fullmatch(tag):
            yield (
                ("tags", index),
                "tag-lower-case",
                f"must be lower-case words joined by hyphens (got {tag!r})",
            )


# What shows as nothing: spaces and line breaks, format characters (zero-width space, joiners,
# soft hyphen, byte-order mark…), controls, marks with no letter to sit on, unassigned and
# private code points, and the letters that are drawn blank (Hangul fillers, the blank
# braille pattern).
_UNSEEN_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cf", "Cc", "Cn", "Co", "Cs", "Mn", "Me"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def visible(text: str) -> bool:
    """Whether `text` shows at least one character: a name of spaces or zero-width spaces
    passes a length check and leaves the page's title, heading and links empty."""
    return any(not character.isspace() and character not in _BLANK_LETTERS
               and unicodedata.category(character) not in _UNSEEN_CATEGORIES
               for character in text)


def format_character(text: str) -> str | None:
    """The first invisible format character of `text` (Unicode category Cf: zero-width space,
    joiners, marks, soft hyphen…), other than the bidirectional controls `control-character`
    reports: in a name, it makes two names that read alike differ, or one look empty."""
    return next((character for character in text if unicodedata.category(character) == "Cf"
                 and not BIDI_CONTROL.match(character)), None)


def _labels(entry: EntryContent) -> Iterator[tuple[Loc, str]]:
    """The texts that name the entry or a part of it, shown as titles, headings and links."""
    yield ("name",), entry.name
    yield ("provider",), entry.provider
    for index, sdk in enumerate(entry.sdks or []):
        yield ("sdks", index, "language"), sdk.language
    for index, tier in enumerate(entry.pricing.tiers or [] if entry.pricing else []):
        yield ("pricing", "tiers", index, "name"), tier.name


def _shown_text(entry: EntryContent) -> Iterator[Lint]:
    """Labels hold a visible character and no invisible format character; a prose field,
    where set, holds a visible character (it says something or is left out)."""
    for loc, text in _labels(entry):
        if not visible(text):
            yield loc, "blank-text", (f"shows nothing (got {text!a}): it needs at least "
                                      "one visible character")
        elif (character := format_character(text)) is not None:
            yield (loc, "invisible-character", f"holds U+{ord(character):04X}, an invisible "
                   "format character, which has no place in a name: remove it")
    for loc, prose in _free_text(entry):
        if prose is not None and not visible(prose):
            yield loc, "blank-text", (f"shows nothing (got {prose!a}): it needs at least "
                                      "one visible character, or leave the field out")


def _free_text(entry: EntryContent) -> Iterator[tuple[Loc, str | None]]:
    """Every prose field of an entry, with its location."""
    yield ("description",), entry.description
    yield ("longDescription",), entry.long_description
    yield ("authDescription",), entry.auth_description
    yield ("rateLimit",), entry.rate_limit
    for index, endpoint in enumerate(entry.endpoints or []):
        yield ("endpoints", index, "description"), endpoint.description
    if entry.deprecated is not None:
        yield ("deprecated", "note"), entry.deprecated.note
    pricing = entry.pricing
    if pricing is None:
        return
    yield ("pricing", "details"), pricing.details
    if pricing.free_quota is not None:
        yield ("pricing", "freeQuota", "note"), pricing.free_quota.note
    for index, tier in enumerate(pricing.tiers or []):
        yield ("pricing", "tiers", index, "included"), tier.included
    if pricing.transaction_fee is not None:
        yield ("pricing", "transactionFee", "note"), pricing.transaction_fee.note


def _hedges(entry: EntryContent) -> Iterator[Lint]:
    for loc, text in _free_text(entry):
        match = HEDGE.search(text or "")
        if match:
            yield (
                loc,
                "hedged-field",
                f"says {match.group(0)!r} instead of a fact: state the provider's figure "
                "(with its unit and period, and the page in sources) or leave the field out",
            )


def _pricing(entry: EntryContent) -> Iterator[Lint]:
    pricing = entry.pricing
    if pricing is None:
        return
    start = pricing.starting_cents_per_month
    if pricing.model == "free" and start != 0:
        yield (
            ("pricing", "startingCentsPerMonth"),
            "pricing-free-start",
            f"must be 0 for the free model (got {start!r})",
        )
    if pricing.model == "enterprise" and start is not None:
        yield (
            ("pricing", "startingCentsPerMonth"),
            "pricing-enterprise-start",
            f"must be null for the enterprise model (got {start!r})",
        )
    prices = [tier.monthly_cents for tier in pricing.tiers or []]
    if prices != sorted(prices):
        yield (
            ("pricing", "tiers"),
            "pricing-tiers-order",
            f"must be sorted by monthlyCents ascending (got {prices})",
        )
    if entry.has_free_tier is False and pricing.free_quota is not None:
        yield (
            ("pricing", "freeQuota"),
            "pricing-free-quota",
            "must be null when hasFreeTier is false",
        )


def _credential_texts(entry: EntryContent) -> Iterator[tuple[Loc, str | None]]:
    """Every field that may show how to authenticate, and every address the prober calls:
    a real key in any of them would be published, and one in a URL sent every night."""
    yield ("authExample",), entry.auth_example
    yield ("sampleRequest",), entry.sample_request
    yield ("sampleResponse",), entry.sample_response
    yield ("baseUrl",), entry.base_url
    for index, endpoint in enumerate(entry.endpoints or []):
        yield ("endpoints", index, "path"), endpoint.path


def _credentials(entry: EntryContent) -> Iterator[Lint]:
    for loc, value in _credential_texts(entry):
        if value is not None:
            for finding in credential_findings(str(loc[-1]), value):
                yield (
                    loc,
                    "real-credential",
                    f"looks like a real credential: {finding}; use a placeholder "
                    "such as YOUR_API_KEY",
                )


def lint_entry(entry: EntryContent) -> list[Lint]:
    """Every lint problem of a schema-valid entry."""
    return [
        *_sample_request(entry),
        *_sample_response(entry),
        *_addresses(entry),
        *_text(entry),
        *_shown_text(entry),
        *_hedges(entry),
        *_pricing(entry),
        *_credentials(entry),
    ]
