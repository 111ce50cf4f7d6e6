"""Pydantic models of the public JSON, interface version 2.0.0.

These models are the one source of truth for what consumers receive: the
publish stage validates every file against them and the OpenAPI document
(`pipeline.release.openapi`) is generated from them. Every field says what it holds (its
description), reads well in a schema (its title) and the main models carry examples, so a
generated client is documented and typed as the published files are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from typing import Annotated, Any, ClassVar, Literal, get_args
from urllib.parse import urlsplit

import jsonschema_rs
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

INTERFACE_VERSION = "2.0.0"
LICENSE = "CC BY 4.0"

CategoryId = Literal[
    "ai",
    "payments",
    "maps",
    "weather",
    "social",
    "communication",
    "search",
    "storage",
    "auth",
    "entertainment",
    "finance",
    "developer",
    "ecommerce",
    "security",
]
CATEGORY_IDS: tuple[str, ...] = get_args(CategoryId)

AuthType = Literal["bearer", "api-key", "oauth2", "basic", "hmac", "none"]
HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
PricingModel = Literal["free", "freemium", "subscription", "pay-as-you-go", "enterprise"]
StatusState = Literal["live", "online", "unreachable", "unchecked"]
FailureClass = Literal["dead", "blocked", "transient", "tls"]
LifecycleState = Literal["active", "degraded", "failing", "dead", "deprecated"]
CorsState = Literal["yes", "no", "unknown"]

SLUG_PATTERN = r"^[a-z0-9]+(?:-[a-z0-9]+)*$"
COLOR_PATTERN = r"^#[0-9a-fA-F]{6}$"
# SemVer 2.0.0 with optional pre-release and build metadata.
SEMVER_PATTERN = (
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
ONLINE_NOTE = "path returned an error or may require auth"
# The largest integer every JSON reader holds exactly (JavaScript's numbers are doubles); a
# larger one also fails the release's check ("exceeded maximum size"), so no field takes one.
MAX_SAFE_INTEGER = 2**53 - 1
# Characters XML 1.0 forbids (C0 controls other than tab, LF and CR; lone surrogates; U+FFFE,
# U+FFFF): a text holding one cannot be written into the Atom feed, which a release carries.
XML_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
# Bidirectional embedding, override and isolate controls (U+202A-U+202E, U+2066-U+2069): a text
# holding one reorders what follows it, the page's own text around an entry's name included,
# and a code sample with one reads otherwise than it runs. The catalogue is English, so no
# curated text needs one; the marks U+200E and U+200F, which reorder nothing, are not among them.
BIDI_CONTROL = re.compile("[\u202a-\u202e\u2066-\u2069]")


# The active ISO 4217 currency codes, as Debian's iso-codes lists them (its iso_4217.json,
# which pycountry 26.2.16 ships): what `Pricing.currency` may name. No installed library
# carries the list; a code ISO adds is added here.
ISO_4217_CODES = frozenset((
    "AED", "AFN", "ALL", "AMD", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT", "BHD",
    "BIF", "BMD", "BND", "BOB", "BOV", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD", "CDF",
    "CHE", "CHF", "CHW", "CLF", "CLP", "CNY", "COP", "COU", "CRC", "CUP", "CVE", "CZK", "DJF",
    "DKK", "DOP", "DZD", "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP",
    "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR",
    "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT",
    "LAK", "LBP", "LKR", "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP",
    "MRU", "MUR", "MVR", "MWK", "MXN", "MXV", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR",
    "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB",
    "RWF", "SAR", "SBD", "SCR", "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN",
    "SVC", "SYP", "SZL", "THB", "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH",
    "UGX", "USD", "USN", "UYI", "UYU", "UYW", "UZS", "VED", "VES", "VND", "VUV", "WST", "XAD",
    "XAF", "XAG", "XAU", "XBA", "XBB", "XBC", "XBD", "XCD", "XCG", "XDR", "XOF", "XPD", "XPF",
    "XPT", "XSU", "XTS", "XUA", "XXX", "YER", "ZAR", "ZMW", "ZWG",
))
# The currency every price is in where a pricing names none, as every entry did before
# `Pricing.currency`; and the signs a price is written with (`£30`), else its code after it.
DEFAULT_CURRENCY = "USD"
CURRENCY_SIGNS = {"USD": "$", "GBP": "£", "EUR": "€"}


def _currency_code(value: str) -> str:
    """Accept an active ISO 4217 code as written, in capitals: `gbp` is refused, not
    corrected, so the file says what the published JSON holds."""
    if value in ISO_4217_CODES:
        return value
    if value.upper() in ISO_4217_CODES:
        raise ValueError(f"must be written in capitals: {value.upper()}")
    raise ValueError("is not an ISO 4217 currency code (e.g. USD, EUR, GBP)")


def number_text(value: float) -> str:
    """A figure as a reader writes it: `1,000,000`, `2.9`; whole without decimals."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,g}"


def price_text(cents: float, currency: str | None = None) -> str:
    """A price in hundredths of `currency` (absent: US dollars) as a reader writes it: `$29`,
    `£30`, `€4.99`, `30 CHF`; whole units without decimals. Every text that shows a price
    (pages, Markdown, the score's reasons) says it so."""
    amount = f"{int(cents) // 100:,}" if cents % 100 == 0 else f"{cents / 100:,.2f}"
    code = currency or DEFAULT_CURRENCY
    sign = CURRENCY_SIGNS.get(code)
    return f"{sign}{amount}" if sign else f"{amount} {code}"


def fixed_fee_text(cents: float, currency: str | None = None) -> str:
    """The fixed part of a transaction fee: `30¢` in US cents, as payment providers write it;
    in another currency its price (`£0.20`), whose small unit has a sign of its own."""
    if (currency or DEFAULT_CURRENCY) == DEFAULT_CURRENCY:
        return f"{number_text(cents)}¢"
    return price_text(cents, currency)


# The common shape, whose scheme and host `urlsplit` would find as the rule wants, is read
# without splitting it: 4.3 to 1.6 µs a URL, and a release's check reads some 13 URLs an
# entry (about 3 s at 100,000 entries).
_PLAIN_URI = re.compile(r"https?://[A-Za-z0-9.-]+(?::[0-9]*)?(?=[/?#]|\Z)")
_NOT_IN_URIS = re.compile(r"[\s{}<>\"|\\^`]")

# The JSON Schema validator the release is checked with (`pipeline.release.validate`), and its
# `format: uri` check (RFC 3986), which every URL field's schema names: the model's rule runs
# the very same check (0.2 µs a URL), so an entry `apidir validate` accepts cannot fail the
# release's check on a URL, and with it the whole publish.
SchemaValidator = jsonschema_rs.Draft202012Validator
_URI_FORMAT = SchemaValidator({"type": "string", "format": "uri"}, validate_formats=True)
# What makes a URL fail RFC 3986, for the message (looked for only once the check failed).
_NOT_ASCII = re.compile(r"[^\x21-\x7e]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_AUTHORITY_AND_REST = re.compile(r"[^:/?#]*:(?://([^/?#]*))?(.*)", re.DOTALL)
_PORT = re.compile(r"(?:\[[^\]]*\]|[^:]*):([^:]*)$")


def is_uri(value: str) -> bool:
    """Whether `value` passes the release's `format: uri` check (RFC 3986)."""
    return _URI_FORMAT.is_valid(value)


def _uri_problem(value: str) -> str:
    """Why `value`, refused by `is_uri`, is not a URI, with what to write instead."""
    parts = _AUTHORITY_AND_REST.match(value)
    authority, rest = (parts.group(1) or "", parts.group(2)) if parts else ("", value)
    if _NOT_ASCII.search(authority):
        return "has a host that is not ASCII: write it in its IDNA form (xn--…)"
    if found := _NOT_ASCII.search(value):
        character = found.group()
        encoded = "".join(f"%{byte:02X}" for byte in character.encode("utf-8", "replace"))
        return f"holds U+{ord(character):04X}, which a URL must percent-encode ({encoded})"
    if _BAD_ESCAPE.search(value):
        return "holds a '%' not followed by two hex digits: write a '%' itself as %25"
    if value.count("#") > 1:
        return "holds a second '#': percent-encode it as %23"
    if "[" in rest or "]" in rest:
        return "holds '[' or ']' after the host: percent-encode them as %5B and %5D"
    port = _PORT.match(authority.rpartition("@")[2])
    if port is not None and not port.group(1).isdigit():
        return f"has the port {port.group(1)!r}, which is not a number"
    return "is not a valid URL (RFC 3986): check its host, port and escapes"


def _absolute_uri(value: str) -> str:
    """Accept an absolute http(s) URI with a host; kept as written (no normalisation)."""
    if _PLAIN_URI.match(value) is None:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http(s) URL with a host")
    if _NOT_IN_URIS.search(value):
        raise ValueError("must not hold spaces, braces or other characters URLs do not allow")
    if not is_uri(value):
        raise ValueError(_uri_problem(value))
    return value


# The rule of every URL of the public JSON, for the settings whose value one is built from.
absolute_uri = _absolute_uri


def xml_safe(text: str) -> str:
    """`text` without the characters XML 1.0 forbids: what a writer of XML keeps of a text
    stored before the catalogue refused them."""
    return XML_FORBIDDEN.sub("", text)


Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN, min_length=1, max_length=100)]
HexColor = Annotated[str, StringConstraints(pattern=COLOR_PATTERN)]
Uri = Annotated[
    str,
    AfterValidator(_absolute_uri),
    WithJsonSchema({"type": "string", "format": "uri"}),
]
SemVer = Annotated[str, StringConstraints(pattern=SEMVER_PATTERN)]


def _whole_as_integer(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def figure(**bounds: float) -> Any:
    """A figure a curator writes (a quota, a percent), within `bounds` (JSON Schema's
    `minimum`, `maximum`): read as a number like any (one error for a bad one, as `float`
    gives), published whole as an integer (`1000000`, not `1000000.0`), a number to the
    schema all the same."""
    return Annotated[float, PlainSerializer(_whole_as_integer, return_type=Any),
                     WithJsonSchema({"type": "number", **bounds})]
Percent = Annotated[int, Field(ge=0, le=100)]
Share = Annotated[float, Field(ge=0, le=1)]
CurrencyCode = Annotated[
    str,
    AfterValidator(_currency_code),
    WithJsonSchema({"type": "string", "pattern": "^[A-Z]{3}$"}),
]


# Words a title spells as readers know them; "ms" is a unit.
_TITLE_WORDS = {"id": "ID", "ids": "IDs", "url": "URL", "api": "API", "apis": "APIs",
                "http": "HTTP", "https": "HTTPS", "tls": "TLS", "cors": "CORS", "sdks": "SDKs",
                "openapi": "OpenAPI", "ms": "(ms)"}


def field_title(name: str, field: FieldInfo) -> str:
    """A field's title in the JSON Schema, from its JSON name: `checkedAt` reads "Checked at"
    and `totalAPIs` "Total APIs", where pydantic's own would read "Checkedat", "Totalapis"."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", field.alias or to_camel(name)).split()
    first, *rest = words
    return " ".join([_TITLE_WORDS.get(first.lower(), first.capitalize()),
                     *(_TITLE_WORDS.get(word.lower(), word.lower()) for word in rest)])


class ContractModel(BaseModel):
    """Base: camelCase names in JSON, snake_case in Python, titles from the JSON names.

    Some fields have a default in Python, so that older or partial documents still validate,
    yet the publish step writes them into every document: `always_written` names them (in
    JSON), and the serialization schema marks them required; `never_null` names those of them
    that are never written as null, and the schema drops null from their type. A model whose
    every field is written sets pydantic's `json_schema_serialization_defaults_required`.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
        field_title_generator=field_title,
        # JSON has no NaN or infinity: the store would keep one and every run that reads it
        # back, and the release written from it, would fail.
        allow_inf_nan=False,
    )
    always_written: ClassVar[tuple[str, ...]] = ()
    never_null: ClassVar[tuple[str, ...]] = ()


def _without_null(field: JsonSchemaValue) -> JsonSchemaValue:
    """An optional field's schema (`anyOf` of its type and null, default null) as the type."""
    branches = [branch for branch in field.get("anyOf", ()) if branch != {"type": "null"}]
    if len(branches) != 1:
        raise ValueError(f"not an optional field of one type: {field}")
    rest = {key: value for key, value in field.items() if key not in ("anyOf", "default")}
    return branches[0] | rest


class ContractJsonSchema(GenerateJsonSchema):
    """The models' JSON Schema: in serialization mode (what the published files hold) a
    model's `always_written` fields are required too and its `never_null` ones not nullable,
    so generated clients type them as the files hold them."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        model = schema["cls"]
        written = getattr(model, "always_written", ())
        never_null = getattr(model, "never_null", ())
        if self.mode != "serialization" or not written:
            return json_schema
        properties = json_schema["properties"]
        unknown = set(written) - set(properties) | set(never_null) - set(written)
        if unknown:
            raise ValueError(f"{model.__name__}: always_written and never_null name fields of "
                             f"it, never_null only written ones: {', '.join(sorted(unknown))}")
        required = {*json_schema.get("required", ()), *written}
        json_schema["required"] = [name for name in properties if name in required]
        for name in never_null:
            properties[name] = _without_null(properties[name])
        return json_schema


# Examples in the schemas, one release's view of one entry (Frankfurter); the tests validate
# each against its own schema and model, so they never drift from the contract.
_CHECKED = "2026-11-21T02:59:00Z"
STATUS_EXAMPLES: list[dict[str, Any]] = [
    {"state": "live", "httpStatus": 200, "responseTimeMs": 84, "checkedAt": _CHECKED,
     "note": None, "url": "https://api.frankfurter.dev/v2/currencies", "failure": None,
     "finalUrl": None, "standIn": False},
    {"state": "online", "httpStatus": 401, "responseTimeMs": 312, "checkedAt": _CHECKED,
     "note": ONLINE_NOTE, "url": "https://api.openai.com/v1/models", "failure": None,
     "finalUrl": None, "standIn": False},
    {"state": "online", "httpStatus": 302, "responseTimeMs": 140, "checkedAt": _CHECKED,
     "note": ONLINE_NOTE, "url": "https://api.example.com/v1/things", "failure": None,
     "finalUrl": "https://example.com/login", "standIn": False},
    {"state": "online", "httpStatus": 404, "responseTimeMs": 95, "checkedAt": _CHECKED,
     "note": ONLINE_NOTE, "url": "https://api.example.com/v1", "failure": None,
     "finalUrl": None, "standIn": True},
    {"state": "unreachable", "httpStatus": None, "responseTimeMs": None, "checkedAt": _CHECKED,
     "note": None, "url": "https://api.example.com/v1/forecast", "failure": "dead",
     "finalUrl": None, "standIn": False},
    {"state": "unchecked", "httpStatus": None, "responseTimeMs": None, "checkedAt": None,
     "note": None, "url": None, "failure": None, "finalUrl": None, "standIn": None},
]
ENDPOINT_STATUS_EXAMPLES: list[dict[str, Any]] = [
    {"state": "live", "httpStatus": 200, "responseTimeMs": 84, "checkedAt": _CHECKED,
     "reason": None, "note": None, "failure": None},
    {"state": "unchecked", "httpStatus": None, "responseTimeMs": None, "checkedAt": None,
     "reason": None, "note": "path has placeholders", "failure": None},
]
PRICING_EXAMPLE: dict[str, Any] = {
    "model": "free",
    "startingCentsPerMonth": 0,
    "freeQuota": {"amount": None, "unit": "requests", "period": "unlimited",
                  "note": "No API key or sign-up, and no request cap."},
    "tiers": [{"name": "Public API", "monthlyCents": 0,
               "included": "Unlimited requests, no API key"}],
    "unitCost": None,
    "details": "The hosted API is free and needs no API key; the project can be self-hosted.",
}
LATENCY_EVIDENCE_EXAMPLE: dict[str, Any] = {
    "minimumSamples": 5, "eligible": True,
    "last7d": {"samples": 10, "p50Ms": 85, "p95Ms": 89},
    "last30d": {"samples": 41, "p50Ms": 88, "p95Ms": 140},
    "minimumDays": 3, "failedProbeMs": 8000, "probes": 10, "failed": 0, "days": 5,
    "p50Ms": 85, "p95Ms": 89,
}
BUILDER_SCORE_EXAMPLES: list[dict[str, Any]] = [
    {
        "grade": "A", "percent": 93, "label": "93% builder-friendly",
        "pricing": 100, "latency": 100, "depth": 80, "rubric": "2.7.0",
        "reasons": {
            "pricing": ["free tier", "no monthly minimum", "nothing to buy"],
            "latency": ["p50 85 ms, p95 89 ms over 10 responses in 7 days"],
            "depth": ["4 endpoints over 1 method and 4 resources",
                      "official OpenAPI description", "no account needed"],
        },
        "confidence": "medium", "provisional": False,
        "evidence": {
            "pricing": {"freeAllowance": "recurring", "sandbox": None, "monthlyMinimumCents": 0,
                        "growth": "nothing to buy", "freeQuotaAmount": None,
                        "currency": "USD"},
            "latency": LATENCY_EVIDENCE_EXAMPLE,
            "depth": {"endpoints": 4, "methods": 1, "resources": 4, "authType": "none",
                      "openapi": True, "sdks": False, "docs": True, "rateLimit": True},
        },
    },
    {
        "grade": "C", "percent": 67, "label": "67% builder-friendly",
        "pricing": 55, "latency": None, "depth": 78, "rubric": "2.7.0",
        "reasons": {
            "pricing": ["one-time free credit", "paid tiers from $29"],
            "latency": ["graded after 5 probes on 3 days within 7 days, none so far"],
            "depth": ["6 endpoints over 2 methods and 4 resources"],
        },
        "confidence": "low", "provisional": True, "evidence": None,
    },
]
UPTIME_EXAMPLE: dict[str, Any] = {
    "last1d": 1.0, "last7d": 0.98, "last30d": 0.995,
    "evidence": {"last1d": {"probes": 4, "succeeded": 4, "days": 1},
                 "last7d": {"probes": 50, "succeeded": 49, "days": 7},
                 "last30d": {"probes": 200, "succeeded": 199, "days": 30}},
}
LIFECYCLE_EXAMPLES: list[dict[str, Any]] = [
    {"state": "active", "since": "2026-10-02T03:00:00Z"},
    {"state": "deprecated", "since": "2026-11-01T03:00:00Z",
     "reason": "deprecated by its provider on 2027-06-30", "successor": "frankfurter"},
]
HTTPS_EXAMPLE: dict[str, Any] = {"enabled": True, "tlsVersion": "TLSv1.3",
                                 "certExpires": "2027-01-14T23:59:59Z", "certDaysLeft": 54,
                                 "checkedAt": _CHECKED}
CORS_EXAMPLE: dict[str, Any] = {"state": "yes", "allowOrigin": "*", "checkedAt": _CHECKED}
PROVENANCE_EXAMPLE: dict[str, Any] = {
    "verified": "2026-11-21", "sources": ["https://frankfurter.dev"], "stale": False}
API_ENTRY_EXAMPLE: dict[str, Any] = {
    "id": "frankfurter",
    "name": "Frankfurter",
    "provider": "Frankfurter (open-source project)",
    "category": "finance",
    "description": "Free, keyless currency exchange rates from central banks, with historical "
                   "data and time series.",
    "color": "#f08d5c",
    "tags": ["currency", "exchange-rates", "open-data"],
    "authType": "none",
    "authDescription": "No authentication or sign-up is required.",
    "authExample": "# No auth required",
    "baseUrl": "https://api.frankfurter.dev/v2",
    "docsUrl": "https://frankfurter.dev",
    "hasFreeTier": True,
    "pricing": PRICING_EXAMPLE,
    "endpoints": [
        {"method": "GET", "path": "/currencies", "description": "Supported currencies.",
         "status": ENDPOINT_STATUS_EXAMPLES[0]},
        {"method": "GET", "path": "/rate/{base}/{quote}",
         "description": "Rate for a single currency pair.", "status": ENDPOINT_STATUS_EXAMPLES[1]},
    ],
    "sampleRequest": 'curl "https://api.frankfurter.dev/v2/rates?base=USD&quotes=EUR"',
    "sampleResponse": '[{"date": "2026-11-20", "base": "USD", "quote": "EUR", "rate": 0.8652}]',
    "openapiUrl": "https://api.frankfurter.dev/v2/openapi.json",
    "provenance": PROVENANCE_EXAMPLE,
    "status": STATUS_EXAMPLES[0],
    "builderScore": BUILDER_SCORE_EXAMPLES[0],
    "uptime": UPTIME_EXAMPLE,
    "lifecycle": LIFECYCLE_EXAMPLES[0],
    "https": HTTPS_EXAMPLE,
    "cors": CORS_EXAMPLE,
}
META_EXAMPLE: dict[str, Any] = {
    "version": "2.0.0+20261121.1", "generated": "2026-11-21T03:00:00Z", "totalAPIs": 158,
    "source": "https://apis.example.org/api/apis.json", "license": LICENSE,
}
CATEGORY_META_EXAMPLE: dict[str, Any] = META_EXAMPLE | {
    "category": "finance", "label": "Finance", "count": 12}
SEARCH_ITEM_EXAMPLE: dict[str, Any] = {
    "id": "frankfurter", "name": "Frankfurter", "provider": "Frankfurter (open-source project)",
    "category": "finance", "description": API_ENTRY_EXAMPLE["description"],
    "tags": API_ENTRY_EXAMPLE["tags"], "authType": "none", "hasFreeTier": True,
    "freeOnly": True, "color": "#f08d5c", "state": "live", "grade": "A", "percent": 93,
    "provisional": False, "lifecycle": "active", "https": True, "cors": "yes",
}
# A provisional grade's item says what its Latency waits for (worked example 2 of scoring.md).
PROVISIONAL_SEARCH_ITEM_EXAMPLE: dict[str, Any] = {
    "id": "stripe", "name": "Stripe API", "provider": "Stripe, Inc.", "category": "payments",
    "authType": "bearer", "hasFreeTier": False, "state": "unchecked", "grade": "C",
    "percent": 67, "provisional": True,
    "provisionalWhy": "Latency is graded after 5 probes on 3 days within 7 days, none so far",
}
CATALOGUE_EVENT_EXAMPLES: list[dict[str, Any]] = [
    {"kind": "added", "entry": "frankfurter", "name": "Frankfurter",
     "at": "2026-11-21T03:00:00Z"},
    {"kind": "added", "entry": "frankfurter", "name": "Frankfurter",
     "renamedFrom": "exchange-rates", "at": "2026-11-19T03:00:00Z"},
    {"kind": "lifecycle", "entry": "frankfurter", "name": "Frankfurter", "from": "active",
     "to": "degraded", "at": "2026-11-20T03:00:00Z"},
    {"kind": "release", "version": "2.0.0+20261121.1", "at": "2026-11-21T03:00:00Z"},
]
STATE_CHANGE_EXAMPLE: dict[str, Any] = {
    "entry": "frankfurter", "name": "Frankfurter", "from": "unreachable", "to": "live",
    "at": _CHECKED}


def _examples(*examples: dict[str, Any]) -> ConfigDict:
    """Examples of a model, shown in its JSON Schema."""
    return ConfigDict(json_schema_extra={"examples": list(examples)})


# Periods of a free quota given once (a trial or sign-up credit), never renewed: what scores
# weigh below a renewing allowance, and the one period besides a standing one that may go
# without a figure.
ONE_TIME_PERIODS = ("one-time", "once", "trial", "signup", "sign-up")
# The period of a free quota for use with no cap the provider states: its allowance is the
# whole of use, so it has no figure to state (and the scores want none).
UNCAPPED_PERIOD = "unlimited"


class FreeQuota(ContractModel):
    """What a builder gets without paying, per period."""

    amount: figure() | None = Field(
        default=None, description="How much is free each period, counted in `unit`; null where "
        "the provider states no figure.")
    unit: str | None = Field(
        default=None, description="What the amount counts, e.g. requests, credits or "
        "characters; null where not stated.")
    period: str = Field(description="How often the allowance is given, e.g. day, month, or "
                        "one-time; `account` for what an account keeps (storage), `unlimited` "
                        "for use with no cap the provider states. A period that renews (day, "
                        "month …) comes with its `amount`.")
    note: str | None = Field(default=None, description="Conditions of the allowance as the "
                             "provider states them; null when there are none.")
    recurring: bool | None = Field(
        default=None,
        description="True: the allowance renews every period; false: a one-time credit "
        "(a trial); absent: not stated, or a standing allowance (period `account` or "
        "`unlimited`), which is never given again.",
    )


class PricingTier(ContractModel):
    """One published price tier."""

    name: str = Field(description="The tier's name, as the provider calls it.")
    monthly_cents: int = Field(ge=0, le=MAX_SAFE_INTEGER,
                               description="Price per month, in hundredths of the pricing's "
                               "currency (cents, pence; 0: free).")
    included: str = Field(description="What the tier includes, as the provider states it.")


class UnitCost(ContractModel):
    """A price per use, e.g. 79 cents per 10,000 SMS."""

    amount_cents: int = Field(ge=0, le=MAX_SAFE_INTEGER,
                              description="Price of `per` units, in hundredths of the "
                              "pricing's currency.")
    per: int = Field(ge=1, le=MAX_SAFE_INTEGER, description="How many units that price buys.")
    unit: str = Field(description="What is counted, e.g. requests or sms.")


class TransactionFee(ContractModel):
    """A fee per transaction, as payment APIs charge: e.g. 2.9 % + 30¢."""

    percent: figure(minimum=0, maximum=100) = Field(
        ge=0, le=100, description="Share of each transaction, in percent.")
    fixed_cents: int = Field(default=0, ge=0, le=MAX_SAFE_INTEGER,
                             description="Fixed part per transaction, in hundredths of "
                             "the pricing's currency.")
    note: str | None = Field(default=None, description="What the fee applies to, as stated.")


class Pricing(ContractModel):
    """What using the API costs, as the provider states it."""

    model_config = _examples(PRICING_EXAMPLE)

    model: PricingModel | None = Field(
        default=None, description="Pricing model: free, freemium, subscription, pay-as-you-go "
        "or enterprise.")
    starting_cents_per_month: int | None = Field(
        default=None, ge=0, le=MAX_SAFE_INTEGER, description="Lowest monthly price in "
        "hundredths of the pricing's currency; 0 means free; null means enterprise or unknown.")
    free_quota: FreeQuota | None = Field(
        default=None, description="The free allowance; null when there is no free tier, or "
        "when the provider states no size for one that renews (`hasFreeTier` says which).")
    tiers: list[PricingTier] | None = Field(
        default=None, description="The published price tiers, cheapest first.")
    unit_cost: UnitCost | None = Field(
        default=None, description="The price per use where the API charges so; else null.")
    details: str | None = Field(
        default=None, description="The pricing in a sentence or two, as the provider states it.")
    transaction_fee: TransactionFee | None = Field(
        default=None, description="The standard fee per transaction, where the API charges so."
    )
    sandbox: bool | None = Field(
        default=None, description="A free sandbox or test mode to build against, without paying."
    )
    monthly_minimum_cents: int | None = Field(
        default=None, ge=0, le=MAX_SAFE_INTEGER,
        description="The least a builder pays per month once live, in hundredths of the "
        "pricing's currency (0: none).",
    )
    currency: CurrencyCode | None = Field(
        default=None, description="The ISO 4217 code of the currency every price here is in "
        "(GBP, EUR …), its hundredths (pence, euro cents) what the `…Cents` fields count; "
        "absent: US dollars.",
    )


class EndpointStatus(ContractModel):
    """One endpoint's own presented status, from the entry's latest trusted probe run."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True,
                              json_schema_extra={"examples": ENDPOINT_STATUS_EXAMPLES})

    state: StatusState = Field(default="unchecked", description="live, online, unreachable, "
                               "or unchecked (not probed, or not yet).")
    http_status: int | None = Field(default=None, ge=100, le=999, description="The HTTP "
                                    "status it answered with; null without an answer.")
    response_time_ms: int | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER,
                                         description="Time to response headers, in "
                                         "milliseconds; null without an answer.")
    checked_at: AwareDatetime | None = Field(default=None, description="The check date (UTC); "
                                             "null when not probed.")
    reason: str | None = Field(default=None, description="Why it answered as it did (auth, "
                               "rate_limited, not_found, …) or why it failed (dns, timeout, …).")
    note: str | None = Field(default=None, description="Why it is not probed, e.g. "
                             "'method is POST', 'path has placeholders', 'path has a "
                             "placeholder credential (YOUR_API_KEY)', 'same URL as GET "
                             "/forecast', 'base address is per account (YOUR_PROJECT_REF)' or, "
                             "for a run that gave its host up, 'not probed this run: its host "
                             "failed 10 times in a row'; or why the run did not follow the "
                             "redirect its URL answered with (no answer of the API, so "
                             "unchecked), e.g. 'its redirect to api.example.com was not "
                             "followed this run: that host failed 10 times in a row'.")
    failure: FailureClass | None = Field(
        default=None, description="Set when it failed in the run (seen twice: a second look "
        "at the end of the run confirms a failure, unless confirmation is off): dead (404/410 "
        "or no such host), blocked (bot challenge or 429), transient (5xx, timeout, reset) or "
        "tls.")


class Endpoint(ContractModel):
    """One operation of the listed API, as in the provider's reference."""

    method: HttpMethod | None = Field(default=None, description="The operation's HTTP method.")
    path: str | None = Field(
        default=None, description="Path of the operation, appended to baseUrl; may contain "
        "{placeholders}.")
    description: str | None = Field(default=None, description="What the operation does or "
                                    "returns.")
    status: EndpointStatus | None = Field(
        default=None, description="Published with each entry: this endpoint's own status.")


class Sdk(ContractModel):
    """An official SDK of the listed API: a repository or a package of its provider."""

    language: str = Field(min_length=1, description="Programming language, e.g. Python.")
    url: Uri = Field(description="The SDK's official repository or package page.")


class Deprecation(ContractModel):
    """The provider's deprecation of an API, as the curator recorded it."""

    on: date | None = Field(default=None, description="Day the provider deprecated it, or "
                            "will shut it down, as announced.")
    successor: Slug | None = Field(default=None, description="Id of the entry that replaces "
                                   "it, where the directory lists one.")
    note: str | None = Field(default=None, description="The provider's words, in short.")


class EntryContent(ContractModel):
    """The curated part of an entry: the interface's APIEntry fields, then optional additions."""

    id: Slug = Field(description="Unique identifier of the entry: lower-case letters, digits "
                     "and single hyphens; names its files, e.g. api/apis/{id}.json.")
    name: str = Field(min_length=1, description="Display name of the API.")
    provider: str = Field(min_length=1, description="Company or project that operates the API.")
    category: CategoryId = Field(description="The id of the entry's category, one of 14.")
    description: str | None = Field(default=None, description="One-sentence summary: what a "
                                    "builder gets from the API.")
    long_description: str | None = Field(
        default=None, description="Two to four sentences: what the API covers, who it is for, "
        "its notable limits or strengths.")
    color: HexColor | None = Field(
        default=None, description="Brand colour as #rrggbb, from the provider's own brand "
        "material; absent where it states none.")
    tags: list[str] | None = Field(default=None, description="Lower-case, hyphenated keywords.")
    auth_type: AuthType = Field(description="How the API authenticates callers: bearer, "
                                "api-key, oauth2, basic, hmac, or none.")
    auth_description: str | None = Field(
        default=None, description="Where the credential goes and how to obtain one.")
    auth_example: str | None = Field(
        default=None, description="The authentication header or parameter with a placeholder "
        "credential, never a working one; for none, the comment '# No auth required'.",
        examples=["Authorization: Bearer YOUR_API_KEY"])
    base_url: Uri = Field(description="Base address of the API: an endpoint's URL is baseUrl "
                          "followed by its path.")
    docs_url: Uri | None = Field(default=None, description="The provider's API reference.")
    has_free_tier: bool | None = Field(default=None, description="Whether a builder can start "
                                       "without paying.")
    pricing: Pricing | None = Field(default=None, description="What the API costs.")
    rate_limit: str | None = Field(
        default=None, description="The listed API's own rate limit, free text as the provider "
        "states it.", examples=["60 requests/minute"])
    endpoints: list[Endpoint] | None = Field(default=None, description="Operations of the "
                                             "API, as in the provider's reference.")
    sample_request: str | None = Field(default=None, description="A ready-to-run curl command, "
                                       "with placeholder credentials.")
    sample_response: str | None = Field(default=None, description="An example JSON response, "
                                        "as text.")
    # Additions (optional; a consumer of interface 2.0.0 ignores them).
    openapi_url: Uri | None = Field(
        default=None,
        description="The provider's official machine-readable description of the API "
        "(OpenAPI or Swagger), where it publishes one.",
    )
    status_page_url: Uri | None = Field(
        default=None, description="The provider's status page for the API, where it has one."
    )
    sdks: list[Sdk] | None = Field(
        default=None, description="Official SDKs of the API, by language."
    )
    deprecated: Deprecation | None = Field(
        default=None, description="Set by the curator when the provider deprecates the API: "
        "the entry stays published, marked, until it is retired.")
    former_ids: list[Slug] | None = Field(
        default=None, description="The ids the entry was published under before it was "
        "renamed, oldest first: its history carries over from them, and their addresses "
        "redirect to its own.", examples=[["exchangerate-host"]])


class Status(ContractModel):
    """Presented endpoint status of an entry, from its latest probe run: live (a probed URL
    answered HTTP 200), online (one answered with another status), unreachable (none
    answered) or unchecked (not probed yet, every probe of the run left undone, or no URL the
    entry lists can be probed)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True,
                              json_schema_extra={"examples": STATUS_EXAMPLES})

    state: StatusState = Field(default="unchecked", description="live, online, unreachable, "
                               "or unchecked (never probed; the latest run left every "
                               "probe undone: its redirect not followed; or no URL the entry "
                               "lists can be probed: see note).")
    http_status: int | None = Field(default=None, ge=100, le=999, description="HTTP status of "
                                    "the deciding answer; null when nothing answered.")
    response_time_ms: int | None = Field(default=None, ge=0, le=MAX_SAFE_INTEGER,
                                         description="Time to response headers, in "
                                         "milliseconds; null without an answer.")
    checked_at: AwareDatetime | None = Field(default=None, description="The check date (UTC); "
                                             "null when never checked.")
    note: str | None = Field(default=None, description="For online: 'path returned an error "
                             "or may require auth'; for unchecked after a run that left its "
                             "probes undone: why, e.g. 'its redirect to api.example.com was "
                             "not followed this run: that host failed 10 times in a row'; "
                             "for unchecked when no URL the entry lists can be probed: why, "
                             "e.g. 'base address is per account (YOUR_PROJECT_REF)', with no "
                             "url; otherwise null.")
    url: Uri | None = Field(default=None, description="The probed URL whose answer decided "
                            "the state (unchecked: the URL left undone); null when not "
                            "probed.")
    failure: FailureClass | None = Field(
        default=None, description="When every target failed in the run (no answer, or "
        "404/410, a challenge, 429 or 5xx; seen twice unless confirmation is off): the class "
        "of the failure of the deciding target (dead, blocked, transient, tls).")
    final_url: Uri | None = Field(  # the bound is the prober's (`FINAL_URL_MAX_LENGTH`)
        default=None, description="Where the redirects of the deciding probe ended, when it "
        "was redirected, always whole; null otherwise, and null when that address is longer "
        "than 2,048 characters (not kept, as a cut one would lead elsewhere). A redirect of a "
        "listed endpoint to an HTML page at another path (a sign-in page) is online with the "
        "redirect's status, not live.")
    stand_in: bool | None = Field(
        default=None, description="True when the deciding URL is the base address, probed in "
        "place of the endpoints (the entry lists no GET endpoint without placeholders): any "
        "answer there but a 429, a bot challenge or a 5xx shows the host up, a 404 too; false "
        "when it is a listed endpoint; null when not probed.")


class Lifecycle(ContractModel):
    """Where the entry stands in its life, judged over runs rather than from one probe."""

    model_config = _examples(*LIFECYCLE_EXAMPLES)

    state: LifecycleState = Field(description="active; degraded (some targets fail); failing "
                                  "(every target failed for several runs in a row); dead "
                                  "(confirmed dead for weeks); deprecated (by its provider).")
    since: AwareDatetime | None = Field(default=None, description="When it entered this state.")
    reason: str | None = Field(default=None, description="What the judgement rests on.")
    successor: Slug | None = Field(default=None, description="Deprecated: the entry replacing "
                                   "it, if listed.")


class Https(ContractModel):
    """Measured transport security of the base address."""

    model_config = _examples(HTTPS_EXAMPLE, {"enabled": False})

    enabled: bool = Field(description="The base address is HTTPS.")
    tls_version: str | None = Field(default=None, description="Protocol of the last "
                                    "connection, e.g. TLSv1.3.")
    cert_expires: AwareDatetime | None = Field(default=None, description="When the server's "
                                               "certificate expires.")
    cert_days_left: int | None = Field(default=None, description="Whole days from the release "
                                       "to that expiry (negative: expired).")
    checked_at: AwareDatetime | None = Field(default=None, description="When the connection "
                                             "was measured (UTC).")


class Cors(ContractModel):
    """Whether a web page on another origin may read the API's answers, as measured by
    sending an `Origin` header (no credentials) to every probed target."""

    model_config = _examples(CORS_EXAMPLE, {"state": "unknown"})

    state: CorsState = Field(description="yes: Access-Control-Allow-Origin allows any origin or "
                             "ours; no: an answer came without it; unknown: nothing answered.")
    allow_origin: str | None = Field(default=None, description="The header's value, as sent.")
    credentials: bool | None = Field(default=None, description="Access-Control-Allow-"
                                     "Credentials was true.")
    checked_at: AwareDatetime | None = Field(default=None, description="When it was measured "
                                             "(UTC).")


class ScoreReasons(ContractModel):
    """The few facts that made each sub-score, e.g. "free tier", "p50 120 ms over 14 probes"."""

    pricing: list[str] = Field(description="What made the Pricing sub-score.")
    latency: list[str] = Field(description="What made the Latency sub-score, or why it is null.")
    depth: list[str] = Field(description="What made the Depth sub-score.")


class LatencyWindow(ContractModel):
    """Response times of one window: only successful probes count (an HTTP answer that is not
    a failure: a 404, a bot challenge, a 429 or a 5xx is none)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    samples: int = Field(ge=0, description="Timed successful probes in the window.")
    p50_ms: int | None = Field(default=None, ge=0, description="Median time to headers, in "
                               "milliseconds; null without samples.")
    p95_ms: int | None = Field(default=None, ge=0, description="95th percentile of the same; "
                               "null without samples.")


class LatencyEvidence(ContractModel):
    """The response times the Latency sub-score is computed from: the probes of the last 7
    days, timed successful ones and failed ones (a failed probe counted as a response of
    `failedProbeMs`, slower than any threshold)."""

    model_config = _examples(LATENCY_EVIDENCE_EXAMPLE)

    minimum_samples: int = Field(description="Probes in 7 days (timed successful or failed) "
                                 "the score needs.")
    eligible: bool = Field(description="Whether the last 7 days hold that many, on at least "
                           "`minimumDays` days.")
    last7d: LatencyWindow = Field(alias="last7d", title="Last 7 days",
                                  description="Response times of the successful probes over "
                                  "the last 7 days.")
    last30d: LatencyWindow = Field(alias="last30d", title="Last 30 days",
                                   description="Response times of the successful probes over "
                                   "the last 30 days.")
    minimum_days: int | None = Field(default=None, description="Distinct UTC days the probes "
                                     "must fall on: evidence over time, not of one moment.")
    failed_probe_ms: int | None = Field(default=None, ge=0, description="The time a failed "
                                        "probe counts as, in milliseconds: 0 points on "
                                        "both scales.")
    probes: int | None = Field(default=None, ge=0, description="Probes of the last 7 days "
                               "Latency counts: timed successful ones and failed ones.")
    failed: int | None = Field(default=None, ge=0, description="Of those, the failed probes "
                               "(no answer, or an answer that is a failure).")
    days: int | None = Field(default=None, ge=0, description="Distinct UTC days those probes "
                             "fall on.")
    p50_ms: int | None = Field(default=None, ge=0, description="Median of those probes' times "
                               "(a failed one as `failedProbeMs`), in milliseconds: Latency's "
                               "p50; null without probes.")
    p95_ms: int | None = Field(default=None, ge=0, description="95th percentile of the same: "
                               "Latency's p95; null without probes.")


class ScoreEvidence(ContractModel):
    """The inputs that made each sub-score, so a reader can check it."""

    pricing: dict[str, Any] = Field(description="The pricing facts the score used.")
    latency: LatencyEvidence = Field(description="The response times the score used.")
    depth: dict[str, Any] = Field(description="The measures of the API the score used.")


class BuilderScore(ContractModel):
    """How friendly the API is to a builder: a letter grade and a percent from three
    sub-scores (Pricing, Latency, Depth), each 0 to 100 or null without its evidence. The rules
    are the published, versioned rubric."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True,
                              json_schema_extra={"examples": BUILDER_SCORE_EXAMPLES})

    grade: Annotated[str, StringConstraints(pattern=r"^[A-F][+-]?$")] = Field(
        description="Letter grade, A (best) to F.")
    percent: Percent = Field(description="The builder score, 0 to 100: the weighted mean of the "
                             "sub-scores that have evidence.")
    label: Annotated[str, StringConstraints(pattern=r"^\d{1,3}% builder-friendly$")] = Field(
        description="The percent as shown to readers: '<percent>% builder-friendly'.")
    pricing: Percent | None = Field(description="Pricing sub-score, 0 to 100: what a builder pays "
                                    "to start and how plainly growth is priced; null without "
                                    "the evidence it needs.")
    latency: Percent | None = Field(description="Latency sub-score, 0 to 100, from recent response "
                                    "times; null without enough timed responses.")
    depth: Percent | None = Field(description="Depth sub-score, 0 to 100: breadth, a "
                                  "machine-readable description, SDKs, auth friction; null "
                                  "without the evidence it needs.")
    rubric: str = Field(description="Version of the scoring rules; scores of different "
                        "versions are not comparable.")
    reasons: ScoreReasons | None = Field(default=None, description="The facts behind each "
                                         "sub-score.")
    confidence: Literal["high", "medium", "low"] | None = Field(
        default=None, description="How much evidence backs the grade.")
    provisional: bool | None = Field(
        default=None, description="True until Latency has its minimum evidence.")
    evidence: ScoreEvidence | None = Field(default=None, description="The inputs of each "
                                           "sub-score.")

    @model_validator(mode="after")
    def _label_matches_percent(self) -> BuilderScore:
        if self.label != f"{self.percent}% builder-friendly":
            raise ValueError("label must read '<percent>% builder-friendly'")
        return self


class UptimeWindow(ContractModel):
    """The probes one window's uptime share is counted from."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    probes: int = Field(ge=0, le=MAX_SAFE_INTEGER, description="Trusted probes in the window, "
                        "each target counted once a run.")
    succeeded: int = Field(ge=0, le=MAX_SAFE_INTEGER, description="Of those, the successful "
                           "ones: the share is succeeded / probes.")
    days: int = Field(ge=0, le=31, description="UTC days with at least one of those probes (a "
                      "window of 24 hours may touch two).")


class UptimeEvidence(ContractModel):
    """The probes behind each uptime share, so that a share of few probes or days reads as
    such: one probe is 100 % as surely as a thousand."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    last1d: UptimeWindow = Field(alias="last1d", title="Last day",
                                 description="The probes of the last day.")
    last7d: UptimeWindow = Field(alias="last7d", title="Last 7 days",
                                 description="The probes of the last 7 days.")
    last30d: UptimeWindow = Field(alias="last30d", title="Last 30 days",
                                  description="The probes of the last 30 days.")


class Uptime(ContractModel):
    """Share of successful probes over the last 1, 7 and 30 days (null: no probes), with the
    probes and days each share is counted from."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True,
                              json_schema_extra={"examples": [UPTIME_EXAMPLE]})

    last1d: Share | None = Field(default=None, alias="last1d", title="Last day",
                                 description="Share (0 to 1) of the last day's probes that "
                                 "succeeded: got an HTTP answer that is not a failure (a "
                                 "404/410, a bot challenge, a 429 or a 5xx is one; a 401 or 403 "
                                 "asking for credentials is not, nor a 404/410 of the base "
                                 "address probed in place of the endpoints); null without "
                                 "probes.")
    last7d: Share | None = Field(default=None, alias="last7d", title="Last 7 days",
                                 description="The same over the last 7 days.")
    last30d: Share | None = Field(default=None, alias="last30d", title="Last 30 days",
                                  description="The same over the last 30 days.")
    evidence: UptimeEvidence | None = Field(
        default=None, description="How many trusted probes, successful probes and days with "
        "probes each share is counted from; always set in a published entry, whose uptime is "
        "null without probes in the last 30 days.")


class Provenance(ContractModel):
    """Where the entry's facts come from and when a curator last checked them."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True,
                              json_schema_extra={"examples": [PROVENANCE_EXAMPLE]})

    verified: date | None = Field(default=None, description="Day the facts were last checked.")
    sources: list[Uri] | None = Field(
        default=None, description="The provider's pages (and named fallbacks) the facts are from.")
    stale: bool | None = Field(
        default=None, description="True when the last check is older than the directory's "
        "staleness limit (180 days by default) at publish time.")


class APIEntry(EntryContent):
    """A published entry: the curated content plus the presented values."""

    model_config = _examples(API_ENTRY_EXAMPLE)
    always_written = ("status", "builderScore", "uptime", "lifecycle", "https", "cors")
    never_null = ("lifecycle", "https", "cors")

    provenance: Provenance | None = Field(
        default=None, description="Where the facts come from and when they were last checked; "
        "absent for an entry that names neither.")
    status: Status = Field(default_factory=Status, description="The entry's status from its "
                           "latest probe run.")
    builder_score: BuilderScore | None = Field(default=None, description="The builder score; "
                                               "null while the entry is not scored.")
    uptime: Uptime | None = Field(default=None, description="Share of successful probes over "
                                  "the last 1, 7 and 30 days; null when the entry has no probe "
                                  "in the last 30 days (never probed, or only before), never "
                                  "an object whose shares are all null: when present, last30d "
                                  "and evidence are set.")
    lifecycle: Lifecycle | None = Field(default=None, description="Where the entry stands in "
                                        "its life, judged over probe runs.")
    https: Https | None = Field(default=None, description="Transport security of the base "
                                "address, as measured.")
    cors: Cors | None = Field(default=None, description="Whether a web page on another origin "
                              "may read the API's answers, as measured.")


class Meta(ContractModel):
    """What every published document says about its release."""

    model_config = _examples(META_EXAMPLE)

    version: SemVer = Field(description="The interface version with build metadata naming the "
                            "release: <interface>+<yyyymmdd>.<n>, the n-th release of that UTC "
                            "day.")
    generated: AwareDatetime = Field(description="When the release was produced (RFC 3339, "
                                     "UTC).")
    total_apis: int = Field(ge=0, alias="totalAPIs", description="Number of entries in the full "
                            "dataset.")
    source: Uri = Field(description="Address of the full dataset, api/apis.json, on the host "
                        "serving the release.")
    license: str = Field(description="Licence of the data.")


class CategoryMeta(Meta):
    """The meta of a category file: the release's, plus the category and its entry count."""

    model_config = _examples(CATEGORY_META_EXAMPLE)

    category: CategoryId = Field(description="The category's id.")
    label: str = Field(description="The category's display name.")
    count: int = Field(ge=0, description="Number of entries in this file.")


def _check_sorted_unique(apis: Sequence[APIEntry | SearchItem]) -> None:
    ids = [api.id for api in apis]
    if ids != sorted(set(ids)):
        raise ValueError("apis must be sorted by id with no id twice")


class FullDataset(ContractModel):
    """`api/apis.json`: every published entry, sorted by id, with the release's meta."""

    meta: Meta = Field(description="The release.")
    apis: list[APIEntry] = Field(description="Every published entry, sorted by id.")

    @model_validator(mode="after")
    def _consistent(self) -> FullDataset:
        if self.meta.total_apis != len(self.apis):
            raise ValueError("meta.totalAPIs must equal the number of apis")
        _check_sorted_unique(self.apis)
        return self


class CategoryDataset(ContractModel):
    """`api/categories/{categoryId}.json`: the entries of one category, sorted by id."""

    meta: CategoryMeta = Field(description="The release, the category and its entry count.")
    apis: list[APIEntry] = Field(description="The category's entries, sorted by id.")

    @model_validator(mode="after")
    def _consistent(self) -> CategoryDataset:
        if self.meta.count != len(self.apis):
            raise ValueError("meta.count must equal the number of apis")
        if any(api.category != self.meta.category for api in self.apis):
            raise ValueError("every api must be of meta.category")
        _check_sorted_unique(self.apis)
        return self


class EntryDocument(ContractModel):
    """`api/apis/{id}.json`: one published entry, whole, with the meta of its release."""

    meta: Meta = Field(description="The release.")
    api: APIEntry = Field(description="The entry, as in the full dataset.")


class SearchItem(ContractModel):
    """One entry as `api/search.json` lists it: what the index page shows, searches and sorts
    by, in a few hundred bytes; the whole entry is `api/apis/{id}.json`. A key whose value
    would be null is left out."""

    model_config = _examples(SEARCH_ITEM_EXAMPLE, PROVISIONAL_SEARCH_ITEM_EXAMPLE)

    id: Slug = Field(description="The entry's id.")
    name: str = Field(min_length=1, description="The entry's name.")
    provider: str = Field(min_length=1, description="The entry's provider.")
    category: CategoryId = Field(description="The entry's category.")
    description: str | None = Field(default=None, description="The one-sentence summary.")
    tags: list[str] | None = Field(default=None, description="The entry's tags.")
    auth_type: AuthType | None = Field(default=None, description="The entry's authType.")
    has_free_tier: bool | None = Field(default=None, description="The entry's hasFreeTier.")
    free_only: Literal[True] | None = Field(
        default=None, description="True where pricing.model is `free`, nothing paid beside it, "
        "which the index's card badges \"Free\" rather than \"Free tier\"; absent otherwise.")
    color: HexColor | None = Field(default=None, description="The entry's brand colour.")
    state: StatusState = Field(description="The entry's status.state.")
    grade: Annotated[str, StringConstraints(pattern=r"^[A-F][+-]?$")] | None = Field(
        default=None, description="The builder grade; absent while the entry is not scored.")
    percent: Percent | None = Field(
        default=None, description="The builder score's percent, which the index sorts by.")
    provisional: bool | None = Field(
        default=None, description="True while the grade lacks its Latency evidence.")
    provisional_why: str | None = Field(
        default=None, min_length=1, description="What a provisional grade's Latency waits "
        "for, from the entry's own evidence (builderScore.evidence.latency), in the words the "
        "pages give the word \"provisional\": \"Latency is graded after 5 probes on 3 days "
        "within 7 days, 2 probes on 1 day so far\"; absent unless the grade is provisional.")
    lifecycle: LifecycleState | None = Field(default=None, description="lifecycle.state.")
    successor: Slug | None = Field(
        default=None, description="lifecycle.successor: the id of the entry that replaces a "
        "deprecated one, which the index's card names; absent otherwise.")
    https: bool | None = Field(default=None, description="https.enabled.")
    cors: CorsState | None = Field(default=None, description="cors.state.")


class SearchIndex(ContractModel):
    """`api/search.json`: every published entry as a SearchItem, sorted by id."""

    meta: Meta = Field(description="The release.")
    apis: list[SearchItem] = Field(description="One item per published entry, sorted by id.")

    @model_validator(mode="after")
    def _consistent(self) -> SearchIndex:
        if self.meta.total_apis != len(self.apis):
            raise ValueError("meta.totalAPIs must equal the number of apis")
        _check_sorted_unique(self.apis)
        return self


class CategorySummary(ContractModel):
    """One category of the index."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    id: CategoryId = Field(description="The category's id, as in its file's name.")
    label: str = Field(description="The category's display name.")
    description: str | None = Field(default=None, description="What the category holds, in "
                                    "one line.")
    count: int = Field(ge=0, description="Number of published entries in it.")


class CategoryIndex(ContractModel):
    """`api/categories.json`: every category with its label and entry count."""

    meta: Meta = Field(description="The release.")
    categories: list[CategorySummary] = Field(description="Every category, in the "
                                              "directory's order.")


CheckedState = Literal["live", "online", "unreachable"]


class ReleaseCounts(ContractModel):
    """How many entries a release holds, in all, by category and by status state."""

    total: int = Field(ge=0, description="Entries in the release.")
    by_category: dict[CategoryId, int] = Field(description="Entries per category id.")
    by_state: dict[StatusState, int] = Field(description="Entries per status state.")


class ReleaseSummary(ContractModel):
    """One kept release: its files are under `api/releases/<folder>/`, never rewritten."""

    version: SemVer = Field(description="The release's version, as in its meta.")
    generated: AwareDatetime = Field(description="When the release was produced (UTC).")
    counts: ReleaseCounts = Field(description="What the release holds.")
    path: str = Field(description=(
        "The release's full dataset, relative to the site root. Its folder is the version "
        "with `+` written `_` (api/releases/2.0.0_20261121.1/apis.json), since some object "
        "stores and CDNs mangle a `+` in a path; releases kept from before that keep the "
        "folder named by the version itself."))


class ReleaseIndex(ContractModel):
    """`api/releases.json`: the kept releases, newest first."""

    meta: Meta = Field(description="The current release.")
    releases: list[ReleaseSummary] = Field(description="The kept releases, newest first; the "
                                           "first is the current one.")

    @model_validator(mode="after")
    def _newest_first(self) -> ReleaseIndex:
        generated = [release.generated for release in self.releases]
        if generated != sorted(generated, reverse=True):
            raise ValueError("releases must be listed newest first")
        if self.releases and self.releases[0].version != self.meta.version:
            raise ValueError("the first release listed must be this release")
        return self


class StateChangeItem(ContractModel):
    """An entry's presented state moved from one checked state to another."""

    model_config = _examples(STATE_CHANGE_EXAMPLE)

    entry: Slug = Field(description="The entry's id.")
    name: str = Field(description="The entry's name; that of a change of an id another entry "
                      "has taken over since (a rename), the id itself.")
    from_state: CheckedState = Field(alias="from", description="The state before.")
    to_state: CheckedState = Field(alias="to", description="The state after.")
    at: AwareDatetime = Field(description="When the change was seen (UTC).")


class CatalogueEvent(ContractModel):
    """Something that happened in the catalogue: an entry added, retired, or moved from one
    lifecycle state to another, or a new release published."""

    model_config = _examples(*CATALOGUE_EVENT_EXAMPLES)

    kind: Literal["added", "retired", "lifecycle", "release"] = Field(
        description="What happened: added, retired, lifecycle (a transition) or release.")
    entry: Slug | None = Field(default=None, description="The entry's id (all but release).")
    name: str | None = Field(default=None, description="The entry's name (all but release); "
                             "that of an event of an id another entry has taken over since "
                             "(a rename), the id itself (of a rename's halves, its new id).")
    from_state: LifecycleState | None = Field(default=None, alias="from",
                                              description="lifecycle: the state left.")
    to_state: LifecycleState | None = Field(default=None, alias="to",
                                            description="lifecycle: the state entered.")
    version: SemVer | None = Field(default=None, description="release: its version.")
    at: AwareDatetime = Field(description="When it happened (UTC).")
    # Additions (optional; a consumer of interface 2.0.0 reads a rename as the old id retired
    # and the new one added).
    renamed_from: Slug | None = Field(
        default=None, description="added: the entry's former id, when the entry was renamed "
        "(its history carries over, its former addresses redirect to its own).")
    renamed_to: Slug | None = Field(
        default=None, description="retired: the entry's new id, when the entry was renamed.")

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> CatalogueEvent:
        if (self.renamed_from is not None and self.kind != "added") or (
                self.renamed_to is not None and self.kind != "retired"):
            raise ValueError("renamedFrom belongs to added events, renamedTo to retired ones")
        if self.kind == "release":
            if self.version is None or self.entry is not None:
                raise ValueError("a release event names its version and no entry")
        elif self.entry is None or self.name is None:
            raise ValueError(f"a {self.kind} event names its entry")
        if (self.kind == "lifecycle") != (self.from_state is not None
                                          and self.to_state is not None):
            raise ValueError("from and to belong to lifecycle events, and both are needed")
        return self


def _check_newest_first(moments: list[Any], what: str) -> None:
    if moments != sorted(moments, reverse=True):
        raise ValueError(f"{what} must be listed newest first")


class ChangeLog(ContractModel):
    """`api/changes.json`: recent state changes and catalogue events, newest first."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    meta: Meta = Field(description="The release.")
    changes: list[StateChangeItem] = Field(description="Recent changes of entries' presented "
                                           "state, newest first.")
    events: list[CatalogueEvent] | None = Field(
        default=None, description="Entries added and retired, lifecycle transitions and "
        "releases, the same items as the Atom feed `changes.atom`.")

    @model_validator(mode="after")
    def _newest_first(self) -> ChangeLog:
        _check_newest_first([change.at for change in self.changes], "changes")
        _check_newest_first([event.at for event in self.events or []], "events")
        return self


class NotFoundError(ContractModel):
    """What was not found, and where to look instead."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    status: Literal[404] = Field(default=404, description="The HTTP status, 404.")
    code: Literal["not_found"] = Field(default="not_found", description="A stable error code.")
    message: str = Field(description="What is missing and where the documents are.")
    category_ids: list[CategoryId] = Field(default_factory=lambda: list(CATEGORY_IDS),
                                           description="Every valid categoryId.")
    index: str = Field(default="api/categories.json", description="The category index, "
                       "relative to the site root.")


class ErrorBody(ContractModel):
    """`api/404.json`: what the static host answers for a document the release lacks."""

    error: NotFoundError = Field(description="The error.")
