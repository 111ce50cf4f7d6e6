"""Data lint: rules an entry must keep beyond the schema, so published data is usable as is."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import SplitResult, urlsplit

from pipeline.catalogue.credentials import (
    credential_findings,
    credential_values,
    sent_credentials,
)
from pipeline.catalogue.curl import (
    HEADER,
    CredentialForm,
    CurlRequest,
    and_more,
    credential_form,
    credential_scheme,
    curl_command,
    parse_curl,
    raw_byte,
    read_shell,
    shown,
    split_url,
)
from pipeline.contract import (
    BIDI_CONTROL,
    ONE_TIME_PERIODS,
    UNCAPPED_PERIOD,
    Endpoint,
    EntryContent,
    absolute_uri,
)

Loc = tuple[int | str, ...]
Lint = tuple[Loc, str, str]  # (field location, rule, message)

TAG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # whole: `$` would also end before a "\n"
SENTENCE_BREAK = re.compile(r"[.!?]\s+[A-Z0-9]")
# Words that point away from a fact instead of stating it: a field says something or is left out.
# An address (`example.com/pricing`) is tried only where a run of name characters starts, its
# labels taken once (possessive) and its path at most 300 characters: the pattern stays linear,
# where `\b(?:[\w-]+\.)+` tried every label of `ab.ab.ab.…` from every label (a 100 KB text
# took 36 s).
HEDGE = re.compile(
    r"\bnot\s+(?:re)?stated\b|\brestated\b|\bpricing\s+page\b"
    r"|\bsee\s+the\s+(?:docs|documentation)\b"
    r"|\b(?:is|are|as)\s+(?:only\s+)?(?:listed|published|shown|advertised)\s+(?:only\s+)?on\b"
    r"|(?<![\w.-])(?:[\w-]+\.)++[a-z]{2,}/\S{0,300}?(?:pricing|fees)\b",
    re.IGNORECASE,
)


def _sample_request(entry: EntryContent, form: CredentialForm) -> Iterator[Lint]:
    text = entry.sample_request
    if text is None:
        return
    try:
        command = read_shell(text)
    except ValueError as exc:
        yield ("sampleRequest",), "sample-request-shell", f"is not a valid shell command: {exc}"
        return
    words = command.words
    if not words or words[0] != "curl":
        yield ("sampleRequest",), "sample-request-curl", "must be a curl command"
        return
    request = parse_curl(words, command.expanded)
    for problem in command.problems:
        yield ("sampleRequest",), "sample-request-shell", problem
    for problem in request.problems:
        yield ("sampleRequest",), "sample-request-curl", problem
    yield from _unset_variables(("sampleRequest",), command.variables, request, form)
    yield from _shell_slips(words, request)
    if not request.urls:  # curl requests only the words it takes for URLs, never a header's
        yield ("sampleRequest",), "sample-request-url", "holds no http(s) URL"
        return
    base = urlsplit(entry.base_url)
    url, why = split_url(request.urls[0])
    if url is not None and (byte := raw_byte(request.urls[0])) is not None:
        url, why = None, (f"curl sends the byte {byte} in it as it is, no UTF-8 text and no "
                          f"URL character (it percent-encodes such a byte in a path alone): "
                          f"write it percent-encoded, %{byte[2:].upper()}")
    if url is None:
        yield (("sampleRequest",), "sample-request-url",
               f"URL {shown(request.urls[0])} is not a valid URL: {why}")
        return
    if url.hostname != base.hostname:
        yield (("sampleRequest",), "sample-request-host",
               f"URL host {shown(url.hostname or '')} is not the baseUrl host {base.hostname!r}")
        return
    if url.scheme != base.scheme:
        yield (("sampleRequest",), "sample-request-https",
               f"URL {shown(request.urls[0])} must use {base.scheme}, as baseUrl does")
    if (port := _sample_port(url, base)) is not None:
        yield ("sampleRequest",), "sample-request-port", port
    if malformed := [header for header in request.headers if not HEADER.fullmatch(header)]:
        yield (("sampleRequest",), "sample-request-header",
               f"header {shown(malformed[0])}{and_more(malformed)} is not of the form "
               "'Name: value'")
    if raw := [header for header in request.headers if raw_byte(header) is not None]:
        yield (("sampleRequest",), "sample-request-header",
               f"header {shown(raw[0])}{and_more(raw)} holds the byte {raw_byte(raw[0])}, "
               "which is no UTF-8 text and curl sends as it is: write the text it stands for")
    yield from _sample_endpoint(entry, request, url)
    yield from _sample_credential(entry, request, form)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _port(url: SplitResult, scheme: str) -> int | None:
    """The port a request to `url` connects to: the one it names, else the default of
    `scheme`; None where the port it names is no port (0, past 65535, not a number)."""
    try:
        port = url.port
    except ValueError:
        return None
    return _DEFAULT_PORTS.get(scheme) if port is None else port or None


def _sample_port(url: SplitResult, base: SplitResult) -> str | None:
    """Why the sample's URL does not reach baseUrl's port, if it does not: the same host on
    another port is another server. A port left out is the default of baseUrl's scheme, so
    `:443` written out is the same port, and a wrong scheme is said once, by its own rule."""
    sample_port, base_port = _port(url, base.scheme), _port(base, base.scheme)
    if sample_port is None:
        return f"URL port {shown(url.netloc.rpartition(':')[2], 20)} is not a port from 1 to 65535"
    if base_port is not None and sample_port != base_port:
        return f"URL port {sample_port} is not the baseUrl port {base_port}"
    return None


def _shell_slips(words: list[str], request: CurlRequest) -> Iterator[Lint]:
    """Words a continuation or quoting slip leaves behind: a backslash before a space keeps the
    space in a word (` -H`, where a line once ended), and a stray word is one more URL to curl."""
    for word in words[1:]:
        if word[:1].isspace():
            yield (("sampleRequest",), "sample-request-shell",
                   f"word {shown(word)} starts with a space: a line continuation is a "
                   "backslash at the very end of a line, with nothing after it")
            return
    if request.strays:
        yield (("sampleRequest",), "sample-request-shell",
               f"curl would also request {shown(request.strays[0])}{and_more(request.strays)} "
               "as a URL: quote it or drop it")
    if len(request.urls) > 1:
        yield (("sampleRequest",), "sample-request-url",
               f"requests {len(request.urls)} URLs; a sample is one request")


# A shell variable by its name alone, `$API_SECRET` or `${API_SECRET}`: a credential's
# placeholder may be one (contributing guide, credential gate).
_NAMED_VARIABLE = re.compile(r"\$(?:[A-Za-z_]\w*|\{[A-Za-z_]\w*\})")


def _unset_variables(loc: Loc, variables: list[str], request: CurlRequest,
                     form: CredentialForm) -> Iterator[Lint]:
    """A sample (or an authExample written as curl) runs as written, in a fresh shell, which
    puts in each variable's value, empty where unset, and no sample can set one: a variable may
    stand only where a placeholder for a credential's whole value does (`-u "api:$API_SECRET"`),
    which a reader fills in."""
    allowed = credential_values(request, form)
    unset = list(dict.fromkeys(
        variable for variable in variables
        if not (_NAMED_VARIABLE.fullmatch(variable) and variable in allowed)))
    if unset:
        yield (loc, "sample-request-variable",
               f"uses {shown(unset[0], 40)[1:-1]}{and_more(unset)}, which the command does not "
               "set, so the shell sends its own value or nothing there: write the placeholder "
               "itself (a variable may stand only for a credential's whole value)")


# A path's `{placeholder}`, never holding a brace: a scan stops at the next `{`, so a path of
# unclosed braces is read in linear time.
_PLACEHOLDER = re.compile(r"(\{[^{}]*\})")


def _endpoint_pattern(path: str, spanning: bool = False) -> re.Pattern[str]:
    """An endpoint's path (its query aside) as a pattern: each `{placeholder}` stands for the
    text of one segment, as in `/users/{id}` or `/forecast/{lat},{lon}`. `spanning` lets a
    placeholder followed by a fixed segment hold several (a Go module path, `golang.org/x/mod`,
    in `/{module}/@v/list`): the fixed text after it still pins the path down."""
    parts = _PLACEHOLDER.split(path.partition("?")[0])
    pattern = ""
    for index, part in enumerate(parts):
        following = parts[index + 1] if index + 1 < len(parts) else ""
        if not part.startswith("{"):
            pattern += re.escape(part)
        elif spanning and following.startswith("/") and following != "/":
            pattern += "[^/]+(?:/[^/]+)*?"
        else:
            pattern += "[^/]+"
    return re.compile(pattern)


def _listed_endpoints(entry: EntryContent, rest: str) -> list[Endpoint]:
    """The endpoints whose path `rest` (a URL path after baseUrl) is, each placeholder one
    segment; failing that, a placeholder followed by a fixed segment may hold several."""
    endpoints = [endpoint for endpoint in entry.endpoints or [] if endpoint.path is not None]
    return ([endpoint for endpoint in endpoints
             if _endpoint_pattern(endpoint.path or "").fullmatch(rest)]
            or [endpoint for endpoint in endpoints
                if _endpoint_pattern(endpoint.path or "", spanning=True).fullmatch(rest)])


def _sample_endpoint(entry: EntryContent, request: CurlRequest, url: SplitResult,
                     ) -> Iterator[Lint]:
    """The request's URL is baseUrl followed by a listed endpoint's path, with its method: the
    sample shows the API as the entry lists it."""
    base_path = urlsplit(entry.base_url).path.rstrip("/")
    if not (url.path == base_path or url.path.startswith(base_path + "/")):
        yield (("sampleRequest",), "sample-request-base",
               f"URL path {shown(url.path)} does not start with the baseUrl path {base_path!r}")
        return
    if not entry.endpoints:
        return  # an entry listing no endpoint (they are optional) has none to match
    rest = url.path[len(base_path):]
    listed = _listed_endpoints(entry, rest)
    if not listed:
        yield (("sampleRequest",), "sample-request-endpoint",
               f"path {shown(rest)} after baseUrl matches none of the listed endpoints")
        return
    if request.method is None:
        return  # curl refuses it for asking for two methods, one line that says so
    same = [endpoint for endpoint in listed if (endpoint.method or "GET") == request.method]
    if not same:
        methods = sorted({endpoint.method or "GET" for endpoint in listed})
        case = (" (curl sends a method as written, and methods are case-sensitive)"
                if request.method.upper() in methods else "")
        yield (("sampleRequest",), "sample-request-method",
               f"sends {shown(request.method, 20)[1:-1]} {shown(rest)}, but the endpoint is "
               f"listed as {' or '.join(methods)} {listed[0].path}{case}")
        return
    yield from _sample_response_shape(entry, same)


# An endpoint that names one item: its last segment is one placeholder naming an id.
_ONE_ITEM = re.compile(r"/\{(?:id|\w*[_-]id|[a-z]\w*Id)\}")


def _sample_response_shape(entry: EntryContent, endpoints: list[Endpoint]) -> Iterator[Lint]:
    """A request for one item (`/users/{id}`) is answered by one JSON object, never a list:
    the only shape check that holds for every API."""
    if not all(_ONE_ITEM.search(endpoint.path or "") and (endpoint.path or "").endswith("}")
               for endpoint in endpoints):
        return
    try:
        response = json.loads(entry.sample_response or "{}")
    except (ValueError, RecursionError):
        return  # sample-response-json says it
    if not isinstance(response, dict):
        yield (("sampleResponse",), "sample-response-shape",
               f"the request asks for one item ({endpoints[0].path}), but the response is "
               f"a JSON {type(response).__name__}, not an object")


def _sample_credential(entry: EntryContent, request: CurlRequest, form: CredentialForm,
                       ) -> Iterator[Lint]:
    """The credential the request sends is where authExample puts it (`form`), and a keyless
    API's request sends none: a sample that authenticates otherwise teaches the wrong call."""
    for kind, name, value in sent_credentials(request, form):
        sent = f"basic auth ({name})" if kind == "basic" else f"{kind} {name!r}"
        if entry.auth_type == "none":
            yield (("sampleRequest",), "sample-request-auth",
                   f"sends a credential ({sent}), but authType is none")
        elif not form.known or entry.auth_example is None:
            continue
        elif kind == "basic" or (name == "authorization" and name not in form.headers
                                 and (credential_scheme(value) or "").lower() == "basic"):
            if not form.basic:
                yield (("sampleRequest",), "sample-request-auth",
                       f"sends {sent}, but authExample puts the credential in {_where(form)}")
        elif kind == "header" and name not in form.headers:
            yield (("sampleRequest",), "sample-request-auth",
                   f"sends {sent}, but authExample puts the credential in {_where(form)}")
        elif kind == "header" and (expected := form.headers[name]) is not None \
                and (credential_scheme(value) or "").lower() != expected.lower():
            yield (("sampleRequest",), "sample-request-auth",
                   f"sends {sent} as {shown(value.split(' ')[0], 40)} …, but authExample writes "
                   f"{expected!r} …")
        elif (kind == "cookie" and name not in form.cookies) or (
                kind == "parameter" and name not in form.params):
            yield (("sampleRequest",), "sample-request-auth",
                   f"sends {sent}, but authExample puts the credential in {_where(form)}")


def _where(form: CredentialForm) -> str:
    """Where a credential form puts the credential, in words."""
    places = [f"header {name!r}" for name in form.headers]
    places += [f"parameter {name!r}" for name in sorted(form.params)]
    places += [f"cookie {name!r}" for name in sorted(form.cookies)]
    if form.basic and not form.headers:
        places.append("basic auth")
    return " and ".join(places) or "no header, parameter, cookie or basic auth"


def _auth_example(entry: EntryContent, form: CredentialForm) -> Iterator[Lint]:
    """An authExample written as curl (`-u "$API_KEY:"`) is a shell fragment a reader pastes,
    held to the sample's variable rule; header lines and a query are no shell and pass as
    written."""
    command = curl_command(entry.auth_example or "")
    if command is not None:
        request = parse_curl(command.words, command.expanded)
        yield from _unset_variables(("authExample",), command.variables, request, form)


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


def _endpoint_url_problem(entry: EntryContent, path: str) -> str | None:
    """Why baseUrl + `path` (its `{placeholders}` filled) is no URL, if it is not: the probe
    calls that URL and the release publishes it as the entry's status URL, which the release's
    check holds to the URL rule, so one such path would fail the whole publish."""
    url = entry.base_url.rstrip("/") + _PLACEHOLDER.sub("x", path)
    try:
        absolute_uri(url)
    except ValueError as exc:
        return (f"{exc} (in {shown(url)}, the URL it makes with baseUrl, which the release "
                "publishes)")
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


# Words that say only that the provider publishes nothing ("No fixed limit published", "no
# request cap is published", "with no published quota", "at prices that are not published",
# "(no published limits)", "undisclosed rate limits", "prices are not listed", "no figures are
# given") read as a stated fact where the rule is to leave it out, wherever they stand: a clause
# of their own, inside one, in parentheses. What the provider does where it publishes no figure
# (answers 429, asks for backoff) is the fact, said without the hedge. A bare "not published"
# (or "not stated", "not documented", "not shown", "not listed", "not given", "undisclosed") is a
# hedge only as a clause of its own ("Free to use, not published", "Rate limit: not given"),
# which starts the text or follows `;`, `:`, `,`, `—`, `(` or a sentence's `.`; inside a clause
# it may be a fact ("results are not published until reviewed", "the key is not shown again").
# A `.` inside a word (`public.api.bsky.app`) ends nothing. Words stand apart by any run of
# spaces or line breaks (`_GAP`), which no word holds, so a run is read once by the word before
# it. Each alternative starts at a fixed word ("no", "undisclosed", a noun, a clause's "not")
# and reads on only through its own adjectives, which no other start shares, or at most 80
# characters of a `for …` tail, so a field of thousands of hedges is one pass.
_GAP = r"\s+"
_CLAUSE_END = r"(?:[;,\u2014)]|\.(?=\s|$))"
_SAID = r"(?:publicly" + _GAP + r")?(?:published|stated|documented)\b"
_GIVEN = r"(?:" + _SAID + r"|(?:shown|listed|given)\b)"  # said of a figure alone
_THING = r"(?:limits?|figures?|numbers?|quotas?|rates?|caps?|prices?|plans?|fees?)\b"
_WHAT = r"(?:(?:fixed|numeric|public|paid|exact|request|rate)" + _GAP + r")*" + _THING
_WHATS = _WHAT + r"(?:" + _GAP + r"or" + _GAP + _WHAT + r")?"
_IS = r"(?:" + _GAP + r"(?:is|are))?"
NOTHING_PUBLISHED = re.compile(
    r"(?P<hedge>(?:"
    r"\b(?:there" + _GAP + r"(?:is|are)" + _GAP + r")?no" + _GAP + _WHATS + _IS + _GAP + _GIVEN
    + r"|\b(?:no" + _GAP + r"(?:(?:fixed|numeric|public)" + _GAP + r")*" + _SAID
    + r"|undisclosed)" + _GAP + _WHATS
    + r"|\b" + _THING + r"(?:" + _GAP + r"(?:that|which))?" + _IS + _GAP
    + r"(?:not" + _GAP + _GIVEN + r"|undisclosed\b)"
    + r"|(?:^|(?<=[;:,\u2014(])|(?<=\.)(?=\s))\s*"
    r"(?:not" + _GAP + _GIVEN + r"|undisclosed)"
    r"(?=\s*(?:" + _CLAUSE_END + r"|$)|" + _GAP + r"for\s)"
    r")(?:" + _GAP + r"for\s(?:[^;:,.()\u2014]|\.(?!\s|$)){1,80}(?=" + _CLAUSE_END + r"|$))?)",
    re.IGNORECASE,
)
# A label a field may open with ("Rate limit:"), which states nothing itself.
_LABEL = re.compile(r"\s*[^\W\d_]{1,40}(?:[ \t-][^\W\d_]{1,40}){0,3}:")


def _quoted(words: str) -> str:
    """`words` as a lint line quotes them: each run of spaces or line breaks one space, cut
    short, so a hedge spread over lines or padded with spaces is said in one short line."""
    return shown(" ".join(words.split()))


def _says_nothing(rest: str) -> bool:
    """Whether `rest`, a field without its hedges, states nothing: no word, or a label alone."""
    label = _LABEL.match(rest)
    return not any(char.isalnum() for char in rest[label.end() if label else 0:])


def _nothing_published(text: str) -> str | None:
    """Why the hedges of `text` are refused, if it has any: said once per field, each scan of it
    one pass."""
    first = NOTHING_PUBLISHED.search(text)
    if first is None:
        return None
    hedge = _quoted(first.group("hedge"))
    if _says_nothing(NOTHING_PUBLISHED.sub("", text)):
        return f"says only {hedge}: where the provider states nothing, leave the field out"
    return f"says {hedge}: drop those words and keep the facts around them"


def _hedges(entry: EntryContent) -> Iterator[Lint]:
    for loc, text in _free_text(entry):
        if nothing := _nothing_published(text or ""):
            yield loc, "hedged-field", nothing
            continue
        match = HEDGE.search(text or "")
        if match:
            yield (
                loc,
                "hedged-field",
                f"says {_quoted(match.group(0))} instead of a fact: state the provider's figure "
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
    if entry.has_free_tier is False and pricing.model in ("free", "freemium"):
        # the card's "Free" comes from the model, its "Free tier" badge from hasFreeTier
        yield (
            ("hasFreeTier",),
            "pricing-free-tier",
            f"must be true for the {pricing.model} model, which has a free tier by definition",
        )
    if entry.has_free_tier is False and pricing.free_quota is not None:
        yield (
            ("pricing", "freeQuota"),
            "pricing-free-quota",
            "must be null when hasFreeTier is false",
        )
    quota = pricing.free_quota
    if quota is not None and quota.recurring is not None and _standing(quota.period):
        yield (
            ("pricing", "freeQuota", "recurring"),
            "pricing-recurring-standing",
            f"leave it out: period {quota.period!r} is a standing allowance, not given again "
            "each period, so it neither renews nor is a one-time credit",
        )
    if quota is not None and quota.amount is None and not _figureless(quota.period):
        yield (
            ("pricing", "freeQuota", "amount"),
            "pricing-quota-amount",
            f"is null with period {quota.period!r}: an allowance given each period needs its "
            "figure; where the provider states none, the period is 'unlimited' (it states no "
            "cap), 'account' or one-time",
        )


# Periods of an allowance that is simply there (storage an account keeps, use without a cap):
# nothing is given again, so `recurring`, renewal each period, says nothing true of them.
STANDING_PERIODS = frozenset({"account", UNCAPPED_PERIOD})


def _standing(period: str) -> bool:
    return period.strip().lower() in STANDING_PERIODS


def _figureless(period: str) -> bool:
    """Whether an allowance of `period` may go without an amount: a standing one or a one-time
    credit. A monthly allowance of no stated size promises nothing, its period invented."""
    return _standing(period) or period.strip().lower() in ONE_TIME_PERIODS


def _credential_texts(entry: EntryContent) -> Iterator[tuple[Loc, str | None]]:
    """Every field that may show how to authenticate, and every address the prober calls:
    a real key in any of them would be published, and one in a URL sent every night."""
    yield ("authExample",), entry.auth_example
    yield ("sampleRequest",), entry.sample_request
    yield ("sampleResponse",), entry.sample_response
    yield ("baseUrl",), entry.base_url
    for index, endpoint in enumerate(entry.endpoints or []):
        yield ("endpoints", index, "path"), endpoint.path


def _credentials(entry: EntryContent, form: CredentialForm) -> Iterator[Lint]:
    for loc, value in _credential_texts(entry):
        if value is not None:
            for finding in credential_findings(str(loc[-1]), value, form):
                yield (
                    loc,
                    "real-credential",
                    f"looks like a real credential: {finding}; use a placeholder "
                    "such as YOUR_API_KEY",
                )


def lint_entry(entry: EntryContent) -> list[Lint]:
    """Every lint problem of a schema-valid entry."""
    form = credential_form(entry.auth_example or "")  # where authExample puts the credential
    return [
        *_sample_request(entry, form),
        *_auth_example(entry, form),
        *_sample_response(entry),
        *_addresses(entry),
        *_text(entry),
        *_shown_text(entry),
        *_hedges(entry),
        *_pricing(entry),
        *_credentials(entry, form),
    ]
