"""`apidir publish`: scores the stored history and publishes, keeping history and changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.store.history import plan_targets, record_probes
from pipeline.store.tables import start_run
from tests.conftest import WriteEntry
from tests.test_history import result


@pytest.fixture
def stored(settings_env: dict[str, str], write_entry: WriteEntry, ingested_store) -> Path:
    """One entry in the store, probed live once; the output folder to publish to."""
    write_entry()
    session = ingested_store()
    target = plan_targets(session)[0]
    record_probes(session, start_run(session, "nightly"),
                  [result(target.url, "live", 200, 90.0, endpoint=target.endpoint_id)])
    return Path(settings_env["APIDIR_OUTPUT_DIR"])


def test_publish_scores_the_stored_history(stored: Path) -> None:
    outcome = CliRunner().invoke(app, ["publish"])
    assert outcome.exit_code == 0, outcome.output
    published = json.loads((stored / "api" / "apis.json").read_text())
    entry, = published["apis"]
    assert entry["status"]["state"] == "live" and entry["status"]["httpStatus"] == 200
    assert entry["builderScore"]["label"].endswith("% builder-friendly")
    assert (f"published {published['meta']['version']}: 1 entries; pages of 1 entries, 0 spliced"
            in outcome.output)
    assert (stored / "index.html").is_file() and (stored / "apis" / f"{entry['id']}.html").is_file()
    releases = json.loads((stored / "api" / "releases.json").read_text())
    assert releases["releases"][0]["counts"]["byState"]["live"] == 1


def test_a_second_publish_says_how_many_pages_it_spliced(stored: Path) -> None:
    """The previous release's entry pages are reused for their static parts, and the line says
    so: an operator sees why a publish took the time it did."""
    assert CliRunner().invoke(app, ["publish"]).exit_code == 0
    again = CliRunner().invoke(app, ["publish"])
    assert again.exit_code == 0, again.output
    version = json.loads((stored / "api" / "apis.json").read_text())["meta"]["version"]
    assert f"published {version}: 1 entries; pages of 1 entries, 1 spliced" in again.output


def test_pages_can_be_left_out(stored: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APIDIR_PUBLISH_PAGES", "false")
    outcome = CliRunner().invoke(app, ["publish"])
    assert outcome.exit_code == 0 and "entries" in outcome.output and "pages" not in outcome.output
    assert (stored / "api" / "apis.json").is_file()
    assert not (stored / "index.html").exists() and not (stored / "apis").exists()
