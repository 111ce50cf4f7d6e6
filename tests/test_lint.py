"""Data lint and the placeholder-only credential gate, each rule with passing and failing cases."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pipeline.catalogue.credentials import credential_findings
from pipeline.catalogue.entries import read_catalog
from tests.conftest import WriteEntry, make_entry

PRICING = make_entry()["pricing"]


def rules(write_entry: WriteEntry, data_dir: Path, **changes: object) -> list[tuple[str, str]]:
    write_entry(make_entry(**changes), category="weather", name="example-weather")
    entries = data_dir / "entries"
    return [(p.rule, p.field) for p in read_catalog([entries], entries).problems]


@pytest.mark.parametrize(
    ("changes", "rule", "field"),
    [
        (
            {"sampleRequest": 'wget "https://api.example.com/v1/forecast"'},
            "sample-request-curl",
            "sampleRequest",
        ),
        (
            {"sampleRequest": 'curl "https://evil.example.net/v1/forecast"'},
            "sample-request-host",
            "sampleRequest",
        ),
        ({"sampleRequest": "curl -X GET"}, "sample-request-url", "sampleRequest"),
        (
            {"sampleRequest": 'curl "https://api.example.com/v1/forecast'},
            "sample-request-shell",
            "sampleRequest",
        ),
        ({"sampleResponse": "{'single': 'quotes'}"}, "sample-response-json", "sampleResponse"),
        (
            {"endpoints": [{"method": "GET", "path": "forecast"}]},
            "endpoint-path-slash",
            "endpoints[0].path",
        ),
        ({"docsUrl": "http://docs.example.com/api"}, "https-only", "docsUrl"),
        (
            {
                "baseUrl": "http://api.example.com/v1",
                "sampleRequest": 'curl "http://api.example.com/v1/forecast"',
            },
            "https-only",
            "baseUrl",
        ),
        ({"baseUrl": "https://api.example.com/v1/"}, "base-url-slash", "baseUrl"),
        (
            {
                "baseUrl": "https://api.example.com:0/v1",
                "sampleRequest": 'curl "https://api.example.com:0/v1/forecast"',
            },
            "url-port",
            "baseUrl",
        ),
        ({"docsUrl": "https://docs.example.com:65536/api"}, "url-port", "docsUrl"),
        ({"description": "Forecasts for any place. Also alerts."}, "one-sentence", "description"),
        ({"description": "Forecasts for any place"}, "one-sentence", "description"),
        ({"tags": ["forecast", "Open-Data"]}, "tag-lower-case", "tags[1]"),
        ({"tags": ["open data"]}, "tag-lower-case", "tags[0]"),
        (
            {"pricing": PRICING | {"model": "free", "startingCentsPerMonth": 500}},
            "pricing-free-start",
            "pricing.startingCentsPerMonth",
        ),
        (
            {"pricing": PRICING | {"model": "enterprise", "startingCentsPerMonth": 0}},
            "pricing-enterprise-start",
            "pricing.startingCentsPerMonth",
        ),
        (
            {"pricing": PRICING | {"tiers": list(reversed(PRICING["tiers"]))}},
            "pricing-tiers-order",
            "pricing.tiers",
        ),
        ({"hasFreeTier": False}, "pricing-free-quota", "pricing.freeQuota"),
        (
            {"hasFreeTier": False, "pricing": PRICING | {"model": "free", "freeQuota": None}},
            "pricing-free-tier",
            "hasFreeTier",
        ),
        (
            {"hasFreeTier": False, "pricing": PRICING | {"model": "freemium",
                                                          "freeQuota": None}},
            "pricing-free-tier",
            "hasFreeTier",
        ),
        (
            {"pricing": PRICING | {"freeQuota": {"amount": 2, "unit": "GB storage",
                                                 "period": "account", "recurring": True}}},
            "pricing-recurring-standing",
            "pricing.freeQuota.recurring",
        ),
        (
            {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": None,
                                                 "period": "unlimited", "recurring": False}}},
            "pricing-recurring-standing",
            "pricing.freeQuota.recurring",
        ),
        (
            {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": "requests",
                                                 "period": "month", "recurring": True,
                                                 "note": "No quota is published."}}},
            "pricing-quota-amount",
            "pricing.freeQuota.amount",
        ),
        (
            {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": "projects",
                                                 "period": "ongoing"}}},
            "pricing-quota-amount",
            "pricing.freeQuota.amount",
        ),
        (
            {"rateLimit": "Rate limits are stated in the docs and not restated here"},
            "hedged-field",
            "rateLimit",
        ),
        ({"rateLimit": "No fixed limit published"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Not published."}, "hedged-field", "rateLimit"),
        ({"rateLimit": "No fixed request rate published for these read APIs"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "No rate limit published for the public instance"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "No numeric limit published for the public instance; no API key or "
                       "sign-up required"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Free to use, not published, no key needed"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "No key needed \u2014 no quota published."}, "hedged-field", "rateLimit"),
        (
            {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": None,
                                                 "period": "unlimited",
                                                 "note": "No API key or sign-up; no numeric "
                                                         "quota is published."}}},
            "hedged-field",
            "pricing.freeQuota.note",
        ),
        ({"rateLimit": "No quota published; no rate limit published"}, "hedged-field",
         "rateLimit"),
        # A hedge before what the provider does is dropped all the same: the fact stands alone.
        ({"rateLimit": "Not published; the provider answers 429 and asks for backoff"},
         "hedged-field", "rateLimit"),
        ({"rateLimit": "Free to use; no fixed request rate published; at most 10 concurrent "
                       "requests"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "No numeric rate limit published for api.example.com, which it calls "
                       "generous; HTTP 429 when a limit is crossed"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "No quota or numeric rate limit is published for the public host."},
         "hedged-field", "rateLimit"),
        ({"rateLimit": "No key, sign-up or paid plan; no request cap is published."},
         "hedged-field", "rateLimit"),
        ({"rateLimit": "Open data, no published quota"}, "hedged-field", "rateLimit"),
        ({"pricing": PRICING | {"details": "Free to use; no paid plans are published for it."}},
         "hedged-field", "pricing.details"),
        ({"pricing": PRICING | {"details": "No price is published; no key is needed."}},
         "hedged-field", "pricing.details"),
        # The same hedge inside a clause, in parentheses, after "with" or "at": words, not a
        # clause of their own, that say only that nothing is published.
        ({"pricing": PRICING | {"details": "Pay per call at prices that are not published."}},
         "hedged-field", "pricing.details"),
        ({"rateLimit": "Free to use (no published limits); HTTP 429 beyond"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "Free to use with no API key and no published quota"}, "hedged-field",
         "rateLimit"),
        (
            {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": "requests",
                                                 "period": "unlimited",
                                                 "note": "Free access to its APIs with no "
                                                         "published request quota; high-offset "
                                                         "searches may be restricted."}}},
            "hedged-field",
            "pricing.freeQuota.note",
        ),
        ({"rateLimit": "Plans list unlimited requests (no fixed request rate published)"},
         "hedged-field", "rateLimit"),
        ({"rateLimit": "Writes go through a load-based limiter with no fixed published number; "
                       "HTTP 429 beyond"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Rate limits are not documented; HTTP 429 when too many requests arrive"},
         "hedged-field", "rateLimit"),
        ({"rateLimit": "There is no published rate limit for reads"}, "hedged-field",
         "rateLimit"),
        # Undisclosed limits, figures not shown, listed or given: the same hedge in other words.
        ({"rateLimit": "Square enforces undisclosed limits and returns HTTP 429 RATE_LIMITED "
                       "when they are exceeded"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Undisclosed rate limits apply; HTTP 429 beyond"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "Limits are undisclosed; HTTP 429 beyond"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Free to use, not shown"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Not listed."}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Rate limits are not shown; HTTP 429 beyond"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "No figures are given for the public instance"}, "hedged-field",
         "rateLimit"),
        ({"rateLimit": "Free to use; no numbers given"}, "hedged-field", "rateLimit"),
        ({"pricing": PRICING | {"details": "Pay per call; prices are not listed."}},
         "hedged-field", "pricing.details"),
        # "Not given" as a clause of its own, as "not listed" is; a label's colon starts one.
        ({"rateLimit": "Rate limit: not given."}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Free to use, not given"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Not given; HTTP 429 when too many requests arrive"}, "hedged-field",
         "rateLimit"),
        ({"pricing": PRICING | {"details": "Pay per call; not given for enterprise plans."}},
         "hedged-field", "pricing.details"),
        ({"rateLimit": "Rate limit: not published."}, "hedged-field", "rateLimit"),
        # The same words two spaces or a line break apart.
        ({"rateLimit": "No fixed  limit published"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "No fixed\nlimit published"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Free to use,  not  published"}, "hedged-field", "rateLimit"),
        ({"rateLimit": "Free to use with no  published\nquota"}, "hedged-field", "rateLimit"),
        ({"pricing": PRICING | {"details": "Plan prices are listed\n on the provider's site."}},
         "hedged-field", "pricing.details"),
        (
            {"endpoints": [{"method": "GET", "path": "/a",
                            "description": "Limits: not  stated."}]},
            "hedged-field",
            "endpoints[0].description",
        ),
        (
            {"pricing": PRICING | {"details": "Plan prices are listed on example.com/pricing."}},
            "hedged-field",
            "pricing.details",
        ),
        (
            {
                "pricing": PRICING
                | {"tiers": [PRICING["tiers"][0] | {"included": "Size on the pricing page"}]}
            },
            "hedged-field",
            "pricing.tiers[0].included",
        ),
        (
            {"pricing": PRICING | {"details": "Paid plans are priced on example.com/pricing."}},
            "hedged-field",
            "pricing.details",
        ),
        (
            {"endpoints": [{"method": "GET", "path": "/a", "description": "Limits: not stated."}]},
            "hedged-field",
            "endpoints[0].description",
        ),
    ],
)
def test_each_lint_rule_fails_its_bad_case(
    write_entry: WriteEntry, data_dir: Path, changes: dict, rule: str, field: str
) -> None:
    assert (rule, field) in rules(write_entry, data_dir, **changes)


@pytest.mark.parametrize("text", [
    "Free to use" + "; not published" * 2000,
    "Free to use" + ";  not\n listed" * 2000,
    "Free to use" + "; undisclosed" * 2000,
    "Free to use" + ": not given" * 2000,
    "Free to use" + ";  not\n given" * 2000,
])
def test_a_field_of_many_hedge_clauses_is_one_problem(
    text: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """Each clause is read once and the field said once, however many hedges it repeats."""
    assert rules(write_entry, data_dir, rateLimit=text) == [("hedged-field", "rateLimit")]


@pytest.mark.parametrize("text", [
    "Pay per call" + " at prices that are not published" * 2000,
    "Free to use" + " (no published limits)" * 2000,
    # One long run of words the pattern reads before the hedge's last word.
    "Free to use with no " + "fixed request " * 12_000 + "quota published",
    "Free to use" + " (undisclosed rate limits)" * 2000,
    "Pay per call" + ", but prices are not listed" * 2000,
    "Free to use with no " + "fixed \n request  " * 12_000 + "figures given",
    # Words a long run of spaces apart, quoted with one space between them.
    "Free to use with no" + " " * 100_000 + "fixed limit published",
    "Limits: not" + " " * 100_000 + "stated",
    "Rate limit:" + " " * 100_000 + "not given.",
    "Free to use, not" + " " * 100_000 + "given for " + "x" * 100_000,
])
def test_a_field_of_many_hedges_inside_its_clauses_is_one_line(
    text: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """Hedges inside a clause are read in one pass too, and said once, in one short line naming
    the file, the entry and the field."""
    lines = problem_lines(write_entry, data_dir, rateLimit=text)
    assert len(lines) == 1, lines[:3]
    assert "example-weather" in lines[0] and "rateLimit" in lines[0]
    assert "hedged-field" in lines[0] and len(lines[0]) < 400


def test_a_bare_not_given_is_said_as_all_the_field_says(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """A label before the clause states nothing: the line says to leave the field out."""
    lines = problem_lines(write_entry, data_dir, rateLimit="Rate limit: not given.")
    assert len(lines) == 1 and "says only 'not given'" in lines[0], lines
    assert "example-weather" in lines[0] and "rateLimit" in lines[0]


BASE = "https://api.example.com/v1"


@pytest.mark.parametrize(
    ("changes", "rule", "field"),
    [
        ({"sampleRequest": f'curl "{BASE}/forecasts?lat=1"'}, "sample-request-endpoint",
         "sampleRequest"),
        ({"sampleRequest": f'curl "{BASE}/forecast/"'}, "sample-request-endpoint",
         "sampleRequest"),
        ({"sampleRequest": f'curl "{BASE}/stations/a/b"'}, "sample-request-endpoint",
         "sampleRequest"),
        ({"sampleRequest": 'curl "https://api.example.com/v2/forecast"'}, "sample-request-base",
         "sampleRequest"),
        ({"sampleRequest": f'curl -X POST "{BASE}/forecast"'}, "sample-request-method",
         "sampleRequest"),
        ({"sampleRequest": f"curl -d 'lat=1' \"{BASE}/forecast\""}, "sample-request-method",
         "sampleRequest"),
        ({"sampleRequest": f'curl --json {{}} "{BASE}/current"'}, "sample-request-method",
         "sampleRequest"),
        ({"sampleRequest": f'curl -I "{BASE}/current"'}, "sample-request-method",
         "sampleRequest"),
        ({"sampleRequest": 'curl "http://api.example.com/v1/forecast"'}, "sample-request-https",
         "sampleRequest"),
        ({"sampleRequest": f'curl -H "X-Api-Key YOUR_API_KEY" "{BASE}/forecast"'},
         "sample-request-header", "sampleRequest"),
        ({"sampleRequest": f'curl -H "Authorization: Bearer YOUR_API_KEY" "{BASE}/forecast"'},
         "sample-request-auth", "sampleRequest"),
        ({"sampleRequest": f'curl "{BASE}/forecast?api_key=YOUR_API_KEY"'},
         "sample-request-auth", "sampleRequest"),
        ({"sampleRequest": f'curl -u YOUR_API_KEY: "{BASE}/forecast"'},
         "sample-request-auth", "sampleRequest"),
        ({"authExample": "Authorization: Token YOUR_API_KEY",
          "sampleRequest": f'curl -H "Authorization: Bearer YOUR_API_KEY" "{BASE}/forecast"'},
         "sample-request-auth", "sampleRequest"),
        ({"authType": "none", "authExample": "# No auth required"}, "sample-request-auth",
         "sampleRequest"),
        ({"authType": "none", "authExample": "# No auth required",
          "sampleRequest": f'curl "{BASE}/forecast?key=YOUR_API_KEY"'}, "sample-request-auth",
         "sampleRequest"),
        ({"sampleRequest": f'curl \\ -H "X-Api-Key: YOUR_API_KEY" "{BASE}/forecast"'},
         "sample-request-shell", "sampleRequest"),
        ({"sampleRequest": f'curl -H "X-Api-Key: YOUR_API_KEY"\n  "{BASE}/forecast"'},
         "sample-request-shell", "sampleRequest"),
        ({"sampleRequest": f'curl -H X-Api-Key: YOUR_API_KEY "{BASE}/forecast"'},
         "sample-request-shell", "sampleRequest"),
        ({"sampleRequest": f'curl "{BASE}/forecast" "{BASE}/current"'}, "sample-request-url",
         "sampleRequest"),
        ({"sampleRequest": f'curl -H "X-Api-Key: YOUR_API_KEY" "{BASE}/stations/10384"',
          "endpoints": [*make_entry()["endpoints"][:2],
                        {"method": "GET", "path": "/stations/{station_id}"}],
          "sampleResponse": '[{"id": "10384"}]'}, "sample-response-shape", "sampleResponse"),
    ],
)
def test_a_sample_request_that_disagrees_with_its_entry_fails(
    write_entry: WriteEntry, data_dir: Path, changes: dict, rule: str, field: str
) -> None:
    """The sample is the call a builder copies: it runs against a listed endpoint, with its
    method, and authenticates as authExample says; the old lint read only its host."""
    assert (rule, field) in rules(write_entry, data_dir, **changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"sampleRequest": f'curl -H "X-Api-Key: YOUR_API_KEY" "{BASE}/stations/10384"',
         "sampleResponse": '{"id": "10384"}'},
        {"sampleRequest": f'curl -sS -X GET -H "x-api-key: YOUR_API_KEY" \\\n  "{BASE}/current"'},
        {"sampleRequest": f"curl -G -d 'lat=1' \"{BASE}/forecast\""},
        {"sampleRequest": f'curl -X POST -d \'{{"a":\n 1}}\' "{BASE}/query"',
         "endpoints": [*make_entry()["endpoints"], {"method": "POST", "path": "/query"}]},
        {"authType": "none", "authExample": "# No auth required",
         "sampleRequest": f'curl -A "MyApp/1.0 (me@example.com)" "{BASE}/forecast"'},
        {"authType": "basic", "authExample": "Authorization: Basic <base64 of KEY_ID:SECRET>",
         "sampleRequest": f'curl -u YOUR_KEY_ID:YOUR_SECRET "{BASE}/forecast"'},
        {"authExample": "?appid=YOUR_API_KEY",
         "sampleRequest": f'curl "{BASE}/forecast?lat=1&appid=YOUR_API_KEY"'},
        {"authType": "bearer", "authExample": "Authorization: bearer YOUR_TOKEN",
         "sampleRequest": f'curl -H "Authorization: Bearer YOUR_TOKEN" "{BASE}/forecast"'},
        {"baseUrl": "https://proxy.example.com",
         "endpoints": [{"method": "GET", "path": "/{module}/@v/list"},
                       {"method": "GET", "path": "/{module}/@v/{version}.info"},
                       {"method": "GET", "path": "/{module}/@latest"}],
         "sampleRequest": 'curl "https://proxy.example.com/golang.org/x/mod/@v/v0.2.0.info"'},
    ],
)
def test_a_sample_request_that_agrees_with_its_entry_passes(
    write_entry: WriteEntry, data_dir: Path, changes: dict
) -> None:
    assert rules(write_entry, data_dir, **changes) == []


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"description": "Forecasts, e.g. hourly ones, for any place."},
        {
            "sampleRequest": "curl -s -H 'X-Api-Key: YOUR_API_KEY' https://api.example.com/v1/current"
        },
        {"pricing": PRICING | {"model": "free", "startingCentsPerMonth": 0}},
        {"pricing": PRICING | {"model": "enterprise", "startingCentsPerMonth": None}},
        {"authType": "none", "authExample": "# No auth required",
         "sampleRequest": 'curl "https://api.example.com/v1/forecast?lat=1&lon=2"'},
        {"rateLimit": "120 requests per 60 seconds per API token"},
        {"rateLimit": "The provider answers 429 and asks for backoff"},
        {"rateLimit": "Free to use; at most 10 concurrent requests"},
        {"authDescription": "Results are published by the provider's own action."},
        {"longDescription": "Rates published on the central bank's site, stated daily."},
        # Facts that merely hold the words: what is published, when, by whom and where.
        {"rateLimit": "Exchange rates published daily; limits are documented per endpoint"},
        {"longDescription": "Reference rates published by the ECB each working day."},
        {"authDescription": "No key needed; every call is documented in the OpenAPI file."},
        {"rateLimit": "All methods, no API key, within the published rate limits"},
        {"longDescription": "Results are not published until reviewed; prices are published "
                            "with each release."},
        {"rateLimit": "No limits apply to reads; quotas published per project in the console"},
        {"rateLimit": "Limits are listed in the OpenAPI file"},
        {"rateLimit": "600 requests per minute; the quota left is shown in the dashboard"},
        {"rateLimit": "10 requests per second; Retry-After is given in seconds"},
        {"authDescription": "The key is given once; it is not given again after creation."},
        {"authDescription": "Scopes: not given by default, granted on request."},
        {"rateLimit": "Retry-After: given in seconds; 60 requests per minute"},
        {"authDescription": "Create a key in the dashboard; the key is not shown again after "
                            "creation."},
        {"pricing": PRICING | {"details": "Prices are shown in US dollars; fees are listed "
                                          "per country."}},
        {"longDescription": "Sellers not listed in the registry are refused; undisclosed "
                            "sources are not shown."},
        {"pricing": PRICING | {"freeQuota": {"amount": 2, "unit": "GB storage",
                                             "period": "account"}}},
        {"pricing": PRICING | {"freeQuota": {"amount": 1000, "unit": "requests",
                                             "period": "month", "recurring": True}}},
        {"pricing": PRICING | {"freeQuota": {"amount": 300, "unit": "USD credit",
                                             "period": "one-time", "recurring": False}}},
        {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": None,
                                             "period": "unlimited",
                                             "note": "Free to use; the provider sets no cap."}}},
        {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": "USD credit",
                                             "period": "Trial", "recurring": False}}},
        {"pricing": PRICING | {"freeQuota": {"amount": None, "unit": "GB storage",
                                             "period": "account"}}},
    ],
)
def test_good_variants_pass_every_lint(
    write_entry: WriteEntry, data_dir: Path, changes: dict
) -> None:
    assert rules(write_entry, data_dir, **changes) == []


# Credential-shaped strings, assembled at run time so this file holds no literal key.
LIVE = {
    "stripe live": "sk_" + "live_" + "51HxQ2aK8rT0vB3mN7pL9cD4",
    "stripe test random": "sk_" + "test_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "aws": "AKIA" + "IOSFODNN7Q2WBX5Z",
    "github": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    "slack": "xox" + "b-2384723984-2398472398472-aB3dE5fG7hJ9kL",
    "google": "AIza" + "SyD4f8Hk2LmN9pQ3rS6tV1wX5yZ7aB0cE2g",
    "openai": "sk-" + "proj-" + "Xk29dLm3Pq8Rz4Tn7Vb1Wc6Yh5Js2",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "random": "q8Zt3LmV0xR7yB2nK5wD9pF4hJ6sC1gA",
    "private key": "-----BEGIN RSA " + "PRIVATE KEY-----",
    # Letters alone, no digit: the random-token check lets them pass; their prefix does not.
    "hugging face": "hf_" + "ujzPdeIgxLdGncfBAepfJBdKhoOOLdKLzd",
    "gitlab": "glpat-" + "ocJisAjIhKtJRlgLKOmx",
    "telegram": "5012345678:" + "AAocJisAjIhKtJRlgLKOmxgJTeKdNnFRIBX",
}

PLACEHOLDERS = [
    "Authorization: Bearer YOUR_API_KEY",
    "Authorization: Bearer <token>",
    "sk_test_" + "x" * 24,
    "sk_live_" + "X" * 24,
    "X-Api-Key: your-api-key-here",
    "Authorization: Basic base64(YOUR_ACCOUNT_SID:YOUR_AUTH_TOKEN)",
    "curl https://api.example.com/v1/items/5b11f4ce-a62d-471e-81fc-a69a8278c7da",
    "Authorization: Bearer eyJhbGciOi...REPLACE_ME",
    "# No auth required",
    "Authorization: Bearer hf_" + "x" * 34,
    "Authorization: Bearer hf_YOUR_TOKEN",
    "PRIVATE-TOKEN: glpat-YOUR_ACCESS_TOKEN",
    "curl https://api.telegram.org/botYOUR_BOT_TOKEN/getMe",
    "curl https://api.telegram.org/bot123456789:" + "A" * 35 + "/getMe",
]


@pytest.mark.parametrize("kind", sorted(LIVE))
@pytest.mark.parametrize("field", ["authExample", "sampleRequest"])
def test_gate_rejects_real_looking_credentials(kind: str, field: str) -> None:
    text = f'curl -H "Authorization: Bearer {LIVE[kind]}" "https://api.example.com/v1/x"'
    assert credential_findings(field, text), kind


@pytest.mark.parametrize("text", PLACEHOLDERS)
@pytest.mark.parametrize("field", ["authExample", "sampleRequest"])
def test_gate_accepts_placeholders(text: str, field: str) -> None:
    assert credential_findings(field, text) == []


def test_gate_reads_secret_fields_of_a_sample_response() -> None:
    leaked = json.dumps({"access_token": LIVE["random"], "id": "Zt3LmV0xR7yB2nK5wD9pF4hJ6sC1g"})
    assert credential_findings("sampleResponse", leaked)
    digest = '{"sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}'
    assert credential_findings("sampleResponse", digest) == []
    assert credential_findings("sampleResponse", json.dumps({"key": LIVE["aws"]}))
    assert credential_findings("sampleResponse", '{"token": "YOUR_ACCESS_TOKEN"}') == []


URL_KEYS = sorted(set(LIVE) - {"private key", "slack", "jwt"})  # a URL holds no spaces or dots


@pytest.mark.parametrize("kind", URL_KEYS)
def test_a_real_looking_credential_in_an_address_the_prober_calls_fails_validation(
    kind: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """A key in an endpoint's query or in baseUrl was probed every night and published: the
    gate read only authExample, sampleRequest and sampleResponse."""
    endpoints = [*make_entry()["endpoints"],
                 {"method": "GET", "path": f"/current?appid={LIVE[kind]}&units=metric"}]
    assert ("real-credential", "endpoints[3].path") in rules(
        write_entry, data_dir, endpoints=endpoints)
    assert ("real-credential", "baseUrl") in rules(
        write_entry, data_dir, baseUrl=f"https://api.example.com/v1/{LIVE[kind]}",
        sampleRequest=f'curl "https://api.example.com/v1/{LIVE[kind]}/forecast"')


def test_a_key_in_an_endpoint_path_is_one_line_naming_file_entry_and_field(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    endpoints = [*make_entry()["endpoints"], {"method": "GET", "path": f"/x?key={LIVE['aws']}"}]
    write_entry(make_entry(endpoints=endpoints), category="weather", name="example-weather")
    entries = data_dir / "entries"
    lines = [str(p) for p in read_catalog([entries], entries).problems]
    assert lines and all("\n" not in line for line in lines)
    assert lines[0].startswith(f"{entries / 'weather' / 'example-weather.yaml'}:")
    assert ": entry example-weather: field endpoints[3].path: looks like a real credential: " \
        "AWS access key id (AKIAIOSF…)" in lines[0]


@pytest.mark.parametrize("path", ["/current?appid=YOUR_API_KEY", "/current?key=your-api-key",
                                  "/items/5b11f4ce-a62d-471e-81fc-a69a8278c7da",
                                  "/v1/models/gemini-2.0-flash:generateContent"])
def test_placeholders_in_an_endpoint_path_pass_the_gate(
    path: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    endpoints = [*make_entry()["endpoints"], {"method": "GET", "path": path}]
    assert rules(write_entry, data_dir, endpoints=endpoints) == []


@pytest.mark.parametrize("made_up", ["01234567-89ab-cdef-0123456789ab",
                                     "sk_test_0123456789ABCDEFGHIJ",
                                     "0123456789abcdef0123456789abcdef"])
def test_an_id_counting_up_is_a_placeholder_and_a_random_one_beside_it_is_not(
    made_up: str
) -> None:
    """Docs make up an id or key by counting (Google's push channel id
    `01234567-89ab-cdef-0123456789ab`, no UUID: a group short): a request sending it passes the
    gate, where the same characters shuffled are refused, as is a real key holding a run
    (Telegram's bot id in `LIVE` counts up before its secret: `test_gate_rejects_…`)."""
    def request(token: str) -> str:
        return (f"curl -X POST -d '{{\"id\": \"{token}\"}}' "
                '"https://api.example.com/v1/x/watch"')

    assert credential_findings("sampleRequest", request(made_up)) == []
    shuffled = "".join(random.Random(7).sample(made_up, len(made_up)))
    assert credential_findings("sampleRequest", request(shuffled))


def test_a_real_looking_credential_fails_validation_and_names_the_field(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    found = rules(write_entry, data_dir, authExample=f"Authorization: Bearer {LIVE['github']}")
    assert ("real-credential", "authExample") in found
    found = rules(write_entry, data_dir, sampleResponse=json.dumps({"api_key": LIVE["random"]}))
    assert ("real-credential", "sampleResponse") in found


def test_a_sample_url_holding_what_a_browser_would_escape_is_still_its_one_url(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """curl sends `<`, `>` or `"` in a URL as written: the word is the request's URL, not a
    stray second one (which read the one URL as two, and refused it)."""
    sample = 'curl "https://api.example.com/v1/forecast?q=<b>x</b>"'
    assert rules(write_entry, data_dir, sampleRequest=sample) == []


def test_a_sample_of_an_entry_listing_no_endpoint_has_none_to_match(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """Endpoints are optional: an entry listing none is not refused for a sample that matches
    none, only one whose sample leaves its base address is."""
    assert rules(write_entry, data_dir, endpoints=None,
                 sampleRequest='curl "https://api.example.com/v1/anything"') == []
    assert rules(write_entry, data_dir, endpoints=None,
                 sampleRequest='curl "https://api.example.com/v2/anything"') == [
        ("sample-request-base", "sampleRequest")]


def test_a_standing_allowance_marked_recurring_is_one_line_naming_file_entry_and_field(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    quota = {"amount": 10, "unit": "GB storage", "period": "account", "recurring": True}
    write_entry(make_entry(pricing=PRICING | {"freeQuota": quota}), category="weather",
                name="example-weather")
    entries = data_dir / "entries"
    lines = [str(p) for p in read_catalog([entries], entries).problems]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(f"{entries / 'weather' / 'example-weather.yaml'}:")
    assert ": entry example-weather: field pricing.freeQuota.recurring: leave it out: period " \
        "'account' is a standing allowance" in lines[0]


def test_a_renewing_allowance_without_its_figure_is_one_line_naming_file_entry_and_field(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """A monthly allowance of no stated size promises nothing: its period is invented."""
    quota = {"amount": None, "unit": "requests", "period": "month", "recurring": True}
    lines = problem_lines(write_entry, data_dir, pricing=PRICING | {"freeQuota": quota})
    entries = data_dir / "entries"
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(f"{entries / 'weather' / 'example-weather.yaml'}:")
    assert ": entry example-weather: field pricing.freeQuota.amount: is null with period " \
        "'month'" in lines[0] and lines[0].endswith("[pricing-quota-amount]")


def problem_lines(write_entry: WriteEntry, data_dir: Path, **changes: object) -> list[str]:
    """Every problem `validate` prints for the example entry with `changes`, as printed."""
    write_entry(make_entry(**changes), category="weather", name="example-weather")
    entries = data_dir / "entries"
    return [str(p) for p in read_catalog([entries], entries).problems]


@pytest.mark.parametrize("url", ["https://[::1/v1/forecast", "https://[zz]/v1/forecast"])
def test_a_sample_url_that_does_not_split_is_one_line_naming_the_field(
    url: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """An open `[` in the sample's host stopped the whole validate run with an unexpected
    ValueError that named no file, entry or field."""
    lines = problem_lines(write_entry, data_dir, sampleRequest=f'curl -g "{url}"')
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "field sampleRequest:" in lines[0] and "is not a valid URL" in lines[0]


def test_a_sample_whose_only_url_is_in_a_header_requests_nothing(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """curl requests the words it takes for URLs; an address inside a header is no request,
    though lint took the first address anywhere in the text for the one requested."""
    sample = f'curl -H "Referer: {BASE}/forecast"'
    assert ("sample-request-url", "sampleRequest") in rules(
        write_entry, data_dir, sampleRequest=sample)


def test_thousands_of_bad_words_are_one_short_line_each_kind(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """A hostile sample of 10,000 stray words and bad headers, one of them 100,000 characters
    long, printed a line for each word, each as long as its word."""
    sample = (f'curl "{BASE}/forecast" ' + "x" * 100_000 + " stray" * 5_000
              + " -H nocolon" * 5_000)
    lines = problem_lines(write_entry, data_dir, sampleRequest=sample)
    assert len(lines) == 2, lines[:3]
    assert all(len(line) < 400 for line in lines)
    assert "(and 5,000 more)" in lines[0] + lines[1]
    assert "(and 4,999 more)" in lines[0] + lines[1]


@pytest.mark.parametrize("sample", [
    f"curl {BASE}/forecast?lat=1&lon=2",  # `&` sends curl off in the background without lon
    f'curl "{BASE}/forecast?lat=$(id)"',
    f'curl "{BASE}/forecast?lat=`id`"',
    f"curl -H \"X-Api-Key: YOUR_API_KEY\" {BASE}/forecast?lat=1",  # zsh: no matches found
])
def test_a_sample_the_shell_runs_otherwise_than_it_reads_fails(
    sample: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """The shell runs `$(…)` and backticks inside double quotes, ends the command at an
    unquoted `&`, and expands an unquoted `?`: the sample's words were read as if none of it
    happened, and a sample that runs a command when pasted passed."""
    assert ("sample-request-shell", "sampleRequest") in rules(
        write_entry, data_dir, sampleRequest=sample)


@pytest.mark.parametrize("sample", [
    f"curl '{BASE}/forecast?lat=$(x)'",  # single quotes keep it as written
    f'curl "{BASE}/forecast?lat=\\$(x)&lon=\\`y\\`"',
    f'curl -H "X-Api-Key: YOUR_API_KEY" \\\n  "{BASE}/forecast#top"',
])
def test_a_sample_whose_quotes_hold_what_the_shell_would_run_passes(
    sample: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    assert rules(write_entry, data_dir, sampleRequest=sample) == []


QUERY = [*make_entry()["endpoints"], {"method": "POST", "path": "/query"}]


@pytest.mark.parametrize(("changes", "rule"), [
    ({"sampleRequest": f'curl --resolve api.example.com:443:203.0.113.9 "{BASE}/forecast"'},
     "sample-request-curl"),
    ({"sampleRequest": f'curl --connect-to ::evil.example.net: "{BASE}/forecast"'},
     "sample-request-curl"),
    ({"sampleRequest": f'curl -x http://evil.example.net:8080 "{BASE}/forecast"'},
     "sample-request-curl"),
    ({"sampleRequest": f'curl -K sample.conf "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl -H @headers.txt "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl -X POST -d @body.json "{BASE}/query"', "endpoints": QUERY},
     "sample-request-curl"),
    ({"sampleRequest": f'curl --url-query units@units.txt "{BASE}/forecast"'},
     "sample-request-curl"),
    ({"sampleRequest": f"curl -G --data-urlencode '@query.txt' \"{BASE}/forecast\""},
     "sample-request-curl"),
    ({"sampleRequest": f'curl --header="X-Api-Key: YOUR_API_KEY" "{BASE}/forecast"'},
     "sample-request-curl"),
    ({"sampleRequest": f'curl --compresed "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl "{BASE}/forecast" --next "{BASE}/current"'},
     "sample-request-curl"),
    ({"sampleRequest": f'curl "{BASE}/stations/{{10384,10385}}"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl -X get "{BASE}/forecast"'}, "sample-request-method"),
    ({"sampleRequest": f'curl -sV "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl -M "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl --version "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f'curl -h all "{BASE}/forecast"'}, "sample-request-curl"),
    ({"sampleRequest": f"curl -I -d 'a=1' \"{BASE}/query\"", "endpoints": QUERY},
     "sample-request-curl"),
    ({"sampleRequest": f"curl --json '{{}}' --head \"{BASE}/query\"", "endpoints": QUERY},
     "sample-request-curl"),
    ({"sampleRequest": f"curl -F 'a=1' -d 'b=2' \"{BASE}/query\"", "endpoints": QUERY},
     "sample-request-curl"),
])
def test_a_sample_curl_runs_otherwise_than_it_reads_fails(
    write_entry: WriteEntry, data_dir: Path, changes: dict, rule: str
) -> None:
    """Read with curl's own option table: options that send the request to another address,
    read what it sends from a file, or need the newest curl; a method curl sends as written;
    and a URL curl expands into several requests; help, version and manual, which make none;
    two methods at once, which curl refuses. Each passed, or was refused for a stray or for
    its method alone."""
    assert (rule, "sampleRequest") in rules(write_entry, data_dir, **changes)


@pytest.mark.parametrize("changes", [
    {"sampleRequest": f'curl -sSL --max-redirs 3 --retry 2 "{BASE}/forecast"'},
    {"sampleRequest": f'curl -sXGET --compressed "{BASE}/forecast"'},
    {"sampleRequest": f'curl -X POST -F "file=@photo.jpg" "{BASE}/query"', "endpoints": QUERY},
    {"sampleRequest": f'curl -g "{BASE}/stations/{{10384}}"'},
    {"sampleRequest": f"curl --url-query '+units=metric@2x' \"{BASE}/forecast\""},
])
def test_a_sample_with_options_curl_reads_as_written_passes(
    write_entry: WriteEntry, data_dir: Path, changes: dict
) -> None:
    """`--max-redirs 3` left its `3` for a second URL: the option table lacked it."""
    assert rules(write_entry, data_dir, **changes) == []


NO_AUTH = {"authType": "none", "authExample": "# No auth required"}


@pytest.mark.parametrize("sample", [
    f"curl -G -d 'api_key=YOUR_API_KEY' \"{BASE}/forecast\"",
    f"curl --url-query 'api_key=YOUR_API_KEY' \"{BASE}/forecast\"",
    'curl "https://YOUR_USER:YOUR_PASSWORD@api.example.com/v1/forecast"',
])
def test_a_keyless_sample_sending_a_credential_where_curl_puts_it_fails(
    sample: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """`-G` moves `-d` fields into the query, `--url-query` adds to it, and a user name in the
    URL is basic auth: the lint dropped the fields of -G, and read neither of the others."""
    assert ("sample-request-auth", "sampleRequest") in rules(
        write_entry, data_dir, sampleRequest=sample, **NO_AUTH)


def test_a_sample_sending_the_parameter_an_example_sends_with_g_passes(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    assert rules(write_entry, data_dir,
                 authExample=f"curl -G --data-urlencode 'appid=YOUR_API_KEY' \"{BASE}/forecast\"",
                 sampleRequest=f'curl "{BASE}/forecast?lat=1&appid=YOUR_API_KEY"') == []


def test_a_parameter_named_like_a_credential_beside_the_one_the_example_names_passes(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """Steam's key goes in `key` and its `appid` is a game's id: the sample's `appid=440` was
    taken for a live key, as `appid` carries one elsewhere."""
    assert rules(write_entry, data_dir, authExample="?key=YOUR_API_KEY",
                 sampleRequest=f'curl "{BASE}/forecast?appid=440&key=YOUR_API_KEY"') == []


@pytest.mark.parametrize("url", ["https://api.example.com:8443/v1/forecast",
                                 "https://api.example.com:0/v1/forecast",
                                 "https://api.example.com:99999/v1/forecast"])
def test_a_sample_on_another_port_than_its_base_url_is_one_line_naming_the_field(
    url: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """The same host on another port is another server: lint compared the host alone, so a
    sample on `:8443` passed against a baseUrl on the https port."""
    lines = problem_lines(write_entry, data_dir,
                          sampleRequest=f'curl -H "X-Api-Key: YOUR_API_KEY" "{url}"')
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(str(data_dir / "entries" / "weather" / "example-weather.yaml"))
    assert ": entry example-weather: field sampleRequest: URL port " in lines[0]
    assert lines[0].endswith("[sample-request-port]")


@pytest.mark.parametrize(("base", "url"), [
    (BASE, "https://api.example.com:443/v1/forecast"),
    ("https://api.example.com:8443/v1", "https://api.example.com:8443/v1/forecast"),
])
def test_a_sample_on_the_port_of_its_base_url_passes(
    base: str, url: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    assert rules(write_entry, data_dir, baseUrl=base,
                 sampleRequest=f'curl -H "X-Api-Key: YOUR_API_KEY" "{url}"') == []


BASIC = {"authType": "basic", "authExample": "Authorization: Basic <base64 of KEY_ID:SECRET>"}


@pytest.mark.parametrize(("field", "text"), [
    ("sampleRequest", f'curl -u YOUR_KEY_ID:hunter2 "{BASE}/forecast"'),
    ("sampleRequest", f'curl --user "YOUR_KEY_ID:correct horse" "{BASE}/forecast"'),
    ("sampleRequest", 'curl "https://YOUR_KEY_ID:hunter2@api.example.com/v1/forecast"'),
    ("authExample", "-u YOUR_KEY_ID:hunter2"),
    ("authExample", f'curl -u YOUR_KEY_ID:hunter2 "{BASE}/forecast"'),
])
def test_a_basic_auth_password_that_is_no_placeholder_is_refused(
    field: str, text: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """A password as short and plain as `hunter2` is as live as a random one: the gate took it
    for a credential only where it looked random."""
    sample = {"sampleRequest": f'curl -u YOUR_KEY_ID:YOUR_SECRET "{BASE}/forecast"'}
    lines = problem_lines(write_entry, data_dir, **BASIC | sample | {field: text})
    assert len(lines) == 1 and "\n" not in lines[0]
    assert f": entry example-weather: field {field}: looks like a real credential: a " in lines[0]
    assert "password that is no placeholder (" in lines[0]
    assert "hunter2" not in lines[0] and "correct horse" not in lines[0]


@pytest.mark.parametrize("user", ["YOUR_KEY_ID:YOUR_SECRET", "YOUR_API_KEY:", "YOUR_API_KEY",
                                  "user:password", "<key-id>:<secret>", "api:$API_SECRET",
                                  "KEY_ID:SECRET", "client_id:client_secret",
                                  "app_id:app_secret", "key_id:secret_key",
                                  "consumer_key:consumer_secret"])
def test_a_basic_auth_password_written_as_a_placeholder_passes(
    user: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    assert rules(write_entry, data_dir,
                 **BASIC | {"sampleRequest": f'curl -u "{user}" "{BASE}/forecast"'}) == []


@pytest.mark.parametrize("sample", [
    f"curl -b 'api_key=YOUR_API_KEY' \"{BASE}/forecast\"",
    f"curl --cookie 'lang=en; session=YOUR_SESSION' \"{BASE}/forecast\"",
    f"curl -H 'Cookie: PHPSESSID=YOUR_SESSION_ID' \"{BASE}/forecast\"",
])
def test_a_keyless_sample_sending_a_credential_cookie_fails(
    sample: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """curl sends -b as a Cookie header: a session or key cookie is a credential, which the
    lint read in neither."""
    assert ("sample-request-auth", "sampleRequest") in rules(
        write_entry, data_dir, sampleRequest=sample, **NO_AUTH)


@pytest.mark.parametrize("sample", [
    f"curl -H 'X-Api-Key: YOUR_API_KEY' -b 'session=hunter2' \"{BASE}/forecast\"",
    f"curl -H 'X-Api-Key: YOUR_API_KEY' -H 'Cookie: api_key=cGxhaW4ga2V5' \"{BASE}/forecast\"",
])
def test_a_credential_cookie_that_is_no_placeholder_is_refused(
    sample: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    lines = problem_lines(write_entry, data_dir, sampleRequest=sample)
    assert any(": entry example-weather: field sampleRequest: looks like a real credential: "
               "cookie '" in line and "that is no placeholder" in line for line in lines), lines
    assert all("hunter2" not in line and "cGxhaW4ga2V5" not in line for line in lines)
    assert credential_findings("authExample", "Cookie: session=hunter2")


@pytest.mark.parametrize("changes", [
    {"authExample": "Cookie: session=YOUR_SESSION",
     "sampleRequest": f"curl -b 'session=YOUR_SESSION' \"{BASE}/forecast\""},
    {"authExample": "-b session=YOUR_SESSION",
     "sampleRequest": f"curl -H 'Cookie: session=YOUR_SESSION; lang=en' \"{BASE}/forecast\""},
    {**NO_AUTH, "sampleRequest": f"curl -b 'lang=en' \"{BASE}/forecast\""},
])
def test_a_cookie_sent_where_auth_example_puts_it_passes(
    changes: dict, write_entry: WriteEntry, data_dir: Path
) -> None:
    assert rules(write_entry, data_dir, **changes) == []


def test_a_sample_reading_its_cookies_from_a_file_fails(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """`-b` without `=` names a file curl reads cookies from: the sample does not show them."""
    assert ("sample-request-curl", "sampleRequest") in rules(
        write_entry, data_dir, sampleRequest=f"curl -b cookies.txt \"{BASE}/forecast\"")


def test_a_form_sent_with_g_is_a_multipart_post(write_entry: WriteEntry, data_dir: Path) -> None:
    """-G moves only -d's fields into the query: with -F alone curl still sends a multipart
    POST, which the lint read as a GET."""
    sample = f"curl -G -F 'a=1' \"{BASE}/query\""
    assert rules(write_entry, data_dir, sampleRequest=sample, endpoints=QUERY) == []
    assert ("sample-request-method", "sampleRequest") in rules(
        write_entry, data_dir, sampleRequest=f"curl -G -F 'a=1' \"{BASE}/forecast\"")


@pytest.mark.parametrize("sample", [
    f"curl -I -d 'a=1' \"{BASE}/query\"",
    f"curl --json '{{}}' --head \"{BASE}/query\"",
    f"curl -G -F 'a=1' -d 'b=2' \"{BASE}/query\"",
    f"curl -T report.csv -d 'a=1' \"{BASE}/query\"",  # curl: PUT (-T) and POST (-d)
    f"curl -I -T report.csv \"{BASE}/query\"",
    f"curl -F 'a=1' --upload-file report.csv \"{BASE}/query\"",
])
def test_a_sample_asking_for_two_methods_is_one_line(
    sample: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """curl refuses a command asking for two methods and sends nothing: the lint said so, then
    compared one of the two with the endpoint's in a second line."""
    lines = problem_lines(write_entry, data_dir, sampleRequest=sample, endpoints=QUERY)
    assert len(lines) == 1, lines
    assert ": entry example-weather: field sampleRequest: curl refuses a command that asks " \
        "for both " in lines[0] and "\n" not in lines[0]


@pytest.mark.parametrize("changes", [
    {"sampleRequest": f"curl -H $'X-Api-Key:\\tYOUR_API_KEY' \"{BASE}/forecast\""},
    {"sampleRequest": f"curl -H $'X-\\x41pi-Key: YOUR_API_KEY' \"{BASE}/forecast\""},
    {"sampleRequest": f"curl -X POST --data-raw $'{{\"text\": \"it\\'s\\\\n\"}}' \"{BASE}/query\"",
     "endpoints": QUERY},
])
def test_a_sample_in_ansi_c_quotes_is_read_as_bash_reads_it(
    changes: dict, write_entry: WriteEntry, data_dir: Path
) -> None:
    """Browsers copy a request as curl in bash's `$'…'`, whose backslash escapes bash reads
    (`\\t`, `\\x41`, `\\'`): the lint read a `$` and a single-quoted word, so the header was
    '$X-Api-Key' and a quote escaped inside was no shell command at all."""
    assert rules(write_entry, data_dir, **changes) == []


@pytest.mark.parametrize(("written", "sent"), [
    ("caf$'\\xc3\\xa9'", "café"),
    ("$'\\303\\251t\\xc3\\xa9'", "été"),
    ("caf$'\\xff'", "caf%ff"),
])
def test_a_byte_in_ansi_c_quotes_is_one_byte_read_as_curl_sends_it(
    written: str, sent: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """In bash's `$'…'`, `\\xHH` and an octal code write one byte, 0x80 and above too, so
    `\\xc3\\xa9` is the UTF-8 of `é`; the lint made a character of each (`Ã©`). A byte that is
    no UTF-8 curl percent-encodes in a path, as it sends it (`%ff`)."""
    sample = f"curl -H 'X-Api-Key: YOUR_API_KEY' \"{BASE}/nowhere/\"{written}"
    lines = problem_lines(write_entry, data_dir, sampleRequest=sample)
    assert len(lines) == 1, lines
    assert f"field sampleRequest: path '/nowhere/{sent}' after baseUrl matches none" in lines[0]


@pytest.mark.parametrize(("sample", "rule", "said"), [
    (f"curl -H $'X-Api-Key: \\xff\\xfehunter2' \"{BASE}/forecast\"", "sample-request-header",
     "holds the byte \\xff, which is no UTF-8 text and curl sends as it is"),
    (f"curl -H 'X-Api-Key: YOUR_API_KEY' \"{BASE}/forecast?q=\"$'\\xfe'", "sample-request-url",
     "curl sends the byte \\xfe in it as it is"),
])
def test_a_byte_that_is_no_utf8_outside_a_path_is_one_line(
    sample: str, rule: str, said: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """curl sends a byte that is no UTF-8 (`$'\\xff'`) in a header or a query as it is: no text,
    and no URL. The lint read it as a character (`ÿ`) and let it pass."""
    assert (rule, "sampleRequest") in rules(write_entry, data_dir, sampleRequest=sample)
    lines = problem_lines(write_entry, data_dir, sampleRequest=sample)
    assert any(said in line for line in lines), lines
    for line in lines:  # each can be stored and printed: no lone surrogate in it
        assert "\n" not in line and line.encode("utf-8")


@pytest.mark.parametrize(("sample", "variable"), [
    (f"curl -H 'X-Api-Key: YOUR_API_KEY' \"{BASE}/forecast?lat=$LAT&lon=2\"", "$LAT"),
    (f"curl -g -H 'X-Api-Key: YOUR_API_KEY' \"{BASE}/forecast?lat=${{LAT}}&lon=2\"", "${LAT}"),
    (f"curl -H 'X-Api-Key: YOUR_API_KEY' {BASE}/stations/$1", "$1"),
    (f"curl -H \"X-Api-Key: $API_KEY\" \"{BASE}/forecast?lat=$LAT\"", "$LAT"),
    (f"curl -H \"X-Api-Key: key-$API_KEY\" \"{BASE}/forecast\"", "$API_KEY"),
])
def test_a_variable_the_sample_does_not_set_is_one_line(
    sample: str, variable: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """bash puts a variable's value in its place, outside single quotes, and a fresh shell
    running the sample has none: the lint read `$LAT` as written. Only a credential's whole
    value may be a variable (`X-Api-Key: $API_KEY`), as the gate takes it for a placeholder."""
    lines = [line for line in problem_lines(write_entry, data_dir, sampleRequest=sample)
             if line.endswith("[sample-request-variable]")]
    assert len(lines) == 1, lines
    assert f": entry example-weather: field sampleRequest: uses {variable}, which the " \
        "command does not set" in lines[0] and "\n" not in lines[0]


BEARER = {"authType": "bearer", "authExample": "Authorization: Bearer YOUR_TOKEN"}
SIGNED = {"authExample": "API-Key: YOUR_API_KEY, API-Sign: <base64 HMAC-SHA512 signature>"}


@pytest.mark.parametrize(("changes", "field", "sent"), [
    ({"sampleRequest": f"curl -H 'X-Api-Key: hunter2' \"{BASE}/forecast\""}, "sampleRequest",
     "header 'x-api-key'"),
    ({**BEARER, "sampleRequest": f"curl -H 'Authorization: Bearer hunter2' \"{BASE}/forecast\""},
     "sampleRequest", "header 'authorization'"),
    ({**BEARER, "sampleRequest": f"curl --oauth2-bearer hunter2 \"{BASE}/forecast\""},
     "sampleRequest", "header 'authorization'"),
    ({**SIGNED, "sampleRequest": f"curl -H 'API-Key: YOUR_API_KEY' -H 'API-Sign: hunter2' "
      f"\"{BASE}/forecast\""}, "sampleRequest", "header 'api-sign'"),
    ({"sampleRequest": f"curl -H $'X-Api-Key: \\x68unter2' \"{BASE}/forecast\""},
     "sampleRequest", "header 'x-api-key'"),
    ({"authExample": "?api_key=YOUR_API_KEY",
      "sampleRequest": f"curl \"{BASE}/forecast?api_key=hunter2\""}, "sampleRequest",
     "parameter 'api_key'"),
    ({"authExample": "?api_key=YOUR_API_KEY",
      "sampleRequest": f"curl -G -d 'api_key=hunter2' \"{BASE}/forecast\""}, "sampleRequest",
     "parameter 'api_key'"),
    ({"authExample": "X-Api-Key: hunter2"}, "authExample", "header 'x-api-key'"),
    ({"authExample": "?api_key=hunter2",
      "sampleRequest": f"curl \"{BASE}/forecast?api_key=YOUR_API_KEY\""}, "authExample",
     "parameter 'api_key'"),
])
def test_a_credential_that_is_no_placeholder_is_refused_wherever_it_is_sent(
    changes: dict, field: str, sent: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """A key in a header (one a credential's name names, or the entry's authExample), sent by
    --oauth2-bearer, or in a parameter was refused only where it looked random: a short plain
    key is as live, as a password and a cookie already were."""
    lines = problem_lines(write_entry, data_dir, **changes)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert f": entry example-weather: field {field}: looks like a real credential: {sent} " \
        "that is no placeholder (" in lines[0]
    assert "hunter2" not in lines[0]


KEYED = "curl -H 'X-Api-Key: YOUR_API_KEY'"


@pytest.mark.parametrize(("written", "kept"), [
    (f"{KEYED} -o ~/forecast.json \"{BASE}/forecast\"",
     f"{KEYED} -o '~/forecast.json' \"{BASE}/forecast\""),
    (f"{KEYED} -G --data-urlencode place=~root \"{BASE}/forecast\"",
     f"{KEYED} -G --data-urlencode place=x~root \"{BASE}/forecast\""),
    (f"{KEYED} --url-query units=metric:~+ \"{BASE}/forecast\"",
     f"{KEYED} --url-query units==metric:\\~+ \"{BASE}/forecast\""),
    (f"{KEYED} -A ~ \"{BASE}/forecast\"", f"{KEYED} -A ~\"\" \"{BASE}/forecast\""),
])
def test_a_tilde_bash_replaces_with_a_directory_is_one_line(
    written: str, kept: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """bash replaces an unquoted `~`, `~name` or `~+` at a word's start, or after the first `=`
    or a `:` in a name=value word, with a directory of the reader's machine: the lint read it
    as written, so each reader's run sent or wrote a path of their own. A `~` bash keeps
    (quoted, escaped, mid-word, after a second `=`) is sent as written and passes."""
    lines = problem_lines(write_entry, data_dir, sampleRequest=written)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert ": entry example-weather: field sampleRequest: " in lines[0]
    assert "holds a '~' that bash replaces with a directory of the reader's machine" in lines[0]
    assert lines[0].endswith("[sample-request-shell]")
    assert problem_lines(write_entry, data_dir, sampleRequest=kept) == []


def test_a_variable_in_a_url_is_one_line_not_also_a_pattern(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    """bash fills `${LAT}` before curl reads the URL, so its braces are no curl pattern: the
    lint said both the variable and the pattern for the one span. Single-quoted, the braces
    reach curl and are its pattern, with no variable."""
    expanded = problem_lines(write_entry, data_dir,
                             sampleRequest=f"{KEYED} \"{BASE}/forecast?lat=${{LAT}}&lon=2\"")
    assert len(expanded) == 1 and expanded[0].endswith("[sample-request-variable]"), expanded
    quoted = problem_lines(write_entry, data_dir,
                           sampleRequest=f"{KEYED} '{BASE}/forecast?lat=${{LAT}}&lon=2'")
    assert len(quoted) == 1 and "as a pattern" in quoted[0], quoted


BASIC_SAMPLE = BASIC | {"sampleRequest": f"curl -u YOUR_API_KEY: \"{BASE}/forecast\""}


@pytest.mark.parametrize(("example", "variable"), [
    ('-u "key-$API_KEY:"', "$API_KEY"),
    ('-u YOUR_API_KEY:"$1"', "$1"),
    ("curl -u YOUR_API_KEY: \"$BASE_URL/forecast\"", "$BASE_URL"),
])
def test_a_variable_in_an_auth_example_written_as_curl_is_one_line(
    example: str, variable: str, write_entry: WriteEntry, data_dir: Path
) -> None:
    """An authExample written as curl (`-u KEY:`) is shell a reader pastes, as a sample is,
    and a fresh shell fills its variables with nothing: the lint let any pass there. As in a
    sample, a variable may stand for a credential's whole value (`-u "$KEY_ID:$SECRET"`)."""
    lines = problem_lines(write_entry, data_dir, **BASIC_SAMPLE | {"authExample": example})
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert f": entry example-weather: field authExample: uses {variable}, which the command " \
        "does not set" in lines[0] and lines[0].endswith("[sample-request-variable]")
    assert problem_lines(write_entry, data_dir,
                         **BASIC_SAMPLE | {"authExample": '-u "$KEY_ID:$SECRET"'}) == []
