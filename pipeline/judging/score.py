"""Score: uptime, latency percentiles, sub-scores and the builder score, as pure functions.

The rubric is published in `docs/scoring.md`; every constant below is named there, and
`RUBRIC_VERSION` changes whenever one of them does. Nothing here reads the clock, the
network or a database: the same content, history and `as_of` always give the same scores.
History is grouped once for all entries, so scoring scales with the number of probe rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from pipeline.contract import BuilderScore, ScoreReasons, Uptime

RUBRIC_VERSION = "1.0.0"

# Probe history columns this module reads, and what a probe outcome may be.
HISTORY_COLUMNS = ("entry_id", "url", "checked_at", "outcome", "total_ms", "run_id")
OUTCOMES = ("unreachable", "online", "live")  # worst to best; "responded" = online or live
RESPONDED = ("live", "online")
WINDOWS: dict[str, int] = {"1d": 1, "7d": 7, "30d": 30}  # window name -> days before as_of

# Pricing: points per fact, 100 in all.
FREE_TIER_POINTS = 35
MODEL_POINTS = {"free": 25, "freemium": 20, "pay-as-you-go": 15, "subscription": 5,
                "enterprise": 0}
UNKNOWN_MODEL_POINTS = 5
START_CENTS = (0, 1_000, 5_000, 20_000, 100_000)  # starting price per month, in cents ...
START_POINTS = (25, 18, 10, 3, 0)  # ... and its points, linear in between, 0 from $1,000
GROWTH_POINTS = 10  # a published price to grow into (or a free model)
FREE_QUOTA_POINTS = 5  # a stated free quota, counted only with a free tier

# Latency: speed from percentiles of the last 7 days, times the share that responded.
LATENCY_WINDOW = "7d"
LITTLE_HISTORY = 5  # fewer probes than this in the window are flagged
P50_MS = (100, 300, 1_000, 3_000)
P50_POINTS = (100, 80, 40, 0)
P90_MS = (250, 750, 2_000, 6_000)
P90_POINTS = (100, 75, 35, 0)
P50_WEIGHT = 0.6
P90_WEIGHT = 0.4

# Depth: points per fact, 100 in all.
ENDPOINT_COUNTS = (0, 1, 3, 5, 10)
ENDPOINT_POINTS = (0, 5, 11, 15, 20)  # linear in between, 20 from 10 endpoints
METHOD_POINTS, METHOD_CAP = 5, 10  # per distinct HTTP method
RESOURCE_POINTS, RESOURCE_CAP = 3, 12  # per distinct top-level path segment
DEPTH_FIELDS: tuple[tuple[str, int, str], ...] = (  # (content key, points, reason when missing)
    ("docsUrl", 10, "no docs address"),
    ("sampleRequest", 8, "no sample request"),
    ("sampleResponse", 8, "no sample response"),
    ("authDescription", 6, "auth not described"),
    ("authExample", 6, "no auth example"),
    ("rateLimit", 6, "no rate limit stated"),
    ("description", 4, "no description"),
)
ONE_SENTENCE_POINTS = 2
ONE_SENTENCE_MAX_CHARS = 200
LONG_DESCRIPTION_POINTS = 8

# Builder score: weights in hundredths (so the combination is exact), and grade bands.
WEIGHTS = {"pricing": 35, "latency": 30, "depth": 35}
GRADE_BANDS: tuple[tuple[int, str], ...] = ((85, "A"), (70, "B"), (55, "C"), (40, "D"), (0, "F"))

MAX_REASONS = 4
_SENTENCE_BREAK = re.compile(r"[.!?][\"')\]]?\s+\S")


@dataclass(frozen=True)
class SubScore:
    """One sub-score 0-100 and the short facts that made it."""

    value: int
    reasons: tuple[str, ...]


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

    def contract(self) -> BuilderScore:
        """The published `builderScore` value."""
        return BuilderScore(grade=self.grade, percent=self.percent, label=self.label,
                            pricing=self.pricing.value, latency=self.latency.value,
                            depth=self.depth.value, rubric=self.rubric,
                            reasons=ScoreReasons(pricing=list(self.pricing.reasons),
                                                 latency=list(self.latency.reasons),
                                                 depth=list(self.depth.reasons)))


# --- small helpers ---------------------------------------------------------------------------


def round_half_up(value: float) -> int:
    """Round .5 up, absorbing float noise (0.35 * 30 is 10.499999…) so documented sums hold."""
    return math.floor(value + 0.5 + 1e-9)


def _dollars(cents: float) -> str:
    """`$29` for whole dollars, `$5.49` otherwise."""
    return f"${int(cents) // 100:,}" if cents % 100 == 0 else f"${cents / 100:,.2f}"


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,g}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _present(value: Any) -> bool:
    return value is not None and (not isinstance(value, str) or bool(value.strip()))


def _nanoseconds(times: pd.Series) -> np.ndarray:
    """Sortable integers of UTC times, whatever their unit."""
    return times.dt.tz_convert(None).to_numpy().astype("datetime64[ns]").view("int64")


def _as_of(as_of: datetime) -> pd.Timestamp:
    if as_of.tzinfo is None:
        raise ValueError("as_of must be timezone-aware (UTC)")
    return pd.Timestamp(as_of).tz_convert("UTC")


# --- pricing ---------------------------------------------------------------------------------


def pricing_score(content: Mapping[str, Any]) -> SubScore:
    """How cheaply a builder can start and grow: free tier, model, starting price, growth path."""
    pricing = content.get("pricing") or {}
    model = pricing.get("model")
    free_tier = content.get("hasFreeTier") is True or model == "free"
    start = pricing.get("startingCentsPerMonth")
    if start is None and model == "free":
        start = 0
    quota = pricing.get("freeQuota") or {}
    unit_cost = pricing.get("unitCost")
    paid_tiers = [t["monthlyCents"] for t in pricing.get("tiers") or []
                  if (t.get("monthlyCents") or 0) > 0]

    points = FREE_TIER_POINTS if free_tier else 0
    reasons = ["free tier" if free_tier else "no free tier"]

    points += MODEL_POINTS.get(model, UNKNOWN_MODEL_POINTS)
    label = model or "pricing model not stated"
    if start is None:
        reasons.append(f"{label}, starting price not stated")
    else:
        points += float(np.interp(start, START_CENTS, START_POINTS))
        reasons.append(f"{label} from {_dollars(start)}/month")

    if free_tier and (quota.get("amount") is not None or _present(quota.get("note"))):
        points += FREE_QUOTA_POINTS
        if quota.get("amount") is not None:
            unit = f" {quota['unit']}" if quota.get("unit") else ""
            reasons.append(f"free quota {_number(quota['amount'])}{unit}/{quota.get('period')}")
        else:
            reasons.append("free quota stated")

    if model == "free":
        points += GROWTH_POINTS
        reasons.append("no paid plan needed")
    elif unit_cost:
        points += GROWTH_POINTS
        reasons.append(f"unit cost {_dollars(unit_cost['amountCents'])} per "
                       f"{_number(unit_cost['per'])} {unit_cost['unit']}")
    elif paid_tiers:
        points += GROWTH_POINTS
        reasons.append(f"paid tiers from {_dollars(min(paid_tiers))}/month")
    else:
        reasons.append("no published price to grow into")
    return SubScore(round_half_up(points), tuple(reasons[:MAX_REASONS]))


# --- depth -----------------------------------------------------------------------------------


def _resource(path: str) -> str:
    """The top-level resource of a path: its first segment (`/repos/{o}/{r}` → `repos`)."""
    segments = [s for s in path.split("?")[0].split("/") if s]
    return segments[0].lower() if segments else "/"


def depth_score(content: Mapping[str, Any]) -> SubScore:
    """How far a builder gets from the listing alone: endpoints, docs, samples, auth, limits."""
    endpoints = [e for e in content.get("endpoints") or [] if _present(e.get("path"))]
    methods = {e["method"] for e in endpoints if _present(e.get("method"))}
    resources = {_resource(e["path"]) for e in endpoints}

    points = float(np.interp(len(endpoints), ENDPOINT_COUNTS, ENDPOINT_POINTS))
    points += min(METHOD_POINTS * len(methods), METHOD_CAP)
    points += min(RESOURCE_POINTS * len(resources), RESOURCE_CAP)
    if endpoints:
        facts = [f"{_plural(len(endpoints), 'endpoint')} over {_plural(len(methods), 'method')} "
                 f"and {_plural(len(resources), 'resource')}"]
    else:
        facts = ["no endpoints listed"]

    gaps = []
    for key, field_points, missing in DEPTH_FIELDS:
        if _present(content.get(key)):
            points += field_points
        else:
            gaps.append(missing)
    description = (content.get("description") or "").strip()
    if description:
        if len(description) <= ONE_SENTENCE_MAX_CHARS and not _SENTENCE_BREAK.search(description):
            points += ONE_SENTENCE_POINTS
        else:
            gaps.append("description is not one short sentence")
    if _present(content.get("longDescription")):
        points += LONG_DESCRIPTION_POINTS
    else:
        gaps.append("no long description")

    if not gaps:
        facts.append("docs, samples, auth and rate limit all stated")
    elif len(gaps) > MAX_REASONS - 1:
        more = len(gaps) - (MAX_REASONS - 2)
        gaps = [*gaps[: MAX_REASONS - 2], f"and {more} more gaps"]
    return SubScore(round_half_up(points), tuple(facts + gaps))


# --- builder score ---------------------------------------------------------------------------


def _check_percent(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value <= 100:
        raise ValueError(f"{name} must be an integer 0-100, got {value!r}")


def grade_for(percent: int) -> str:
    """The letter of a builder percent on the documented bands."""
    _check_percent("percent", percent)
    return next(letter for floor, letter in GRADE_BANDS if percent >= floor)


def builder_score(pricing: int, latency: int, depth: int) -> tuple[int, str]:
    """(percent, grade): the weighted sum of the sub-scores, rounded half up in exact integers."""
    for name, value in (("pricing", pricing), ("latency", latency), ("depth", depth)):
        _check_percent(name, value)
    total = WEIGHTS["pricing"] * pricing + WEIGHTS["latency"] * latency + WEIGHTS["depth"] * depth
    percent = (int(total) + 50) // 100
    return percent, grade_for(percent)


# --- history ---------------------------------------------------------------------------------


def _prepare(history: pd.DataFrame, as_of: datetime) -> pd.DataFrame:
    """The probes at or before `as_of`, with the flags every aggregate needs."""
    cutoff = _as_of(as_of)
    missing = [c for c in HISTORY_COLUMNS if c not in history.columns]
    if missing:
        raise ValueError(f"history lacks columns: {', '.join(missing)}")
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
    frame = frame.assign(checked_at=checked, total_ms=pd.to_numeric(frame["total_ms"]))
    frame = frame.loc[frame["checked_at"] <= cutoff]
    rank = frame["outcome"].map({o: i for i, o in enumerate(OUTCOMES)}).astype("int64")
    frame = frame.assign(rank=rank, responded=rank > 0, live=rank == 2)
    for name, days in WINDOWS.items():
        frame[f"in_{name}"] = frame["checked_at"] > cutoff - pd.Timedelta(days=days)
    return frame


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
    """Per group: probe counts, responded and live shares per window, p50/p90 of the last 7 days."""
    responded, live = frame["responded"].to_numpy(), frame["live"].to_numpy()
    counts: dict[str, np.ndarray] = {}
    for name in WINDOWS:
        inside = frame[f"in_{name}"].to_numpy()
        counts[f"probes_{name}"] = np.bincount(group[inside], minlength=size)
        counts[f"responded_{name}"] = np.bincount(group[inside & responded], minlength=size)
        counts[f"live_{name}"] = np.bincount(group[inside & live], minlength=size)
    out = pd.DataFrame({f"probes_{name}": counts[f"probes_{name}"] for name in WINDOWS})
    for share in ("responded", "live"):
        for name in WINDOWS:
            probes = out[f"probes_{name}"]
            out[f"{share}_{name}"] = (counts[f"{share}_{name}"] / probes).where(probes > 0)
    out[f"responses_{LATENCY_WINDOW}"] = counts[f"responded_{LATENCY_WINDOW}"]

    timed = (frame[f"in_{LATENCY_WINDOW}"] & frame["responded"] & frame["total_ms"].notna())
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
    """Share of probes that got an HTTP response, over the last 1, 7 and 30 days of `as_of`.

    Counts every row of `history` (pass one entry's rows); None for a window without probes.
    """
    frame = _prepare(history, as_of)
    shares: dict[str, float | None] = {}
    for name in WINDOWS:
        inside = frame[f"in_{name}"]
        probes = int(inside.sum())
        responded = int((inside & frame["responded"]).sum())
        shares[f"last{name}"] = responded / probes if probes else None
    return shares


# --- latency ---------------------------------------------------------------------------------


def _latency_values(stats: pd.DataFrame) -> np.ndarray:
    """Latency sub-score per row of `_window_stats`, vectorised: speed * share responded."""
    p50 = stats["p50_ms"].to_numpy(dtype=float)
    p90 = stats["p90_ms"].to_numpy(dtype=float)
    speed = (P50_WEIGHT * np.interp(p50, P50_MS, P50_POINTS)
             + P90_WEIGHT * np.interp(p90, P90_MS, P90_POINTS))
    probes = stats[f"probes_{LATENCY_WINDOW}"].to_numpy(dtype=float)
    responses = stats[f"responses_{LATENCY_WINDOW}"].to_numpy(dtype=float)
    share = np.divide(responses, probes, out=np.zeros_like(probes), where=probes > 0)
    raw = np.where(np.isnan(speed) | (responses == 0), 0.0, speed * share)
    return np.floor(raw + 0.5 + 1e-9).astype(int)


def _latency_subscore(value: int, probes: int, responses: int, timed: int,
                      p50: float, p90: float) -> SubScore:
    window = LATENCY_WINDOW.replace("d", " days")
    if probes == 0:
        return SubScore(0, (f"no probes in {window}",))
    if responses == 0:
        return SubScore(0, (f"never reached in {window} ({_plural(probes, 'probe')})",))
    reasons = []
    if timed:
        reasons.append(f"p50 {round_half_up(p50)} ms, p90 {round_half_up(p90)} ms over "
                       f"{_plural(timed, 'response')}")
    else:
        reasons.append("no response times recorded")
    reasons.append(f"responded {responses} of {probes}")
    if probes < LITTLE_HISTORY:
        reasons.append(f"little history ({_plural(probes, 'probe')})")
    return SubScore(int(value), tuple(reasons))


def _latency_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Latency inputs and sub-score per entry_id, from one pass over the history."""
    group, keys = _grouped(frame, ["entry_id"])
    stats = _window_stats(frame, group, len(keys)).set_index(keys["entry_id"])
    return stats.assign(latency=_latency_values(stats))


def _latency_from_row(row: Any) -> SubScore:
    return _latency_subscore(row.latency, int(getattr(row, f"probes_{LATENCY_WINDOW}")),
                             int(getattr(row, f"responses_{LATENCY_WINDOW}")),
                             int(getattr(row, f"timed_{LATENCY_WINDOW}")), row.p50_ms, row.p90_ms)


def latency_score(history: pd.DataFrame, as_of: datetime) -> SubScore:
    """Latency of ONE entry: p50/p90 over its last 7 days of responses, times the share answered."""
    frame = _prepare(history, as_of)
    frame = frame.assign(entry_id="entry")
    table = _latency_table(frame)
    if table.empty:
        return _latency_subscore(0, 0, 0, 0, math.nan, math.nan)
    return _latency_from_row(next(table.itertuples()))


# --- everything at once ----------------------------------------------------------------------


def score_entries(contents: Mapping[str, Mapping[str, Any]], history: pd.DataFrame,
                  as_of: datetime) -> dict[str, EntryScore]:
    """Scores of every entry in `contents`, by id; history is grouped once for all of them.

    Probes of ids not in `contents` are ignored; an entry without probes scores 0 on Latency.
    """
    frame = _prepare(history, as_of)
    table = _latency_table(frame)
    latencies = {row.Index: _latency_from_row(row) for row in table.itertuples()}
    unprobed = _latency_subscore(0, 0, 0, 0, math.nan, math.nan)
    scores: dict[str, EntryScore] = {}
    for entry_id in sorted(contents):
        content = contents[entry_id]
        pricing, depth = pricing_score(content), depth_score(content)
        latency = latencies.get(entry_id, unprobed)
        percent, grade = builder_score(pricing.value, latency.value, depth.value)
        scores[entry_id] = EntryScore(entry_id, pricing, latency, depth, percent, grade,
                                      f"{percent}% builder-friendly", RUBRIC_VERSION)
    return scores



def entry_uptimes(history: pd.DataFrame, as_of: datetime) -> dict[str, Uptime]:
    """Published `uptime` of every probed entry: the responded share per window."""
    table = entry_analytics(history, as_of)
    uptimes = {}
    for row in table.itertuples(index=False):
        shares = {f"last{name}": getattr(row, f"responded_{name}") for name in WINDOWS}
        uptimes[row.entry_id] = Uptime(**{k: None if pd.isna(v) else float(v)
                                          for k, v in shares.items()})
    return uptimes
