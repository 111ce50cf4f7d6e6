"""The scale benchmark's synthetic catalogue is valid, sized and mixed as asked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.synthetic import CATEGORY_MIX, category_counts, write_catalogue
from pipeline.catalogue.entries import load_categories, read_catalog
from tests.conftest import REPO


def test_a_synthetic_catalogue_is_valid_and_follows_the_mix(tmp_path: Path) -> None:
    counts = write_catalogue(REPO / "data", tmp_path / "catalogue", 420)
    entries = tmp_path / "catalogue" / "entries"
    report = read_catalog([entries], entries, workers=1)
    assert report.problems == []
    assert len(report.entries) == sum(counts.values()) == 420
    assert Counter(e.category for e in report.entries.values()) == counts
    assert len({e.base_url for e in report.entries.values()}) == 420  # a host per entry
    load_categories(tmp_path / "catalogue" / "categories.yaml")


def test_category_counts_add_up_and_follow_the_shares() -> None:
    assert sum(CATEGORY_MIX.values()) == 100
    for total in (7, 1_000, 100_000):
        counts = category_counts(total)
        assert sum(counts.values()) == total
    largest = max(category_counts(100_000).values())
    assert largest == 100_000 * max(CATEGORY_MIX.values()) / 100
