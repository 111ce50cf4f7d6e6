"""The prober: one polite, read-only GET per URL, timed and classified.

Plain asyncio and aiohttp, no Prefect and no database, so that one flow task can
run thousands of probes and tests can run them against a fake internet on
loopback. One ClientSession per `probe_all` (connections reused within a run,
never across runs, so each host's first probe pays a fresh DNS + connect).

Politeness: a probe waits for its host's turn (per-host semaphore and minimum
interval between actual request starts) BEFORE taking a global slot, so a host
waiting on its interval never holds a slot another host could use. Every redirect
hop, retry and confirmation is a request of its own: it is checked by the guard
and waits for its host's turn.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import random
import re
import socket
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import SimpleNamespace
from typing import Any, Literal

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.client_proto import ResponseHandler
from aiohttp.http import RawResponseMessage
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader
from yarl import URL

from pipeline.probing.netguard import (
    ALLOWED_SCHEMES,
    BlockedAddressError,
    GuardedResolver,
    GuardPolicy,
    parse_address,
)
from pipeline.probing.prober_loop import run_on_prober_loop

log = logging.getLogger(__name__)

# `unchecked`: a target the prober gave up on before sending it (`ProbeResult.not_probed`);
# such a result is evidence of nothing and is never stored as a probe.
Outcome = Literal["live", "online", "unreachable", "unchecked"]
NOT_PROBED: Outcome = "unchecked"

DEFAULT_USER_AGENT = "apidir-prober/2.0 (+https://github.com/apidir/apidir; read-only health check)"
# Redirects followed by hand; other 3xx (300, 304, ...) are reported as `redirect`.
FOLLOWED_REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5  # hops followed after the first request, by the prober and by `apidir draft`
# 5xx worth a second try; 501 (not implemented) and 505 (version) will not change.
RETRIED_5XX = frozenset({500, 502, 503, 504, 520, 521, 522, 523, 524, 529})
RETRIED_ERRORS = frozenset({"connect_timeout", "read_timeout", "reset"})
_PLACEHOLDER = re.compile(r"\{[^}]*\}")
_MESSAGE_LIMIT = 200
# The longest final URL a probe keeps (`kept_final_url`), as browsers and crawlers commonly cap
# a URL; a status's `finalUrl` says so.
FINAL_URL_MAX_LENGTH = 2048
# How the note of a redirect not followed opens (`_redirect_not_followed`): the one note a
# stored probe carries, in its error, which its status shows beside it and by which the score
# knows it for no evidence (`history.PROBE_NOTE`).
REDIRECT_NOTE_OPENING = "its redirect to "


@dataclass(frozen=True)
class ProbeTarget:
    url: str
    entry_id: str | None = None
    endpoint_id: int | None = None


@dataclass(frozen=True)
class ProbeSettings:
    global_concurrency: int = 64
    per_host_concurrency: int = 2  # 0: unbounded
    per_host_interval: float = 0.5  # seconds between request starts to one host
    connect_timeout: float = 5.0
    total_timeout: float = 15.0  # per attempt, until response headers
    max_redirects: int = MAX_REDIRECTS
    max_attempts: int = 3  # only transient failures are retried
    retry_after_cap: float = 30.0
    backoff_base: float = 0.5  # jittered exponential backoff
    allow_private: bool = False  # the network guard is ON unless this is set
    user_agent: str = DEFAULT_USER_AGENT
    # Networks refused even with allow_private (CIDR strings); lets loopback tests
    # exercise the guard on one hop of a redirect chain.
    blocked_networks: tuple[str, ...] = ()
    # Sent as `Origin` (never with credentials) so the answer tells whether a browser page
    # elsewhere may read the API: its Access-Control-Allow-Origin is recorded.
    origin: str | None = "https://apidir.dev"
    # Extra certificate authorities to trust (a PEM file), beside the system's: for a
    # private deployment's own CA, and for tests with certificates they make.
    ca_file: str | None = None
    # Probe a failed target once more after every other target, in the same run: only a
    # failure seen twice is a failure of the run.
    confirm_failures: bool = True
    # In a run of several shards (processes, machines): the hosts this prober was dealt
    # (None: every host). Any other host, one a redirect led to, may be probed by every
    # shard at once, so each keeps `sharing` times its interval and a `sharing`th of its
    # concurrency (at least one): together they start no more requests than one prober.
    own_hosts: frozenset[str] | None = None
    sharing: int = 1
    # A host is given up on for the rest of the run (its targets left unchecked, nothing sent)
    # once this many of its requests in a row failed transiently (a timeout, a reset, a 5xx or
    # a 429: what is retried; each attempt of a URL, retries too, counted at the host it ended
    # on, so a redirect followed neither counts nor breaks the row), or once such failures cost
    # this many seconds (their attempts and the waits before the host's next attempt: backoff,
    # Retry-After): one host that hangs or holds us off must not make the night last hours.
    # 0: no such limit.
    host_failures_in_a_row: int = 10
    host_failure_budget: float = 120.0


@dataclass
class ProbeResult:
    url: str
    entry_id: str | None
    endpoint_id: int | None
    checked_at: datetime  # UTC, aware: start of the final attempt
    outcome: Outcome
    # online: auth, rate_limited, bot_challenge, not_found, method_not_allowed, redirect,
    # server_error, other
    reason: str | None
    # unreachable: dns, refused, connect_timeout, read_timeout, tls, reset, protocol,
    # redirect_loop, blocked, malformed
    error_class: str | None
    http_status: int | None
    total_ms: float | None  # to response headers, final attempt, all its hops
    dns_ms: float | None  # phases summed over the hops of the final attempt;
    connect_ms: float | None  # None: phase not run (IP literal, no connection)
    ttfb_ms: float | None  # request sent -> response headers
    final_url: str | None
    attempts: int
    redirects: int
    error: str | None  # short human message
    # What a browser would be told: Access-Control-Allow-Origin and -Credentials of the final
    # answer to our Origin (None: no answer, or the header was absent).
    cors_allow_origin: str | None = None
    cors_allow_credentials: bool | None = None
    # The TLS connection of the final hop, when it was HTTPS and a new connection was made.
    tls_version: str | None = None
    cert_expires_at: datetime | None = None
    confirmation: bool = False  # this probe re-checks a failure seen earlier in the run
    # Set on the look that concludes a failed target (`failure_class`): dead, blocked,
    # transient or tls. That is its confirmation, or the first look when there is none to come
    # (nothing was sent, or confirmation is off).
    failure_class: str | None = None
    # Not stored: the first hop's status (a 3xx) when the redirects ended on an HTML page at
    # another path, a sign-in page rather than the API's answer (`answered_by_page`).
    page_redirect_status: int | None = None
    # Why the target was not probed this run (its host was given up on): the outcome is then
    # `unchecked` and nothing was sent. Never stored as a probe, so the target's status, uptime
    # and latency keep the evidence of the runs that did probe it.
    not_probed: str | None = None
    # What the run left undone of a target it did probe (the redirect its URL answered with,
    # not followed: that host was given up on). Stored as the probe's error, read back as its
    # note (`history.PROBE_NOTE`): its published status shows it beside this probe's answer.
    note: str | None = None


FailureClass = Literal["dead", "blocked", "transient", "tls"]
# Online answers that are failures of the API (an auth wall is not: it is the API asking for
# a key); every unreachable probe is a failure too.
FAILED_REASONS = frozenset({"not_found", "bot_challenge", "rate_limited", "server_error"})
# The same of an entry's base address probed in place of its endpoints (`stands_in`): it is
# probed only to see that the host answers, and many REST roots answer 404 or 410 by design.
STAND_IN_FAILED_REASONS = FAILED_REASONS - {"not_found"}
# Refused before anything was sent: a second look would see the same.
SETTLED_ERRORS = frozenset({"malformed", "blocked"})
# Probes waiting at once, per global slot: enough that the slots never wait for one to start
# and the busiest hosts' URLs are in line together, few enough to weigh megabytes, not GB.
WINDOW_PER_SLOT = 64


def is_failure(result: ProbeResult) -> bool:
    """Whether a probe failed: no answer at all, or an answer saying the API is gone, walled
    off or broken (404/410, a bot challenge, 429, 5xx; a base address standing in for the
    endpoints is not gone for a 404 or 410: `stands_in`)."""
    return failed(result.outcome, result.reason, stands_in(result.entry_id, result.endpoint_id))


def answered_by_page(result: ProbeResult) -> ProbeResult:
    """`result` as the probe of a listed endpoint judges it: redirected to an HTML page at
    another path (`/v1/things` -> 302 -> `/login`, 200 text/html), the endpoint did not answer
    as an API does; it is `online` with the status of its own answer, the redirect, the page
    being its `final_url`. The base address standing in keeps its answer: any page there shows
    its host up. Changed in place; returned for chaining."""
    if result.page_redirect_status is not None and not stands_in(result.entry_id,
                                                                 result.endpoint_id):
        result.outcome, result.http_status = "online", result.page_redirect_status
        result.reason = "redirect"
        where = f" ({result.final_url})" if result.final_url else ""  # None: too long to keep
        result.error = f"redirected to an HTML page at another path{where}"[:_MESSAGE_LIMIT]
    return result


def kept_final_url(final_url: str | None) -> str | None:
    """The URL a probe ended on as it is recorded, stored and published (`finalUrl`): whole, or
    None when longer than `FINAL_URL_MAX_LENGTH` characters. A server may redirect to an
    address as long as a header (32 KiB), and a cut one would lead elsewhere."""
    return None if final_url is None or len(final_url) > FINAL_URL_MAX_LENGTH else final_url


def redirected_to(url: str, final_url: str | None, redirects: int) -> str | None:
    """Where a probe's redirects ended, as a status publishes it (`finalUrl`): None when it
    was not redirected, though the prober keeps the URL it probed as its final one, and None
    when it ended where it began (its first hop refused: nothing else was requested)."""
    return final_url if redirects and final_url != url else None


def left_unchecked(note: str | None) -> bool:
    """Whether a stored probe with `note` (`ProbeResult.note`, read back from its row) is
    unchecked: its run left it undone, the redirect its URL answered with not followed, that
    host given up on. Its 3xx is no answer of the API: the one rule of such a probe, asked by
    its published status and its endpoint's (`history`), the scores and a run's lifecycle
    verdict (`score.unchecked`)."""
    return note is not None


def stands_in(entry_id: str | None, endpoint_id: int | None) -> bool:
    """Whether a probe of an entry is of its base address standing in for endpoints the prober
    does not call (none is a GET without placeholders): the target of no endpoint
    (`probe_targets_for`). A probe of no entry is a witness, not a stand-in."""
    return target_stands_in(of_entry=entry_id is not None, of_endpoint=endpoint_id is not None)


def target_stands_in(*, of_entry: bool, of_endpoint: bool) -> bool:
    """`stands_in` from what a probe's target is, not its ids: the one rule, also for readers
    holding the ids as columns (the score stage asks it per kind of target, not per probe)."""
    return of_entry and not of_endpoint


def failed(outcome: str, reason: str | None, stand_in: bool = False) -> bool:
    """`is_failure` of a probe stored as its outcome and reason (and whether it `stands_in`):
    the one rule of a failed probe, read again where uptime and Latency count the successful
    ones."""
    return outcome == "unreachable" or reason in (
        STAND_IN_FAILED_REASONS if stand_in else FAILED_REASONS)


def failure_class(*looks: ProbeResult) -> FailureClass | None:
    """The class of a target's failure from its looks in a run, the first and its confirmation
    if it had one (None: the last look succeeded). A single look is judged as if it had been
    seen twice: it is all the run has when nothing was sent, or when confirmation is off.

    tls: a certificate or handshake failure; blocked: a bot challenge or 429; dead: 404/410 on
    every look, a name that does not resolve, or a URL that can never be fetched; transient:
    anything else (5xx, timeouts, resets, refused connections, mixed answers).
    """
    if not is_failure(looks[-1]):
        return None
    if any(p.error_class == "tls" for p in looks):
        return "tls"
    if any(p.reason in ("bot_challenge", "rate_limited") for p in looks):
        return "blocked"
    if all(p.reason == "not_found" for p in looks) or all(p.error_class == "dns" for p in looks):
        return "dead"
    if all(p.error_class in SETTLED_ERRORS for p in looks):
        return "dead"
    return "transient"


# A base address written for the reader's own account: `https://YOUR_PROJECT_REF.supabase.co`.
_ACCOUNT_PLACEHOLDER = re.compile(r"YOUR_[A-Z0-9_]+|\{[^}]*\}|<[^>]*>")
# A credential written as a stand-in in an endpoint's path or query (`?appid=YOUR_API_KEY`,
# `?key=your-api-key`): sending it is noise to the provider, and its 401 says nothing. In
# capitals any `YOUR_…` is a stand-in; in lower case only one naming a credential is, so that
# a resource such as `/your-orders` is still probed. The whole token is the stand-in, as the
# reason names it: `Your-Secret-Key`, not `Your-Secret` (`_credential_placeholder`).
_CREDENTIAL_PLACEHOLDER = re.compile(
    r"\bYOUR_[A-Z0-9_]+|(?P<your>(?i:\byour[_-])[\w-]*+)|<[^<>]*>")
_NAMES_CREDENTIAL = re.compile(r"(?:key|token|secret|password|credential)s?(?![a-z0-9])", re.I)
_CAPITAL_PLACEHOLDER = re.compile(r"\bYOUR_[A-Z0-9_]+")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]*@")


def _credential_placeholder(path: str) -> str | None:
    """The first stand-in for a credential in an endpoint's `path` (`_CREDENTIAL_PLACEHOLDER`),
    if any. Each run of name characters is read once, so that a path of `your-your-your-…`
    costs no more than another (looking ahead for a credential word from each `your-` took
    minutes for 200 KB): a run from `your-` names a credential after it, or none of its later
    `your-` does, and only a `YOUR_…` inside it may still be one."""
    for match in _CREDENTIAL_PLACEHOLDER.finditer(path):
        if match.lastgroup != "your" or _NAMES_CREDENTIAL.search(match.group(), 5):
            return match.group()
        if capital := _CAPITAL_PLACEHOLDER.search(path, match.start() + 1, match.end()):
            return capital.group()
    return None


def redact_userinfo(text: str) -> str:
    """`text` with the userinfo (`user:password@`) of every URL in it removed: credentials
    never reach output, logs, the store, alerts or published files (nor the wire: see
    `clean_url`)."""
    if "@" not in text:  # no userinfo without one; the pattern's scan costs 10-20 µs a URL
        return text
    return _USERINFO.sub(r"\1", text)


def no_targets(base_url: str) -> str | None:
    """Why an entry at `base_url` has no URL to probe whatever it lists (None: it has one, an
    endpoint's or the base address standing in): a base address written for the reader's own
    account has no one URL (`probe_targets_for`)."""
    placeholder = _ACCOUNT_PLACEHOLDER.search(redact_userinfo(base_url))
    return None if placeholder is None else f"base address is per account ({placeholder.group(0)})"


def unprobable_entries(base_urls: Mapping[str, str]) -> dict[str, str]:
    """Why each entry (by id, from its base address) the catalogue gives no URL to probe has
    none (`no_targets`): what the statuses, scores, lifecycles and trends alike leave its
    probes of addresses no longer listed out by."""
    return {entry_id: why for entry_id, base_url in base_urls.items()
            if (why := no_targets(base_url)) is not None}


def probe_targets_for(
    base_url: str,
    endpoints: list[tuple[int | None, str, str]],
    *,
    entry_id: str | None = None,
) -> tuple[list[ProbeTarget], list[tuple[int | None, str]]]:
    """From an entry's baseUrl and endpoints (endpoint_id, method, path): the GET targets
    without {placeholders} joined to baseUrl (baseUrl itself when none), duplicates removed,
    plus the skipped endpoints with their reason ("method is POST", "path has placeholders",
    "path has a placeholder credential (YOUR_API_KEY)", "same URL as GET /forecast", naming
    the endpoint as the entry lists it: a reader knows no endpoint by its number in the
    store). Probes carry no credentials, so a path or query holding a stand-in for one is not
    called either. A base address written for the reader's own account
    (`https://YOUR_PROJECT_REF.supabase.co`) has no URL to probe: no targets at all."""
    targets: list[ProbeTarget] = []
    skipped: list[tuple[int | None, str]] = []
    seen: dict[str, str] = {}  # each URL probed: the method and path of its first endpoint
    base_url = redact_userinfo(base_url)
    reason = no_targets(base_url)
    if reason is not None:
        return [], [(endpoint_id, reason) for endpoint_id, _, _ in endpoints]
    for endpoint_id, method, path in endpoints:
        method = (method or "GET").upper()
        path = path or ""
        if method != "GET":
            skipped.append((endpoint_id, f"method is {method}"))
        elif _PLACEHOLDER.search(path):
            skipped.append((endpoint_id, "path has placeholders"))
        elif credential := _credential_placeholder(path):
            skipped.append((endpoint_id, f"path has a placeholder credential ({credential})"))
        else:
            url = join_url(base_url, path)
            if url in seen:
                skipped.append((endpoint_id, f"same URL as {seen[url]}"))
            else:
                seen[url] = f"GET {path or '/'}"
                targets.append(ProbeTarget(url, entry_id, endpoint_id))
    if not targets:
        targets.append(ProbeTarget(base_url, entry_id, None))
    return targets, skipped


_ABSOLUTE_PATH = re.compile(r"https?://", re.IGNORECASE)  # compiled once: every endpoint's


def join_url(base_url: str, path: str) -> str:
    """baseUrl + path as OpenAPI servers do (appended, not RFC 3986 resolved); absolute kept."""
    if _ABSOLUTE_PATH.match(path):
        return path
    if not path:
        return base_url
    return base_url.rstrip("/") + "/" + path.lstrip("/")


# --- classification -------------------------------------------------------------------------


def _is_challenge(status: int, headers: Mapping[str, str]) -> bool:
    """A bot wall rather than the API: judged from headers only (the body is never read)."""
    if status == 999:  # LinkedIn and others answer crawlers with 999
        return True
    if headers.get("cf-mitigated", "").lower() == "challenge":
        return True
    server = headers.get("server", "").lower()
    if "cloudflare" in server and status in (403, 429, 503) and "cf-chl-bypass" in headers:
        return True
    if headers.get("x-amzn-waf-action", "").lower() in ("challenge", "captcha"):
        return True
    return status == 403 and ("x-datadome" in headers or "datadome" in server)


def http_reason(status: int, headers: Mapping[str, str]) -> str | None:
    """The `online` reason of a status (None for 200, which is `live`)."""
    if status == 200:
        return None
    if _is_challenge(status, headers):
        return "bot_challenge"
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limited"
    if status in (404, 410):
        return "not_found"
    if status == 405:
        return "method_not_allowed"
    if 300 <= status < 400:
        return "redirect"
    if 500 <= status < 600:
        return "server_error"
    return "other"


def _chain(exc: BaseException) -> Iterable[BaseException]:
    """exc and what it wraps (aiohttp keeps the OSError in os_error / __cause__)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        context = None if item.__suppress_context__ else item.__context__
        todo.extend([getattr(item, "os_error", None), item.__cause__, context])


def classify_error(exc: BaseException, phase: str = "read") -> str:
    """The error class of a failed request; `phase` (dns, connect, read) names a timeout."""
    chain = list(_chain(exc))
    kinds = tuple(type(item) for item in chain)

    def has(*types: type[BaseException]) -> bool:
        return any(issubclass(kind, types) for kind in kinds)

    if has(BlockedAddressError):
        return "blocked"
    if has(aiohttp.ClientConnectorDNSError, socket.gaierror):
        return "dns"
    if has(aiohttp.ClientSSLError, ssl.SSLError, ssl.CertificateError):
        return "tls"
    if has(ConnectionRefusedError):
        return "refused"
    if has(aiohttp.ConnectionTimeoutError):
        return "connect_timeout"
    if has(TimeoutError):
        return {"dns": "dns", "connect": "connect_timeout"}.get(phase, "read_timeout")
    if has(ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return "reset"
    if has(aiohttp.ServerDisconnectedError):
        return "reset"
    if has(aiohttp.ClientConnectorError):  # unreachable network or host
        return "refused"
    if has(UnicodeError):  # a host name IDNA cannot encode (`a..b`, a label over 63)
        return "malformed"
    return "protocol"


def _is_temporary_dns(exc: BaseException) -> bool:
    return any(getattr(item, "errno", None) == socket.EAI_AGAIN for item in _chain(exc))


def guard_refusal(exc: BaseException) -> BlockedAddressError | None:
    """The network guard's refusal behind a failed request, if that is what failed it
    (aiohttp wraps the resolver's in its own connection error)."""
    return next((e for e in _chain(exc) if isinstance(e, BlockedAddressError)), None)


def _unparsable_answer(exc: BaseException) -> str | None:
    """The error of an answer whose status line or headers could not be parsed, in the
    prober's words, with what the parser found wrong; None if `exc` is no such failure.
    aiohttp reports it as an HTTP 400 (`400, message: ...`), the status its own server would
    answer such a request with: no status the server sent, so none is quoted."""
    failure = next((e for e in _chain(exc) if isinstance(e, HttpProcessingError)), None)
    if failure is None:
        return None
    lines = (line.strip() for line in failure.message.splitlines())
    detail = " ".join(line for line in lines if line and line != "^")  # `^`: aiohttp's pointer
    return "the server's answer could not be parsed" + (f": {detail}" if detail else "")


def _message(exc: BaseException) -> str:
    blocked = guard_refusal(exc)
    text = (str(blocked) if blocked else _unparsable_answer(exc)
            or f"{type(exc).__name__}: {exc}".rstrip(": "))
    return redact_userinfo(" ".join(text.split()))[:_MESSAGE_LIMIT]


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # `isdigit` alone takes "²", which float() refuses
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):  # a year past datetime's
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - (now or datetime.now(UTC))).total_seconds())


def clean_url(url: URL) -> URL:
    """No credentials and no fragment ever leave the prober."""
    if url.raw_user is not None or url.raw_password is not None:
        url = url.with_user(None)
    return url.with_fragment(None)


# --- timings ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Hop:
    """Timestamps of one request, filled in by the trace callbacks."""

    start: float | None = None
    dns_start: float | None = None
    dns: float | None = None
    conn_start: float | None = None
    connect: float | None = None
    sent: float | None = None
    headers: float | None = None
    connected: bool = False
    reused: bool = False  # sent on a pooled keep-alive connection
    tls_version: str | None = None
    cert_expires_at: datetime | None = None
    on_sent: Callable[[], None] | None = None  # tells the host's turn the request is out

    @property
    def phase(self) -> str:
        """Where the request was when it stopped: dns, connect or read."""
        if self.connected:
            return "read"
        return "dns" if self.dns_start is not None and self.dns is None else "connect"


def _ctx(trace_ctx: SimpleNamespace) -> _Hop | None:
    hop = trace_ctx.trace_request_ctx
    return hop if isinstance(hop, _Hop) else None


async def _on_request_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if hop := _ctx(ctx):
        hop.start = time.perf_counter()


async def _on_dns_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if hop := _ctx(ctx):
        hop.dns_start = time.perf_counter()


async def _on_dns_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if (hop := _ctx(ctx)) and hop.dns_start is not None:
        hop.dns = (hop.dns or 0.0) + time.perf_counter() - hop.dns_start


async def _on_dns_cache_hit(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if (hop := _ctx(ctx)) and hop.dns is None:
        hop.dns = 0.0


async def _on_conn_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if hop := _ctx(ctx):
        hop.conn_start = time.perf_counter()


async def _on_conn_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if (hop := _ctx(ctx)) and hop.conn_start is not None:
        # DNS runs inside connection creation; connect is the rest (TCP + TLS).
        hop.connect = max(0.0, time.perf_counter() - hop.conn_start - (hop.dns or 0.0))
        hop.connected = True


async def _on_conn_reuse(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if hop := _ctx(ctx):
        hop.connect, hop.connected, hop.reused = 0.0, True, True


async def _on_headers_sent(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if hop := _ctx(ctx):
        hop.sent, hop.connected = time.perf_counter(), True
        if hop.on_sent is not None:
            hop.on_sent()


async def _on_request_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if hop := _ctx(ctx):
        hop.headers = time.perf_counter()


def _trace_config() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(_on_request_start)
    trace.on_dns_resolvehost_start.append(_on_dns_start)
    trace.on_dns_resolvehost_end.append(_on_dns_end)
    trace.on_dns_cache_hit.append(_on_dns_cache_hit)
    trace.on_connection_create_start.append(_on_conn_start)
    trace.on_connection_create_end.append(_on_conn_end)
    trace.on_connection_reuseconn.append(_on_conn_reuse)
    trace.on_request_headers_sent.append(_on_headers_sent)
    trace.on_request_end.append(_on_request_end)
    return trace


# What no text taken from a server keeps: C0 and C1 controls and DEL (a terminal escape, a
# line break in a one-line value, NUL, which PostgreSQL refuses in text), noncharacters
# (U+FDD0-U+FDEF, the last two code points of every plane) and the bidirectional embedding,
# override and isolate controls (U+202A-U+202E, U+2066-U+2069, which the catalogue refuses in
# its own text too), which would reorder a page's or a terminal's text around it.
_UNSHOWN = re.compile(
    "[\x00-\x1f\x7f-\x9f\ufdd0-\ufdef\u202a-\u202e\u2066-\u2069"
    + "".join(chr(plane | 0xFFFE) + chr(plane | 0xFFFF) for plane in range(0, 0x110000, 0x10000))
    + "]"
)
_SPACING = str.maketrans("\t\n\v\f\r", "     ")


def storable(text: str | None) -> str | None:
    """`text` taken from a server (a header, a Location, an error's message) as the store keeps
    it and a release, a page or a terminal shows it: the one rule of every such field. Bytes
    that are not UTF-8 (aiohttp keeps them as lone surrogates) become `?`, a tab or line break
    a space, and what `_UNSHOWN` names is dropped. One such header must not make a night's
    probes impossible to store, nor write control codes into what a reader sees."""
    if text is None or (text.isascii() and text.isprintable()):
        return text
    text = text.encode("utf-8", "replace").decode("utf-8").translate(_SPACING)
    return _UNSHOWN.sub("", text)


def _header_value(text: str | None) -> str | None:
    """A header's value as stored (`storable`), None when nothing of it is left: a header
    made only of what is dropped says nothing, as if it were absent."""
    return (storable(text) or "").strip() or None


def _ms_sum(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) * 1000.0 if present else None


# --- the prober ---------------------------------------------------------------------------


@dataclass
class _Attempt:
    """What one attempt (a request and its redirect hops) came to."""

    checked_at: datetime
    hops: list[_Hop] = field(default_factory=list)
    status: int | None = None
    reason: str | None = None
    error_class: str | None = None
    error: str | None = None
    final_url: str | None = None
    redirects: int = 0
    retry_after: float | None = None
    retryable: bool = False
    cors_allow_origin: str | None = None
    cors_allow_credentials: bool | None = None
    first_status: int | None = None  # the first hop's status
    landed_on_page: bool = False  # redirected to an HTML page at another path
    given_up: str | None = None  # not sent: the host of its hop was given up on (why)
    note: str | None = None  # a redirect not followed: its target's host was given up on
    began: float | None = None  # when its first request had its turn (the prober's clock)

    def result(self, url: str, attempts: int) -> ProbeResult:
        if self.error_class is not None:
            outcome: Outcome = "unreachable"
        else:
            outcome = "live" if self.status == 200 else "online"
        spans = [
            hop.headers - hop.start
            for hop in self.hops
            if hop.start is not None and hop.headers is not None
        ]
        reached = outcome != "unreachable" and len(spans) == len(self.hops)
        return ProbeResult(
            url=storable(redact_userinfo(url)),
            entry_id=None,
            endpoint_id=None,
            checked_at=self.checked_at,
            outcome=outcome,
            reason=self.reason,
            error_class=self.error_class,
            http_status=self.status if outcome != "unreachable" else None,
            total_ms=_ms_sum(spans) if reached else None,
            dns_ms=_ms_sum(hop.dns for hop in self.hops),
            connect_ms=_ms_sum(hop.connect for hop in self.hops),
            ttfb_ms=_ms_sum(
                hop.headers - hop.sent
                for hop in self.hops
                if hop.sent is not None and hop.headers is not None
            ),
            final_url=storable(self.final_url),
            attempts=attempts,
            redirects=self.redirects,
            error=storable(self.error),
            cors_allow_origin=(
                _header_value(self.cors_allow_origin) if outcome != "unreachable" else None
            ),
            cors_allow_credentials=(
                self.cors_allow_credentials if outcome != "unreachable" else None
            ),
            tls_version=self.hops[-1].tls_version if self.hops else None,
            cert_expires_at=self.hops[-1].cert_expires_at if self.hops else None,
            page_redirect_status=self.first_status if self.landed_on_page else None,
            note=self.note,
        )


class _HostTurn:
    """Per-host politeness: a semaphore and the earliest time the next request may start;
    the host's probes not yet finished, so its connections close once it has none; and what
    its transient failures have cost the run, until it is given up on (`given_up`: why)."""

    __slots__ = ("failures_in_a_row", "given_up", "interval", "lost", "next_start", "pending",
                 "queued", "semaphore", "started", "starting", "woken")

    def __init__(self, limit: int, interval: float) -> None:
        self.semaphore = asyncio.Semaphore(limit) if limit > 0 else None
        self.interval = interval  # seconds between request starts
        self.starting = asyncio.Lock()  # held by the probe of the host next to start
        self.next_start = 0.0
        self.pending = 0
        self.started = False  # a request of the host has had a global slot
        self.queued: list[asyncio.Future[None]] = []  # its requests waiting for one
        # Attempts in a row, retries too, that ended on it in a transient failure (`_count`)
        self.failures_in_a_row = 0
        self.lost = 0.0  # seconds its transient failures cost: their attempts and waits
        self.given_up: str | None = None
        self.woken: asyncio.Future[None] | None = None  # ends its next probe's wait to start

    def give_up(self, reason: str) -> None:
        """Give the host up for the run: the probe waiting for its start (a Retry-After or a
        backoff may have minutes to run) is woken to end at once, and those behind it too."""
        self.given_up = reason
        if self.woken is not None:
            _wake(self.woken)

    async def wait_to_start(self, seconds: float) -> None:
        """Wait `seconds` for the host's next start, or less should it be given up meanwhile.
        One probe of the host waits at a time (the one holding `starting`)."""
        loop = asyncio.get_running_loop()
        self.woken = woken = loop.create_future()
        timer = loop.call_later(seconds, _wake, woken)
        try:
            await woken
        finally:
            timer.cancel()
            self.woken = None


def _wake(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)


class HostGivenUp(Exception):
    """A request was not sent: its host was given up on for the run (the reason)."""


def not_probed(url: str, reason: str) -> ProbeResult:
    """The result of a target left unprobed this run, nothing sent (`ProbeResult.not_probed`)."""
    return ProbeResult(
        url=storable(redact_userinfo(url)), entry_id=None, endpoint_id=None,
        checked_at=datetime.now(UTC), outcome=NOT_PROBED, reason=None, error_class=None,
        http_status=None, total_ms=None, dns_ms=None, connect_ms=None, ttfb_ms=None,
        final_url=None, attempts=0, redirects=0, error=None, not_probed=reason)


def host_politeness(settings: ProbeSettings, host: str) -> tuple[int, float]:
    """The concurrency limit (0: none) and the interval between request starts of `host`:
    the settings' own, or, for a host another shard may probe too, its share of them."""
    limit, interval = settings.per_host_concurrency, settings.per_host_interval
    if settings.sharing <= 1 or settings.own_hosts is None or host in settings.own_hosts:
        return limit, interval
    return (max(1, limit // settings.sharing) if limit > 0 else 0), interval * settings.sharing


class _Start:
    """The start of one request to a host: its next request may start an interval later.

    The host's next probe waits (holding no slot) until this request is sent, the moment
    the host sees it; or, if its connection takes longer than the interval to open, until
    an interval after it got its slot, so that a host whose connections hang is not
    probed one URL at a time (it then sees connection attempts an interval apart).
    """

    __slots__ = ("_interval", "_loop", "_timer", "_turn")

    def __init__(self, turn: _HostTurn, interval: float, loop: asyncio.AbstractEventLoop) -> None:
        self._turn: _HostTurn | None = turn
        self._interval = interval
        self._loop = loop
        turn.next_start = loop.time() + interval
        self._timer = loop.call_later(interval, self.hand_on)

    def sent(self) -> None:
        """The request went out: the interval counts from now."""
        if self._turn is not None:
            self._turn.next_start = max(self._turn.next_start, self._loop.time() + self._interval)
            self.hand_on()

    def hand_on(self) -> None:
        """Let the host's next probe wait for its start (once; later calls do nothing)."""
        if self._turn is not None:
            self._timer.cancel()
            self._turn.starting.release()
            self._turn = None


class _Slots:
    """The global limit, handed out by rank rather than first come, first served.

    A host already started goes before one not yet started, so a host is finished (and its
    connections closed) before new ones are opened: the open connections stay about those
    of the hosts in progress, not one per host. Among either, the host with the most probes
    left goes first (then first come): the longest serial chains start first and never wait
    behind the crowd, so the busiest host ends near its own bound.
    """

    def __init__(self, limit: int) -> None:
        self._free = max(1, limit)  # while a slot is free, nobody waits
        self._waiters: list[tuple[bool, int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, turn: _HostTurn) -> None:
        """Take a slot for a request of `turn`'s host, waiting in rank if none is free."""
        if self._free > 0:
            self._free -= 1
        else:
            granted = asyncio.get_running_loop().create_future()
            turn.queued.append(granted)
            self._enqueue(turn, granted)
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():
                    self.release()  # handed a slot while being cancelled: pass it on
                raise
            finally:
                turn.queued.remove(granted)
        if not turn.started:
            turn.started = True
            for waiting in turn.queued:  # ranked again, as a started host's (the first
                self._enqueue(turn, waiting)  # entry granted wins, the other is skipped)

    def _enqueue(self, turn: _HostTurn, granted: asyncio.Future[None]) -> None:
        rank = (not turn.started, -turn.pending, next(self._arrivals), granted)
        heapq.heappush(self._waiters, rank)

    def release(self) -> None:
        """Give a slot back: to the best-ranked waiter, else to the free ones."""
        while self._waiters:
            granted = heapq.heappop(self._waiters)[-1]
            if not granted.done():  # granted already, or cancelled: skipped
                granted.set_result(None)
                return
        self._free += 1


def _is_interim(code: int) -> bool:
    """Whether an answer's status is an interim one (1xx), which its final answer follows
    (101 switches protocols instead)."""
    return 100 <= code <= 199 and code != 101


# Where a head ends in a read: an empty line (its CR optional, as aiohttp's parser takes it),
# or, at the read's start, the rest of one whose first bytes ended the read before.
_HEAD_END = re.compile(rb"\n\r?\n|^\r?\n")


class _HeadFirst(ResponseHandler):
    """aiohttp's connection protocol, parsing the head of an answer before what follows it.

    A probe's verdict is that of the answer's head, its status and headers (the body is never
    read): a body aiohttp cannot parse (a broken chunked encoding, bytes past its length) must
    not change it. Fed in one go, bytes of the body that came in the head's read failed the
    parse of the head with them, and a `live` answer was a protocol error, while the same
    body one read later went unseen. Until the final answer's head is parsed, a read is fed
    to the parser up to each head's end apart, so what follows the head never comes with it.
    """

    _head_read = False

    def set_response_params(self, **params: Any) -> None:
        self._head_read = False  # a new request on the connection: its answer's head to come
        super().set_response_params(**params)

    def feed_data(self, data: tuple[RawResponseMessage, StreamReader], size: int = 0) -> None:
        self._head_read = self._head_read or not _is_interim(data[0].code)
        super().feed_data(data, size)

    def data_received(self, data: bytes) -> None:
        start = 0
        while not self._head_read and self.exception() is None and (
                end := _HEAD_END.search(data, start)):
            super().data_received(data[start:end.end()])
            start = end.end()
        if start < len(data) and (start == 0 or self.exception() is None):
            super().data_received(data[start:] if start else data)


class _Pool(aiohttp.TCPConnector):
    """aiohttp's connection pool, which can also close one host's idle connections at once,
    on connections that parse an answer's head first (`_HeadFirst`).

    A kept-alive connection otherwise stays until the keep-alive timeout (15 s), and each
    TLS connection holds about 0.3 MiB (asyncio's SSL read buffer and OpenSSL's state): at
    100,000 hosts, thousands of them would be open at once for nothing.

    Its keys are indexed by host (`_keys_by_host`), so that closing one host's connections
    looks at its keys alone. aiohttp adds a key to `_conns` in `_release` alone, where the
    index takes it: every pooled key is indexed, so none is left open. Keys leave in
    aiohttp's `_get`, `_cleanup` and `_close` too, each followed here; should a key leave
    by a path not followed, the index holds it stale, harmless: `close_idle` skips a key
    no longer pooled (it closes only what `_conns` holds, never a connection in use), and
    `_cleanup` builds the index anew from the pool.
    """

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._factory = functools.partial(_HeadFirst, loop=self._loop)
        self._keys_by_host: dict[str, set[Any]] = {}

    def close_idle(self, host: str) -> None:
        """Close the pooled connections to `host` that no request is using, at once: a TLS
        close would send close_notify and wait for the server's, which some servers never
        send (asyncio then waits 30 s), and costs the prober a few % of its CPU."""
        for key in self._keys_by_host.pop(host, ()):
            if (idle := self._conns.pop(key, None)) is not None:  # a stale key is skipped
                self._close_now(key, idle)

    def _release(self, key: Any, protocol: Any, *, should_close: bool = False) -> None:
        """aiohttp's release, the one place a key enters the pool, indexed by its host."""
        super()._release(key, protocol, should_close=should_close)
        if key in self._conns:
            self._index(key)

    def _index(self, key: Any) -> None:
        self._keys_by_host.setdefault(key.host.lower(), set()).add(key)

    def _forget(self, key: Any) -> None:
        """Drop `key` from the index once it has left the pool."""
        if key not in self._conns and (keys := self._keys_by_host.get(key.host.lower())):
            keys.discard(key)
            if not keys:
                del self._keys_by_host[key.host.lower()]

    def _cleanup(self) -> None:
        """aiohttp's pass over the whole pool for expired connections, which builds the pool
        anew: the index is built anew from it, at the cost of that same pass."""
        super()._cleanup()
        self._keys_by_host = {}
        for key in self._conns:
            self._index(key)

    def _close(self, *, abort_ssl: bool = False) -> list[Any]:
        """aiohttp's close, which empties the pool: the index with it."""
        waiters = super()._close(abort_ssl=abort_ssl)
        self._keys_by_host.clear()
        return waiters

    async def _get(self, key: Any, traces: Any) -> Any:
        """A pooled connection to reuse, never one the server wrote on while it sat idle (a
        body longer than its Content-Length, an answer nobody asked for): aiohttp would read
        what it queued as the next request's answer. Such a connection is closed instead."""
        idle = self._conns.get(key)
        if spoken := [entry for entry in idle or () if entry[0].should_close]:
            for entry in spoken:
                idle.remove(entry)
            if not idle:
                del self._conns[key]
            self._close_now(key, spoken)
        try:
            return await super()._get(key, traces)
        finally:
            self._forget(key)  # its last idle connection taken (or closed): the key left

    def _close_now(self, key: Any, entries: Iterable[tuple[Any, float]]) -> None:
        """Close pooled connections (protocol, time pooled) of `key` at once, unanswered."""
        for protocol, _ in entries:
            if (transport := protocol.transport) is not None:
                transport.abort()  # nothing more is read on it
            self._release(key, protocol, should_close=True)  # aiohttp's own way to close


# Interim (1xx) answers taken before a request's final one. A server sends a few (103 Early
# Hints, 102 Processing while it works); aiohttp reads them without end.
MAX_INTERIM_ANSWERS = 16


class TooManyInterimAnswers(aiohttp.ClientError):
    """A server kept answering with interim (1xx) answers, never a final one."""


class _Response(aiohttp.ClientResponse):
    """aiohttp's response, given up after `MAX_INTERIM_ANSWERS` interim answers: a server
    streaming them without end held its probe until the deadline while the answers it parsed
    and queued faster than they were read filled memory and the prober's loop, slowing every
    other host's probes (and counting their latency high)."""

    async def start(self, connection: Any) -> _Response:
        protocol = connection.protocol
        read = protocol.read
        interim = 0

        async def read_counted() -> Any:
            nonlocal interim
            message, payload = await read()
            if _is_interim(message.code):
                interim += 1
                if interim > MAX_INTERIM_ANSWERS:
                    raise TooManyInterimAnswers(
                        f"more than {MAX_INTERIM_ANSWERS} interim (1xx) answers, no final one")
            return message, payload

        protocol.read = read_counted  # for this response alone: the connection may be reused
        try:
            await super().start(connection)
        finally:
            del protocol.read
        return self


class Prober:
    """Probes URLs over one session; use as `async with Prober(settings) as prober`.

    `inner_resolver` replaces the system resolver under the guard (tests use a fake DNS);
    `clock` times what a host's failed attempts cost its budget (the event loop's by default,
    on which their deadlines run: a timed-out attempt costs at least its timeout).
    """

    def __init__(
        self, settings: ProbeSettings, inner_resolver: AbstractResolver | None = None,
        *, clock: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self._inner_resolver = inner_resolver
        self._clock = clock
        self.policy = GuardPolicy.from_strings(settings.allow_private, settings.blocked_networks)
        self._hosts: dict[str, _HostTurn] = {}
        self._slots = _Slots(settings.global_concurrency)
        self._session: aiohttp.ClientSession | None = None
        self._pool: _Pool | None = None
        self._resolver: GuardedResolver | None = None

    async def __aenter__(self) -> Prober:
        self._resolver = GuardedResolver(self.policy, self._inner_resolver)
        context = ssl.create_default_context()
        if self.settings.ca_file:
            context.load_verify_locations(self.settings.ca_file)
        headers = {"User-Agent": self.settings.user_agent, "Accept": "*/*"}
        if self.settings.origin:
            headers["Origin"] = self.settings.origin
        self._pool = _Pool(
            resolver=self._resolver,
            ssl=context,
            limit=0,  # bounded by our own semaphores
            limit_per_host=0,
            ttl_dns_cache=60,  # cached answers were checked by the resolver
        )
        self._session = aiohttp.ClientSession(
            connector=self._pool,
            headers=headers,
            cookie_jar=aiohttp.DummyCookieJar(),  # never store or send cookies
            trust_env=False,  # no proxy and no .netrc credentials from the environment
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.settings.connect_timeout),
            trace_configs=[_trace_config()],
            max_line_size=16384,
            max_field_size=32768,
            # The body is never read, so never decoded: a Content-Encoding aiohttp cannot
            # decode here (br, zstd without their modules) would fail the answer unseen.
            auto_decompress=False,
            response_class=_Response,
        )
        # aiohttp resends an idempotent request once when the connection drops; our own
        # retries do that, counted and spaced by the host's interval.
        if hasattr(self._session, "_retry_connection"):
            self._session._retry_connection = False
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._session is not None:
            await self._session.close()
        if self._resolver is not None:
            await self._resolver.close()

    def _host(self, host: str) -> _HostTurn:
        turn = self._hosts.get(host)
        if turn is None:
            turn = self._hosts[host] = _HostTurn(*host_politeness(self.settings, host))
        return turn

    @asynccontextmanager
    async def _turn(self, host: str) -> AsyncIterator[_Start]:
        """Wait for the host's turn, then for a global slot; the request starts on the slot.

        The interval runs from one request's actual start (when it is sent) to the next
        one's. One probe of a host at a time waits out the interval and queues for a slot
        (the host's `starting` lock, handed on by `_Start`), so a later probe never
        overtakes the one before it, and no slot is taken before the host may start: none
        is held idle. A slot granted while the host was held off meanwhile (Retry-After) is
        passed on at once.
        """
        turn = self._host(host)
        loop = asyncio.get_running_loop()
        if turn.semaphore is not None:
            await turn.semaphore.acquire()
        try:
            await turn.starting.acquire()
            try:
                while True:
                    if turn.given_up is not None:  # meanwhile, by another probe of the host
                        raise HostGivenUp(turn.given_up)
                    if (wait := turn.next_start - loop.time()) > 0:
                        await turn.wait_to_start(wait)
                        continue
                    await self._slots.acquire(turn)
                    if loop.time() >= turn.next_start and turn.given_up is None:
                        break
                    self._slots.release()
            except BaseException:
                turn.starting.release()
                raise
            start = _Start(turn, turn.interval, loop)
            try:
                yield start
            finally:
                start.hand_on()
                self._slots.release()
        finally:
            if turn.semaphore is not None:
                turn.semaphore.release()

    def _hold_off(self, host: str, seconds: float) -> float:
        """Keep every probe of `host` away for `seconds` (`_wait_before_next_attempt`); returns
        the seconds this adds to the host's wait (a hold already running counts once)."""
        turn = self._hosts.get(host)
        if turn is None:
            return 0.0
        now = asyncio.get_running_loop().time()
        added = max(0.0, now + seconds - max(turn.next_start, now))
        turn.next_start = max(turn.next_start, now + seconds)
        return added

    def _wait_before_next_attempt(
        self, host: str, attempt: _Attempt, attempts: int, ends: bool
    ) -> float:
        """Hold `host` off before its next attempt, for the Retry-After it asked for (whether
        or not this probe tries again: it applies to the host), else, when this probe tries
        again, for a jittered exponential backoff. Both are the host's next start, so a probe
        waiting one out is woken once the host is given up, and both count towards the host's
        budget; returns the seconds added to the host's wait."""
        settings = self.settings
        if attempt.retry_after is not None:
            seconds = min(attempt.retry_after, settings.retry_after_cap)
        elif ends:
            return 0.0
        else:
            step = settings.backoff_base * 2 ** (attempts - 1)
            seconds = step / 2 + random.uniform(0, step / 2)
        return self._hold_off(host, seconds)

    def _count(self, host: str, transient: bool, lost: float) -> None:
        """Count an attempt that ended on `host` (its last request; a redirect it followed on
        the way is no part of the row): a `transient` failure (timeout, reset, 5xx, 429) adds
        to the host's streak and its `lost` seconds (the attempt and the wait before the next)
        to the host's cost; any other end, a redirect not followed too, ends the streak. The
        host is given up for the run after `host_failures_in_a_row` such attempts in a row, or
        once they cost it `host_failure_budget` seconds: one host that hangs or holds us off
        must not make the night last hours."""
        turn = self._hosts.get(host)
        if turn is None or turn.given_up is not None:
            return
        settings = self.settings
        turn.lost += lost
        turn.failures_in_a_row = turn.failures_in_a_row + 1 if transient else 0
        if 0 < settings.host_failures_in_a_row <= turn.failures_in_a_row:
            times = "time" if turn.failures_in_a_row == 1 else "times"
            turn.give_up(f"its host failed {turn.failures_in_a_row} {times} in a row")
        elif 0 < settings.host_failure_budget <= turn.lost:
            # The budget, not the seconds measured: the note is published, and a release
            # should not differ from the last for a host's timings alone.
            turn.give_up(f"its host's failures took {settings.host_failure_budget:g} s")
        if turn.given_up is not None:
            log.warning("gave up on %s for this run (%s, %.1f s of failures): its other "
                        "targets are not probed", host, turn.given_up, turn.lost)

    async def probe(self, url: str) -> ProbeResult:
        """Probe one URL, retrying transient failures; never raises (bar cancellation).

        Once the probes of its host (started, not finished) are done, the host's kept-alive
        connections are closed: reused while the host has URLs left, never held after.
        """
        host = target_host(url)
        self._host(host).pending += 1
        final_host = host
        try:
            try:
                result = await self._probe(url)
            except Exception as exc:  # a fault of the prober's own ends this URL, not the run
                log.warning("unexpected error probing %s: %s", redact_userinfo(url),
                            _message(exc), exc_info=exc)
                result = _Attempt(datetime.now(UTC), error_class="protocol",
                                  error=_message(exc)).result(url, 1)
            if result.final_url and result.final_url != url:  # a redirect may have moved host
                final_host = target_host(result.final_url)
            result.final_url = kept_final_url(result.final_url)
            return result
        finally:
            self._host(host).pending -= 1
            self._close_if_done(host)
            self._close_if_done(final_host)

    def _now(self) -> float:
        return asyncio.get_running_loop().time() if self._clock is None else self._clock()

    def _seconds_taken(self, attempt: _Attempt) -> float:
        """Seconds from an attempt's first turn to now (0: it never had one)."""
        return 0.0 if attempt.began is None else max(0.0, self._now() - attempt.began)

    def _close_if_done(self, host: str) -> None:
        """Close the host's idle connections if none of its probes is left."""
        turn = self._hosts.get(host)
        if turn is not None and turn.pending == 0 and self._pool is not None:
            self._pool.close_idle(host)

    async def _probe(self, url: str) -> ProbeResult:
        settings = self.settings
        attempts = 0
        last: _Attempt | None = None
        while True:
            attempt = await self._attempt(url)
            if last is not None and (attempt.given_up or attempt.note):
                return last.result(url, attempts)  # a retry cut short: what it retried stands
            if attempt.given_up is not None:  # nothing sent
                return not_probed(url, f"not probed this run: {attempt.given_up}")
            attempts += 1
            host = target_host(attempt.final_url) if attempt.final_url else ""
            ends = not attempt.retryable or attempts >= settings.max_attempts
            if attempt.retry_after is not None:
                # Asked to wait longer than we will: never come back early, stop here.
                ends = ends or attempt.retry_after > settings.retry_after_cap
            lost = self._seconds_taken(attempt) if attempt.retryable else 0.0
            lost += self._wait_before_next_attempt(host, attempt, attempts, ends)
            self._count(host, attempt.retryable, lost)
            if ends:
                return attempt.result(url, attempts)
            last = attempt  # the wait is the next attempt's, for its host's turn

    async def _attempt(self, url_text: str) -> _Attempt:
        settings = self.settings
        attempt = _Attempt(checked_at=datetime.now(UTC))
        try:
            url = clean_url(URL(url_text))
            if not url.scheme or not url.raw_host:
                raise ValueError("an absolute URL needs a scheme and a host, as https://host/path")
            if url.scheme in ALLOWED_SCHEMES and (problem := unusable(url)):
                raise ValueError(problem)  # as yarl refuses a port over 65535: never sent
        except (ValueError, TypeError) as exc:
            attempt.error_class = "malformed"
            attempt.error = redact_userinfo(f"not a valid URL: {exc}")[:_MESSAGE_LIMIT]
            return attempt
        visited = {url}
        asked = url  # the URL whose answer led to the hop being made, on a later hop
        deadline: float | None = None  # one deadline per attempt, across all its hops
        while True:
            hop = _Hop()
            attempt.hops.append(hop)
            try:
                self.policy.check_url(url)
                attempt.final_url = str(url)  # only a hop the guard let through is requested
                host = _host_key(url)
                loop = asyncio.get_running_loop()
                waiting = loop.time()
                async with self._turn(host) as start:
                    hop.on_sent = start.sent
                    if attempt.redirects == 0:
                        attempt.checked_at = datetime.now(UTC)
                        attempt.began = self._now()
                        deadline = loop.time() + settings.total_timeout
                    else:  # the wait for a later hop's host (its interval, a Retry-After)
                        assert deadline is not None  # set on the first hop
                        deadline += loop.time() - waiting
                    status, headers = await self._request(url, hop, deadline)
            except asyncio.CancelledError:
                raise
            except HostGivenUp as given_up:
                if attempt.redirects == 0:
                    attempt.given_up = str(given_up)
                    return attempt
                return _redirect_not_followed(attempt, asked, host, str(given_up))
            except Exception as exc:  # every failure becomes a result, none aborts the run
                attempt.error_class = classify_error(exc, hop.phase)
                attempt.error = _message(exc)
                attempt.retryable = attempt.error_class in RETRIED_ERRORS or (
                    attempt.error_class == "dns" and _is_temporary_dns(exc)
                )
                if attempt.error_class == "protocol" and not isinstance(exc, aiohttp.ClientError):
                    log.warning(
                        "unexpected error probing %s", redact_userinfo(str(url)), exc_info=exc
                    )
                return attempt
            if not 100 <= status <= 999:  # `HTTP/1.1 000`: no status a reader could use
                attempt.error_class = "protocol"
                attempt.error = f"not an HTTP status: {status}"
                return attempt
            attempt.status = status
            if attempt.redirects == 0:
                attempt.first_status = status
            allowed = headers.get("access-control-allow-origin")
            credentials = headers.get("access-control-allow-credentials")
            attempt.cors_allow_origin = allowed.strip()[:_MESSAGE_LIMIT] if allowed else None
            attempt.cors_allow_credentials = (
                None if credentials is None else credentials.strip().lower() == "true"
            )
            location = headers.get("location")
            if status in FOLLOWED_REDIRECTS and location:
                target = redirect_target(url, location)
                if target is not None:
                    if target in visited:
                        attempt.error_class = "redirect_loop"
                        attempt.error = f"redirect loop back to {target}"[:_MESSAGE_LIMIT]
                        return attempt
                    if attempt.redirects >= settings.max_redirects:
                        attempt.reason = "redirect"
                        attempt.error = f"more than {settings.max_redirects} redirects"
                        return attempt
                    visited.add(target)
                    attempt.redirects += 1
                    asked, url = url, target
                    continue
            attempt.reason = http_reason(status, headers)
            attempt.landed_on_page = (status == 200 and attempt.redirects > 0
                                      and _is_page(headers) and _moved(URL(url_text), url))
            if attempt.reason is not None:
                attempt.error = f"HTTP {status}"
            attempt.retryable = status == 429 or status in RETRIED_5XX
            if attempt.retryable and attempt.reason != "bot_challenge":
                attempt.retry_after = retry_after_seconds(headers.get("retry-after"))
            else:
                attempt.retryable = False
            return attempt

    async def _request(
        self, url: URL, hop: _Hop, deadline: float | None = None
    ) -> tuple[int, Mapping[str, str]]:
        """One GET: headers read, body never downloaded, connection released at once.

        A keep-alive connection the server closed while it sat in the pool fails before any
        byte of a response: the request is sent once more on a fresh connection, as browsers
        and urllib3 do for an idempotent request (not a retry: the server never saw it).
        """
        assert self._session is not None, "use Prober as an async context manager"
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self.settings.total_timeout
        async with asyncio.timeout_at(deadline):
            try:
                response = await self._session.get(
                    url, allow_redirects=False, trace_request_ctx=hop
                )
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if not hop.reused or hop.headers is not None or not _closed_early(exc):
                    raise
                hop.reused, hop.connected, hop.sent = False, False, None
                response = await self._session.get(
                    url,
                    allow_redirects=False,
                    trace_request_ctx=hop,
                    headers={"Connection": "close"},  # a fresh connection, used once
                )
        _read_tls(response, hop)
        try:
            return response.status, {
                name: response.headers[name] for name in _KEPT_HEADERS if name in response.headers
            }
        finally:
            # The body was not read: release closes the connection unless it was complete.
            response.release()


def redirect_target(url: URL, location: str) -> URL | None:
    """Where a redirect from `url` leads, or None when its `Location` leads nowhere a request
    can go: unparsable, or an http(s) URL `unusable` refuses. The answer then stands as the
    3xx (`redirect`), as for any redirect not followed. Another scheme is returned, for the
    guard to refuse (`blocked`)."""
    try:
        target = clean_url(url.join(URL(location)))
    except (ValueError, TypeError):
        return None
    if target.scheme in ALLOWED_SCHEMES and unusable(target) is not None:
        return None
    return target


def _redirect_not_followed(attempt: _Attempt, answered: URL, host: str, why: str) -> _Attempt:
    """`attempt` ended on the redirect `answered` sent, whose target's `host` was given up on
    (`why`): as any redirect not followed, that answer stands (`redirect`) with the URL
    requested last as the final one, and its note says what the run left undone. The URL's own
    host did answer: it is a probe, not a target left unprobed."""
    attempt.hops.pop()  # the hop to the host given up on was never sent
    attempt.redirects -= 1
    attempt.final_url = str(answered)
    attempt.reason = "redirect"
    attempt.note = (f"{REDIRECT_NOTE_OPENING}{host} was not followed this run: "
                    + why.replace("its host", "that host", 1))
    attempt.error = attempt.note  # whole: ours, and as long as a host name at most
    return attempt


# A host name as DNS and RFC 3986 write one (yarl has the rest of a URL percent-encoded).
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+")


def unusable(url: URL) -> str | None:
    """Why an http(s) `url` is never requested, if it is not: port 0, which no server listens
    on (a connection to it fails at once, which would read as a refusal worth retrying), or a
    host that is no name or address a request can go to (a space, an IPv6 zone), which no
    release could publish as the URL a probe ended on either."""
    if url.explicit_port == 0:
        return "port 0 is no port a server listens on"
    host = url.raw_host or ""
    if _HOST_NAME.fullmatch(host) or ("%" not in host and parse_address(host) is not None):
        return None
    return f"{host!r} is no host name or address"


def _is_page(headers: Mapping[str, str]) -> bool:
    """Whether an answer is an HTML page (its Content-Type), as a browser would show it."""
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media in ("text/html", "application/xhtml+xml")


def _moved(probed: URL, final: URL) -> bool:
    """Whether redirects took a probe to another path (a trailing slash, the scheme or the
    host alone do not count: `http://a/x` -> `https://a/x/` is the same resource)."""
    return probed.path.rstrip("/") != final.path.rstrip("/")


def _closed_early(exc: BaseException) -> bool:
    """The peer closed or reset the connection (not a timeout, not TLS, not DNS)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return True
    return any(
        isinstance(e, ConnectionResetError | BrokenPipeError | ConnectionAbortedError)
        for e in _chain(exc)
    ) or "Connection reset" in str(exc)


_KEPT_HEADERS = (
    "location",
    "content-type",
    "retry-after",
    "server",
    "cf-mitigated",
    "cf-chl-bypass",
    "x-amzn-waf-action",
    "x-datadome",
    "access-control-allow-origin",
    "access-control-allow-credentials",
)


def _read_tls(response: aiohttp.ClientResponse, hop: _Hop) -> None:
    """The TLS version and certificate expiry of the connection `response` came on, if HTTPS."""
    # A small body read with the headers frees the connection at once: the protocol stays.
    connection = response.connection
    protocol = (
        connection.protocol if connection is not None else getattr(response, "_protocol", None)
    )
    transport = getattr(protocol, "transport", None)
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    if ssl_object is None:
        return
    hop.tls_version = ssl_object.version()
    # The certificate as the handshake decoded it (asyncio's and uvloop's SSL transports keep
    # `getpeercert()` as `peercert`), not decoded again for every request on the connection.
    peercert = transport.get_extra_info("peercert")
    if peercert is None:
        peercert = ssl_object.getpeercert()
    not_after = (peercert or {}).get("notAfter")
    if isinstance(not_after, str):
        hop.cert_expires_at = _cert_expiry(not_after)


@functools.lru_cache(maxsize=1024)
def _cert_expiry(not_after: str) -> datetime | None:
    """A certificate's notAfter as a UTC moment (None if unreadable); cached, since parsing
    it (strptime) costs more than the rest of reading the connection's TLS, and the requests
    of a host (and the hosts of one certificate) share it."""
    try:
        return datetime.fromtimestamp(ssl.cert_time_to_seconds(not_after), UTC)
    except ValueError:
        return None


def _host_key(url: URL) -> str:
    return (url.raw_host or "").lower()


def target_host(url: str) -> str:
    """The host whose turn a probe of `url` waits for (its politeness key); '' if unparsable."""
    try:
        return _host_key(clean_url(URL(url)))
    except (ValueError, TypeError):
        return ""


async def probe_all(
    targets: Iterable[ProbeTarget],
    settings: ProbeSettings,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> list[ProbeResult]:
    """Probe every target concurrently (one asyncio task per target, never a Prefect task),
    then each failed one once more (`confirm_failures`); returns the results in target order,
    followed by the confirmations in target order. Duplicate URLs are probed once. The targets
    of a host given up on (`host_failures_in_a_row`, `host_failure_budget`) that were not yet
    sent are results with nothing sent (`not_probed`), and a failure it had gets no second look.

    The probes run on the prober's own loop (uvloop) in a worker thread: `on_result` is
    called there as each result is ready (to store it at once); an exception it raises
    cancels the run.
    """
    targets = list(targets)
    return await run_on_prober_loop(lambda: _probe_all(targets, settings, on_result))


async def _probe_all(
    targets: list[ProbeTarget],
    settings: ProbeSettings,
    on_result: Callable[[ProbeResult], None] | None,
) -> list[ProbeResult]:
    by_url: dict[str, list[int]] = {}
    for index, target in enumerate(targets):
        by_url.setdefault(target.url, []).append(index)
    results: list[ProbeResult | None] = [None] * len(targets)

    confirmations: list[ProbeResult | None] = [None] * len(targets)
    first: dict[str, ProbeResult] = {}

    async def run(prober: Prober, url: str, indexes: list[int], again: bool = False) -> None:
        probed = await prober.probe(url)
        if again and (probed.not_probed is not None or probed.note is not None):
            # No second look after all (its host, or its redirect's, was given up on): the
            # first look decides.
            for index in indexes:
                first_look = results[index]
                if first_look is not None:
                    first_look.failure_class = failure_class(first_look)
            return
        probed.confirmation = again
        if not again:
            first[url] = probed
        for position, index in enumerate(indexes, 1):
            target = targets[index]
            if position < len(indexes):  # a URL of several targets: a copy for each but one
                result = replace(probed, entry_id=target.entry_id, endpoint_id=target.endpoint_id)
            else:
                result = probed
                result.entry_id, result.endpoint_id = target.entry_id, target.endpoint_id
            # Judged as each target's look: a base address standing in is not dead for a 404,
            # nor is a page it redirects to anything but its host answering.
            answered_by_page(result)
            if again:
                result.failure_class = failure_class(first[url], result)
            elif not (settings.confirm_failures and _needs_confirmation(result)):
                result.failure_class = failure_class(result)  # no second look to come
            (confirmations if again else results)[index] = result
            if on_result is not None:
                on_result(result)

    urls = busiest_hosts_first(by_url)
    window = asyncio.Semaphore(max(WINDOW_PER_SLOT * settings.global_concurrency, 1))

    async def in_window(probe: Coroutine[Any, Any, None]) -> None:
        try:
            await probe
        finally:
            window.release()

    async def probe_in_order(order: list[str], again: bool = False) -> None:
        """Each URL's probe, started in `order`, with a bounded number waiting at once: a
        waiting probe holds some 6 KB (its task and frames), so a whole catalogue's of them
        would weigh gigabytes (280,000 URLs: 1.6 GB), while the window keeps the global slots
        as busy and their ranking as it was among the URLs next in line."""
        async with asyncio.TaskGroup() as group:
            for url in order:
                await window.acquire()
                group.create_task(in_window(run(prober, url, by_url[url], again)))

    async with Prober(settings) as prober:
        await probe_in_order(urls)
        if settings.confirm_failures:
            # After every other target, through the same hosts' turns: a flapping target
            # gets its second look minutes later, and a failing host is never hammered.
            await probe_in_order(busiest_hosts_first(
                u for u in urls if any(_needs_confirmation(results[i]) for i in by_url[u])
            ), again=True)
    return [result for result in [*results, *confirmations] if result is not None]


def busiest_hosts_first(urls: Iterable[str]) -> list[str]:
    """`urls` ordered by how many of them their host has, most first (else as given): the
    order in which `probe_all` starts them, so that the longest serial chains start first."""
    urls = list(urls)
    hosts = [target_host(url) for url in urls]
    sizes = Counter(hosts)
    order = sorted(range(len(urls)), key=lambda position: -sizes[hosts[position]])
    return [urls[position] for position in order]


def _needs_confirmation(result: ProbeResult) -> bool:
    """A failure worth a second look: anything but a refusal made before a request was sent,
    which is settled at once."""
    return is_failure(result) and result.error_class not in SETTLED_ERRORS


async def probe_url(url: str, settings: ProbeSettings) -> ProbeResult:
    """Probe a single URL with a session of its own."""
    async with Prober(settings) as prober:
        return await prober.probe(url)
