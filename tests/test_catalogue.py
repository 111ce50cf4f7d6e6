"""The curated catalogue itself: size, spread, completeness and provenance of every entry."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime

import pytest
import yaml

from pipeline.catalogue.entries import EntryFile, read_catalog
from pipeline.contract import CATEGORY_IDS
from tests.conftest import REPO

ENTRIES = REPO / "data" / "entries"
FILES = sorted(ENTRIES.rglob("*.yaml"))
# Keys that may be null, and when: no free tier, no per-unit charge; startingCentsPerMonth is
# null where the provider publishes no price (the seed's "enterprise or unknown").
NULLABLE = {("pricing", "freeQuota"), ("pricing", "unitCost")}
# The seed's fields: every entry fills each of them, but `color`, which comes only from the
# provider's own brand material, and `rateLimit`, which is left out where the provider states
# none (the lint refuses one saying only that nothing is published). The optional
# additions (openapiUrl, statusPageUrl, sdks) are filled only where the provider has one, and
# `deprecated` only where the provider deprecated the API.
OPTIONAL_ADDITIONS = ("color", "rate_limit", "openapi_url", "status_page_url", "sdks",
                      "deprecated", "former_ids")
ENTRY_KEYS = [
    name for name in EntryFile.model_fields
    if name not in ("sources", "verified", *OPTIONAL_ADDITIONS)
]


def test_the_catalogue_is_valid_and_large_enough() -> None:
    report = read_catalog([ENTRIES], ENTRIES)
    assert report.ok, "\n".join(map(str, report.problems))
    per_category = Counter(entry.category for entry in report.entries.values())
    assert len(report.entries) >= 70
    assert {c: per_category[c] for c in CATEGORY_IDS if per_category[c] < 5} == {}


def test_some_entries_need_no_auth_and_say_so() -> None:
    report = read_catalog([ENTRIES], ENTRIES)
    open_ones = [e for e in report.entries.values() if e.auth_type == "none"]
    assert len(open_ones) >= 3
    for entry in open_ones:
        assert entry.auth_example is not None and entry.auth_example.startswith("#")
        assert "no auth" in entry.auth_example.lower()


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_entry_fills_every_field(path) -> None:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    entry = EntryFile.model_validate(raw)
    content = entry.content()
    missing = [
        EntryFile.model_fields[k].alias or k
        for k in ENTRY_KEYS
        if content.get(EntryFile.model_fields[k].alias or k) in (None, "", [])
    ]
    assert missing == [], f"{path}: unset fields"
    pricing = content["pricing"]
    for key in ("model", "startingCentsPerMonth", "freeQuota", "tiers", "unitCost", "details"):
        assert key in pricing, f"{path}: pricing.{key} is absent"
        if ("pricing", key) not in NULLABLE and key != "startingCentsPerMonth":
            assert pricing[key] not in (None, "", []), f"{path}: pricing.{key} is empty"
    if pricing["model"] == "free" or entry.has_free_tier:
        assert pricing["startingCentsPerMonth"] == 0, f"{path}: a free start costs 0"
    # A quota only with a free tier; a free tier whose renewing allowance has no stated size
    # leaves it out (`pricing-quota-amount`) and says its conditions in the tier's `included`.
    assert pricing["freeQuota"] is None or entry.has_free_tier, f"{path}: freeQuota"
    assert len(content["endpoints"]) >= 3, f"{path}: fewer than 3 endpoints"
    for endpoint in content["endpoints"]:
        assert endpoint.get("method") and endpoint.get("path") and endpoint.get("description")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_entry_records_its_sources_and_verification_date(path) -> None:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    entry = EntryFile.model_validate(raw)
    assert entry.sources, f"{path}: no sources"
    assert all(source.startswith("https://") for source in entry.sources)
    assert isinstance(entry.verified, date), f"{path}: no verification date"
    # today as the directory counts its days, in UTC: the machine's own zone would move it
    today = datetime.now(UTC).date()
    assert entry.verified <= today, f"{path}: verified in the future (today is {today}, UTC)"


def test_provenance_fields_are_never_published() -> None:
    report = read_catalog([ENTRIES], ENTRIES)
    for entry in report.entries.values():
        assert "sources" not in entry.content() and "verified" not in entry.content()
