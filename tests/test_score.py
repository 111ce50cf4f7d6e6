"""The score stage: sub-score rules, monotonicity, determinism, windows, analytics, the doc."""

from __future__ import annotations

import io
import itertools
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, make_entry  # tests/ is on sys.path (rootdir conftest)

from pipeline.catalogue.entries import EntryFile
from pipeline.judging.score import (
    RUBRIC_VERSION,
    EntryScore,
    builder_score,
    depth_score,
    endpoint_analytics,
    entry_analytics,
    grade_for,
    latency_score,
    pricing_score,
    score_entries,
    uptime_shares,
)

AS_OF = datetime(2026, 11, 21, 23, 59, 59, tzinfo=UTC)
URL = "https://api.example.com/v1/forecast"


def probes(spec: list[tuple[float, str, float | None]], *, entry_id: str = "example-weather",
           url: str = URL, as_of: datetime = AS_OF) -> pd.DataFrame:
    """History rows from (hours before as_of, outcome, total_ms), oldest run first."""
    rows = []
    for run, (hours, outcome, ms) in enumerate(sorted(spec, key=lambda s: -s[0]), start=1):
        rows.append({
            "entry_id": entry_id, "endpoint_id": None, "url": url,
            "checked_at": pd.Timestamp(as_of - timedelta(hours=hours)),
            "outcome": outcome,
            "http_status": {"live": 200.0, "online": 403.0}.get(outcome, np.nan),
            "total_ms": np.nan if ms is None else float(ms), "run_id": run,
        })
    columns = ["entry_id", "endpoint_id", "url", "checked_at", "outcome", "http_status",
               "total_ms", "run_id"]
    return pd.DataFrame(rows, columns=columns)


def live_week(times: list[float]) -> pd.DataFrame:
    """One live probe per time, spread over the last 6 days."""
    step = 144 / max(len(times), 1)
    return probes([(1 + i * step, "live", ms) for i, ms in enumerate(times)])


# --- pricing ---------------------------------------------------------------------------------


def test_free_api_scores_full_pricing() -> None:
    entry = make_entry(hasFreeTier=True, pricing={"model": "free", "startingCentsPerMonth": 0,
                                                  "freeQuota": {"amount": 60, "unit": "requests",
                                                                "period": "hour"}})
    score = pricing_score(entry)
    assert score.value == 100
    assert score.reasons[:3] == ("free tier", "free from $0/month", "free quota 60 requests/hour")


def test_enterprise_without_price_scores_zero() -> None:
    entry = make_entry(hasFreeTier=False, pricing={"model": "enterprise"})
    score = pricing_score(entry)
    assert score.value == 0
    assert "no free tier" in score.reasons
    assert "enterprise, starting price not stated" in score.reasons


def test_paid_start_and_unit_cost_are_reported() -> None:
    entry = make_entry(hasFreeTier=False, pricing={
        "model": "subscription", "startingCentsPerMonth": 549,
        "unitCost": {"amountCents": 2500, "per": 1_000_000, "unit": "characters"}})
    score = pricing_score(entry)
    # 0 + 5 + (25 - 549/1000 * 7 = 21.157) + 0 + 10 = 36.157
    assert score.value == 36
    assert "subscription from $5.49/month" in score.reasons
    assert "unit cost $25 per 1,000,000 characters" in score.reasons
    assert 1 <= len(score.reasons) <= 4


@pytest.mark.parametrize("model", ["free", "freemium", "subscription", "pay-as-you-go",
                                   "enterprise", None])
@pytest.mark.parametrize("start", [None, 0, 500, 2900, 10_000, 50_000, 200_000])
def test_free_tier_never_scores_lower(model: str | None, start: int | None) -> None:
    pricing = {"model": model, "startingCentsPerMonth": start,
               "freeQuota": {"amount": 100, "unit": "requests", "period": "day"}}
    with_free = pricing_score(make_entry(hasFreeTier=True, pricing=pricing)).value
    without = pricing_score(make_entry(hasFreeTier=False, pricing=pricing)).value
    assert with_free >= without


@pytest.mark.parametrize("model", ["freemium", "subscription", "pay-as-you-go", "enterprise"])
@pytest.mark.parametrize("free", [True, False])
def test_cheaper_start_never_scores_lower(model: str, free: bool) -> None:
    grid = list(range(0, 120_001, 250))
    values = [pricing_score(make_entry(hasFreeTier=free, pricing={
        "model": model, "startingCentsPerMonth": cents})).value for cents in grid]
    assert all(a >= b for a, b in itertools.pairwise(values))
    assert 0 <= min(values) <= max(values) <= 100


# --- latency ---------------------------------------------------------------------------------


def test_never_reached_scores_zero() -> None:
    history = probes([(h, "unreachable", None) for h in (1, 13, 25, 37, 49, 61)])
    score = latency_score(history, AS_OF)
    assert score == latency_score(history, AS_OF)
    assert score.value == 0
    assert score.reasons == ("never reached in 7 days (6 probes)",)


def test_no_probes_scores_zero() -> None:
    assert latency_score(probes([]), AS_OF).value == 0
    old = probes([(24 * 8, "live", 100)])  # only older than the 7-day window
    assert latency_score(old, AS_OF).reasons == ("no probes in 7 days",)


def test_little_history_still_scores_but_is_flagged() -> None:
    score = latency_score(probes([(1, "live", 90), (13, "live", 90), (25, "online", 90)]), AS_OF)
    assert score.value == 100
    assert "little history (3 probes)" in score.reasons
    assert "responded 3 of 3" in score.reasons


def test_enough_history_is_not_flagged() -> None:
    score = latency_score(live_week([90] * 5), AS_OF)
    assert not any("little history" in reason for reason in score.reasons)


def test_latency_is_speed_times_share_responded() -> None:
    # p50 = 300 ms -> 80, p90 = 750 ms -> 75; speed = 0.6*80 + 0.4*75 = 78; 9 of 10 answered.
    times = [300] * 8 + [750, 750]
    history = pd.concat([live_week(times), probes([(2, "unreachable", None)])])
    history["run_id"] = range(1, len(history) + 1)
    score = latency_score(history, AS_OF)
    assert score.value == 71  # 78 * 10 / 11 = 70.9
    assert score.reasons[0] == "p50 300 ms, p90 750 ms over 10 responses"
    assert score.reasons[1] == "responded 10 of 11"


def test_faster_latency_never_scores_lower() -> None:
    grid = [0, 50, 100, 150, 250, 300, 500, 750, 1000, 1500, 2000, 3000, 4500, 6000, 9000]
    rng = np.random.default_rng(7)
    base = rng.choice(grid, size=8)
    for position in range(len(base)):
        scores = []
        for ms in grid:
            times = base.copy()
            times[position] = ms
            scores.append(latency_score(live_week(list(times)), AS_OF).value)
        assert all(a >= b for a, b in itertools.pairwise(scores)), scores
    uniform = [latency_score(live_week([ms] * 6), AS_OF).value for ms in grid]
    assert uniform[0] == 100 and uniform[-1] == 0
    assert all(a >= b for a, b in itertools.pairwise(uniform))


# --- depth -----------------------------------------------------------------------------------


ONE = [{"method": "GET", "path": "/forecast", "description": "Forecast."}]
MANY = [*ONE,
        {"method": "GET", "path": "/current", "description": "Now."},
        {"method": "POST", "path": "/alerts", "description": "Subscribe."},
        {"method": "DELETE", "path": "/alerts/{id}", "description": "Unsubscribe."},
        {"method": "GET", "path": "/stations/{id}", "description": "A station."},
        {"method": "PUT", "path": "/users/me", "description": "Update settings."}]


def test_many_endpoints_never_score_lower_than_one() -> None:
    one = depth_score(make_entry(endpoints=ONE))
    many = depth_score(make_entry(endpoints=MANY))
    assert many.value > one.value
    assert many.reasons[0] == "6 endpoints over 4 methods and 5 resources"
    assert one.reasons[0] == "1 endpoint over 1 method and 1 resource"
    for n in range(len(MANY)):
        assert depth_score(make_entry(endpoints=MANY[: n + 1])).value >= depth_score(
            make_entry(endpoints=MANY[:n])).value


def test_complete_entry_and_bare_entry() -> None:
    full = depth_score(make_entry())
    # 3 endpoints 11, 1 method 5, 3 resources 9, fields 10+8+8+6+6+6+4+2+8
    assert full.value == 83
    assert full.reasons[1] == "docs, samples, auth and rate limit all stated"
    bare = make_entry(endpoints=None, docsUrl=None, sampleRequest=None, sampleResponse=None,
                      authDescription=None, authExample=None, rateLimit=None,
                      description=None, longDescription=None)
    score = depth_score(bare)
    assert score.value == 0
    assert score.reasons == ("no endpoints listed", "no docs address", "no sample request",
                             "and 6 more gaps")


def test_depth_gaps_are_named() -> None:
    score = depth_score(make_entry(sampleResponse=None, rateLimit="  "))
    assert score.value == 83 - 8 - 6
    assert score.reasons[1:] == ("no sample response", "no rate limit stated")
    long = depth_score(make_entry(description="First sentence. Second sentence."))
    assert long.value == 81
    assert "description is not one short sentence" in long.reasons


# --- builder score and grades ----------------------------------------------------------------


@pytest.mark.parametrize(("percent", "grade"), [
    (100, "A"), (85, "A"), (84, "B"), (70, "B"), (69, "C"), (55, "C"), (54, "D"),
    (40, "D"), (39, "F"), (0, "F"),
])
def test_grade_band_edges(percent: int, grade: str) -> None:
    assert grade_for(percent) == grade


def test_builder_score_weights_and_rounding() -> None:
    assert builder_score(100, 100, 100) == (100, "A")
    assert builder_score(0, 0, 0) == (0, "F")
    assert builder_score(100, 0, 0) == (35, "F")
    assert builder_score(0, 100, 0) == (30, "F")
    assert builder_score(1, 0, 0) == (0, "F")  # 0.35 rounds down
    assert builder_score(10, 0, 0) == (4, "F")  # 3.5 rounds half up
    assert builder_score(30, 15, 30) == (26, "F")  # 10.5 + 4.5 + 10.5 = 25.5 -> 26
    with pytest.raises(ValueError):
        builder_score(101, 0, 0)
    with pytest.raises(ValueError):
        grade_for(-1)


# --- determinism and score_entries -----------------------------------------------------------


def mixed_history() -> pd.DataFrame:
    first = probes([(h, "live", 100 + 7 * h) for h in range(1, 160, 12)])
    second = probes([(h, "online" if h % 3 else "unreachable", None if h % 3 == 0 else 400 + h)
                     for h in range(2, 700, 10)], entry_id="other", url="https://other.test/")
    third = probes([(h, "live", 50) for h in (3, 30)], entry_id="other",
                   url="https://other.test/a")
    return pd.concat([first, second, third], ignore_index=True)


def test_score_entries_is_deterministic_and_order_free() -> None:
    contents = {"example-weather": make_entry(), "other": make_entry(id="other"),
                "unprobed": make_entry(id="unprobed")}
    history = mixed_history()
    first = score_entries(contents, history, AS_OF)
    assert first == score_entries(contents, history, AS_OF)
    shuffled = history.sample(frac=1, random_state=3).reset_index(drop=True)
    assert first == score_entries(contents, shuffled, AS_OF)
    assert set(first) == set(contents)
    assert first["unprobed"].latency.value == 0
    for entry_id, score in first.items():
        assert isinstance(score, EntryScore)
        assert score.rubric == RUBRIC_VERSION
        assert score.label == f"{score.percent}% builder-friendly"
        assert (score.percent, score.grade) == builder_score(
            score.pricing.value, score.latency.value, score.depth.value)
        for sub in (score.pricing, score.latency, score.depth):
            assert 0 <= sub.value <= 100 and 1 <= len(sub.reasons) <= 4
        assert score.contract().percent == score.percent
        # The batch path gives what the one-entry functions give.
        own = history[history["entry_id"] == entry_id]
        assert score.latency == latency_score(own, AS_OF)
        assert score.pricing == pricing_score(contents[entry_id])


def test_analytics_do_not_depend_on_row_order() -> None:
    history = mixed_history()
    shuffled = history.sample(frac=1, random_state=11).reset_index(drop=True)
    pd.testing.assert_frame_equal(endpoint_analytics(history, AS_OF),
                                  endpoint_analytics(shuffled, AS_OF))
    pd.testing.assert_frame_equal(entry_analytics(history, AS_OF),
                                  entry_analytics(shuffled, AS_OF))


def test_naive_as_of_and_unknown_outcome_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        latency_score(probes([(1, "live", 1)]), datetime(2026, 11, 21))
    bad = probes([(1, "live", 1)]).assign(outcome="up")
    with pytest.raises(ValueError, match="unknown probe outcomes"):
        uptime_shares(bad, AS_OF)


# --- uptime windows --------------------------------------------------------------------------


def test_uptime_windows_and_old_probes_ignored() -> None:
    history = probes([
        (2, "live", 100), (20, "unreachable", None),  # last day: 1 of 2
        (30, "online", 300), (100, "unreachable", None),  # last 7 days: 2 of 4
        (24 * 20, "live", 100),  # last 30 days: 3 of 5
        (24 * 31, "live", 100), (24 * 45, "live", 100),  # older than 30 days: ignored
    ])
    assert uptime_shares(history, AS_OF) == {"last1d": 0.5, "last7d": 0.5, "last30d": 0.6}


def test_uptime_respects_as_of_cutoff_and_empty_windows() -> None:
    history = probes([(24 * 3, "live", 100), (24 * 2, "unreachable", None)])
    earlier = AS_OF - timedelta(days=2, hours=12)  # only the first probe existed then
    assert uptime_shares(history, earlier) == {"last1d": 1.0, "last7d": 1.0, "last30d": 1.0}
    assert uptime_shares(history, AS_OF) == {"last1d": None, "last7d": 0.5, "last30d": 0.5}
    assert uptime_shares(history, AS_OF - timedelta(days=4)) == {
        "last1d": None, "last7d": None, "last30d": None}


def test_window_edges_are_half_open() -> None:
    exactly_one_day = probes([(24, "live", 100), (0, "unreachable", None)])
    # The probe at as_of counts; the one exactly 24 h before falls out of the 1-day window.
    assert uptime_shares(exactly_one_day, AS_OF)["last1d"] == 0.0
    assert uptime_shares(exactly_one_day, AS_OF)["last7d"] == 0.5


# --- analytics -------------------------------------------------------------------------------


def test_endpoint_analytics_percentiles_and_streak() -> None:
    spec = [(150, "live", 100), (130, "live", 200), (110, "unreachable", None),
            (90, "online", 300), (70, "live", 400), (50, "live", 500),
            (30, "live", 600), (10, "live", 700), (24 * 9, "live", 5000)]
    history = pd.concat([probes(spec), probes([(5, "unreachable", None)], url=URL + "/b")])
    table = endpoint_analytics(history, AS_OF)
    assert list(table["url"]) == [URL, URL + "/b"]
    row = table.iloc[0]
    # Responses in 7 days: 100..700 (7 values); p50 = 400, p90 at 0.9 * 6 = 5.4 -> 640.
    assert row["p50_ms"] == 400.0
    assert row["p90_ms"] == pytest.approx(640.0)
    assert (row["probes_1d"], row["probes_7d"], row["probes_30d"]) == (1, 8, 9)
    assert row["responded_7d"] == 7 / 8 and row["live_7d"] == 6 / 8
    assert row["streak_state"] == "live" and row["streak_length"] == 4
    assert row["state_changed_at"] == pd.Timestamp(AS_OF - timedelta(hours=70))
    assert row["last_checked_at"] == pd.Timestamp(AS_OF - timedelta(hours=10))
    other = table.iloc[1]
    assert other["streak_state"] == "unreachable" and other["streak_length"] == 1
    assert np.isnan(other["p50_ms"]) and other["responded_1d"] == 0.0


def test_entry_analytics_counts_runs_with_the_best_outcome() -> None:
    url_a = probes([(30, "live", 100), (20, "unreachable", None), (10, "unreachable", None)])
    url_b = probes([(30, "unreachable", None), (20, "online", 300), (10, "unreachable", None)],
                   url=URL + "/b")
    history = pd.concat([url_a, url_b], ignore_index=True)
    row = entry_analytics(history, AS_OF).iloc[0]
    assert row["entry_id"] == "example-weather"
    assert row["probes_7d"] == 6 and row["responded_7d"] == 2 / 6
    # Runs: 1 live (a answered), 2 online (b answered), 3 unreachable.
    assert row["streak_state"] == "unreachable" and row["streak_length"] == 1
    assert row["state_changed_at"] == pd.Timestamp(AS_OF - timedelta(hours=10))


def test_analytics_of_empty_history() -> None:
    empty = probes([])
    assert endpoint_analytics(empty, AS_OF).empty
    assert entry_analytics(empty, AS_OF).empty
    assert uptime_shares(empty, AS_OF) == {"last1d": None, "last7d": None, "last30d": None}


# --- the worked example of docs/scoring.md ---------------------------------------------------


def worked_example() -> tuple[datetime, pd.DataFrame, dict[str, Any]]:
    doc = (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Worked example"):]
    as_of = datetime.fromisoformat(re.search(r"^as_of: (\S+)$", section, re.M).group(1))
    csv = re.search(r"```csv\n(.*?)```", section, re.S).group(1)
    history = pd.read_csv(io.StringIO(csv))
    history["checked_at"] = pd.to_datetime(history["checked_at"], utc=True)
    stated = {name: int(re.search(rf"^{name}: (\d+)$", section, re.M).group(1))
              for name in ("Pricing", "Latency", "Depth")}
    percent, grade = re.search(r"^Result: (\d+)% → ([A-F])$", section, re.M).groups()
    stated |= {"percent": int(percent), "grade": grade}
    return as_of, history, stated


def test_worked_example_matches_the_doc() -> None:
    as_of, history, stated = worked_example()
    path = REPO / "data" / "entries" / "developer" / "github-rest.yaml"
    content = EntryFile.model_validate(yaml.safe_load(path.read_text())).content()
    assert len(history) == 14
    score = score_entries({"github-rest": content}, history, as_of)["github-rest"]
    assert score.pricing.value == stated["Pricing"]
    assert score.latency.value == stated["Latency"]
    assert score.depth.value == stated["Depth"]
    assert (score.percent, score.grade) == (stated["percent"], stated["grade"])
    assert score.latency.reasons[:2] == ("p50 250 ms, p90 400 ms over 13 responses",
                                         "responded 13 of 14")
    shares = uptime_shares(history, as_of)
    assert shares["last1d"] == 1.0 and shares["last7d"] == pytest.approx(13 / 14)
