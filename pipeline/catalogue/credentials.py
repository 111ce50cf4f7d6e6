"""The placeholder-only credential gate: find text that looks like a real credential.

Entries show how to authenticate, so they hold credential-shaped text on purpose;
only placeholders (`YOUR_API_KEY`, `<token>`, `sk_test_xxxx…`) may appear. Known
key formats are caught anywhere; long random-looking tokens are caught where a
credential would sit (auth examples, requests, the addresses the prober calls,
secret-named response fields).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pipeline.catalogue.curl import (
    CredentialForm,
    CurlRequest,
    credential_scheme,
    example_request,
    printable,
    query_fields,
    shown,
    split_url,
)

# Well-known formats of live credentials, each a prefix and a body of its length; a body that is
# a placeholder (`hf_xxxx…`, `glpat-YOUR_TOKEN`) passes.
KNOWN_FORMATS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Stripe live key", re.compile(r"\b[spr]k_live_[0-9A-Za-z]{10,}")),
    ("Stripe test key", re.compile(r"\b[spr]k_test_[0-9A-Za-z]{16,}")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[0-9A-Za-z]{30,}|github_pat_[0-9A-Za-z_]{30,})")),
    ("Slack token", re.compile(r"\bxox[abposr]-[0-9A-Za-z-]{10,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("OpenAI-style secret key", re.compile(r"\bsk-(?:proj-|ant-|or-)?[0-9A-Za-z_-]{20,}")),
    ("private key", re.compile(r"-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----")),
    ("Twilio account credential", re.compile(r"\b(?:AC|SK)[0-9a-f]{32}\b")),
    # Prefixed formats whose body may be letters alone (a Hugging Face token always is), which
    # the random-token check, asking for a digit, lets pass.
    ("Hugging Face token", re.compile(r"\b(?:hf_|api_org_)[0-9A-Za-z]{34}\b")),
    ("GitLab token", re.compile(r"\bgl(?:pat|dt|ptt|rt|oas)-[0-9A-Za-z_-]{20,}")),
    ("Groq API key", re.compile(r"\bgsk_[0-9A-Za-z]{52}\b")),
    ("Replicate API token", re.compile(r"\br8_[0-9A-Za-z]{37}\b")),
    ("Perplexity API key", re.compile(r"\bpplx-[0-9A-Za-z]{48}\b")),
    ("xAI API key", re.compile(r"\bxai-[0-9A-Za-z]{80}\b")),
    ("npm token", re.compile(r"\bnpm_[0-9A-Za-z]{36}\b")),
    ("Linear API key", re.compile(r"\blin_api_[0-9A-Za-z]{40}\b")),
    ("SendGrid API key", re.compile(r"\bSG\.[0-9A-Za-z_-]{22}\.[0-9A-Za-z_-]{43}(?![\w-])")),
    ("Telegram bot token", re.compile(r"(?<![0-9])[0-9]{5,16}:A[0-9A-Za-z_-]{34}(?![\w-])")),
)
JWT = re.compile(r"\beyJ[0-9A-Za-z_-]{8,}\.(eyJ[0-9A-Za-z_-]{8,})\.[0-9A-Za-z_-]{8,}")
TOKEN = re.compile(r"[0-9A-Za-z_-]{24,}")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
HEX = re.compile(r"^[0-9a-fA-F]+$")
PLACEHOLDER_WORDS = re.compile(
    r"YOUR|EXAMPLE|PLACEHOLDER|REPLACE|REDACTED|DUMMY|SAMPLE|TOKEN_HERE", re.I
)
SECRET_KEYS = re.compile(
    r"token|secret|password|passwd|api[_-]?key|access[_-]?key|private|"
    r"credential|signature",
    re.I,
)
# Names that carry a credential, in a header, a cookie, or a query or form parameter; a cookie
# may also hold a session (`session`, `PHPSESSID`, `connect.sid`).
CREDENTIAL_HEADER = re.compile(r"auth|key$|token|secret|passphrase|password|signature")
CREDENTIAL_PARAMS = frozenset({"key", "api_key", "apikey", "api-key", "access_token", "token",
                               "appid", "app_id", "app_key", "auth", "auth_token",
                               "client_secret", "secret", "password"})
_SESSION_COOKIE = re.compile(r"sess|(?:^|[._-])sid$|jwt")
# Fields where any long random-looking token is taken for a credential: the auth example, the
# sample request, and the addresses the prober calls every night and the release publishes
# (`baseUrl` and an endpoint's `path`, its query included).
TOKEN_FIELDS = frozenset({"authExample", "sampleRequest", "baseUrl", "path"})


@dataclass(frozen=True)
class Finding:
    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.excerpt})"


def _excerpt(text: str) -> str:
    """Enough of a match to find it, not enough to reuse it: at most 8 characters, and at most
    half of a short one (a password)."""
    return printable(text[:min(8, len(text) // 2)]) + "…"


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


# How docs write an id or key they made up by counting (Google's channel id
# `01234567-89ab-cdef-0123456789ab`, `sk_test_0123456789ABCDEF`): most of its letters and
# digits in runs of at least four counting up. A generated key is no such thing, and a real
# one that merely holds a run (a Telegram bot's id `5012345678:` before its secret) is not
# mostly runs.
_COUNTING = "0123456789abcdefghijklmnopqrstuvwxyz"
_NEXT = dict(pairwise(_COUNTING))
COUNTED_SHARE = 0.75


def counts_up(token: str) -> bool:
    """Whether at least `COUNTED_SHARE` of `token`'s letters and digits lie in runs of four
    or more counting up (`0123`, `89ab`, `cdef`), separators left out."""
    marks = [c.lower() for c in token if c.isalnum()]
    counted, run = 0, 1
    for previous, current in zip(marks, [*marks[1:], ""], strict=True):
        if _NEXT.get(previous) == current:
            run += 1
            continue
        counted += run if run >= 4 else 0
        run = 1
    return len(marks) >= 8 and counted >= COUNTED_SHARE * len(marks)


def is_placeholder(token: str) -> bool:
    """Obvious stand-ins: words like YOUR_/EXAMPLE, long runs of one character (xxxx, 0000),
    or characters counting up (`counts_up`)."""
    return bool(PLACEHOLDER_WORDS.search(token) or re.search(r"(.)\1{3,}", token)
                or counts_up(token))


# How a password is written as a stand-in: an upper-case name (`SECRET`, `YOUR_API_SECRET`), a
# name in brackets (`<password>`, `{secret}`), a shell variable, or words naming what goes there
# (`password`, `api_key`, `client_secret`, as OAuth's `-u client_id:client_secret` writes it).
STAND_IN = re.compile(r"[A-Z]+(?:_[A-Z0-9]+)*|<[^<>]+>|\{[^{}]+\}|\$\{?\w+\}?"
                      r"|(?i:(?:(?:api|app|client|consumer|access|auth|account|user|private"
                      r"|secret|bot)[_-]?){0,3}(?:password|passwd|pass|secret|token|key))")


def credential_cookie(name: str) -> bool:
    """Whether a cookie named `name` carries a credential: a session, or a key or token."""
    name = name.lower()
    return (name in CREDENTIAL_PARAMS or CREDENTIAL_HEADER.search(name) is not None
            or _SESSION_COOKIE.search(name) is not None)


def is_stand_in(value: str) -> bool:
    """Whether a password or a credential cookie's value is written as a placeholder: one
    sent as written is no token to measure, and a short plain word (`hunter2`) is as live as
    a random one."""
    return not value or is_placeholder(value) or bool(STAND_IN.fullmatch(value))


def looks_random(token: str) -> bool:
    """A long token mixing letters and digits with the entropy of generated keys."""
    if is_placeholder(token) or UUID.match(token):
        return False
    if HEX.match(token):
        return len(token) >= 32 and entropy(token) >= 3.4
    has_letter = any(c.isalpha() for c in token)
    has_digit = any(c.isdigit() for c in token)
    return has_letter and has_digit and entropy(token) >= 3.8


def _jwt_payload_is_real(segment: str) -> bool:
    try:
        decoded = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        return isinstance(json.loads(decoded), dict)
    except (binascii.Error, ValueError):
        return False


def known_credentials(text: str) -> Iterator[Finding]:
    """Credentials of a well-known format, and JWTs whose payload decodes."""
    for kind, pattern in KNOWN_FORMATS:
        for match in pattern.finditer(text):
            if not is_placeholder(match.group(0).strip("-")):
                yield Finding(kind, _excerpt(match.group(0)))
    for match in JWT.finditer(text):
        if _jwt_payload_is_real(match.group(1)):
            yield Finding("JWT with a real payload", _excerpt(match.group(0)))


def random_tokens(text: str) -> Iterator[Finding]:
    """Long random-looking tokens; UUIDs and placeholders pass."""
    for match in TOKEN.finditer(text):
        token = match.group(0).strip("-_")
        if looks_random(token):
            yield Finding("high-entropy token", _excerpt(token))


def sent_credentials(request: CurlRequest, form: CredentialForm,
                     ) -> Iterator[tuple[str, str, str]]:
    """Each credential `request` sends, as (kind, name, value): a header `form` (the entry's
    authExample) names or a credential's name, a cookie (from -b or a Cookie header), basic
    auth (from -u, or a user name in the URL, which curl sends so), or a query or form
    parameter: one `form` names, or one with a credential's name where `form` names none (an
    API whose key goes in `key` takes `appid` as an argument of its own: Steam's game id)."""
    for name, value in request.header_fields():
        if name != "cookie" and (name in form.headers or CREDENTIAL_HEADER.search(name)):
            yield "header", name, value
    for name, value in request.cookies():
        if name in form.cookies or credential_cookie(name):
            yield "cookie", name, value
    if request.user is not None:
        yield "basic", "-u", request.user
    for url in request.urls[:1]:
        netloc = parts.netloc if (parts := split_url(url)[0]) is not None else ""
        if "@" in netloc:
            yield "basic", "URL", netloc.rpartition("@")[0]
    if request.bearer is not None:
        yield "header", "authorization", f"Bearer {request.bearer}"
    for name, value in query_fields(request):
        if name in form.params or (not form.params and name.lower() in CREDENTIAL_PARAMS):
            yield "parameter", name, value


def credential_values(request: CurlRequest, form: CredentialForm) -> set[str]:
    """Each value `request` sends as a credential, whole: a basic-auth user and password, a
    header's after its scheme word, a cookie's, a parameter's. A placeholder stands there,
    and so may a shell variable (`$API_SECRET`), as the gate lets it."""
    values: set[str] = set()
    for kind, _, value in sent_credentials(request, form):
        values.update(value.split(":", 1) if kind == "basic" else [_secret(kind, value) or ""])
    return values


def _secret(kind: str, value: str) -> str | None:
    """The part of a credential sent as `kind` that is secret: a basic-auth password (None
    where there is none), a header's value after its scheme word (`Bearer`), or all of it."""
    if kind == "basic":
        _, colon, password = value.partition(":")
        return password if colon else None
    if kind == "header" and (scheme := credential_scheme(value)) is not None:
        return value[len(scheme):].strip()
    return value


def plain_secrets(text: str, form: CredentialForm) -> Iterator[Finding]:
    """Credentials that are no placeholder, wherever a curl command, curl options alone
    (`-u KEY:`), a query or header lines send them: a password, a cookie, a header, a
    parameter. A key a known format or its randomness already names is said once, there."""
    request = example_request(text) or CurlRequest()
    for kind, name, value in sent_credentials(request, form):
        secret = _secret(kind, value)
        if secret is None or is_stand_in(secret) or any(known_credentials(secret)) \
                or any(random_tokens(secret)):
            continue
        what = (f"a {name} password" if kind == "basic" else f"{kind} {shown(name, 40)}")
        yield Finding(f"{what} that is no placeholder", _excerpt(secret))


def _secret_valued(document: Any, under_secret_key: bool = False) -> Iterator[str]:
    """String values of a JSON document that sit under a secret-sounding key."""
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _secret_valued(value, under_secret_key or bool(SECRET_KEYS.search(key)))
    elif isinstance(document, list):
        for item in document:
            yield from _secret_valued(item, under_secret_key)
    elif isinstance(document, str) and under_secret_key:
        yield document


def credential_findings(field: str, text: str, form: CredentialForm | None = None,
                        ) -> list[Finding]:
    """What in one field of an entry looks like a real credential; `field` is its name (an
    endpoint's path is `path`), `form` where the entry's authExample puts the credential."""
    findings = list(known_credentials(text))
    if field in TOKEN_FIELDS:
        findings.extend(random_tokens(text))
    if field in ("authExample", "sampleRequest"):
        findings.extend(plain_secrets(text, form or CredentialForm()))
    elif field == "sampleResponse":
        try:
            document = json.loads(text)
            values = list(_secret_valued(document))
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to walk (lint
            values = []  # says so); its known credential formats are found above all the same
        for value in values:
            findings.extend(random_tokens(value))
    return list(dict.fromkeys(findings))
