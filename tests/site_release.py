"""A published release for the page and host tests: the real catalogue plus one hostile entry.

It goes through the real path: entry files read and validated, ingested into a SQLite file,
scored from a probe history, and published by `publish_release`. Three entries carry the
three status forms (the unreachable one failed twice); the hostile entry holds HTML in every
free-text field it can, the bare entry has none of the optional fields, one entry is
deprecated by its provider and one has a name without spaces far wider than a phone.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import yaml
from sqlmodel import Session

from pipeline.catalogue.entries import load_categories, read_catalog
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.contract import ONLINE_NOTE, Status
from pipeline.judging.present import Presented
from pipeline.judging.score import HISTORY_COLUMNS, entry_uptimes, score_entries
from pipeline.release.publish import publish_release
from pipeline.store.tables import active_entries, make_engine
from tests.conftest import REPO, make_entry

NOW = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
BASE_URL = "https://directory.test"

LIVE_ID, ONLINE_ID, UNREACHABLE_ID = "frankfurter", "openai", "hostile-html"
HOSTILE_NAME = '<img src=x onerror="alert(1)">Hostile API'
HOSTILE_DESCRIPTION = 'Shows <script>alert("pwned")</script> and <b>bold</b> tags as text.'
HOSTILE_ENTRY = make_entry(
    id=UNREACHABLE_ID,
    name=HOSTILE_NAME,
    provider="<em>Evil</em> Corp",
    category="security",
    description=HOSTILE_DESCRIPTION,
    longDescription="</p></article><h1>injected</h1>",
    tags=["hostile", "escaping"],
    authType="none",
    authDescription=None,
    authExample=None,
    baseUrl="https://hostile.example/v1",
    rateLimit="<u>100</u> requests/minute",
    sampleRequest='curl "https://hostile.example/v1/forecast?q=<b>x</b>"',
    sampleResponse='{"html": "<script>alert(2)</script>"}',
)

# An entry with the required fields alone: every optional one (pricing, description, endpoints,
# samples, sources …) left out, as the entry schema allows.
BARE_ID = "bare-minimum"
BARE_ENTRY = {key: value for key, value in make_entry(
    id=BARE_ID, name="Bare Minimum API", provider="Bare Corp", category="storage",
    baseUrl="https://bare.example/v1").items()
    if key in ("id", "name", "provider", "category", "authType", "baseUrl")}

# An entry its provider deprecated, naming its successor, with the provider's words.
DEPRECATED_ID = "old-forecast"
DEPRECATION_NOTE = "Version 1 is retired; move to the forecast API of Open-Meteo."
DEPRECATED_ENTRY = make_entry(
    id=DEPRECATED_ID, name="Old Forecast API", category="weather",
    deprecated={"on": "2026-10-01", "successor": "open-meteo-forecast",
                "note": DEPRECATION_NOTE},
)

# An entry whose name and provider are single words far wider than a phone.
LONG_NAME_ID = "long-name"
LONG_NAME = "Supercalifragilistic" * 15
# It was renamed: its former id's addresses redirect to its own.
FORMER_ID = "long-name-before"
LONG_NAME_ENTRY = make_entry(id=LONG_NAME_ID, name=LONG_NAME, provider="Expialidocious" * 15,
                             category="developer", formerIds=[FORMER_ID])


@dataclass(frozen=True)
class SampleRelease:
    folder: Path
    statuses: dict[str, Status]


def probe_history() -> pd.DataFrame:
    """Ten probes per entry over the last few days (Latency's minimum: probes on three days):
    one entry fast and live, one 401, one down."""
    rows = []
    for step in range(10):
        at = NOW - timedelta(hours=6 * step)
        rows.append((LIVE_ID, "https://api.frankfurter.dev/v1/latest", at, "live", 80.0 + step, 1))
        rows.append((ONLINE_ID, "https://api.openai.com/v1/models", at, "online", 300.0, 1))
        outcome = "unreachable" if step < 5 else "online"
        took = None if outcome == "unreachable" else 900.0
        rows.append((UNREACHABLE_ID, "https://hostile.example/v1/forecast", at, outcome, took, 1))
    return pd.DataFrame(rows, columns=list(HISTORY_COLUMNS))


def sample_statuses() -> dict[str, Status]:
    checked = NOW - timedelta(minutes=1)
    return {
        LIVE_ID: Status(state="live", http_status=200, response_time_ms=84, checked_at=checked,
                        url="https://api.frankfurter.dev/v1/latest"),
        ONLINE_ID: Status(state="online", http_status=401, response_time_ms=312,
                          checked_at=checked, note=ONLINE_NOTE,
                          url="https://api.openai.com/v1/models"),
        UNREACHABLE_ID: Status(state="unreachable", checked_at=checked,
                               url="https://hostile.example/v1/forecast", failure="dead"),
    }


def publish_sample_release(root: Path, pages: bool = True) -> SampleRelease:
    """Publish the sample release into `root/public` (its reader pages too, unless `pages` is
    off: a JSON-only release) and return where it is."""
    data = root / "data"
    shutil.copytree(REPO / "data", data)
    hostile = data / "entries" / "security" / f"{UNREACHABLE_ID}.yaml"
    hostile.write_text(yaml.safe_dump(HOSTILE_ENTRY, sort_keys=False))
    bare = data / "entries" / "storage" / f"{BARE_ID}.yaml"
    bare.write_text(yaml.safe_dump(BARE_ENTRY, sort_keys=False))
    deprecated = data / "entries" / "weather" / f"{DEPRECATED_ID}.yaml"
    deprecated.write_text(yaml.safe_dump(DEPRECATED_ENTRY, sort_keys=False))
    long_name = data / "entries" / "developer" / f"{LONG_NAME_ID}.yaml"
    long_name.write_text(yaml.safe_dump(LONG_NAME_ENTRY, sort_keys=False))
    report = read_catalog([data / "entries"], data / "entries")
    assert not report.problems, report.problems
    engine = make_engine(f"sqlite:///{root / 'var' / 'apidir.db'}")
    history = probe_history()
    statuses = sample_statuses()
    try:
        with Session(engine) as session:
            ingest_catalog(session, report)
            contents = {row.id: row.content for row in active_entries(session)}
            scores = score_entries(contents, history, NOW)
            presented = Presented(
                statuses=statuses,
                scores={entry_id: score.contract() for entry_id, score in scores.items()},
                uptimes=entry_uptimes(history, NOW),
            )
            categories = load_categories(data / "categories.yaml")
            publish_release(session, root / "public", BASE_URL, categories, NOW, presented,
                            pages=pages)
    finally:
        engine.dispose()
    return SampleRelease(root / "public", statuses)
