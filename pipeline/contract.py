"""Pydantic models of the public JSON, interface version 2.0.0.

These models are the one source of truth for what consumers receive: the
publish stage validates every file against them and the OpenAPI document
(`pipeline.release.openapi`) is generated from them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

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


def _absolute_uri(value: str) -> str:
    """Accept an absolute http(s) URI with a host; kept as written (no normalisation)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http(s) URL with a host")
    if re.search(r"[\s{}<>\"|\\^`]", value):
        raise ValueError("must not hold spaces, braces or other characters URLs do not allow")
    return value


Slug = Annotated[str, StringConstraints(pattern=SLUG_PATTERN, min_length=1, max_length=100)]
HexColor = Annotated[str, StringConstraints(pattern=COLOR_PATTERN)]
Uri = Annotated[
    str,
    AfterValidator(_absolute_uri),
    WithJsonSchema({"type": "string", "format": "uri"}),
]
SemVer = Annotated[str, StringConstraints(pattern=SEMVER_PATTERN)]
Percent = Annotated[int, Field(ge=0, le=100)]
Share = Annotated[float, Field(ge=0, le=1)]


class ContractModel(BaseModel):
    """Base: camelCase names in JSON, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
    )


class FreeQuota(ContractModel):
    amount: float | None = None
    unit: str | None = None
    period: str
    note: str | None = None
    recurring: bool | None = Field(
        default=None,
        description="True: the allowance renews every period; false: a one-time credit "
        "(a trial); absent: not stated.",
    )


class PricingTier(ContractModel):
    name: str
    monthly_cents: int = Field(ge=0)
    included: str


class UnitCost(ContractModel):
    amount_cents: int = Field(ge=0)
    per: int = Field(ge=1)
    unit: str


class TransactionFee(ContractModel):
    """A fee per transaction, as payment APIs charge: e.g. 2.9 % + 30¢."""

    percent: float = Field(ge=0, le=100, description="Share of each transaction, in percent.")
    fixed_cents: int = Field(default=0, ge=0, description="Fixed part per transaction, in US "
                             "cents (or the provider's main currency's cents).")
    note: str | None = Field(default=None, description="What the fee applies to, as stated.")


class Pricing(ContractModel):
    model: PricingModel | None = None
    starting_cents_per_month: int | None = Field(default=None, ge=0)
    free_quota: FreeQuota | None = None
    tiers: list[PricingTier] | None = None
    unit_cost: UnitCost | None = None
    details: str | None = None
    transaction_fee: TransactionFee | None = Field(
        default=None, description="The standard fee per transaction, where the API charges so."
    )
    sandbox: bool | None = Field(
        default=None, description="A free sandbox or test mode to build against, without paying."
    )
    monthly_minimum_cents: int | None = Field(
        default=None, ge=0,
        description="The least a builder pays per month once live, in US cents (0: none).",
    )


class EndpointStatus(ContractModel):
    """One endpoint's own presented status, from the entry's latest trusted probe run."""

    state: StatusState = Field(default="unchecked", description="live, online, unreachable, "
                               "or unchecked (not probed, or not yet).")
    http_status: int | None = Field(default=None, ge=100, le=999)
    response_time_ms: int | None = Field(default=None, ge=0, description="Time to headers.")
    checked_at: AwareDatetime | None = Field(default=None, description="The check date.")
    reason: str | None = Field(default=None, description="Why it answered as it did (auth, "
                               "rate_limited, not_found, …) or why it failed (dns, timeout, …).")
    note: str | None = Field(default=None, description="Why it is not probed, e.g. "
                             "'method is POST' or 'path has placeholders'.")
    failure: FailureClass | None = Field(
        default=None, description="Set when it failed twice in the run (a second look at the "
        "end of the run confirmed it): dead (404/410 or no such host), blocked (bot challenge "
        "or 429), transient (5xx, timeout, reset) or tls.")


class Endpoint(ContractModel):
    method: HttpMethod | None = None
    path: str | None = None
    description: str | None = None
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
    """The curated part of an entry: the seed's APIEntry fields, then optional additions."""

    id: Slug
    name: str = Field(min_length=1)
    provider: str = Field(min_length=1)
    category: CategoryId
    description: str | None = None
    long_description: str | None = None
    color: HexColor | None = None
    tags: list[str] | None = None
    auth_type: AuthType
    auth_description: str | None = None
    auth_example: str | None = None
    base_url: Uri
    docs_url: Uri | None = None
    has_free_tier: bool | None = None
    pricing: Pricing | None = None
    rate_limit: str | None = None
    endpoints: list[Endpoint] | None = None
    sample_request: str | None = None
    sample_response: str | None = None
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


class Status(ContractModel):
    """Presented endpoint status of an entry, from its latest probe run."""

    state: StatusState = "unchecked"
    http_status: int | None = Field(default=None, ge=100, le=999)
    response_time_ms: int | None = Field(default=None, ge=0)
    checked_at: AwareDatetime | None = None
    note: str | None = None
    url: Uri | None = None
    failure: FailureClass | None = Field(
        default=None, description="When no target answered in the run, twice: the class of "
        "the failure of the deciding target (dead, blocked, transient, tls).")


class Lifecycle(ContractModel):
    """Where the entry stands in its life, judged over runs rather than from one probe."""

    state: LifecycleState = Field(description="active; degraded (some targets fail); failing "
                                  "(no target answered for several runs in a row); dead "
                                  "(confirmed dead for weeks); deprecated (by its provider).")
    since: AwareDatetime | None = Field(default=None, description="When it entered this state.")
    reason: str | None = Field(default=None, description="What the judgement rests on.")
    successor: Slug | None = Field(default=None, description="Deprecated: the entry replacing "
                                   "it, if listed.")


class Https(ContractModel):
    """Measured transport security of the base address."""

    enabled: bool = Field(description="The base address is HTTPS.")
    tls_version: str | None = Field(default=None, description="Protocol of the last "
                                    "connection, e.g. TLSv1.3.")
    cert_expires: AwareDatetime | None = Field(default=None, description="When the server's "
                                               "certificate expires.")
    cert_days_left: int | None = Field(default=None, description="Whole days from the release "
                                       "to that expiry (negative: expired).")
    checked_at: AwareDatetime | None = None


class Cors(ContractModel):
    """Whether a web page on another origin may read the API's answers, as measured by
    sending an `Origin` header (no credentials) to every probed target."""

    state: CorsState = Field(description="yes: Access-Control-Allow-Origin allows any origin or "
                             "ours; no: an answer came without it; unknown: nothing answered.")
    allow_origin: str | None = Field(default=None, description="The header's value, as sent.")
    credentials: bool | None = Field(default=None, description="Access-Control-Allow-"
                                     "Credentials was true.")
    checked_at: AwareDatetime | None = None


class ScoreReasons(ContractModel):
    """The few facts that made each sub-score, e.g. "free tier", "p50 120 ms over 14 probes"."""

    pricing: list[str]
    latency: list[str]
    depth: list[str]


class LatencyWindow(ContractModel):
    """Response times of one window: only probes that got an HTTP answer count."""

    samples: int = Field(ge=0, description="Timed responses in the window.")
    p50_ms: int | None = Field(default=None, ge=0, description="Median time to headers.")
    p95_ms: int | None = Field(default=None, ge=0, description="95th percentile, same.")


class LatencyEvidence(ContractModel):
    minimum_samples: int = Field(description="Timed responses in 7 days the score needs.")
    eligible: bool = Field(description="Whether the last 7 days hold that many.")
    last7d: LatencyWindow = Field(alias="last7d")
    last30d: LatencyWindow = Field(alias="last30d")


class ScoreEvidence(ContractModel):
    """The inputs that made each sub-score, so a reader can check it."""

    pricing: dict[str, Any] = Field(description="The pricing facts the score used.")
    latency: LatencyEvidence
    depth: dict[str, Any] = Field(description="The measures of the API the score used.")


class BuilderScore(ContractModel):
    grade: Annotated[str, StringConstraints(pattern=r"^[A-F][+-]?$")]
    percent: Percent
    label: Annotated[str, StringConstraints(pattern=r"^\d{1,3}% builder-friendly$")]
    pricing: Percent | None = Field(description="Null without the evidence it needs.")
    latency: Percent | None = Field(description="Null without enough timed responses.")
    depth: Percent | None = Field(description="Null without the evidence it needs.")
    rubric: str
    reasons: ScoreReasons | None = None
    confidence: Literal["high", "medium", "low"] | None = Field(
        default=None, description="How much evidence backs the grade.")
    provisional: bool | None = Field(
        default=None, description="True until Latency has its minimum evidence.")
    evidence: ScoreEvidence | None = None

    @model_validator(mode="after")
    def _label_matches_percent(self) -> BuilderScore:
        if self.label != f"{self.percent}% builder-friendly":
            raise ValueError("label must read '<percent>% builder-friendly'")
        return self


class Uptime(ContractModel):
    """Share of successful probes over the last 1, 7 and 30 days (null: no probes)."""

    last1d: Share | None = Field(default=None, alias="last1d")
    last7d: Share | None = Field(default=None, alias="last7d")
    last30d: Share | None = Field(default=None, alias="last30d")


class Provenance(ContractModel):
    """Where the entry's facts come from and when a curator last checked them."""

    verified: date | None = Field(default=None, description="Day the facts were last checked.")
    sources: list[Uri] | None = Field(
        default=None, description="The provider's pages (and named fallbacks) the facts are from.")
    stale: bool | None = Field(
        default=None, description="True when the last check is older than the directory's "
        "staleness limit (180 days by default) at publish time.")


class APIEntry(EntryContent):
    """A published entry: the curated content plus the presented values."""

    provenance: Provenance | None = None
    status: Status = Field(default_factory=Status)
    builder_score: BuilderScore | None = None
    uptime: Uptime | None = None
    lifecycle: Lifecycle | None = None
    https: Https | None = None
    cors: Cors | None = None


class Meta(ContractModel):
    version: SemVer
    generated: AwareDatetime
    total_apis: int = Field(ge=0, alias="totalAPIs")
    source: Uri
    license: str


class CategoryMeta(Meta):
    category: CategoryId
    label: str
    count: int = Field(ge=0)


def _check_sorted_unique(apis: Sequence[APIEntry | SearchItem]) -> None:
    ids = [api.id for api in apis]
    if ids != sorted(set(ids)):
        raise ValueError("apis must be sorted by id with no id twice")


class FullDataset(ContractModel):
    meta: Meta
    apis: list[APIEntry]

    @model_validator(mode="after")
    def _consistent(self) -> FullDataset:
        if self.meta.total_apis != len(self.apis):
            raise ValueError("meta.totalAPIs must equal the number of apis")
        _check_sorted_unique(self.apis)
        return self


class CategoryDataset(ContractModel):
    meta: CategoryMeta
    apis: list[APIEntry]

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

    meta: Meta
    api: APIEntry


class SearchItem(ContractModel):
    """One entry as `api/search.json` lists it: what the index page shows, searches and sorts
    by, in a few hundred bytes; the whole entry is `api/apis/{id}.json`."""

    id: Slug
    name: str = Field(min_length=1)
    provider: str = Field(min_length=1)
    category: CategoryId
    description: str | None = Field(default=None, description="The one-sentence summary.")
    tags: list[str] | None = None
    auth_type: AuthType | None = None
    has_free_tier: bool | None = None
    color: HexColor | None = None
    state: StatusState = Field(description="The entry's status.state.")
    grade: Annotated[str, StringConstraints(pattern=r"^[A-F][+-]?$")] | None = Field(
        default=None, description="The builder grade; absent while the entry is not scored.")
    percent: Percent | None = Field(
        default=None, description="The builder score's percent, which the index sorts by.")
    provisional: bool | None = Field(
        default=None, description="True while the grade lacks its Latency evidence.")
    lifecycle: LifecycleState | None = Field(default=None, description="lifecycle.state.")
    https: bool | None = Field(default=None, description="https.enabled.")
    cors: CorsState | None = Field(default=None, description="cors.state.")


class SearchIndex(ContractModel):
    """`api/search.json`: every published entry as a SearchItem, sorted by id."""

    meta: Meta
    apis: list[SearchItem]

    @model_validator(mode="after")
    def _consistent(self) -> SearchIndex:
        if self.meta.total_apis != len(self.apis):
            raise ValueError("meta.totalAPIs must equal the number of apis")
        _check_sorted_unique(self.apis)
        return self


class CategorySummary(ContractModel):
    id: CategoryId
    label: str
    description: str | None = None
    count: int = Field(ge=0)


class CategoryIndex(ContractModel):
    """`api/categories.json`: every category with its label and entry count."""

    meta: Meta
    categories: list[CategorySummary]


CheckedState = Literal["live", "online", "unreachable"]


class ReleaseCounts(ContractModel):
    total: int = Field(ge=0)
    by_category: dict[CategoryId, int]
    by_state: dict[StatusState, int]


class ReleaseSummary(ContractModel):
    """One kept release: its files are under `api/releases/<folder>/`, never rewritten."""

    version: SemVer
    generated: AwareDatetime
    counts: ReleaseCounts
    path: str = Field(description=(
        "The release's full dataset, relative to the site root. Its folder is the version "
        "with `+` written `_` (api/releases/2.0.0_20261121.1/apis.json), since some object "
        "stores and CDNs mangle a `+` in a path; releases kept from before that keep the "
        "folder named by the version itself."))


class ReleaseIndex(ContractModel):
    """`api/releases.json`: the kept releases, newest first."""

    meta: Meta
    releases: list[ReleaseSummary]

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

    entry: Slug
    name: str
    from_state: CheckedState = Field(alias="from")
    to_state: CheckedState = Field(alias="to")
    at: AwareDatetime


class CatalogueEvent(ContractModel):
    """Something that happened in the catalogue: an entry added, retired, or moved from one
    lifecycle state to another, or a new release published."""

    kind: Literal["added", "retired", "lifecycle", "release"]
    entry: Slug | None = Field(default=None, description="The entry's id (all but release).")
    name: str | None = Field(default=None, description="The entry's name (all but release).")
    from_state: LifecycleState | None = Field(default=None, alias="from",
                                              description="lifecycle: the state left.")
    to_state: LifecycleState | None = Field(default=None, alias="to",
                                            description="lifecycle: the state entered.")
    version: SemVer | None = Field(default=None, description="release: its version.")
    at: AwareDatetime

    @model_validator(mode="after")
    def _fields_of_its_kind(self) -> CatalogueEvent:
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

    meta: Meta
    changes: list[StateChangeItem]
    events: list[CatalogueEvent] | None = Field(
        default=None, description="Entries added and retired, lifecycle transitions and "
        "releases, the same items as the Atom feed `changes.atom`.")

    @model_validator(mode="after")
    def _newest_first(self) -> ChangeLog:
        _check_newest_first([change.at for change in self.changes], "changes")
        _check_newest_first([event.at for event in self.events or []], "events")
        return self


class NotFoundError(ContractModel):
    status: Literal[404] = 404
    code: Literal["not_found"] = "not_found"
    message: str
    category_ids: list[CategoryId] = Field(default_factory=lambda: list(CATEGORY_IDS))
    index: str = "api/categories.json"


class ErrorBody(ContractModel):
    """`api/404.json`: what the static host answers for a document the release lacks."""

    error: NotFoundError
