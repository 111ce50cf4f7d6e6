"""Reader pages: static HTML rendered from the same documents a release publishes as JSON.

Every page is rendered by Jinja2 with autoescaping, so text from entries always shows as
text. Pages link to one another and to their assets by relative paths only, so the release
works from any folder of any static host (and from the file system). They load nothing
from elsewhere: one stylesheet and one script of their own, named by a hash of their
content, under a strict Content-Security-Policy. The index lists the APIs from the search
index (`api/search.json`), never from the whole dataset; each page names its Markdown alternate.
`404.html`, which a host serves at any missing address, alone links from the site's root (the
path of the base address). Before a release is written, every page is checked for balanced
tags and for links that lead to files of the release.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Callable, Container, Iterable, Mapping, MutableMapping, Sequence
from datetime import date, datetime, timedelta
from functools import cache, lru_cache
from html import unescape
from io import StringIO
from keyword import iskeyword as is_python_keyword
from pathlib import Path
from types import BuiltinFunctionType, FunctionType
from typing import Any
from urllib.parse import urlsplit

import orjson
from jinja2 import Environment, FileSystemLoader, StrictUndefined, nodes, select_autoescape
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.runtime import Macro
from markupsafe import Markup, escape

from pipeline.contract import (
    BIDI_CONTROL,
    ONLINE_NOTE,
    APIEntry,
    Pricing,
    Uptime,
    fixed_fee_text,
    number_text,
    price_text,
)
from pipeline.judging.day_figures import SentDay
from pipeline.judging.score import (
    MIN_LATENCY_DAYS,
    MIN_LATENCY_SAMPLES,
    NO_ENDPOINT_CHECKABLE,
    latency_wait,
    round_half_up,
)
from pipeline.release.hosting import PAGE_CSP
from pipeline.release.layout import (
    ASSETS_DIR,
    INDEX_PAGE,
    LLMS_TXT,
    NOT_FOUND_PAGE,
    SEARCH_INDEX,
    category_markdown,
    category_page,
    entry_document,
    entry_markdown,
    entry_page,
)
from pipeline.release.presented import with_defaults

TEMPLATES = Path(__file__).parent / "templates"
STATIC = TEMPLATES / "static"
# Cards the index shows at first, and again with each "Show more".
INDEX_PAGE_SIZE = 100

STATE_LABELS = {
    "live": "Live",
    "online": "Online",
    "unreachable": "Unreachable",
    "unchecked": "Not checked",
}
AUTH_LABELS = {
    "bearer": "Bearer token",
    "api-key": "API key",
    "oauth2": "OAuth 2.0",
    "basic": "HTTP basic",
    "hmac": "HMAC signature",
    "none": "None",
}
NO_AUTH_HEADER = "# No auth required"
LIFECYCLE_LABELS = {
    "active": "Active",
    "degraded": "Degraded",
    "failing": "Failing",
    "dead": "Dead",
    "deprecated": "Deprecated",
}
FAILURE_LABELS = {
    "dead": "dead (404/410 or no such host)",
    "blocked": "blocked (bot challenge or rate limit)",
    "transient": "transient (server error, timeout or reset)",
    "tls": "TLS (certificate or handshake)",
}
# Why an endpoint answered as it did, or why it failed (`EndpointStatus.reason`: a probe's
# reason or its error class), in a reader's words; a code not here is shown as it is.
REASON_LABELS = {
    "auth": "needs credentials",
    "rate_limited": "rate limited",
    "bot_challenge": "bot challenge",
    "not_found": "not found",
    "method_not_allowed": "method not allowed",
    "redirect": "redirected",
    "server_error": "server error",
    "other": "an error status",
    "dns": "host name not found",
    "tls": "TLS certificate or handshake failed",
    "refused": "connection refused",
    "connect_timeout": "timed out connecting",
    "read_timeout": "timed out waiting for an answer",
    "reset": "connection reset",
    "blocked": "host resolves to a private address: not called",
    "malformed": "address not valid",
    "protocol": "broken answer",
    "redirect_loop": "too many redirects",
}
# Why an entry never probed shows no status, in the words its page and Markdown share: a run
# whose network was down is not counted, so it is as if no run had come.
NOT_CHECKED_YET = "no run has probed this API yet"
# What an entry's uptime says without a probe in its widest window: said once, not as "no
# probes" for each of the three windows within it.
NO_UPTIME = "No probes in the last 30 days"
CORS_LABELS = {
    "yes": "yes: a web page on another site may read its answers",
    "no": "no: answers carry no Access-Control-Allow-Origin for other sites",
    "unknown": "unknown (nothing answered yet)",
}
TREND_DAYS = 30


class PageError(RuntimeError):
    """A rendered page is malformed or links to a file the release does not have."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("pages failed their check:\n  " + "\n  ".join(problems))
        self.problems = problems


def site_root(base_url: str) -> str:
    """The path the site is served at, from its base address: `/` for `https://x.test`."""
    return urlsplit(base_url).path.rstrip("/") + "/"


# --- presentation helpers (Jinja filters) ----------------------------------------------------


@lru_cache(maxsize=8192)
def checked_text(value: str | None) -> str:
    """`2026-11-21 03:00 UTC` from an RFC 3339 stamp (cached: a night's probes share a few
    thousand seconds, and an entry's page and Markdown say each of its stamps twice)."""
    if not value:
        return ""
    stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return stamp.strftime("%Y-%m-%d %H:%M UTC")


def share_text(value: float | None) -> str:
    """`99.5%` for a share of 0.995, to a tenth rounded half up as the rubric rounds (1/16 is
    `6.3%`); `no probes` when there is none. `100%` says every probe answered and `0%` none
    did, so a share short of either is never rounded to it: 0.9996 shows `99.9%`, 0.0004
    `0.1%`."""
    if value is None:
        return "no probes"
    tenths = round_half_up(value * 1000)
    if 0 < value < 1:
        tenths = min(max(tenths, 1), 999)
    return f"{tenths / 10:.1f}".rstrip("0").rstrip(".") + "%"


def uptime_basis_text(uptime: Mapping[str, Any], window: str) -> str:
    """What a window's uptime share is counted from, to read beside it: `12 probes on 3 of 7
    days` (`4 probes` for the last day); '' without probes. One probe is 100 % as surely as a
    thousand: the count tells them apart."""
    evidence = (uptime.get("evidence") or {}).get(window)
    if not evidence or not evidence["probes"]:
        return ""
    probes = evidence["probes"]
    counted = f"{probes:,} probe{'' if probes == 1 else 's'}"
    if window == "last1d":
        return counted
    days = window.removeprefix("last").removesuffix("d")
    return f"{counted} on {evidence['days']} of {days} days"


def cents_text(cents: int | None, currency: str | None = None) -> str:
    """A price of the entry's pricing in its currency (`price_text`), or that none is stated."""
    if cents is None:
        return "not stated"
    return price_text(cents, currency)


def paid_from_cents(pricing: Mapping[str, Any]) -> int | None:
    """The least a paid plan costs a month: the cheapest tier above $0, else the starting
    price when above $0; None when no paid price is stated."""
    prices = [tier["monthlyCents"] for tier in pricing.get("tiers") or ()
              if tier.get("monthlyCents")]
    if starting := pricing.get("startingCentsPerMonth"):
        prices.append(starting)
    return min(prices, default=None)


def pricing_text(pricing: Mapping[str, Any] | None, has_free_tier: bool | None = None) -> str:
    """What an entry costs, each fact said once: `free`; a freemium API's free tier and what
    its paid plans start at (`free tier, paid from $29/month`); any other model with its price
    (`subscription, from $19.95/month`; `pay-as-you-go, no monthly fee, free tier`). A free
    model with "from $0/month" and "free tier" after it said free three times."""
    pricing = pricing or {}
    model, starting = pricing.get("model"), pricing.get("startingCentsPerMonth")
    if model == "freemium":
        return ", ".join(("freemium" if has_free_tier is False else "free tier",
                          _paid_beyond(pricing)))
    said = [model or "not stated"]
    if starting:
        said.append(f"from {cents_text(starting, pricing.get('currency'))}/month")
    elif starting == 0 and model not in (None, "free"):
        said.append("no monthly fee")
    if has_free_tier and model != "free":
        said.append("free tier")
    return ", ".join(said)


def _paid_beyond(pricing: Mapping[str, Any]) -> str:
    """What a freemium API's use past its free tier costs, in a few words: its cheapest paid
    plan a month, else how it is charged where the entry states a price per use or a fee
    (its "Price per use" or "Transaction fee" beside it says how much), else that no price is
    stated."""
    if paid := paid_from_cents(pricing):
        return f"paid from {cents_text(paid, pricing.get('currency'))}/month"
    if pricing.get("unitCost"):
        return "then priced per use"
    if pricing.get("transactionFee"):
        return "then a fee per transaction"
    return "paid price not stated"


# What an entry's free quota says of its renewal (`freeQuota.recurring`), where it says it:
# never of an unlimited one, which has no period to renew.
RENEWAL_WORDS = {True: "renewed each period", False: "not renewed"}
UNLIMITED = "unlimited"


def reason_text(reason: str) -> str:
    """An endpoint's reason code (`not_found`, `tls`) as a reader's words (`REASON_LABELS`)."""
    return REASON_LABELS.get(reason, reason)


# What an entry without a free quota says of its free tier (`hasFreeTier`): none, one whose
# size the provider does not give, or nothing either way.
NO_QUOTA_WORDS = {False: "no free tier", True: "a free tier, its size not given"}


def free_quota_text(quota: Mapping[str, Any] | None, has_free_tier: bool | None = None) -> str:
    """`1,000 requests/day, renewed each period` with its note: a builder weighs a monthly
    allowance above a one-time credit, so whether it recurs is said. Without one, what the
    entry says of its free tier (`NO_QUOTA_WORDS`; `none stated` where it says nothing), as
    the score's Pricing reasons do."""
    if not quota:
        return NO_QUOTA_WORDS.get(has_free_tier, "none stated")
    said = []
    if quota.get("amount") is not None:
        unit = f" {quota['unit']}" if quota.get("unit") else ""
        said.append(f"{number_text(quota['amount'])}{unit}/{quota.get('period')}")
    unlimited = quota.get("period") == UNLIMITED
    renewal = RENEWAL_WORDS.get(quota.get("recurring"))
    if renewal is not None and not unlimited:
        said.append(renewal)
    parts = [", ".join(said)] if said else []
    if quota.get("note"):
        parts.append(quota["note"])
    return " — ".join(parts) or (UNLIMITED if unlimited else f"per {quota.get('period')}")


# A token of a JSON text: a string, a mark of its structure, or a number or literal.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"|[{}\[\],:]|[^\s{}\[\],:"]++')
_JSON_CLOSING = {"{": "}", "[": "]"}


def _not_json(constant: str) -> float:
    """Refuses `NaN` and `Infinity`, which Python's parser takes but JSON has not."""
    raise ValueError(f"{constant} is not JSON")


def _is_json(text: str) -> bool:
    """Whether `text` is JSON, and so may be indented and labelled as JSON."""
    try:
        json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return False
    return True


def indented_json(text: str) -> str:
    """A JSON text indented as `json.dumps(..., indent=2)` would, with every token kept as
    written: a parse and dump would turn `9.90` into `9.9`, `1e5` into `100000.0` and
    `1e400` into `Infinity`, and keep one of two equal keys."""
    tokens = _JSON_TOKEN.findall(text)
    shown, depth = [], 0
    for number, token in enumerate(tokens):
        if token in _JSON_CLOSING:
            if number + 1 < len(tokens) and tokens[number + 1] == _JSON_CLOSING[token]:
                shown.append(token)  # empty: `{}`, `[]`, as json.dumps draws it
                continue
            depth += 1
            shown.append(token + "\n" + "  " * depth)
        elif token in ("}", "]"):
            if shown and shown[-1] in _JSON_CLOSING:
                shown.append(token)
                continue
            depth -= 1
            shown.append("\n" + "  " * depth + token)
        elif token == ",":
            shown.append(",\n" + "  " * depth)
        elif token == ":":
            shown.append(": ")
        else:
            shown.append(token)
    return "".join(shown)


def pricing_facts(pricing: Mapping[str, Any] | None) -> list[tuple[str, str, str]]:
    """The pricing facts an entry states beyond its model, price and free quota (price per use,
    transaction fee, monthly minimum, sandbox), each as (element id, label, text): only the
    ones set, so neither page nor Markdown says more than the entry does."""
    if not pricing:
        return []
    facts, currency = [], pricing.get("currency")
    if unit_cost := pricing.get("unitCost"):
        facts.append(("unit-cost", "Price per use",
                      f"{cents_text(unit_cost['amountCents'], currency)} per "
                      f"{number_text(unit_cost['per'])} {unit_cost['unit']}"))
    if fee := pricing.get("transactionFee"):
        fixed = (f" + {fixed_fee_text(fee['fixedCents'], currency)}" if fee.get("fixedCents")
                 else "")
        note = f" ({fee['note']})" if fee.get("note") else ""
        facts.append(("transaction-fee", "Transaction fee",
                      f"{number_text(fee['percent'])}%{fixed} per transaction{note}"))
    if (minimum := pricing.get("monthlyMinimumCents")) is not None:
        facts.append(("monthly-minimum", "Monthly minimum",
                      "none" if minimum == 0
                      else f"{cents_text(minimum, currency)}/month once live"))
    if (sandbox := pricing.get("sandbox")) is not None:
        facts.append(("sandbox", "Sandbox", "yes: a free sandbox or test mode to build against"
                      if sandbox else "no free sandbox or test mode"))
    return facts


@lru_cache(maxsize=16)
def shown_sample(text: str | None) -> tuple[str, bool]:
    """A sample response indented for reading when it is JSON, otherwise as written; and
    whether it is JSON. Its tokens are always as the entry wrote them, so what the page shows
    and its copy button copies is the provider's answer. Kept for the few entries in flight:
    page and Markdown show the same."""
    if not text:
        return "", False
    if _is_json(text):
        return indented_json(text), True
    return text.strip(), False


def sample_text(text: str | None) -> str:
    """A sample response indented for reading when it is JSON; otherwise as written."""
    return shown_sample(text)[0]


def https_text(https: Mapping[str, Any]) -> str:
    """What an entry's page and Markdown say of its transport: `yes, TLSv1.3; certificate
    expires in 60 days`, or that the base address is plain HTTP."""
    if not https.get("enabled"):
        return "no: the base address is plain HTTP"
    said = f"yes, {https['tlsVersion']}" if https.get("tlsVersion") else "yes"
    if (days := https.get("certDaysLeft")) is not None:
        said += f"; {certificate_text(days)}"
    return said


def certificate_text(days: int) -> str:
    """When a certificate expires, from its days left at the check: `expires in 1 day`,
    `expires today`, `expired 3 days ago` (a negative count is a certificate already out)."""
    if days == 0:
        return "certificate expires today"
    count = f"{abs(days)} day{'' if abs(days) == 1 else 's'}"
    return f"certificate expires in {count}" if days > 0 else f"certificate expired {count} ago"


def source_links(sources: Sequence[str]) -> list[tuple[str, str]]:
    """Each source of an entry's facts with the text its link shows: its host (`frankfurter.dev`),
    so a reader sees where a fact comes from before following it; a host two sources share
    shows their paths too, and sources still alike are numbered."""
    hosts = [(urlsplit(source).hostname or source).removeprefix("www.") for source in sources]
    shared = {host for host in hosts if hosts.count(host) > 1}
    texts = []
    for source, host in zip(sources, hosts, strict=True):
        if host in shared:
            parts = urlsplit(source)
            host += parts.path.rstrip("/") + (f"?{parts.query}" if parts.query else "")
        texts.append(host)
    alike = {text for text in texts if texts.count(text) > 1}
    seen: dict[str, int] = {}
    for number, text in enumerate(texts):
        if text in alike:
            seen[text] = seen.get(text, 0) + 1
            texts[number] = f"{text} ({seen[text]})"
    return list(zip(sources, texts, strict=True))


def directionless(text: str) -> str:
    """An entry's name or provider as shown inside `<bdi>`: without explicit direction controls,
    since an isolate's end (PDI) of its own would close the `<bdi>` early and let an override
    reorder the site's words after it."""
    return BIDI_CONTROL.sub("", text)


def isolated_text(text: str) -> str:
    """Entry text where no `<bdi>` can hold it (a page's title): `directionless`, isolated
    (FSI … PDI), so it never reorders the site's words around it."""
    return f"\u2068{directionless(text)}\u2069"


def grade_band(grade: str) -> str:
    """The class that colours a grade badge by its band: `grade-b` for B (and B+ or B-)."""
    return f"grade-{grade[0].lower()}"


def auth_mention(description: str | None, auth_type: str) -> tuple[str, str, str] | None:
    """The auth description split around its first mention of the auth type's label (a whole
    word or phrase, in any case): `("Send it as a ", "Bearer token", " in the header.")`, so the
    page says the label once, inside the sentence; None when the description does not name it."""
    if not description or auth_type == "none":
        return None
    found = re.search(rf"\b{re.escape(AUTH_LABELS[auth_type])}\b", description, re.IGNORECASE)
    if found is None:
        return None
    return description[:found.start()], found.group(), description[found.end():]


SUBSCORE_NAMES = (("pricing", "Pricing"), ("latency", "Latency"), ("depth", "Depth"))
# Why a sub-score is not counted, said beside the sub-scores a grade comes from instead
# (Latency's from the entry's own evidence: `latency_wanting`).
_UNCOUNTED_WHY = {
    "pricing": "Pricing is not stated",
    "depth": "Depth has nothing to measure",
}


def notice_due(api: Mapping[str, Any]) -> bool:
    """Whether an entry's page and Markdown say its lifecycle under its name, in a notice,
    rather than in its status: when it is deprecated, which a reader learns before how to use
    it."""
    lifecycle = api.get("lifecycle")
    return bool(lifecycle) and lifecycle["state"] == "deprecated"


def any_endpoint_checked(endpoints: Sequence[Mapping[str, Any]]) -> bool:
    """Whether an endpoint carries a status of its own: the page's endpoints table has a
    Status column only then, rather than a heading over empty cells."""
    return any(endpoint.get("status") for endpoint in endpoints)


def free_only(entry: Mapping[str, Any]) -> bool:
    """Whether an entry is free and nothing else (pricing model `free`): its card badges it
    "Free", where "Free tier" would suggest a paid product past the tier."""
    return (entry.get("pricing") or {}).get("model") == "free"


def latency_wanting(score: Mapping[str, Any]) -> str:
    """Why Latency does not count yet, in its reason's words (`latency_wait`) from the entry's
    own evidence (`builderScore.evidence.latency`: its probes and their UTC days in the window,
    against the minimums), so that a page says what its JSON holds, not only the rule."""
    reasons = (score.get("reasons") or {}).get("latency") or ()
    if reasons and reasons[0].startswith(NO_ENDPOINT_CHECKABLE):  # no probe will ever come
        return f"Latency has no probe to count: {reasons[0]}"
    evidence = (score.get("evidence") or {}).get("latency") or {}
    wait = latency_wait(evidence.get("probes"), evidence.get("days"),
                        evidence.get("minimumSamples", MIN_LATENCY_SAMPLES),
                        evidence.get("minimumDays", MIN_LATENCY_DAYS))
    return f"Latency is {wait}"


def grade_basis(score: Mapping[str, Any]) -> str | None:
    """What a grade comes from when a sub-score lacks its evidence (the grade is then
    provisional, or partial): why each is missing and which sub-scores count; None when all do.
    An entry without pricing is graded from Depth alone until Latency counts."""
    missing = [key for key, _ in SUBSCORE_NAMES if score.get(key) is None]
    if not missing:
        return None
    counted = [name for key, name in SUBSCORE_NAMES if key not in missing]
    why = ", and ".join(latency_wanting(score) if key == "latency" else _UNCOUNTED_WHY[key]
                        for key in missing)
    basis = (f"so this grade comes from {' and '.join(counted)} alone" if counted
             else "so no sub-score backs this grade")
    return f"{why}, {basis}."


def search_text(api: Mapping[str, Any]) -> str:
    """What the index's free-text search looks in: name, provider, description and tags."""
    words = [api.get("name"), api.get("provider"), api.get("description"), *(api.get("tags") or [])]
    return " ".join(w for w in words if w).lower()


def score_key(api: Mapping[str, Any]) -> tuple[int, bool, str]:
    """Best builder score first, a confirmed grade before a provisional one of the same
    percent, then by name; unscored entries last."""
    score = api.get("builderScore") or {}
    percent = score.get("percent")
    return (-(percent if percent is not None else -1), bool(score.get("provisional")),
            api["name"].lower())


@cache
def _no_uptime() -> dict[str, Any]:
    return Uptime().model_dump(mode="json")


def presented_entry(api: Mapping[str, Any]) -> dict[str, Any]:
    """An entry with every field of the contract present (null where unset), for templates;
    it shares with `api` every part that holds its fields already (`with_defaults`)."""
    entry = with_defaults(api, APIEntry)
    if not entry["uptime"]:
        if entry is api:
            entry = dict(api)
        entry["uptime"] = dict(_no_uptime())
    return entry


@lru_cache(maxsize=4)
def _trend_days(first_day: date) -> tuple[str, ...]:
    """The ISO dates of the chart's days from `first_day` on (shared by every entry's chart)."""
    return tuple((first_day + timedelta(days=offset)).isoformat() for offset in range(TREND_DAYS))


# The chart's geometry: a slot of 10 a day, 60 high; each day's bar starts at the same x.
_TREND_WIDTH, _TREND_HEIGHT, _TREND_SLOT = TREND_DAYS * 10, 60, 10
_BAR_X = tuple(str(offset * _TREND_SLOT + 1) for offset in range(TREND_DAYS))
_POINT_X = tuple(f"{offset * _TREND_SLOT + _TREND_SLOT / 2:g}" for offset in range(TREND_DAYS))


@lru_cache(maxsize=4096)
def _up_bar(successes: int, probes: int) -> tuple[str, str]:
    """A day's bar from its probes and successful probes, as uptime counts them (a few pairs
    recur on every chart): its attributes after x, and the start of its label after the date."""
    share = successes / probes
    bar = round(share * (_TREND_HEIGHT - 4), 1)
    return (f'y="{_TREND_HEIGHT - bar}" width="8" height="{bar}" fill="#2da44e"',
            f"{share_text(share)} up")


def trend_svg(days: Sequence[SentDay], last_day: date) -> str:
    """The last 30 days (`sent_days`) as a small inline SVG: a bar per day for the share of
    probes that succeeded (the day's uptime), a line for their daily median response time; ''
    without any probed day.

    Drawn once per entry page, so the days are placed by their offset from the first day and
    the text shared by every chart is made once."""
    first_day = last_day - timedelta(days=TREND_DAYS - 1)
    first = first_day.toordinal()
    by_offset = {}
    for ordinal, probes, successes, p50_ms in days:
        offset = ordinal - first
        if 0 <= offset < TREND_DAYS and probes:
            by_offset[offset] = (probes, successes, p50_ms)
    if not by_offset:
        return ""
    width, height = _TREND_WIDTH, _TREND_HEIGHT
    slowest = max((median for _, _, median in by_offset.values() if median is not None),
                  default=None)
    isodays = _trend_days(first_day)
    bars, points = [], []
    for offset in sorted(by_offset):
        probes, successes, median = by_offset[offset]
        shape, up = _up_bar(successes, probes)
        if median is None:
            label = f"{isodays[offset]}: {up}"
        else:
            label = f"{isodays[offset]}: {up}, median {median:.0f} ms"
        bars.append(f'<rect x="{_BAR_X[offset]}" {shape}><title>{label}</title></rect>')
        if median is not None and slowest:
            y = round(height - 2 - median / slowest * (height - 8), 1)
            points.append(f"{_POINT_X[offset]},{y:g}")
    line = (f'<polyline points="{" ".join(points)}" fill="none" stroke="#0969da" '
            f'stroke-width="1.5"></polyline>' if len(points) > 1 else "")
    summary = (f"{len(by_offset)} probed days from {isodays[0]} to "
               f"{last_day.isoformat()}; slowest daily median {slowest:.0f} ms" if slowest
               else f"{len(by_offset)} probed days, no timed answer")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-labelledby="trend-title">'
            f'<title id="trend-title">Last {TREND_DAYS} days: {summary}</title>'
            f'<rect x="0" y="0" width="{width}" height="{height}" fill="none" '
            f'stroke="#8c959f" stroke-width="0.5"></rect>{"".join(bars)}{line}</svg>')


# What the pages and their Markdown alternates say alike: the same formats and labels.
SHARED_FILTERS = {"checked": checked_text, "share": share_text, "cents": cents_text,
                  "uptime_basis": uptime_basis_text, "free_quota": free_quota_text,
                  "pricing": pricing_text,
                  "https": https_text, "reason": reason_text}
SHARED_GLOBALS = {"STATE_LABELS": STATE_LABELS, "AUTH_LABELS": AUTH_LABELS,
                  "LIFECYCLE_LABELS": LIFECYCLE_LABELS, "FAILURE_LABELS": FAILURE_LABELS,
                  "CORS_LABELS": CORS_LABELS, "NOT_CHECKED_YET": NOT_CHECKED_YET,
                  "NO_UPTIME": NO_UPTIME,
                  "NO_AUTH_HEADER": NO_AUTH_HEADER, "ONLINE_NOTE": ONLINE_NOTE,
                  "auth_mention": auth_mention, "pricing_facts": pricing_facts,
                  "grade_basis": grade_basis, "latency_wanting": latency_wanting,
                  "free_only": free_only,
                  "notice_due": notice_due,
                  "SUBSCORE_NAMES": SUBSCORE_NAMES,
                  "source_links": source_links,
                  # An entry without `pricing` (it is optional) shows every fact as not stated.
                  "NO_PRICING": with_defaults({}, Pricing)}


class DocumentCodeGenerator(CodeGenerator):
    """Compiles `api.status` to read a dict's key in the template's own code, and to call
    `DocumentEnvironment.getattr` for anything else: an entry's page and Markdown read some
    300 of them, and a call each cost more than the rest of the lookup."""

    @optimizeconst
    def visit_Getattr(self, node: nodes.Getattr, frame: Frame) -> None:
        if self.environment.is_async:
            super().visit_Getattr(node, frame)
            return
        held, key = self.temporary_identifier(), repr(node.attr)
        self.write(f"({held}[{key}] if type({held} := ")
        self.visit(node.node, frame)
        self.write(f") is dict and {key} in {held} else environment.getattr({held}, {key}))")

    def visit_Call(self, node: nodes.Call, frame: Frame, forward_caller: bool = False) -> None:
        """Calls a plain function (`direct_call`) straight from the template's code, anything
        else through `context.call` as Jinja does: an entry's page and Markdown call some 20
        (`entry_page`, `relative`, a text's `strip`), and `context.call` looked each up for
        the context or environment it might want, which cost more than most of the calls."""
        keywords = [keyword.key for keyword in node.kwargs]
        if (self.environment.is_async or self.environment.sandboxed or forward_caller
                or node.dyn_args is not None or node.dyn_kwargs is not None
                or any(map(is_python_keyword, keywords))):
            super().visit_Call(node, frame, forward_caller)
            return
        held, stream = self.temporary_identifier(), self.stream
        self.stream = StringIO()
        try:
            self.signature(node, frame)
            arguments = self.stream.getvalue()
        finally:
            self.stream = stream
        extra = [f", {name}={name}" for name, used in
                 (("_loop_vars", frame.loop_frame), ("_block_vars", frame.block_frame)) if used]
        self.write(f"({held}({arguments.removeprefix(', ')}) if environment.direct_call({held} := ")
        self.visit(node.node, frame)
        self.write(f") else context.call({held}{arguments}{''.join(extra)}))")

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        """A printed value is escaped by `printed_text` where the template autoescapes."""
        if frame.eval_ctx.volatile or not frame.eval_ctx.autoescape:
            super()._output_child_pre(node, frame, finalize)
            return
        self.write("environment.printed_text(")
        if finalize.src is not None:
            self.write(finalize.src)


# What escaping changes in a text: a text with none of it is printed as it is.
_ESCAPED_CHARACTERS = re.compile(r"[&<>'\"]")


def printed_text(value: Any) -> str:
    """A value as an autoescaped template prints it: what `markupsafe.escape` gives, as a plain
    text where nothing is escaped. A page's nightly parts print some 80 values, most of them
    numbers or texts with nothing to escape, and escaping made a Markup of each, which cost
    more than the rest of the print; the template's output is markup as a whole all the same."""
    kind = type(value)
    if kind is int or kind is float:  # digits, a sign, a point, an exponent: nothing to escape
        return str(value)
    if kind is str and _ESCAPED_CHARACTERS.search(value) is None:
        return value
    return escape(value)


def direct_call(callee: Any) -> bool:
    """Whether a template may call `callee` itself: a plain function (no attribute, so none
    that asks Jinja for the context or environment) or a built-in one, such as a text's
    `strip`. Anything else (a macro, a class, an undefined value) goes through
    `context.call`."""
    kind = type(callee)
    return kind is BuiltinFunctionType or (kind is FunctionType and not callee.__dict__)


class DocumentEnvironment(Environment):
    """Templates over documents (dicts from JSON): `api.status` reads the key first. Jinja
    tries the attribute first, which for a dict fails with an exception at every lookup."""

    code_generator_class = DocumentCodeGenerator
    printed_text = staticmethod(printed_text)
    direct_call = staticmethod(direct_call)

    def getattr(self, obj: Any, attribute: str) -> Any:
        if type(obj) is dict:
            try:
                return obj[attribute]
            except KeyError:
                pass
        return super().getattr(obj, attribute)

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        """A template's globals as one plain dict, not Jinja's view over the environment's:
        each render copies them, and a view costs a lookup in each map for every name. The
        environment's globals are all set before its first template is loaded."""
        return {**self.globals, **(d or {})}


@cache
def environment() -> Environment:
    env = DocumentEnvironment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        auto_reload=False,  # rendered thousands of times a run: no check of the files each time
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        SHARED_FILTERS,
        sample=sample_text,
        search_text=search_text,
        band=grade_band,
        isolated=isolated_text,
        directionless=directionless,
    )
    env.globals.update(
        SHARED_GLOBALS,
        csp=PAGE_CSP,
        category_page=category_page,
        entry_page=entry_page,
        entry_document=entry_document,
        any_endpoint_checked=any_endpoint_checked,
    )
    return env


def asset_files() -> tuple[dict[str, bytes], dict[str, str]]:
    """The stylesheet and script, named by a hash of their content, and their paths by name."""
    files, paths = {}, {}
    for source in sorted(STATIC.iterdir()):
        data = source.read_bytes()
        digest = hashlib.sha256(data).hexdigest()[:12]
        path = f"{ASSETS_DIR}/{source.stem}.{digest}{source.suffix}"
        files[path] = data
        paths[source.name] = path
    return files, paths


@cache
def macros(template: str) -> Any:
    """The macros of a template, looked up once a process: each entry calls several."""
    return environment().get_template(template).module


def macro_text(module: Any, name: str) -> Callable[..., str]:
    """A macro of a template's `module` as the function Jinja compiled it to: given every
    argument by position, it returns the macro's text. Calling the macro binds each argument
    by name and makes a Markup of the text, some 2 µs a call, which a spliced entry paid a
    dozen times for parts it makes text of again."""
    macro = getattr(module, name)
    if not isinstance(macro, Macro) or macro.catch_kwargs or macro.catch_varargs or macro.caller:
        raise TypeError(f"{name} is not a macro of named arguments alone")
    return macro._func


@cache
def page_macro(template: str, name: str) -> Callable[..., str]:
    """A macro of a page template as its text (`macro_text`), looked up once a process."""
    return macro_text(macros(template), name)


def release_line(meta: Mapping[str, Any]) -> str:
    """The line that names a page's release: the same on every page of the release, so drawn
    (and checked) once for every entry page spliced."""
    return str(macros("_macros.html").release_line(meta))


def entry_badges(api: Mapping[str, Any]) -> Markup:
    """A presented entry's badges (status, lifecycle, grade, transport), which its page and its
    card show alike."""
    return Markup(page_macro("_macros.html", "entry_badges")(api))


def card_html(api: Mapping[str, Any], labels: Mapping[str, str], badges: Markup,
              successor_name: str | None = None) -> Markup:
    """A presented entry's card as a category page draws it (markup already: a category page
    of a large release holds tens of thousands, which are not copied again), with the entry's
    `entry_badges`, drawn once for its page and its card, and the name of its successor."""
    return Markup(page_macro("_macros.html", "api_card")(api, "../", labels, badges,
                                                         successor_name))


def trend_of(common: Mapping[str, Any], trend: Sequence[SentDay]) -> str:
    """An entry's trend chart (`trend_svg`) up to the day of the release in `common`."""
    last_day = datetime.fromisoformat(common["meta"]["generated"].replace("Z", "+00:00")).date()
    return trend_svg(trend, last_day)


def render_entry_page(
    api: Mapping[str, Any], common: Mapping[str, Any], trend: Sequence[SentDay],
    badges: Markup, key: str = "", successor_name: str | None = None,
) -> str:
    """The page of one presented entry; `common` holds the release's meta, assets, category
    labels and categories (`page_context`), `trend` the entry's `sent_days`, `badges` its
    `entry_badges`, `key` its `static_key` (which the page keeps, for the night after),
    `successor_name` the name of the entry its lifecycle names as successor."""
    path = entry_page(api["id"])
    return environment().get_template("entry.html").render(
        common, root="../", api=api, category=common["labels"].get(api["category"]), page=path,
        trend=trend_of(common, trend), markdown=entry_markdown(api["id"]), badges=badges,
        static_key=key, successor_name=successor_name,
    )


# --- the parts of an entry's page that change each night -------------------------------------

# An entry's page and Markdown mark what changes with each night's probes, `<!--nightly:NAME-->`
# … `<!--/nightly-->`, and keep a key of everything else they show, `<!--static:KEY-->`. When an
# entry's key is the one its page of the night before kept, that page is the new one with its
# marked parts drawn again: the rest (facts, pricing, samples, head) is neither rendered nor
# checked again. The marks are HTML comments, unseen in a browser and in rendered Markdown.
# The fields of an entry that only its marked parts show; every other field is in its key.
NIGHTLY_FIELDS = frozenset(("status", "builderScore", "lifecycle", "uptime", "https", "cors",
                            "endpoints"))
_NIGHTLY_OPEN, _NIGHTLY_CLOSE = b"<!--nightly:", b"<!--/nightly-->"
# What draws the pages and Markdown: a change to any of it changes every entry's key.
_DRAWING_SOURCES = ("pages.py", "markdown.py", "presented.py")


@cache
def drawing_digest() -> bytes:
    """A digest of the templates and the code that fills them."""
    digest = hashlib.blake2b(digest_size=16)
    here = Path(__file__).parent
    for source in [*sorted(p for p in TEMPLATES.iterdir() if p.is_file()),
                   *(here / name for name in _DRAWING_SOURCES)]:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.digest()


def static_key(api: Mapping[str, Any], common: Mapping[str, Any]) -> str:
    """What an entry's page and Markdown show besides their nightly parts, as a digest: the
    entry's other fields, its category's label, the release's assets and the drawing code."""
    digest = hashlib.blake2b(drawing_digest(), digest_size=16)
    digest.update(orjson.dumps(
        [{name: value for name, value in api.items() if name not in NIGHTLY_FIELDS},
         common["labels"].get(api["category"]), common["assets"]],
        option=orjson.OPT_SORT_KEYS,
    ))
    return digest.hexdigest()


def may_splice(line: bytes) -> bool:
    """Whether an entry (its line of `apis.json`) may have its page spliced: never when its own
    text holds the start of a comment (or an escaped `<`), which could stand for a mark."""
    return b"<!--" not in line and b"\\u003c" not in line and b"\\u003C" not in line


def nightly_page_parts(api: Mapping[str, Any], trend: str, badges: Markup,
                       release: str, successor_name: str | None = None) -> dict[str, str]:
    """The marked parts of an entry's page, drawn as `render_entry_page` draws them, with its
    `trend_of`, its `entry_badges` and the release's `release_line`, drawn before."""
    return {
        "badges": str(badges),
        "notice": page_macro("_entry_nightly.html", "deprecation_notice")(
            api, "../", successor_name),
        "status": page_macro("_entry_nightly.html", "status_section")(
            api, trend, "../", successor_name),
        "score": page_macro("_entry_nightly.html", "score_section")(api),
        "endpoints": page_macro("_entry_nightly.html", "endpoints_section")(api),
        "release": release,
    }


def kept_key(previous: bytes, key: str) -> bool:
    """Whether a page or Markdown file of the night before kept the static key `key`."""
    return f"<!--static:{key}-->".encode() in previous


def spliced(previous: bytes, parts: Mapping[str, str]) -> bytes | None:
    """`previous` (the bytes of a page or Markdown file of the night before, which
    `kept_key`) with its nightly parts replaced by `parts`, as bytes; None unless it marks each
    of them exactly once.

    Spliced as bytes: a page holds non-ASCII text (a dash, a name), so decoding the file of
    the night before and encoding the new one cost more than drawing its nightly parts. Its
    bytes outside those parts are kept as that night's publish wrote them."""
    encoded = {name.encode(): text.encode() for name, text in parts.items()}
    pieces, seen, last = [], set(), 0
    find = previous.find
    while (opening := find(_NIGHTLY_OPEN, last)) >= 0:
        start = find(b"-->", opening) + 3
        name = previous[opening + len(_NIGHTLY_OPEN):start - 3]
        end = find(_NIGHTLY_CLOSE, start)
        if start < 3 or end < 0 or name in seen or name not in encoded:
            return None
        seen.add(name)
        pieces += (previous[last:start], encoded[name])
        last = end
    if len(seen) != len(encoded):
        return None
    pieces.append(previous[last:])
    return b"".join(pieces)


def page_context(meta: Mapping[str, Any], categories: Sequence[Mapping[str, Any]],
                 assets: Mapping[str, str]) -> dict[str, Any]:
    """What every page is rendered with: the release's meta, its assets and categories."""
    labels = {category["id"]: category["label"] for category in categories}
    return {"meta": meta, "assets": assets, "labels": labels, "categories": list(categories)}


def render_pages(
    common: Mapping[str, Any], cards: Mapping[str, Sequence[str]], root_path: str = "/",
) -> dict[str, bytes]:
    """The index, one page per category and the 404 page (linking from `root_path`, the site's
    path on its host); `cards` holds each category's cards (`card_html`), best score first."""
    env = environment()
    pages = {
        INDEX_PAGE: env.get_template("index.html").render(
            common, root="", page=INDEX_PAGE, markdown=LLMS_TXT, search_index=SEARCH_INDEX,
            page_size=INDEX_PAGE_SIZE,
        ).encode(),
        NOT_FOUND_PAGE: env.get_template("404.html").render(
            common, root=root_path, page=NOT_FOUND_PAGE, markdown=None
        ).encode(),
    }
    for category in common["categories"]:
        # Each page is encoded as it is drawn: the text of every category page is never held.
        pages[category_page(category["id"])] = render_category_page(
            common, category, cards.get(category["id"], ())).encode()
    return pages


def render_category_page(common: Mapping[str, Any], category: Mapping[str, Any],
                         cards: Sequence[str]) -> str:
    """The page of one category, listing its `cards` (`card_html`)."""
    path = category_page(category["id"])
    shown = [card if isinstance(card, Markup) else Markup(card) for card in cards]
    return environment().get_template("category.html").render(
        common, root="../", cards=shown, category=category, page=path,
        markdown=category_markdown(category["id"]),
    )


def category_outline(common: Mapping[str, Any], category: Mapping[str, Any],
                     count: int) -> str:
    """A category page of `count` cards with each card left empty: what its check reads when
    its cards balance by construction (`fragments`), each read for its links alone."""
    return render_category_page(common, category, [Markup()] * count)


# --- the check before a release is written ---------------------------------------------------

VOID_ELEMENTS = frozenset(
    ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
     "wbr")
)
# Elements whose content is text, never tags.
RAW_TEXT = frozenset(("script", "style"))

# One token of a page: a comment or declaration, or a start or end tag with its attributes
# (quoted values may hold `>`; possessive, so a tag is never scanned twice).
_TAG = re.compile(
    r"""<(?:!--.*?-->|![^>]*>|(/?)([a-zA-Z][^\s/>]*)((?:[^>"']++|"[^"]*+"|'[^']*+')*+)>)""",
    re.DOTALL,
)
# One attribute of a tag, its value whole (so `src=` inside another value is no attribute).
_ATTRIBUTE = re.compile(r"""([^\s=/>]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
_LINK_NAMES = frozenset(("href", "src", "data-source"))


def _link_values(attributes: Iterable[str]) -> list[str]:
    """The values of the link attributes (`href`, `src`, `data-source`) of tags, in order,
    unescaped; an empty value links nowhere and is left out."""
    links = []
    for tag in attributes:
        for attribute, double, single, bare in _ATTRIBUTE.findall(tag):
            value = double or single or bare
            if value and attribute.lower() in _LINK_NAMES:
                links.append(unescape(value) if "&" in value else value)
    return links


def _balanced_links(html: str) -> list[str] | None:
    """The link values of a page whose tags balance, in order; None when they do not.

    The common case, kept to a few steps a tag: `_tag_walk` walks an unbalanced page again
    to say where."""
    opened: list[str] = []
    push, pop = opened.append, opened.pop
    linked: list[str] = []
    raw_text = None  # inside <script> or <style>: text up to its end tag
    for closing, name, attributes in _TAG.findall(html):
        if not name:
            continue  # a comment or declaration
        tag = name.lower()
        if raw_text is not None:
            if not (closing and tag == raw_text):
                continue
            raw_text = None
        if closing:
            if not opened or pop() != tag:
                return None
            continue
        if attributes:
            # A cheap test before the few tags that may carry a link are parsed.
            if "href" in attributes or "src" in attributes or "data-source" in attributes:
                linked.append(attributes)
            if attributes[-1] == "/":
                continue
        if tag in VOID_ELEMENTS:
            continue
        if tag in RAW_TEXT:
            raw_text = tag
        push(tag)
    if opened:
        return None
    return _link_values(linked)


def _tag_walk(path: str, html: str) -> tuple[list[str], list[str]]:
    """The tag problems of a page, each with its line, and its link values in order."""
    problems: list[str] = []
    opened: list[str] = []
    linked: list[str] = []
    raw_text = None
    for token in _TAG.finditer(html):
        closing, name, attributes = token.groups()
        if name is None:
            continue
        tag = name.lower()
        if raw_text is not None:
            if not (closing and tag == raw_text):
                continue
            raw_text = None
        if closing:
            if not opened or opened[-1] != tag:
                line = html.count("\n", 0, token.start()) + 1
                problems.append(f"{path}: line {line}: </{tag}> closes "
                                f"<{opened[-1] if opened else ''}>")
            else:
                opened.pop()
            continue
        linked.append(attributes)
        if tag in VOID_ELEMENTS or attributes.endswith("/"):
            continue
        if tag in RAW_TEXT:
            raw_text = tag
        opened.append(tag)
    if opened:
        problems.append(f"{path}: unclosed <{'>, <'.join(opened)}>")
    return problems, _link_values(linked)


@lru_cache(maxsize=4096)
def _link_target(folder: str, link: str, root_path: str | None) -> str | None:
    """The release path a link from a page in `folder` leads to: '' for a link elsewhere (an
    address with a host, a fragment), None for a link from the host's root that `root_path`
    (the 404 page's; None for any other page) does not allow. Pages share most of their links,
    so each is resolved once."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or not parts.path:
        return ""
    if parts.path.startswith("/"):
        if root_path is None or not parts.path.startswith(root_path):
            return None
        return posixpath.normpath(parts.path.removeprefix(root_path))
    return posixpath.normpath(posixpath.join(folder, parts.path))


def page_problems(path: str, html: str, release: Container[str], root_path: str = "/") -> list[str]:
    """The problems of one page at `path`: unbalanced tags, relative links that lead to no path
    of `release`, links from the host's root but in the 404 page (whose links start at
    `root_path`)."""
    links = _balanced_links(html)
    problems: list[str] = []
    if links is None:
        problems, links = _tag_walk(path, html)
    return problems + link_problems(path, links, release, root_path)


def part_links(part: str) -> list[str]:
    """The link values of a part of a page whose tags balance by construction (`fragments`),
    read from its tags without the walk that balances them."""
    return _link_values([attributes for _, _, attributes in _TAG.findall(part)
                         if "href" in attributes or "src" in attributes
                         or "data-source" in attributes])


def link_problems(path: str, links: Iterable[str], release: Container[str],
                  root_path: str = "/") -> list[str]:
    """The problems of the links of a page at `path` (`page_problems`)."""
    problems: list[str] = []
    folder = posixpath.dirname(path)
    allowed_root = root_path if path == NOT_FOUND_PAGE else None
    for link in links:
        target = _link_target(folder, link, allowed_root)
        if target is None:
            problems.append(f"{path}: link to {link} starts at the host's root, not at the page")
        elif target and target not in release:
            problems.append(f"{path}: link to {link} leads to no file of the release")
    return problems


def check_pages(files: Mapping[str, bytes], root_path: str = "/") -> list[str]:
    """Every problem of the release's pages (`page_problems`), the release being `files`."""
    problems = []
    for path, data in sorted(files.items()):
        if path.endswith(".html"):
            problems += page_problems(path, data.decode("utf-8"), files, root_path)
    return problems
