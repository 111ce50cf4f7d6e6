"""The score stage: sub-score rules, monotonicity, determinism, windows, analytics, the doc."""

from __future__ import annotations

import io
import itertools
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pydantic_core
import pytest
import yaml
from conftest import REPO, make_entry, model_json_of  # tests/ is on sys.path (rootdir conftest)

from pipeline.catalogue.entries import EntryFile, read_catalog
from pipeline.contract import Uptime
from pipeline.judging.score import (
    RUBRIC_VERSION,
    EntryScore,
    builder_score,
    depth_score,
    endpoint_analytics,
    entry_analytics,
    entry_uptimes,
    grade_for,
    latency_score,
    pricing_score,
    round_half_up,
    score_entries,
    succeeded_probes,
    uptime_shares,
)
from pipeline.probing.probe import FAILED_REASONS, ProbeResult, is_failure

AS_OF = datetime(2026, 11, 21, 23, 59, 59, tzinfo=UTC)
URL = "https://api.example.com/v1/forecast"


def probes(spec: list[tuple[float, str, float | None]], *, entry_id: str = "example-weather",
           url: str = URL, as_of: datetime = AS_OF) -> pd.DataFrame:
    """History rows from (hours before as_of, outcome, total_ms), oldest run first."""
    rows = []
    for run, (hours, outcome, ms) in enumerate(sorted(spec, key=lambda s: -s[0]), start=1):
        rows.append({
            "entry_id": entry_id, "endpoint_id": 1, "url": url,  # a listed endpoint's
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


def priced(**pricing: Any) -> dict[str, Any]:
    """An entry whose pricing is exactly `pricing` (and no free tier unless it says so)."""
    free = pricing.pop("hasFreeTier", False)
    return make_entry(hasFreeTier=free, pricing=pricing)


def test_free_api_scores_full_pricing() -> None:
    score = pricing_score(priced(model="free", startingCentsPerMonth=0, hasFreeTier=True,
                                 freeQuota={"amount": 5000, "unit": "requests",
                                            "period": "hour", "recurring": True}))
    # free tier, free to build against, no minimum, nothing to buy, a stated quota
    assert score.value == 35 + 10 + 25 + 20 + 10 == 100
    assert score.reasons == ("free tier", "no monthly minimum", "nothing to buy")
    assert score.evidence["freeAllowance"] == "recurring"


@pytest.mark.parametrize("note", ["Fair use; cache what you can.", None])
def test_use_without_a_cap_is_a_free_quota_stated_in_full(note: str | None) -> None:
    """A free API whose use has no cap (period `unlimited`) has no figure to state: it scored
    5 (or, without a note, 10) points below one capped at 5,000 requests an hour, for an amount
    that cannot exist."""
    uncapped = pricing_score(priced(model="free", hasFreeTier=True, freeQuota={
        "amount": None, "unit": "requests", "period": "unlimited", "note": note}))
    capped = pricing_score(priced(model="free", hasFreeTier=True, freeQuota={
        "amount": 5000, "unit": "requests", "period": "hour", "recurring": True}))
    assert uncapped.value == capped.value == 35 + 10 + 25 + 20 + 10 == 100
    account = pricing_score(priced(model="free", hasFreeTier=True, freeQuota={
        "amount": None, "unit": "GB", "period": "account", "note": note}))
    assert account.value == 100 - (5 if note else 10)  # a figure the provider left unstated


def test_a_recurring_allowance_beats_a_one_time_credit() -> None:
    paid = [{"name": "Pro", "monthlyCents": 2900, "included": "x"}]
    recurring = pricing_score(priced(model="freemium", hasFreeTier=True, tiers=paid, freeQuota={
        "amount": 100, "unit": "dollars", "period": "month", "recurring": True}))
    one_time = pricing_score(priced(model="freemium", hasFreeTier=True, tiers=paid, freeQuota={
        "amount": 100, "unit": "dollars", "period": "one-time"}))
    assert recurring.value - one_time.value == 35 - 20
    assert "one-time free credit" in one_time.reasons


def test_payments_priced_per_transaction_with_a_sandbox() -> None:
    score = pricing_score(priced(model="pay-as-you-go", sandbox=True, monthlyMinimumCents=0,
                                 transactionFee={"percent": 2.9, "fixedCents": 30}))
    assert score.value == 10 + 25 + 20  # sandbox, no minimum, a published fee
    assert score.reasons == ("no free tier", "free sandbox", "no monthly minimum",
                             "2.9% + 30¢ per transaction")


def test_enterprise_without_price_and_no_pricing_at_all() -> None:
    enterprise = pricing_score(priced(model="enterprise", startingCentsPerMonth=None))
    assert enterprise.value is None and enterprise.reasons == ("no price stated",)
    unknown = pricing_score(make_entry(pricing=None, hasFreeTier=None))
    assert unknown.value is None and unknown.reasons == ("no pricing stated",)


@pytest.mark.parametrize("stated", [
    {"hasFreeTier": False, "pricing": None},
    {"hasFreeTier": None, "pricing": {"details": "contact sales"}},
    {"hasFreeTier": False, "pricing": {"model": "enterprise", "startingCentsPerMonth": None,
                                       "details": "contact sales"}},
    {"hasFreeTier": False, "pricing": {"model": "subscription", "sandbox": True,
                                       "tiers": [{"name": "Trial", "monthlyCents": 0,
                                                  "included": "x"}]}},
])
def test_an_unknown_price_is_no_pricing_evidence_not_the_worst_price(
    stated: dict[str, Any],
) -> None:
    """A price nobody states is missing evidence: Pricing is null with its reason and the grade
    comes from the other sub-scores, not 0 points as if it cost $1,000 a month."""
    unknown = pricing_score(make_entry(**stated))
    assert unknown.value is None and unknown.reasons == ("no price stated",)
    dear = pricing_score(priced(model="subscription", startingCentsPerMonth=100_000))
    assert dear.value == 0 and "from $1,000/month" in dear.reasons
    history = probes([])
    scores = score_entries({"unknown": make_entry(**stated), "dear": priced(
        model="subscription", startingCentsPerMonth=100_000)}, history, AS_OF)
    depth = scores["unknown"].depth.value
    assert scores["unknown"].pricing.value is None and scores["unknown"].percent == depth
    assert scores["unknown"].confidence == "low"
    assert scores["dear"].percent < scores["unknown"].percent


def test_pricing_ignores_the_name_of_the_model() -> None:
    facts = {"startingCentsPerMonth": 2900, "tiers": [
        {"name": "Pro", "monthlyCents": 2900, "included": "x"}]}
    values = {pricing_score(priced(model=m, **facts)).value
              for m in ("subscription", "freemium", "pay-as-you-go", None)}
    assert len(values) == 1


@pytest.mark.parametrize("details", [
    "API Pro is EUR 4.99 a month plus EUR 0.00002 a character.",  # priced in another currency
    "Higher limits are priced on request (contact sales).",
    "Free within the rate limits above.",  # no paid plan named at all
])
def test_a_price_to_grow_into_not_stated_is_missing_evidence_not_zero_points(
    details: str,
) -> None:
    """A free tier whose paid plan the entry states no US price for scored 0 of the 20 points
    of a price to grow into, as if its provider hid one: the facts stated are scored out of
    the 80 points they can give, and the reason says the price is not stated, not that none
    is published."""
    free = {"model": "freemium", "startingCentsPerMonth": 0, "details": details,
            "freeQuota": {"amount": 500_000, "unit": "characters", "period": "month"}}
    unstated = pricing_score(priced(hasFreeTier=True, **free))
    assert unstated.value == round_half_up((35 + 25 + 10) * 100 / 80) == 88
    assert unstated.reasons == ("free tier", "no monthly minimum",
                                "price to grow into not stated")
    assert unstated.evidence["growth"] is None
    stated = pricing_score(priced(hasFreeTier=True, **free, tiers=[
        {"name": "Pro", "monthlyCents": 499, "included": "x"}]))
    assert stated.value == 35 + 25 + 20 + 10 == 90 >= unstated.value


def test_paid_tiers_in_another_currency_are_a_price_to_grow_into() -> None:
    """Paid tiers the provider prices in pounds are stated in the open: they give the 20
    points of a price to grow into, as tiers in US dollars do, and the reason says them in
    pounds."""
    free = {"model": "freemium", "startingCentsPerMonth": 0, "currency": "GBP",
            "freeQuota": {"amount": 1_000_000, "unit": "calls", "period": "month"},
            "tiers": [{"name": "Free", "monthlyCents": 0, "included": "x"},
                      {"name": "Startup", "monthlyCents": 3000, "included": "y"}]}
    score = pricing_score(priced(hasFreeTier=True, **free))
    assert score.value == 35 + 25 + 20 + 10 == 90
    assert score.reasons == ("free tier", "no monthly minimum", "paid tiers from £30/month")
    assert score.evidence["currency"] == "GBP"
    assert pricing_score(priced(hasFreeTier=True, **free | {"currency": None})).value == 90


def test_a_monthly_minimum_in_another_currency_is_missing_evidence_not_dollars() -> None:
    """The minimum's thresholds are in US dollars and no exchange rate is kept: €20 a month
    is missing evidence for that part, its 25 points scaled out as a missing price to grow
    into is, never read as $20; €0 is no minimum in any currency."""
    fee = {"percent": 1.4, "fixedCents": 25}
    euros = pricing_score(priced(model="pay-as-you-go", currency="EUR", sandbox=True,
                                 monthlyMinimumCents=2000, transactionFee=fee))
    assert euros.value == round_half_up((10 + 20) * 100 / 75) == 40
    assert euros.reasons == ("no free tier", "free sandbox",
                             "from €20/month, not weighed in US dollars",
                             "1.4% + €0.25 per transaction")
    dollars = pricing_score(priced(model="pay-as-you-go", sandbox=True,
                                   monthlyMinimumCents=2000, transactionFee=fee))
    assert dollars.value == 10 + 16 + 20 == 46 and dollars.reasons[2] == "from $20/month"
    none = pricing_score(priced(model="pay-as-you-go", currency="EUR", sandbox=True,
                                monthlyMinimumCents=0, transactionFee=fee))
    assert none.value == 10 + 25 + 20 == 55 and none.reasons[2] == "no monthly minimum"
    # with no price to grow into either, both missing parts leave the whole
    bare = pricing_score(priced(model="subscription", currency="EUR",
                                monthlyMinimumCents=4900, sandbox=True))
    assert bare.value == round_half_up(10 * 100 / 55) == 18


# Calibration: the judgments the rubric means to make, stated as properties.


def test_pay_as_you_go_with_a_free_test_mode_is_no_dearer_than_a_paid_subscription() -> None:
    payg = pricing_score(priced(model="pay-as-you-go", sandbox=True, monthlyMinimumCents=0,
                                transactionFee={"percent": 2.9, "fixedCents": 30}))
    for cents in (500, 900, 2900, 9900):
        subscription = pricing_score(priced(model="subscription", startingCentsPerMonth=cents,
                                            tiers=[{"name": "Basic", "monthlyCents": cents,
                                                    "included": "x"}]))
        assert payg.value >= subscription.value, cents


@pytest.mark.parametrize(("model", "start"), list(itertools.product(
    ["free", "freemium", "subscription", "pay-as-you-go", "enterprise", None],
    [None, 0, 900, 5000])))
def test_a_free_tier_never_lowers_pricing(model: str | None, start: int | None) -> None:
    without = pricing_score(priced(model=model, startingCentsPerMonth=start))
    with_tier = pricing_score(priced(model=model, startingCentsPerMonth=start, hasFreeTier=True))
    assert with_tier.value is not None  # a free tier states a price: $0 to start
    assert without.value is None or with_tier.value >= without.value


@pytest.mark.parametrize("free", [True, False])
def test_a_cheaper_minimum_never_scores_lower(free: bool) -> None:
    values = [pricing_score(priced(model="subscription", monthlyMinimumCents=cents,
                                   hasFreeTier=free)).value
              for cents in (0, 500, 1_000, 5_000, 20_000, 100_000, 500_000)]
    assert values == sorted(values, reverse=True)


# --- latency ---------------------------------------------------------------------------------


def test_no_probes_is_no_latency_with_its_reason() -> None:
    score = latency_score(probes([]), AS_OF)
    assert score.value is None
    assert score.reasons == ("graded after 5 probes on 3 days within 7 days, none so far",)
    assert score.evidence["eligible"] is False and score.evidence["minimumSamples"] == 5


def test_too_few_responses_is_no_latency() -> None:
    score = latency_score(live_week([120, 130, 140, 150]), AS_OF)
    assert score.value is None
    assert score.reasons[0] == (
        "graded after 5 probes on 3 days within 7 days, 4 probes on 4 days so far")
    assert score.evidence["last7d"] == {"samples": 4, "p50Ms": 135, "p95Ms": 149}


def test_a_fast_401_is_fast_and_an_unreachable_probe_counts_as_slower_than_any_threshold(
) -> None:
    fast_auth = probes([(h, "online", 90) for h in (1, 10, 20, 30, 40, 50)])
    assert latency_score(fast_auth, AS_OF).value == 100  # p50 and p95 of 90 ms
    unreachable = probes([(h, "online", 90) for h in (1, 10, 20, 30, 40, 50)]
                         + [(h, "unreachable", None) for h in (5, 15, 25)])
    score = latency_score(unreachable, AS_OF)
    # sorted: six times 90, three times 8,000; p50 at 4: 90 (f50 100); p95 at 7.6: 8,000 (0)
    assert score.value == 60
    assert score.evidence["last7d"] == {"samples": 6, "p50Ms": 90, "p95Ms": 90}
    assert {k: score.evidence[k] for k in ("probes", "failed", "days", "p50Ms", "p95Ms")} == {
        "probes": 9, "failed": 3, "days": 3, "p50Ms": 90, "p95Ms": 8000}
    # every figure of milliseconds written alike, the percentiles as the failed probe's time
    assert score.reasons == ("6 of 9 probes succeeded in 7 days",
                             "p50 90 ms, p95 8,000 ms over 9 probes in 7 days, a failed one "
                             "counted as 8,000 ms")


def test_a_bad_night_costs_latency_for_the_seven_days_it_is_in_the_window_and_no_longer(
) -> None:
    """An API probed nightly at three endpoints, unreachable one night, then back: its failed
    probes are the slowest of the week, so its p95 is a timeout's while that night lies in the
    7 days Latency reads, as its uptime of those days counts them; Latency is whole again the
    moment the night leaves the window, as the 7-day uptime is, the 30-day uptime still
    holding it. One failed probe of 21, under 5 % of the week, leaves the p95 untouched."""
    bad_night = AS_OF - timedelta(days=3, hours=20)

    def history(failed: int) -> pd.DataFrame:
        """Each night from 20 days before the bad one to 11 after, `failed` of the three
        endpoints unreachable on the bad one."""
        frames = [probes([(-24 * night, "unreachable", None) if night == 0 and n < failed
                          else (-24 * night, "live", 120) for night in range(-20, 12)],
                         url=f"{URL}/{n}", as_of=bad_night) for n in range(3)]
        return pd.concat(frames, ignore_index=True)

    def figures(frame: pd.DataFrame, as_of: datetime) -> tuple[Any, ...]:
        latency, uptime = latency_score(frame, as_of), uptime_shares(frame, as_of)
        return (latency.value, latency.evidence["failed"], latency.evidence["p95Ms"],
                uptime["last7d"], uptime["last30d"] == 1.0)

    down_one_night = history(failed=3)
    assert figures(down_one_night, AS_OF) == (59, 3, 8000, 18 / 21, False)
    leaves = bad_night + timedelta(days=7)  # the window holds (as_of - 7 days, as_of]
    assert figures(down_one_night, leaves - timedelta(seconds=1)) == (
        59, 3, 8000, 18 / 21, False)
    assert figures(down_one_night, leaves) == (99, 0, 120, 1.0, False)
    assert figures(history(failed=1), AS_OF) == (99, 1, 120, 20 / 21, False)


@pytest.mark.parametrize("reason", sorted(FAILED_REASONS))
def test_an_answer_the_prober_classes_a_failure_is_neither_up_nor_fast(
    reason: str,
) -> None:
    """A fast 404, 429, bot challenge or 5xx got an HTTP answer, but the API failed: no up
    time, and for Latency a response slower than any threshold, never a fast one. A 401 or
    403 asking for a key is the service answering."""
    hours = (1, 10, 20, 30, 40, 50, 24 * 20)
    failing = probes([(h, "online", 40) for h in hours]).assign(reason=reason)
    assert uptime_shares(failing, AS_OF) == {"last1d": 0.0, "last7d": 0.0, "last30d": 0.0}
    assert shares_of(entry_uptimes(failing, AS_OF)) == {
        "example-weather": uptime_shares(failing, AS_OF)}
    latency = latency_score(failing, AS_OF)
    assert latency.value == 0 and latency.evidence["last30d"]["samples"] == 0
    assert (latency.evidence["probes"], latency.evidence["failed"]) == (6, 6)
    assert latency.reasons[0] == "0 of 6 probes succeeded in 7 days"
    walled = failing.assign(reason="auth")
    assert uptime_shares(walled, AS_OF) == {"last1d": 1.0, "last7d": 1.0, "last30d": 1.0}
    assert latency_score(walled, AS_OF).value == 100
    # half of the answers failures, the fast half: the successful ones alone are timed as
    # they came, the failures counted as slower than any threshold
    mixed = probes([(h, "online", 40 if n % 2 else 30) for n, h in enumerate(range(1, 121, 6))])
    mixed["reason"] = np.where(mixed["total_ms"] == 40, "auth", reason)
    assert uptime_shares(mixed, AS_OF)["last7d"] == 0.5
    assert latency_score(mixed, AS_OF).evidence["last7d"] == {
        "samples": 10, "p50Ms": 40, "p95Ms": 40}
    # p50 halfway between 40 and 8,000 ms: 4,020 (0 points), p95 8,000 (0)
    assert latency_score(mixed, AS_OF).value == 0
    score = score_entries({"example-weather": make_entry()}, mixed, AS_OF)["example-weather"]
    assert score.latency == latency_score(mixed, AS_OF)
    row = endpoint_analytics(mixed, AS_OF).iloc[0]
    assert (row["responded_7d"], row["succeeded_7d"], row["p50_ms"]) == (1.0, 0.5, 40.0)


def test_a_redirect_not_followed_is_unchecked_neither_up_nor_down_nor_timed() -> None:
    """A probe whose URL answered with a redirect the run did not follow (its target's host
    given up on: the probe's note says so) is no evidence of the API: its fast 302 is neither
    up time nor a latency sample, and it counts as no probe at all, as a target left unprobed:
    the entry's other probes alone make its uptime and Latency."""
    hours = (1, 10, 20, 30, 40, 50, 24 * 20)
    failing = probes([(h, "unreachable", None) for h in hours])
    note = ("its redirect to api2.example.com was not followed this run: that host failed 10 "
            "times in a row")
    noted = probes([(h + 2, "online", 5) for h in hours]).assign(
        http_status=302.0, reason="redirect", note=note, run_id=lambda f: f["run_id"] + 100)
    history = pd.concat([failing.assign(reason=None, note=None), noted], ignore_index=True)
    assert uptime_shares(history, AS_OF) == uptime_shares(failing, AS_OF) == {
        "last1d": 0.0, "last7d": 0.0, "last30d": 0.0}
    assert shares_of(entry_uptimes(history, AS_OF)) == {
        "example-weather": uptime_shares(failing, AS_OF)}
    latency = latency_score(history, AS_OF)
    assert latency == latency_score(failing, AS_OF)
    assert (latency.value, latency.evidence["probes"], latency.evidence["failed"]) == (0, 6, 6)
    score = score_entries({"example-weather": make_entry()}, history, AS_OF)["example-weather"]
    assert score.latency == latency
    row = entry_analytics(history, AS_OF).iloc[0]
    assert (row["probes_7d"], row["responded_7d"], row["streak_state"]) == (6, 0.0, "unreachable")
    # Its own redirect, one the URL answered with and the prober did not need to follow (a
    # 302 without a Location), is the URL's answer: up, and timed.
    answered = noted.assign(note=None)
    assert uptime_shares(answered, AS_OF)["last7d"] == 1.0
    assert latency_score(answered, AS_OF).value == 100


def test_the_score_stage_and_the_prober_agree_on_every_probe_and_kind_of_target() -> None:
    """Uptime and Latency count a probe as the prober judges it (`probe.is_failure`), the base
    address standing in by the prober's own rule: a target of an entry and of no endpoint. A
    probe of no entry is a witness whose 404 fails it, though it has no endpoint either."""
    looks = [("live", None), ("online", "auth"), ("online", "redirect"),
             ("unreachable", None), *(("online", reason) for reason in sorted(FAILED_REASONS))]
    targets = [(entry, endpoint) for entry in ("example-weather", None) for endpoint in (7, None)]
    rows = [(outcome, reason, entry, endpoint)
            for outcome, reason in looks for entry, endpoint in targets]
    frame = pd.DataFrame(rows, columns=["outcome", "reason", "entry_id", "endpoint_id"])
    prober = [not is_failure(ProbeResult(
        url=URL, entry_id=entry, endpoint_id=endpoint, checked_at=AS_OF, outcome=outcome,
        reason=reason, error_class="refused" if outcome == "unreachable" else None,
        http_status=None, total_ms=None, dns_ms=None, connect_ms=None, ttfb_ms=None,
        final_url=None, attempts=1, redirects=0, error=None))
        for outcome, reason, entry, endpoint in rows]
    assert succeeded_probes(frame["outcome"], frame["reason"], frame["endpoint_id"],
                            frame["entry_id"]).tolist() == prober
    witness = frame[frame["entry_id"].isna() & frame["endpoint_id"].isna()
                    & (frame["reason"] == "not_found")]
    assert not succeeded_probes(witness["outcome"], witness["reason"], witness["endpoint_id"],
                                witness["entry_id"]).any()


def test_an_api_whose_probes_all_fail_does_not_keep_a_top_grade() -> None:
    """Fourteen probes in a week all answered 503 are evidence, and bad: Latency 0, not a
    missing Latency that leaves the grade to Pricing and Depth (an A); the API grades below
    the same API answering every probe slowly, and its reasons say how many answered."""
    content = entry_content("data/entries/developer/github-rest.yaml")

    def week(outcome: str, reason: str | None, ms: float, answered: int = 0) -> pd.DataFrame:
        rows = probes([(12 * n, outcome, ms) for n in range(14)])
        rows["reason"] = reason
        if answered:  # the latest ones answered, fast
            rows.loc[rows.index[-answered:], ["outcome", "reason", "total_ms"]] = ("live", None,
                                                                                    90.0)
        return rows

    histories = {"failing": week("online", "server_error", 40.0),
                 "slow": week("live", None, 2500.0),
                 "mostly-failing": week("online", "server_error", 40.0, answered=3),
                 "unreachable": week("unreachable", None, None)}
    scores = {name: score_entries({name: content}, history.assign(entry_id=name), AS_OF)[name]
              for name, history in histories.items()}
    never = score_entries({"never": content}, probes([]), AS_OF)["never"]
    for name in ("failing", "unreachable"):
        failing = scores[name]
        assert failing.latency.value == 0 and not failing.provisional, name
        assert failing.latency.reasons[0] == "0 of 14 probes succeeded in 7 days"
        assert failing.percent < scores["slow"].percent < never.percent
        assert failing.grade != "A" and failing.confidence == "medium"
    assert scores["slow"].latency.value == 20
    mostly = scores["mostly-failing"].latency
    assert mostly.reasons[0] == "3 of 14 probes succeeded in 7 days"
    assert (mostly.evidence["probes"], mostly.evidence["failed"]) == (14, 11)
    assert mostly.evidence["last7d"] == {"samples": 3, "p50Ms": 90, "p95Ms": 90}
    assert mostly.value == 0  # p50 and p95 among the failures
    assert never.latency.value is None and never.provisional


def test_latency_is_confirmed_only_by_probes_over_several_days() -> None:
    """Five probes make no evidence over time when they come from one moment: six runs within
    five minutes, or one night of an entry with five URLs (or two runs either side of
    midnight), leave Latency null and the grade provisional; probes on three days confirm it."""
    def runs(at: list[datetime], urls: int = 1) -> pd.DataFrame:
        return pd.concat([probes([(0, "live", 120.0)], url=f"{URL}/{n}", as_of=moment)
                          .assign(run_id=run)
                          for run, moment in enumerate(at) for n in range(urls)],
                         ignore_index=True)

    def latency(history: pd.DataFrame) -> Any:
        score = score_entries({"example-weather": make_entry()}, history, AS_OF)
        return score["example-weather"]

    minutes = runs([AS_OF - timedelta(minutes=n) for n in range(6)])
    within = latency(minutes)
    assert within.latency.value is None and within.provisional and within.confidence == "low"
    assert within.latency.reasons == (
        "graded after 5 probes on 3 days within 7 days, 6 probes on 1 day so far",)
    assert (within.latency.evidence["days"], within.latency.evidence["minimumDays"]) == (1, 3)
    midnight = AS_OF.replace(hour=0, minute=2)
    either_side = runs([midnight - timedelta(minutes=4 + n) for n in range(3)]
                       + [midnight - timedelta(minutes=n) for n in range(3)])
    assert latency(either_side).latency.value is None
    nights = [AS_OF.replace(hour=3) - timedelta(days=n) for n in range(5)]
    assert latency(runs(nights[:1], urls=5)).latency.value is None
    assert latency(runs(nights[:2], urls=5)).latency.value is None
    confirmed = latency(runs(nights[:3], urls=5))
    assert confirmed.latency.value == 99 and not confirmed.provisional
    assert confirmed.latency.evidence["days"] == 3
    assert latency(runs(nights[:4])).latency.value is None  # four probes of one URL
    assert latency(runs(nights)).latency.value == 99


def test_latency_from_p50_and_p95() -> None:
    score = latency_score(live_week([200] * 10), AS_OF)
    # p50 200 ms: 100 - (200 - 100) * 20 / 200 = 90; p95 200 ms: 100; 0.6*90 + 0.4*100 = 94
    assert score.value == 94
    assert score.reasons == ("p50 200 ms, p95 200 ms over 10 responses in 7 days",)
    assert score.evidence["last30d"]["samples"] == 10


def test_faster_responses_never_lower_latency() -> None:
    base = [150, 220, 300, 480, 650, 900, 1300, 2100]
    for factor in (0.25, 0.5, 0.8):
        assert latency_score(live_week([t * factor for t in base]), AS_OF).value >= (
            latency_score(live_week(base), AS_OF).value)
    slow_tail = latency_score(live_week([*base[:-1], 6000]), AS_OF).value
    assert latency_score(live_week(base), AS_OF).value >= slow_tail


# --- depth -----------------------------------------------------------------------------------

MANY = [{"method": m, "path": f"/r{i}/{m.lower()}", "description": "x"}
        for i, m in enumerate(["GET", "POST", "PUT", "PATCH", "DELETE"] * 3)]


def test_depth_measures_what_a_builder_gets() -> None:
    score = depth_score(make_entry())
    # 3 endpoints 12, 1 method 4, 3 resources 9, docs 5, rate limit 5, api-key 10
    assert score.value == 45
    assert score.reasons == ("3 endpoints over 1 method and 3 resources",
                             "no official OpenAPI description or SDK", "auth: api-key")
    rich = depth_score(make_entry(openapiUrl="https://api.example.com/openapi.json",
                                  sdks=[{"language": "Go", "url": "https://github.com/e/go"}],
                                  authType="none"))
    assert rich.value == 45 + 15 + 10 + (15 - 10) + 10
    assert rich.reasons[1:] == ("official OpenAPI description, official SDKs",
                                "no account needed")
    assert rich.evidence == {"endpoints": 3, "methods": 1, "resources": 3, "authType": "none",
                             "openapi": True, "sdks": True, "docs": True, "rateLimit": True}


def test_adding_endpoints_or_an_openapi_link_never_lowers_depth() -> None:
    for n in range(len(MANY)):
        assert depth_score(make_entry(endpoints=MANY[: n + 1])).value >= depth_score(
            make_entry(endpoints=MANY[:n])).value
    assert depth_score(make_entry(openapiUrl="https://api.example.com/o.json")).value > (
        depth_score(make_entry()).value)


@pytest.mark.parametrize("version", ["v1", "v2", "v1beta1", "2", "1.1", "2024-01-01", "api",
                                     "api/v3"])
def test_a_version_segment_is_no_resource_wherever_it_sits(version: str) -> None:
    """Four resources under a version are four resources, whether the version is in the base
    address or starts every path: Depth is the same either way."""
    resources = ("customers", "orders", "refunds", "payouts")

    def entry(base: str, prefix: str) -> dict[str, Any]:
        return make_entry(baseUrl=base, endpoints=[
            {"method": "GET", "path": f"{prefix}/{name}", "description": "x"}
            for name in resources])

    in_base = depth_score(entry(f"https://api.example.com/{version}", ""))
    in_paths = depth_score(entry("https://api.example.com", f"/{version}"))
    assert in_paths == in_base
    assert in_paths.evidence["resources"] == 4
    assert in_paths.reasons[0] == "4 endpoints over 1 method and 4 resources"
    root = depth_score(make_entry(endpoints=[{"method": "GET", "path": f"/{version}",
                                              "description": "x"}]))
    assert root.evidence["resources"] == 1  # the API's root is one resource, not none


def test_auth_friction_orders_depth() -> None:
    values = [depth_score(make_entry(authType=a)).value
              for a in ("none", "api-key", "basic", "hmac", "oauth2")]
    assert values == sorted(values, reverse=True)


# --- builder score and grades ----------------------------------------------------------------


@pytest.mark.parametrize(("percent", "grade"), [
    (100, "A"), (85, "A"), (84, "B"), (70, "B"), (69, "C"), (55, "C"), (54, "D"),
    (40, "D"), (39, "F"), (0, "F"),
])
def test_grade_band_edges(percent: int, grade: str) -> None:
    assert grade_for(percent) == grade


def test_builder_score_weights_renormalised_and_rounding() -> None:
    assert builder_score(100, 100, 100) == (100, "A")
    assert builder_score(0, 0, 0) == (0, "F")
    assert builder_score(100, 0, 0) == (35, "F")
    assert builder_score(10, 0, 0) == (4, "F")  # 3.5 rounds half up
    assert builder_score(30, 15, 30) == (26, "F")  # 25.5 -> 26
    # a sub-score without evidence leaves the others' weights, renormalised
    assert builder_score(90, None, 45) == (68, "C")  # (35*90 + 35*45) / 70 = 67.5 -> 68
    assert builder_score(None, None, 45) == (45, "D")
    assert builder_score(80, None, 80) == builder_score(80, 80, 80)
    with pytest.raises(ValueError):
        builder_score(101, 0, 0)
    with pytest.raises(ValueError):
        builder_score(None, None, None)
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
    unprobed = first["unprobed"]
    assert unprobed.latency.value is None and unprobed.provisional
    assert unprobed.confidence == "low"
    assert first["example-weather"].confidence == "medium"  # 14 samples, fewer than 20
    for entry_id, score in first.items():
        assert isinstance(score, EntryScore)
        assert score.rubric == RUBRIC_VERSION == "2.7.0"
        assert score.label == f"{score.percent}% builder-friendly"
        assert (score.percent, score.grade) == builder_score(
            score.pricing.value, score.latency.value, score.depth.value)
        assert score.provisional == (score.latency.value is None)
        for sub in (score.pricing, score.latency, score.depth):
            assert sub.value is None or 0 <= sub.value <= 100
            assert 1 <= len(sub.reasons) <= 4
        published = score.contract()
        assert published.percent == score.percent and published.provisional == score.provisional
        assert first.json_form(entry_id) == score.json_form()  # as the score stage writes it
        assert published.evidence.latency.minimum_samples == 5
        # The batch path gives what the one-entry functions give.
        own = history[history["entry_id"] == entry_id]
        assert score.latency == latency_score(own, AS_OF)
        assert score.pricing == pricing_score(contents[entry_id])
        # What the score stage hands over: the model's JSON, byte for byte, without the model.
        assert pydantic_core.to_json(score.json_form()) == published.model_dump_json().encode()
    # Each score is built when read: in id order, the same each time, only for judged ids.
    assert list(first) == sorted(contents) and len(first) == 3
    assert first["other"] == first["other"] and first["other"] is not first["other"]
    assert "missing" not in first and "other" in first and first.get("missing") is None
    with pytest.raises(KeyError):
        first["missing"]


def test_no_entry_without_probe_evidence_gets_a_confirmed_grade() -> None:
    """Calibration on the real catalogue: with no history every grade is provisional, from
    Pricing and Depth alone, and none falls below C merely for lack of probes."""
    report = read_catalog([REPO / "data" / "entries"], REPO / "data" / "entries")
    contents = {e.id: e.content() for e in report.entries.values()}
    scores = score_entries(contents, probes([]), AS_OF)
    assert len(scores) == len(contents) >= 70
    for entry_id, score in scores.items():
        assert score.provisional and score.latency.value is None, entry_id
        assert score.contract().latency is None
        assert (score.percent, score.grade) == builder_score(
            score.pricing.value, None, score.depth.value)
        with_zero_latency, _ = builder_score(score.pricing.value or 0, 0, score.depth.value)
        assert score.percent >= with_zero_latency  # a missing measurement is not the worst one


def test_a_realistic_history_grades_the_catalogue_with_at_least_three_letters() -> None:
    """Calibration: every real entry probed twice a day for a week with latencies drawn as
    the internet gives them (20 ms to 3 s, log-uniform, seeded): confirmed grades, spread."""
    report = read_catalog([REPO / "data" / "entries"], REPO / "data" / "entries")
    contents = {e.id: e.content() for e in report.entries.values()}
    rng = np.random.default_rng(7)
    frames = []
    for entry_id in sorted(contents):
        typical = float(np.exp(rng.uniform(np.log(20), np.log(3000))))
        spec = [(h, "live", typical * float(rng.uniform(0.7, 1.6))) for h in range(1, 168, 12)]
        frames.append(probes(spec, entry_id=entry_id, url=f"https://{entry_id}.test/"))
    scores = score_entries(contents, pd.concat(frames, ignore_index=True), AS_OF)
    assert not any(score.provisional for score in scores.values())
    assert len({score.grade for score in scores.values()}) >= 3


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


def test_each_entrys_uptime_is_handed_over_as_the_model_writes_it() -> None:
    """The stage's uptimes (every entry at once) are each entry's own shares, in the JSON form
    `Uptime` writes, byte for byte, without a model built for each: windows without probes
    too."""
    history = pd.concat([probes([(24 * 3, "live", 100), (24 * 2, "unreachable", None)]),
                         probes([(2, "live", 100), (20, "unreachable", None), (30, "online", 9)],
                                entry_id="other")])
    uptimes = entry_uptimes(history, AS_OF)
    assert shares_of(uptimes) == {
        entry_id: uptime_shares(history[history["entry_id"] == entry_id], AS_OF)
        for entry_id in ("example-weather", "other")}
    assert uptimes["other"]["evidence"] == {  # 2, 20 and 30 hours before AS_OF (23:59:59)
        "last1d": {"probes": 2, "succeeded": 1, "days": 1},
        "last7d": {"probes": 3, "succeeded": 2, "days": 2},
        "last30d": {"probes": 3, "succeeded": 2, "days": 2}}
    assert uptimes["example-weather"]["evidence"]["last30d"] == {
        "probes": 2, "succeeded": 1, "days": 2}
    assert uptimes["example-weather"]["last1d"] is None and uptimes["other"]["last1d"] == 0.5
    for uptime in uptimes.values():
        assert pydantic_core.to_json(uptime) == model_json_of(Uptime, uptime)


def test_an_entry_probed_only_before_30_days_has_no_uptime_as_one_never_probed() -> None:
    """Probes older than every window publish no uptime (null), as for an entry never probed,
    not an uptime whose shares and evidence are all null: one form for "no uptime"."""
    history = pd.concat([probes([(24 * 31, "live", 100), (24 * 45, "unreachable", None)],
                                entry_id="quiet"),
                         probes([(2, "live", 100)], entry_id="other")])
    uptimes = entry_uptimes(history, AS_OF)
    assert set(uptimes) == {"other"} and uptimes["other"]["last30d"] == 1.0


def shares_of(uptimes: dict[str, dict]) -> dict[str, dict]:
    """Each entry's uptime shares, without the evidence beside them."""
    return {entry_id: {k: v for k, v in uptime.items() if k != "evidence"}
            for entry_id, uptime in uptimes.items()}


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


# --- the worked examples of docs/scoring.md --------------------------------------------------


def worked_example(number: int) -> tuple[datetime, pd.DataFrame, dict[str, Any]]:
    doc = (REPO / "docs" / "scoring.md").read_text(encoding="utf-8")
    first = doc[doc.index("## Worked example 1"):]
    section = doc[doc.index(f"## Worked example {number}"):]
    section = section[: section.index("## Worked example 2")] if number == 1 else section
    as_of = datetime.fromisoformat(re.search(r"^as_of: (\S+)$", first, re.M).group(1))
    csv = re.search(r"```csv\n(.*?)```", first, re.S).group(1)
    history = pd.read_csv(io.StringIO(csv))
    history["checked_at"] = pd.to_datetime(history["checked_at"], utc=True)
    stated: dict[str, Any] = {}
    for name in ("Pricing", "Latency", "Depth"):
        value = re.search(rf"^{name}: (\d+|null)$", section, re.M).group(1)
        stated[name] = None if value == "null" else int(value)
    percent, grade, confidence = re.search(
        r"^Result: (\d+)% → ([A-F]) \((\w+)(?:, provisional)?\)$", section, re.M).groups()
    stated |= {"percent": int(percent), "grade": grade, "confidence": confidence,
               "provisional": "provisional)" in section.split("Result:", 1)[1].split("\n")[0]}
    return as_of, history, stated


def entry_content(path: str) -> dict[str, Any]:
    return EntryFile.model_validate(yaml.safe_load((REPO / path).read_text())).content()


def test_worked_example_1_confirmed_matches_the_doc() -> None:
    as_of, history, stated = worked_example(1)
    assert len(history) == 14
    content = entry_content("data/entries/developer/github-rest.yaml")
    score = score_entries({"github-rest": content}, history, as_of)["github-rest"]
    assert score.pricing.value == stated["Pricing"]
    assert score.latency.value == stated["Latency"]
    assert score.depth.value == stated["Depth"]
    assert (score.percent, score.grade) == (stated["percent"], stated["grade"])
    assert (score.confidence, score.provisional) == (stated["confidence"], False)
    assert score.latency.evidence["last7d"] == {"samples": 13, "p50Ms": 250, "p95Ms": 528}
    assert {k: score.latency.evidence[k] for k in ("probes", "failed", "p50Ms", "p95Ms")} == {
        "probes": 14, "failed": 1, "p50Ms": 256, "p95Ms": 3249}
    shares = uptime_shares(history, as_of)
    assert shares["last1d"] == 1.0 and shares["last7d"] == pytest.approx(13 / 14)


def test_worked_example_2_provisional_matches_the_doc() -> None:
    as_of, history, stated = worked_example(2)
    content = entry_content("data/entries/payments/stripe.yaml")
    score = score_entries({"stripe": content}, history.iloc[:0], as_of)["stripe"]
    assert (score.pricing.value, score.latency.value, score.depth.value) == (
        stated["Pricing"], stated["Latency"], stated["Depth"])
    assert (score.percent, score.grade, score.confidence) == (
        stated["percent"], stated["grade"], stated["confidence"])
    assert score.provisional and stated["provisional"]
    assert score.latency.reasons == (
        "graded after 5 probes on 3 days within 7 days, none so far",)


@pytest.mark.parametrize("at_once", [1, 3, 20_000])
def test_latency_percentiles_taken_a_few_entries_at_a_time_are_each_entrys_own(
    at_once: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each entry's p50 and p95 per window are those of its own samples (NaN without one),
    however many entries' samples are taken at a time; samples of entries not scored count
    for none."""
    from pipeline.judging import score

    rng = np.random.default_rng(4)
    ids = [f"entry-{n}" for n in range(7)]
    names = rng.choice([*ids[:6], "unscored"], 600)  # the last id has no sample at all
    failed = rng.random(600) < 0.1
    timed = pd.DataFrame({"entry_id": names, "total_ms": np.where(
                              failed, float(score.FAILED_PROBE_MS),
                              rng.lognormal(5, 1, 600).round(3)),
                          "failed": failed, "day": rng.integers(20_000, 20_007, 600),
                          "in_7d": rng.random(600) < 0.4, "in_30d": True})
    monkeypatch.setattr(score, "PERCENTILE_ENTRIES", at_once)
    stats = score._latency_stats(timed, ids)
    for window in ("7d", "30d"):
        for n, entry_id in enumerate(ids):
            own = timed.loc[(timed["entry_id"] == entry_id) & timed[f"in_{window}"]
                            & ~timed["failed"], "total_ms"].to_numpy()
            assert stats[f"samples_{window}"][n] == len(own)
            for name, q in (("p50", 0.5), ("p95", 0.95)):
                found = stats[f"{name}_{window}"][n]
                if len(own):
                    assert found == pytest.approx(np.quantile(own, q), rel=1e-12)
                else:
                    assert np.isnan(found) and stats[f"{name}Ms_{window}"][n] is None
    for n, entry_id in enumerate(ids):  # Latency's own: every probe of the week, failed or not
        week = timed.loc[(timed["entry_id"] == entry_id) & timed["in_7d"], "total_ms"]
        scored = stats["scoredP50Ms"][n], stats["scoredP95Ms"][n]
        assert scored == ((round(np.quantile(week, 0.5)), round(np.quantile(week, 0.95)))
                          if len(week) else (None, None))
    monkeypatch.setattr(score, "PERCENTILE_ENTRIES", 20_000)
    at_once_stats = score._latency_stats(timed, ids)
    assert {k: [None if v != v else v for v in vs] for k, vs in stats.items()} == {
        k: [None if v != v else v for v in vs] for k, vs in at_once_stats.items()}


@pytest.mark.parametrize("cells", [1, 1 << 24])
def test_distinct_days_are_each_entrys_own_whether_flagged_in_a_table_or_sorted(
    cells: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each entry's count of distinct days with a row, by a table of entries by days or, where
    that table would be too large, by sorting the pairs: the same counts either way."""
    from pipeline.judging import score

    rng = np.random.default_rng(5)
    position = rng.integers(0, 9, 400)  # entry 9 has no row
    day = rng.integers(20_000, 20_009, 400).astype(np.int32)
    monkeypatch.setattr(score, "DAY_TABLE_CELLS", cells)
    found = score._distinct_days(position, day, 10)
    assert found.tolist() == [len(set(day[position == n].tolist())) for n in range(10)]
    assert score._distinct_days(position[:0], day[:0], 3).tolist() == [0, 0, 0]
