"""Score: uptime, latency percentiles, sub-scores and the builder score, as pure functions.

The rubric is published in `docs/scoring.md`; every constant below is named there, and
`RUBRIC_VERSION` changes whenever one of them does. Nothing here reads the clock, the
network or a database: the same content, history and `as_of` always give the same scores.
History is grouped once for all entries, so scoring scales with the number of probe rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from pipeline.contract import (
    DEFAULT_CURRENCY,
    ONE_TIME_PERIODS,
    UNCAPPED_PERIOD,
    BuilderScore,
    fixed_fee_text,
    number_text,
    price_text,
)
from pipeline.probing.probe import failed, left_unchecked, target_stands_in

RUBRIC_VERSION = "2.7.0"

# Probe history columns this module reads, and what a probe outcome may be. A history may
# also carry each probe's `reason` (the prober's word for an `online` answer): without it every
# answer counts as a successful probe.
HISTORY_COLUMNS = ("entry_id", "url", "checked_at", "outcome", "total_ms", "run_id")
REASON_COLUMN = "reason"
ENDPOINT_COLUMN = "endpoint_id"  # none on a probe of the base address standing in
# A probe's note: what its run left undone of it (`probe.ProbeResult.note`); without the
# column no probe has one. Such a probe is no evidence (`unchecked`).
NOTE_COLUMN = "note"
OUTCOMES = ("unreachable", "online", "live")  # worst to best; "responded" = online or live
RESPONDED = ("live", "online")
WINDOWS: dict[str, int] = {"1d": 1, "7d": 7, "30d": 30}  # window name -> days before as_of

# Pricing: what a builder pays to start, and how plainly growth is priced; 100 in all, the
# points of the facts stated scaled to it when a part lacks its evidence: no price to grow
# into, or a monthly minimum in a currency other than the US dollar its thresholds are in.
PRICING_POINTS = 100
FREE_TIER_POINTS = {"recurring": 35, "one-time": 20}  # a renewing allowance beats a trial
SANDBOX_POINTS = 10  # a free sandbox or test mode to build against
MINIMUM_CENTS = (0, 1_000, 5_000, 20_000, 100_000)  # least paid per month, in US cents ...
MINIMUM_POINTS = (25, 18, 10, 3, 0)  # ... and its points, linear in between, 0 from $1,000
GROWTH_POINTS = 20  # a published price to grow into: unit cost, fee, paid tiers (or none needed)
# A free allowance stated in full: its amount, or use without a cap (only described: the less).
QUOTA_POINTS, QUOTA_NOTE_POINTS = 10, 5

# Latency: time to headers of the successful probes, as a benchmark reports it, a failed probe
# counted as a response slower than any threshold (a timeout): failed probes are evidence too,
# for the window alone, weighed as any other probe (docs/scoring.md, "A bad night").
LATENCY_WINDOW = "7d"
MIN_LATENCY_SAMPLES = 5  # probes (timed successful or failed) in the window; fewer: provisional
MIN_LATENCY_DAYS = 3  # UTC days they fall on: three days lie more than a whole day apart
HIGH_CONFIDENCE_SAMPLES = 20
P50_MS = (100, 300, 1_000, 3_000)
P50_POINTS = (100, 80, 40, 0)
P95_MS = (300, 1_000, 2_500, 8_000)
P95_POINTS = (100, 75, 35, 0)
FAILED_PROBE_MS = max(P50_MS[-1], P95_MS[-1])  # a failed probe's time: 0 points on both scales
P50_WEIGHT = 0.6
P95_WEIGHT = 0.4

# Depth: what a builder gets, measured, not whether the file is filled; 100 in all.
ENDPOINT_COUNTS = (0, 1, 3, 5, 10)
ENDPOINT_POINTS = (0, 5, 12, 16, 20)  # linear in between, 20 from 10 endpoints
METHOD_POINTS, METHOD_CAP = 4, 8  # per distinct HTTP method
RESOURCE_POINTS, RESOURCE_CAP = 3, 12  # per distinct top-level path segment
# A leading path segment that names a version or the API itself, not a resource: `v1`, `v2`,
# `v1beta1`, `2`, `1.1`, a dated version `2024-01-01`, `api`.
VERSION_SEGMENT = re.compile(r"v?\d+(?:\.\d+)*(?:(?:alpha|beta|rc)\d*)?|\d{4}-\d{2}-\d{2}|api")
OPENAPI_POINTS = 15  # an official machine-readable description to generate a client from
SDK_POINTS = 10  # an official SDK
AUTH_POINTS = {"none": 15, "api-key": 10, "bearer": 10, "basic": 8, "hmac": 5, "oauth2": 3}
NO_ACCOUNT_POINTS = 10  # the sample request runs without an account
DOCS_POINTS = 5
RATE_LIMIT_POINTS = 5

# Builder score: weights in hundredths, renormalised over the sub-scores that have evidence.
WEIGHTS = {"pricing": 35, "latency": 30, "depth": 35}
GRADE_BANDS: tuple[tuple[int, str], ...] = ((85, "A"), (70, "B"), (55, "C"), (40, "D"), (0, "F"))

MAX_REASONS = 4
_SENTENCE_BREAK = re.compile(r"[.!?][\"')\]]?\s+\S")


@dataclass(frozen=True)
class SubScore:
    """One sub-score 0-100 (None without its minimum evidence), the short facts that made it,
    and the inputs, published as evidence."""

    value: int | None
    reasons: tuple[str, ...]
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class EntryScore:
    """Every score of one entry, as published in `builderScore`."""

    entry_id: str
    pricing: SubScore
    latency: SubScore
    depth: SubScore
    percent: int
    grade: str
    label: str
    rubric: str
    confidence: str
    provisional: bool

    def json_form(self) -> dict[str, Any]:
        """The published `builderScore` value in its JSON form, every field in the order
        `BuilderScore` writes them: what the score stage hands over, 100,000 times a night,
        without a model built and validated for each (some 20 µs an entry). The release is
        checked against the contract where it is published."""
        return _score_form(self.pricing, self.latency, self.depth, self.percent, self.grade,
                           self.label, self.rubric, self.confidence, self.provisional)

    def contract(self) -> BuilderScore:
        """The published `builderScore` value as a model, validated in one call with what it
        nests (a model built per part costs four times as much)."""
        return BuilderScore.model_validate(self.json_form())


def _score_form(pricing: SubScore, latency: SubScore, depth: SubScore, percent: int, grade: str,
                label: str, rubric: str, confidence: str, provisional: bool) -> dict[str, Any]:
    """`EntryScore.json_form` of these fields, built from them alone."""
    return {
        "grade": grade, "percent": percent, "label": label,
        "pricing": pricing.value, "latency": latency.value, "depth": depth.value,
        "rubric": rubric,
        "reasons": {"pricing": list(pricing.reasons), "latency": list(latency.reasons),
                    "depth": list(depth.reasons)},
        "confidence": confidence, "provisional": provisional,
        "evidence": {"pricing": dict(pricing.evidence), "latency": dict(latency.evidence),
                     "depth": dict(depth.evidence)},
    }


# --- small helpers ---------------------------------------------------------------------------


def round_half_up(value: float) -> int:
    """Round .5 up, absorbing float noise (0.35 * 30 is 10.499999…) so documented sums hold."""
    return math.floor(value + 0.5 + 1e-9)


def rounded_half_up(values: np.ndarray) -> np.ndarray:
    """`round_half_up` of every value at once (NaN stays NaN), as whole floats."""
    return np.floor(values + 0.5 + 1e-9)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _present(value: Any) -> bool:
    return value is not None and (not isinstance(value, str) or bool(value.strip()))


def _nanoseconds(times: pd.Series) -> np.ndarray:
    """Sortable integers of UTC times, whatever their unit."""
    return times.dt.tz_convert(None).to_numpy().astype("datetime64[ns]").view("int64")


DAY_NS = 86_400 * 10**9  # nanoseconds in a UTC day


def _utc_days(times: pd.Series) -> np.ndarray:
    """The UTC day of each of `times`, as days since 1970."""
    return _nanoseconds(times) // DAY_NS


def _as_of(as_of: datetime) -> pd.Timestamp:
    if as_of.tzinfo is None:
        raise ValueError("as_of must be timezone-aware (UTC)")
    return pd.Timestamp(as_of).tz_convert("UTC")


# --- pricing ---------------------------------------------------------------------------------


def _free_allowance(content: Mapping[str, Any]) -> str | None:
    """`recurring`, `one-time` (a trial credit) or None (no free tier)."""
    pricing = content.get("pricing") or {}
    if not (content.get("hasFreeTier") is True or pricing.get("model") == "free"):
        return None
    quota = pricing.get("freeQuota") or {}
    one_time = quota.get("recurring") is False or str(quota.get("period", "")).lower() in (
        ONE_TIME_PERIODS)
    return "one-time" if one_time else "recurring"


def pricing_score(content: Mapping[str, Any]) -> SubScore:
    """What a builder pays to start (free allowance, sandbox, monthly minimum) and how plainly
    growth is priced (unit cost, transaction fee, paid tiers); never the model's name. None
    (no evidence) when no price at all is stated: neither a free tier nor a minimum nor a
    price to grow into. Without a price to grow into (none stated is none known), the other
    facts' points are scaled to 100, so stating one never lowers Pricing."""
    pricing = content.get("pricing")
    if not pricing and content.get("hasFreeTier") is None:
        return SubScore(None, ("no pricing stated",), {})
    pricing = pricing or {}
    model = pricing.get("model")
    allowance = _free_allowance(content)
    quota = pricing.get("freeQuota") or {}
    sandbox = pricing.get("sandbox")
    minimum = pricing.get("monthlyMinimumCents")
    if minimum is None:
        minimum = 0 if model == "free" or allowance else pricing.get("startingCentsPerMonth")
    unit_cost, fee = pricing.get("unitCost"), pricing.get("transactionFee")
    paid_tiers = [t["monthlyCents"] for t in pricing.get("tiers") or []
                  if (t.get("monthlyCents") or 0) > 0]

    currency = pricing.get("currency")
    # A minimum in another currency than the thresholds' is unknown in their terms, with no
    # exchange rate to read it by; 0 is 0 in any currency.
    minimum_unweighed = bool(minimum) and (currency or DEFAULT_CURRENCY) != DEFAULT_CURRENCY

    points, reasons, unknown = 0.0, [], 0
    if allowance:
        points += FREE_TIER_POINTS[allowance]
        reasons.append("free tier" if allowance == "recurring" else "one-time free credit")
    else:
        reasons.append("no free tier")
    if sandbox or model == "free":  # a free API is its own sandbox
        points += SANDBOX_POINTS
        if sandbox:
            reasons.append("free sandbox")
    if minimum is None:
        reasons.append("monthly minimum not stated")
    elif minimum_unweighed:
        unknown += MINIMUM_POINTS[0]
        reasons.append(f"from {price_text(minimum, currency)}/month, not weighed in US dollars")
    else:
        points += float(np.interp(minimum, MINIMUM_CENTS, MINIMUM_POINTS))
        reasons.append("no monthly minimum" if minimum == 0
                       else f"from {price_text(minimum, currency)}/month")
    if model == "free":
        growth = "nothing to buy"
    elif fee:
        fixed = (f" + {fixed_fee_text(fee['fixedCents'], currency)}" if fee.get("fixedCents")
                 else "")
        growth = f"{number_text(fee['percent'])}%{fixed} per transaction"
    elif unit_cost:
        growth = (f"unit cost {price_text(unit_cost['amountCents'], currency)} per "
                  f"{number_text(unit_cost['per'])} {unit_cost['unit']}")
    elif paid_tiers:
        growth = f"paid tiers from {price_text(min(paid_tiers), currency)}/month"
    else:
        growth = None
    if growth:
        points += GROWTH_POINTS
        reasons.append(growth)
    else:
        # Unknown, not 0 points: a price sold by "contact sales", and a free API whose entry
        # names no paid plan read the same.
        unknown += GROWTH_POINTS
        reasons.append("price to grow into not stated")
    uncapped = str(quota.get("period", "")).strip().lower() == UNCAPPED_PERIOD
    if allowance and (quota.get("amount") is not None or uncapped):
        points += QUOTA_POINTS  # use without a cap has no figure to state: stated in full
    elif allowance and _present(quota.get("note")):
        points += QUOTA_NOTE_POINTS
    evidence = {"freeAllowance": allowance, "sandbox": sandbox, "monthlyMinimumCents": minimum,
                "growth": growth, "freeQuotaAmount": quota.get("amount") if allowance else None,
                "currency": currency or DEFAULT_CURRENCY}
    if not (allowance or model == "free" or minimum is not None or growth):
        # "contact sales" is no price: unknown, not the 0 points of $1,000 a month
        return SubScore(None, ("no price stated",), evidence)
    # the points of the facts stated, out of those they can give (growth unknown: 80)
    possible = PRICING_POINTS - unknown
    return SubScore(round_half_up(points * PRICING_POINTS / possible),
                    tuple(reasons[:MAX_REASONS]), evidence)


# --- depth -----------------------------------------------------------------------------------


def _resource(path: str) -> str:
    """The top-level resource of a path: its first segment after any leading version or
    `api` prefix (`/repos/{o}/{r}` and `/v1/repos/{o}` → `repos`), so Depth is the same
    whether the version sits in the base address or in every path; `/` for none."""
    segments = [s.lower() for s in path.split("?")[0].split("/") if s]
    while segments and VERSION_SEGMENT.fullmatch(segments[0]):
        segments.pop(0)
    return segments[0] if segments else "/"


def depth_score(content: Mapping[str, Any]) -> SubScore:
    """What a builder gets: the API's breadth, an official description and SDKs, auth friction,
    a sample that runs without an account, docs and a stated rate limit."""
    endpoints = [e for e in content.get("endpoints") or [] if _present(e.get("path"))]
    methods = {e["method"] for e in endpoints if _present(e.get("method"))}
    resources = {_resource(e["path"]) for e in endpoints}
    auth = content.get("authType")

    points = float(np.interp(len(endpoints), ENDPOINT_COUNTS, ENDPOINT_POINTS))
    points += min(METHOD_POINTS * len(methods), METHOD_CAP)
    points += min(RESOURCE_POINTS * len(resources), RESOURCE_CAP)
    reasons = [f"{_plural(len(endpoints), 'endpoint')} over {_plural(len(methods), 'method')} "
               f"and {_plural(len(resources), 'resource')}" if endpoints
               else "no endpoints listed"]
    has = {"openapi": _present(content.get("openapiUrl")),
           "sdks": bool(content.get("sdks")), "docs": _present(content.get("docsUrl")),
           "rateLimit": _present(content.get("rateLimit"))}
    points += OPENAPI_POINTS * has["openapi"] + SDK_POINTS * has["sdks"]
    points += DOCS_POINTS * has["docs"] + RATE_LIMIT_POINTS * has["rateLimit"]
    points += AUTH_POINTS.get(auth, 0)
    if auth == "none":
        points += NO_ACCOUNT_POINTS
    extras = [name for key, name in (("openapi", "official OpenAPI description"),
                                     ("sdks", "official SDKs")) if has[key]]
    reasons.append(", ".join(extras) if extras else "no official OpenAPI description or SDK")
    reasons.append("no account needed" if auth == "none" else f"auth: {auth}")
    evidence = {"endpoints": len(endpoints), "methods": len(methods),
                "resources": len(resources), "authType": auth, **has}
    return SubScore(round_half_up(points), tuple(reasons[:MAX_REASONS]), evidence)


# --- builder score ---------------------------------------------------------------------------


def _check_percent(name: str, value: int) -> None:
    if type(value) is int and 0 <= value <= 100:  # the common case, checked cheaply
        return
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value <= 100:
        raise ValueError(f"{name} must be an integer 0-100, got {value!r}")


# The letter of every percent 0-100 on the documented bands, looked up rather than searched.
_GRADES = tuple(next(letter for floor, letter in GRADE_BANDS if percent >= floor)
                for percent in range(101))


def grade_for(percent: int) -> str:
    """The letter of a builder percent on the documented bands."""
    _check_percent("percent", percent)
    return _GRADES[percent]


def builder_score(pricing: int | None, latency: int | None, depth: int | None) -> tuple[int, str]:
    """(percent, grade): the weighted mean of the sub-scores that have evidence (weights
    renormalised), rounded half up in exact integers."""
    known = {}
    for name, value in (("pricing", pricing), ("latency", latency), ("depth", depth)):
        if value is not None:
            _check_percent(name, value)
            known[name] = value
    if not known:
        raise ValueError("at least one sub-score is needed")
    percent = _weighted_percent(pricing, latency, depth)
    return percent, grade_for(percent)


_WEIGHTS_IN_ORDER = (WEIGHTS["pricing"], WEIGHTS["latency"], WEIGHTS["depth"])


def _weighted_percent(pricing: int | None, latency: int | None, depth: int | None) -> int:
    """The weighted mean of the sub-scores that are known (at least one), rounded half up in
    exact integers."""
    total = weight = 0
    for share, value in zip(_WEIGHTS_IN_ORDER, (pricing, latency, depth), strict=True):
        if value is not None:
            total += share * value
            weight += share
    return (2 * total + weight) // (2 * weight)


# --- history ---------------------------------------------------------------------------------


def unchecked(note: Any) -> Any:
    """Whether a probe with `note` (its `NOTE_COLUMN`: one value, or a column of them) is
    unchecked: its run left it undone, the redirect the URL answered with not followed, its
    target's host given up on. Such a probe is no evidence, as a target left unprobed is: its
    3xx is no answer of the API, so it is neither up nor down and times nothing (its fast
    redirect is no latency sample). The one rule of what counts (`probe.left_unchecked`, which
    the published statuses ask too): the scores read it through `counted_probes`, a run's
    lifecycle verdict through `health.run_verdict`. A column's missing note may be read as
    NaN; one probe's, as stored, is None (asked of every probe of a run's verdict, so without
    pandas' scalar check)."""
    if isinstance(note, pd.Series):
        return note.notna()
    return left_unchecked(note)


def counted_probes(history: pd.DataFrame) -> pd.DataFrame:
    """The probes of `history` that are evidence: all but the `unchecked` ones. Uptime,
    Latency and the rollups read the history through here alone."""
    if NOTE_COLUMN not in history.columns:
        return history
    noted = unchecked(history[NOTE_COLUMN]).to_numpy()
    return history.loc[~noted] if noted.any() else history


def _prepare(history: pd.DataFrame, as_of: datetime) -> pd.DataFrame:
    """The probes at or before `as_of` that count (`counted_probes`), with the flags every
    aggregate needs."""
    cutoff = _as_of(as_of)
    history = counted_probes(history)
    missing = [c for c in HISTORY_COLUMNS if c not in history.columns]
    if missing:
        raise ValueError(f"history lacks columns: {', '.join(missing)}")
    reasons = history[REASON_COLUMN] if REASON_COLUMN in history.columns else None
    endpoints = history[ENDPOINT_COLUMN] if ENDPOINT_COLUMN in history.columns else None
    frame = history.loc[:, list(HISTORY_COLUMNS)]
    if not len(frame):  # an empty frame may carry no dtypes at all
        frame = frame.astype({"checked_at": "datetime64[ns, UTC]", "total_ms": "float64",
                              "entry_id": "object", "url": "object", "outcome": "object"})
    checked = pd.to_datetime(frame["checked_at"], utc=True)
    bad = set(frame["outcome"].dropna().unique()) - set(OUTCOMES)
    if bad or frame["outcome"].isna().any():
        raise ValueError(f"unknown probe outcomes: {sorted(map(str, bad)) or ['<missing>']}")
    if frame["entry_id"].isna().any() or frame["url"].isna().any() or checked.isna().any():
        raise ValueError("every probe needs an entry_id, a url and a checked_at")
    frame = frame.assign(checked_at=checked, total_ms=pd.to_numeric(frame["total_ms"]),
                         succeeded=succeeded_probes(frame["outcome"], reasons, endpoints,
                                                    frame["entry_id"]))
    frame = frame.loc[frame["checked_at"] <= cutoff]
    rank = frame["outcome"].map({o: i for i, o in enumerate(OUTCOMES)}).astype("int64")
    frame = frame.assign(rank=rank, responded=rank > 0, live=rank == 2)
    for name, days in WINDOWS.items():
        frame[f"in_{name}"] = frame["checked_at"] > cutoff - pd.Timedelta(days=days)
    return frame


def succeeded_probes(outcomes: pd.Series, reasons: pd.Series | None = None,
                     endpoints: pd.Series | None = None,
                     entries: pd.Series | None = None) -> np.ndarray:
    """Whether each probe succeeded: it got an HTTP answer that is not a failure
    (`probe.failed`: a 401 asking for a key is the service answering; a 404, a 429, a bot
    challenge or a 5xx is not, but a 404 of the base address standing in for the endpoints,
    `probe.target_stands_in` of its entry in `entries` and endpoint in `endpoints`, is its
    host answering). Uptime counts these, and Latency times only these: a fast 404 of an
    endpoint is no fast API. `reasons` None: no probe has one; `endpoints` None: every probe
    is of an endpoint; `entries` None: every probe is of an entry. The rules are asked once
    per distinct outcome, reason and kind of target, not once per probe."""
    outcome_codes, outcome_kinds = pd.factorize(outcomes)
    if reasons is None:
        reasons = pd.Series(None, index=outcomes.index, dtype=object)
    reason_codes, reason_kinds = pd.factorize(reasons, use_na_sentinel=False)
    table = np.array([[[not failed(outcome, None if pd.isna(reason) else reason, stand_in)
                        for stand_in in (False, True)]
                       for reason in reason_kinds] for outcome in outcome_kinds],
                     dtype=bool).reshape(len(outcome_kinds), len(reason_kinds), 2)
    kinds = np.array([[target_stands_in(of_entry=of_entry, of_endpoint=of_endpoint)
                       for of_endpoint in (False, True)] for of_entry in (False, True)],
                     dtype=np.int64)
    of_entry = _has_id(entries, len(outcomes))
    of_endpoint = _has_id(endpoints, len(outcomes))
    return table[outcome_codes, reason_codes, kinds[of_entry, of_endpoint]]


def _has_id(ids: pd.Series | None, size: int) -> np.ndarray:
    """Whether each probe has an id in `ids` (as 0 or 1, to index with); None: every one."""
    if ids is None:
        return np.ones(size, dtype=np.int64)
    return ids.notna().to_numpy().astype(np.int64)


def prepare_history(history: pd.DataFrame, as_of: datetime) -> pd.DataFrame:
    """The probes of `history` at or before `as_of`, flagged by window, as every aggregate
    here reads them (for evidence gathered elsewhere, as the score stage does)."""
    return _prepare(history, as_of)


def _grouped(frame: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Number the groups of `keys` once, in sorted order: (group of each row, keys per group).

    Every later aggregate works on these integers, so strings are hashed only here.
    """
    if frame.empty:
        return np.zeros(0, dtype=np.int64), frame.loc[:, keys].reset_index(drop=True)
    group = frame.groupby(keys, sort=True).ngroup().to_numpy()
    _, first = np.unique(group, return_index=True)
    return group, frame[keys].iloc[first].reset_index(drop=True)


def _window_stats(frame: pd.DataFrame, group: np.ndarray, size: int) -> pd.DataFrame:
    """Per group: probe counts, responded, succeeded and live shares per window, p50/p90 of the
    successful probes of the last 7 days."""
    flags = {share: frame[share].to_numpy() for share in ("responded", "succeeded", "live")}
    counts: dict[str, np.ndarray] = {}
    for name in WINDOWS:
        inside = frame[f"in_{name}"].to_numpy()
        counts[f"probes_{name}"] = np.bincount(group[inside], minlength=size)
        for share, flag in flags.items():
            counts[f"{share}_{name}"] = np.bincount(group[inside & flag], minlength=size)
    out = pd.DataFrame({f"probes_{name}": counts[f"probes_{name}"] for name in WINDOWS})
    for share in flags:
        for name in WINDOWS:
            probes = out[f"probes_{name}"]
            out[f"{share}_{name}"] = (counts[f"{share}_{name}"] / probes).where(probes > 0)
    out[f"responses_{LATENCY_WINDOW}"] = counts[f"responded_{LATENCY_WINDOW}"]

    timed = (frame[f"in_{LATENCY_WINDOW}"] & frame["succeeded"] & frame["total_ms"].notna())
    timed = timed.to_numpy()
    ms = pd.Series(frame["total_ms"].to_numpy()[timed]).groupby(group[timed])
    out[f"timed_{LATENCY_WINDOW}"] = np.bincount(group[timed], minlength=size)
    out["p50_ms"] = ms.quantile(0.5).reindex(out.index)
    out["p90_ms"] = ms.quantile(0.9).reindex(out.index)
    return out


def _streaks(group: np.ndarray, rank: np.ndarray, checked: pd.Series, size: int) -> pd.DataFrame:
    """The current streak of each group, from rows ordered by group, then oldest first.

    The streak is the run of latest rows with the same outcome rank; it began at the first
    of them.
    """
    if not len(group):
        return pd.DataFrame({"streak_state": pd.Series(dtype=object),
                             "streak_length": pd.Series(dtype="int64"),
                             "state_changed_at": checked.iloc[:0].reset_index(drop=True)})
    new_streak = np.ones(len(group), dtype=bool)
    new_streak[1:] = (group[1:] != group[:-1]) | (rank[1:] != rank[:-1])
    streak = np.cumsum(new_streak)
    last_row = np.r_[np.flatnonzero(group[1:] != group[:-1]), len(group) - 1]
    current = streak == streak[last_row][group]
    began = np.flatnonzero(current & new_streak)  # exactly one row per group
    return pd.DataFrame({
        "streak_state": np.array(OUTCOMES, dtype=object)[rank[last_row]],
        "streak_length": np.bincount(group[current], minlength=size),
        "state_changed_at": checked.iloc[began].reset_index(drop=True),
    })


def _analytics(keys: pd.DataFrame, stats: pd.DataFrame, streaks: pd.DataFrame,
               last_checked: pd.Series) -> pd.DataFrame:
    stats = stats.drop(columns=[f"responses_{LATENCY_WINDOW}", f"timed_{LATENCY_WINDOW}"])
    return pd.concat([keys, stats, streaks, last_checked.rename("last_checked_at")], axis=1)


def _last_checked(frame: pd.DataFrame, group: np.ndarray, size: int) -> pd.Series:
    return frame["checked_at"].groupby(group).max().reindex(range(size)).reset_index(drop=True)


def endpoint_analytics(history: pd.DataFrame, as_of: datetime) -> pd.DataFrame:
    """One row per (entry_id, url) probed at or before `as_of`: windows, percentiles, streak.

    Shares are NaN for a window without probes; the streak counts probes, newest back.
    """
    frame = _prepare(history, as_of)
    group, keys = _grouped(frame, ["entry_id", "url"])
    rank, run = frame["rank"].to_numpy(), frame["run_id"].to_numpy()
    order = np.lexsort((rank, run, _nanoseconds(frame["checked_at"]), group))
    streaks = _streaks(group[order], rank[order], frame["checked_at"].iloc[order], len(keys))
    return _analytics(keys, _window_stats(frame, group, len(keys)), streaks,
                      _last_checked(frame, group, len(keys)))


def entry_analytics(history: pd.DataFrame, as_of: datetime) -> pd.DataFrame:
    """One row per entry_id, like `endpoint_analytics` over all of the entry's probes.

    The streak counts probe runs: an entry's state in a run is the best outcome of its
    endpoints in that run (one answering URL means the API is up), dated by its first probe.
    """
    frame = _prepare(history, as_of)
    group, keys = _grouped(frame, ["entry_id"])
    runs = (frame.assign(group=group).groupby(["group", "run_id"], sort=False)
            .agg(rank=("rank", "max"), checked_at=("checked_at", "min")).reset_index())
    run_group, rank = runs["group"].to_numpy(), runs["rank"].to_numpy()
    order = np.lexsort((runs["run_id"].to_numpy(), _nanoseconds(runs["checked_at"]), run_group))
    streaks = _streaks(run_group[order], rank[order], runs["checked_at"].iloc[order], len(keys))
    return _analytics(keys, _window_stats(frame, group, len(keys)), streaks,
                      _last_checked(frame, group, len(keys)))


def uptime_shares(history: pd.DataFrame, as_of: datetime) -> dict[str, float | None]:
    """Share of successful probes (`succeeded_probes`), over the last 1, 7 and 30 days of
    `as_of`.

    Counts every row of `history` (pass one entry's rows); None for a window without probes.
    """
    frame = _prepare(history, as_of)
    shares: dict[str, float | None] = {}
    for name in WINDOWS:
        inside = frame[f"in_{name}"]
        probes = int(inside.sum())
        succeeded = int((inside & frame["succeeded"]).sum())
        shares[f"last{name}"] = succeeded / probes if probes else None
    return shares


# --- latency ---------------------------------------------------------------------------------


def _speed(p50: np.ndarray, p95: np.ndarray) -> np.ndarray:
    """Latency's points of every entry at once from its p50 and p95 (NaN without them)."""
    return rounded_half_up(P50_WEIGHT * np.interp(p50, P50_MS, P50_POINTS)
                           + P95_WEIGHT * np.interp(p95, P95_MS, P95_POINTS))


SAMPLE_COLUMNS = ["entry_id", "total_ms", "failed", "day", "in_7d", "in_30d"]
COUNT_COLUMNS = ["entry_id", *(f"{kind}_{name}" for name in WINDOWS
                               for kind in ("probes", "succeeded", "days"))]


def timed_samples(frame: pd.DataFrame) -> pd.DataFrame:
    """The evidence Latency reads, from a prepared history: each timed successful probe
    (`succeeded_probes`: a fast 401 is fast) and each failed probe (a 404, a 5xx, no answer:
    `failed`, timed as `FAILED_PROBE_MS`), with its UTC day (days since 1970) and the windows
    it falls in."""
    failed = ~frame["succeeded"].to_numpy(dtype=bool)
    kept = failed | frame["total_ms"].notna().to_numpy()
    chosen = frame.loc[kept]
    return pd.DataFrame({
        "entry_id": chosen["entry_id"].to_numpy(),
        "total_ms": np.where(failed[kept], float(FAILED_PROBE_MS),
                             chosen["total_ms"].to_numpy(dtype=float)),
        "failed": failed[kept],
        "day": _utc_days(chosen["checked_at"]).astype(np.int32),
        "in_7d": chosen["in_7d"].to_numpy(dtype=bool),
        "in_30d": chosen["in_30d"].to_numpy(dtype=bool),
    }, columns=SAMPLE_COLUMNS)


def window_counts(frame: pd.DataFrame) -> pd.DataFrame:
    """The evidence uptime reads, from a prepared history: per entry and window, probes,
    successful probes (`succeeded_probes`) and UTC days with probes."""
    entry_day = _entry_days(frame)
    columns = {}
    for name in WINDOWS:
        inside = frame[f"in_{name}"]
        columns[f"probes_{name}"] = inside.astype("int64")
        columns[f"succeeded_{name}"] = (inside & frame["succeeded"]).astype("int64")
        columns[f"days_{name}"] = _first_of_each(entry_day, inside.to_numpy())
    counts = pd.DataFrame(columns).assign(entry_id=frame["entry_id"].to_numpy())
    return counts.groupby("entry_id", sort=True).sum().reset_index().loc[:, COUNT_COLUMNS]


# Latency's percentiles of the samples of so many entries at a time: pandas holds some 55 bytes a
# sample while it computes them (400 MiB at once for 30 days of 100,000 entries: 7.6 million).
PERCENTILE_ENTRIES = 20_000
PERCENTILES = {"p50": 0.5, "p95": 0.95}


def _percentiles(ms: np.ndarray, position: np.ndarray, inside: np.ndarray,
                 entries: int) -> dict[str, np.ndarray]:
    """`PERCENTILES` of the samples `ms` of each of `entries` entries (by `position`), of those
    `inside` the window; NaN for an entry without one. Both in one pass, `PERCENTILE_ENTRIES`
    entries at a time (the same values as at once: each entry's own samples decide them)."""
    found = {name: np.full(entries, np.nan) for name in PERCENTILES}
    for first in range(0, entries, PERCENTILE_ENTRIES):
        part = inside & (position >= first) & (position < first + PERCENTILE_ENTRIES)
        if not part.any():
            continue
        values = (pd.Series(ms[part]).groupby(position[part])
                  .quantile(list(PERCENTILES.values())).unstack())
        at = values.index.to_numpy()
        for name, q in PERCENTILES.items():
            found[name][at] = values[q].to_numpy(dtype=float)
    return found


# The most cells of the table of entries by days `_distinct_days` flags the pairs in, beyond
# which it sorts the pairs instead (a week of a span of 50,000 entries: 400,000 cells).
DAY_TABLE_CELLS = 1 << 24


def _distinct_days(position: np.ndarray, day: np.ndarray, entries: int) -> np.ndarray:
    """How many distinct days each of `entries` entries (by `position`) has a row on: each
    (entry, day) pair flagged in a table of the entries by the days the rows span, neither
    sorted nor hashed (`np.unique` of a span's week of samples took some 0.3 s of CPU)."""
    if not len(day):
        return np.zeros(entries, dtype=np.int64)
    first = int(day.min())
    width = int(day.max()) - first + 1
    if entries * width > DAY_TABLE_CELLS:  # days far apart: the pairs sorted
        pairs = np.unique((position.astype(np.int64) << 32) | day.astype(np.int64))
        return np.bincount(pairs >> 32, minlength=entries)
    seen = np.zeros(entries * width, dtype=bool)
    seen[position.astype(np.int64) * width + (day.astype(np.int64) - first)] = True
    return seen.reshape(entries, width).sum(axis=1, dtype=np.int64)


def _latency_stats(timed: pd.DataFrame, ids: list[str]) -> dict[str, list[Any]]:
    """Per entry of `ids` and window (7d, 30d): timed successful responses, p50, p95 and
    their whole milliseconds (None without a sample); and of the 7 days Latency reads, the
    failed probes, the days the probes fall on and the percentiles Latency's points come from
    (the failed probes counted as `FAILED_PROBE_MS`), from `timed_samples`; one list per
    figure."""
    # Each sample's entry as its position in `ids` (-1: not scored), hashed once for both
    # windows: millions of samples at 100k entries.
    entries = timed["entry_id"]
    if isinstance(entries.dtype, pd.CategoricalDtype):  # each name hashed once, not per sample
        codes = entries.cat.codes.to_numpy()
        position = np.append(pd.Index(ids).get_indexer(entries.cat.categories), -1)[codes]
    else:
        position = pd.Index(ids).get_indexer(entries)
    ms = timed["total_ms"].to_numpy(dtype=float)
    failed = timed["failed"].to_numpy(dtype=bool)
    stats: dict[str, Any] = {}
    percentiles: dict[str, np.ndarray] = {}
    for window in ("7d", "30d"):
        inside = timed[f"in_{window}"].to_numpy(dtype=bool) & (position >= 0)
        answered = inside & ~failed
        stats[f"samples_{window}"] = np.bincount(position[answered], minlength=len(ids)).tolist()
        for name, values in _percentiles(ms, position, answered, len(ids)).items():
            percentiles[f"{name}_{window}"] = values
            stats[f"{name}_{window}"] = values.tolist()
            stats[f"{name}Ms_{window}"] = _whole_ms(values)
    week = timed["in_7d"].to_numpy(dtype=bool) & (position >= 0)
    failures = np.bincount(position[week & failed], minlength=len(ids))
    probes = np.array(stats["samples_7d"], dtype=np.int64) + failures
    days = _distinct_days(position[week], timed["day"].to_numpy()[week], len(ids))
    # with failures, the percentiles of every probe; of the answered ones (as above) otherwise
    scored = {name: percentiles[f"{name}_7d"].copy() for name in PERCENTILES}
    with_failures = failures > 0
    if with_failures.any():
        found = _percentiles(ms, position, week & with_failures[np.maximum(position, 0)],
                             len(ids))
        for name in PERCENTILES:
            scored[name][with_failures] = found[name][with_failures]
    eligible = (probes >= MIN_LATENCY_SAMPLES) & (days >= MIN_LATENCY_DAYS)
    speed = _speed(scored["p50"], scored["p95"])
    stats.update({
        "failed_7d": failures.tolist(), "probes_7d": probes.tolist(), "days_7d": days.tolist(),
        "scoredP50Ms": _whole_ms(scored["p50"]), "scoredP95Ms": _whole_ms(scored["p95"]),
        "speed": _whole_where(speed, eligible)})
    return stats


def _whole_ms(values: np.ndarray) -> list[int | None]:
    """Milliseconds rounded half up to whole ones (None for NaN: no sample)."""
    whole = rounded_half_up(values)
    return _whole_where(whole, ~np.isnan(whole))


def _whole_where(values: np.ndarray, known: np.ndarray) -> list[int | None]:
    """The whole floats `values` as Python integers where `known`, None elsewhere: made for
    every entry at once (a step of Python an entry, six times a span, cost some 0.1 s of CPU
    at 50,000 entries)."""
    whole = np.where(known, values, 0).astype(np.int64).astype(object)
    whole[~known] = None
    return whole.tolist()


def latency_wait(probes: int | None, days: int | None, needed: int = MIN_LATENCY_SAMPLES,
                 needed_days: int = MIN_LATENCY_DAYS) -> str:
    """What a Latency without its minimum evidence waits for, and what the entry has of it so
    far: "graded after 5 probes on 3 days within 7 days, 2 probes on 1 day so far". Its
    reason and the pages say it in these words; without the counts (`None`), the rule alone."""
    rule = (f"graded after {needed} probes on {needed_days} days "
            f"within {WINDOWS[LATENCY_WINDOW]} days")
    if probes is None or days is None or (probes >= needed and days >= needed_days):
        return rule
    so_far = f"{_plural(probes, 'probe')} on {_plural(days, 'day')}" if probes else "none"
    return f"{rule}, {so_far} so far"


def _latency_subscore(stats: Mapping[str, list[Any]], i: int) -> SubScore:
    """The Latency of the `i`th entry of `_latency_stats`: p50 and p95 of its probes of 7
    days, a failed one counted as `FAILED_PROBE_MS`."""
    week_samples, speed = stats["samples_7d"][i], stats["speed"][i]
    probes, failures, days = stats["probes_7d"][i], stats["failed_7d"][i], stats["days_7d"][i]
    p50, p95 = stats["scoredP50Ms"][i], stats["scoredP95Ms"][i]
    evidence = {
        "minimumSamples": MIN_LATENCY_SAMPLES,
        "eligible": speed is not None,
        "last7d": {"samples": week_samples, "p50Ms": stats["p50Ms_7d"][i],
                   "p95Ms": stats["p95Ms_7d"][i]},
        "last30d": {"samples": stats["samples_30d"][i], "p50Ms": stats["p50Ms_30d"][i],
                    "p95Ms": stats["p95Ms_30d"][i]},
        "minimumDays": MIN_LATENCY_DAYS, "failedProbeMs": FAILED_PROBE_MS,
        "probes": probes, "failed": failures, "days": days, "p50Ms": p50, "p95Ms": p95,
    }
    if speed is None:
        reasons = [latency_wait(probes, days)]
    elif failures:
        reasons = [f"p50 {number_text(p50)} ms, p95 {number_text(p95)} ms over "
                   f"{_plural(probes, 'probe')} in 7 days, "
                   f"a failed one counted as {number_text(FAILED_PROBE_MS)} ms"]
    else:
        reasons = [f"p50 {number_text(p50)} ms, p95 {number_text(p95)} ms over "
                   f"{_plural(week_samples, 'response')} in 7 days"]
    if failures:
        # "succeeded", not "answered": a 404, a 429 or a 5xx answered, and failed
        reasons.insert(0, f"{week_samples} of {_plural(probes, 'probe')} succeeded in 7 days")
    return SubScore(speed, tuple(reasons), evidence)


def latency_score(history: pd.DataFrame, as_of: datetime) -> SubScore:
    """Latency of ONE entry: p50 and p95 of its timed responses of the last 7 days."""
    frame = _prepare(history, as_of).assign(entry_id="entry")
    return _latency_subscore(_latency_stats(timed_samples(frame), ["entry"]), 0)


# --- everything at once ----------------------------------------------------------------------


@dataclass(frozen=True)
class ContentScores:
    """The sub-scores an entry's curated content alone decides (Pricing and Depth): kept in
    the store with the hash of the content they came from, so scoring reads them back rather
    than judging every entry's content again."""

    pricing: SubScore
    depth: SubScore

    @classmethod
    def of(cls, content: Mapping[str, Any]) -> ContentScores:
        return cls(pricing_score(content), depth_score(content))

    def stored(self) -> dict[str, Any]:
        """As JSON for the store, with the rubric that made them."""
        return {"rubric": RUBRIC_VERSION, **{
            name: {"value": sub.value, "reasons": list(sub.reasons), "evidence": sub.evidence}
            for name, sub in (("pricing", self.pricing), ("depth", self.depth))}}

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> ContentScores:
        """Read back what `stored` gave (of this rubric: the caller checks)."""
        pricing, depth = stored["pricing"], stored["depth"]
        return cls(SubScore(pricing["value"], tuple(pricing["reasons"]), pricing["evidence"]),
                   SubScore(depth["value"], tuple(depth["reasons"]), depth["evidence"]))


def confidence_of(pricing: SubScore, latency: SubScore) -> str:
    """high: every sub-score known, Latency from many samples; medium: every one known; low:
    a sub-score lacks its evidence (the grade is provisional or partial)."""
    if latency.value is None or pricing.value is None:
        return "low"
    samples = latency.evidence["probes"]
    return "high" if samples >= HIGH_CONFIDENCE_SAMPLES else "medium"


def score_entries(contents: Mapping[str, Mapping[str, Any]], history: pd.DataFrame,
                  as_of: datetime) -> EntryScores:
    """Scores of every entry in `contents`, by id; history is grouped once for all of them.

    Probes of ids not in `contents` are ignored; an entry without enough timed responses has
    no Latency, and its grade, from the other sub-scores, is provisional.
    """
    judged = {entry_id: ContentScores.of(content) for entry_id, content in contents.items()}
    return scores_from_samples(judged, timed_samples(_prepare(history, as_of)))


def uncheckable_reason(why: str) -> str:
    """What an entry the catalogue gives no URL to probe any longer has of its endpoints, `why`
    being the reason (`probe.no_targets`): said alike by its Latency, which will never have a
    probe to count, and its lifecycle."""
    return f"{NO_ENDPOINT_CHECKABLE} ({why})"


NO_ENDPOINT_CHECKABLE = "no endpoint can be checked"


class EntryScores(Mapping[str, EntryScore]):
    """Every judged entry's scores, by id, each built when it is read: Latency's percentiles
    and points are computed for all entries at once, but an entry's `EntryScore` (reasons and
    evidence, some 2.7 KB) only when asked for, so a stage going through 100,000 entries
    never holds them all. `unprobable`: why each entry the catalogue gives no URL to probe
    has none, which its Latency says rather than that it waits for probes."""

    def __init__(self, judged: Mapping[str, ContentScores], samples: pd.DataFrame,
                 unprobable: Mapping[str, str] | None = None) -> None:
        self._judged = judged
        self._ids = sorted(judged)
        self._position = {entry_id: i for i, entry_id in enumerate(self._ids)}
        self._stats = _latency_stats(samples, self._ids)
        self._unprobable = unprobable or {}

    def _fields(self, entry_id: str) -> tuple[Any, ...]:
        """An entry's `EntryScore` fields after its id, in their order."""
        latency = _latency_subscore(self._stats, self._position[entry_id])
        if (why := self._unprobable.get(entry_id)) is not None:
            latency = SubScore(None, (uncheckable_reason(why),), latency.evidence)
        pricing, depth = self._judged[entry_id].pricing, self._judged[entry_id].depth
        # builder_score without checking the rubric's own sub-scores again, entry by entry
        percent = _weighted_percent(pricing.value, latency.value, depth.value)
        return (pricing, latency, depth, percent, _GRADES[percent],
                f"{percent}% builder-friendly", RUBRIC_VERSION, confidence_of(pricing, latency),
                latency.value is None)

    def __getitem__(self, entry_id: str) -> EntryScore:
        return EntryScore(entry_id, *self._fields(entry_id))

    def json_form(self, entry_id: str) -> dict[str, Any]:
        """`self[entry_id].json_form()`, without the frozen `EntryScore` built between (some
        6 µs an entry, 100,000 times a night)."""
        return _score_form(*self._fields(entry_id))

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._position  # not Mapping's, which builds the entry's scores

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def scores_from_samples(judged: Mapping[str, ContentScores], samples: pd.DataFrame,
                        unprobable: Mapping[str, str] | None = None) -> EntryScores:
    """`score_entries` from each entry's content scores and the timed responses alone
    (`timed_samples`, or the same evidence gathered from daily rollups): all Latency needs
    of the history; `unprobable` as `EntryScores` reads it."""
    return EntryScores(judged, samples, unprobable)


def entry_uptimes(history: pd.DataFrame, as_of: datetime) -> dict[str, Any]:
    """Published `uptime` of every entry probed in the last 30 days: the share of successful
    probes per window, in its JSON form (`uptimes_from_counts`)."""
    return uptimes_from_counts(window_counts(_prepare(history, as_of)))


def _entry_days(frame: pd.DataFrame) -> np.ndarray:
    """One integer per probe naming its entry and its UTC day, equal for the probes of an
    entry on one day."""
    days = _utc_days(frame["checked_at"])
    if not len(days):
        return days
    days -= days.min()
    return pd.factorize(frame["entry_id"])[0].astype(np.int64) * (int(days.max()) + 1) + days


def _first_of_each(keys: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """1 on the first row `inside` of each key (an entry's day), 0 elsewhere: summed by entry,
    its days with probes in a window."""
    first = np.zeros(len(keys), dtype=np.int64)
    _, at = np.unique(keys[inside], return_index=True)
    first[np.flatnonzero(inside)[at]] = 1
    return first


@cache
def _uptime_evidence(*counts: int) -> dict[str, dict[str, int]]:
    """`uptime.evidence` in its JSON form from the probes, successful probes and days of each
    window in turn: one object for each set of counts, shared by the entries that have it (most
    entries of a nightly catalogue have the same), never changed once made."""
    return {f"last{name}": dict(zip(("probes", "succeeded", "days"), counts[3 * n:3 * n + 3],
                                    strict=True))
            for n, name in enumerate(WINDOWS)}


def uptimes_from_counts(counts: pd.DataFrame) -> dict[str, Any]:
    """`entry_uptimes` from per-entry window counts (`window_counts`, or the same evidence
    gathered from daily rollups): each in its JSON form as published (fields in `Uptime`'s
    order), without a model built for each entry; the release is checked where it is
    published. An entry without probes in the last 30 days has none, as one never probed:
    its older probes counted would publish an uptime of nulls, a second form of "no uptime"."""
    shares = {}
    for name in WINDOWS:  # every entry at once: the same IEEE division as one by one
        probes = counts[f"probes_{name}"].to_numpy(dtype=np.int64)
        succeeded = counts[f"succeeded_{name}"].to_numpy(dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = succeeded / probes
        shares[f"last{name}"] = [v if n else None
                                 for v, n in zip(share.tolist(), probes.tolist(), strict=True)]
    evidence = list(map(_uptime_evidence, *(
        counts[f"{kind}_{name}"].to_numpy(dtype=np.int64).tolist()
        for name in WINDOWS for kind in ("probes", "succeeded", "days"))))
    return {entry_id: {"last1d": day, "last7d": week, "last30d": month, "evidence": proof}
            for entry_id, day, week, month, proof in zip(
                counts["entry_id"].tolist(), shares["last1d"], shares["last7d"],
                shares["last30d"], evidence, strict=True)
            if month is not None}
