"""The real nightly flow, end to end, on a temporary database and output folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sqlmodel import Session, select

from flows.nightly import nightly
from pipeline.operations.handover import handover_dir
from pipeline.operations.runs import StageFailed
from pipeline.store.tables import PipelineRun, ProbeRow, ReleaseRow, engine_for
from tests.conftest import WriteEntry, make_entry

pytestmark = pytest.mark.prefect


async def test_nightly_publishes_fresh_releases_with_identical_apis(
    prefect_backend: None, write_entry: WriteEntry, settings_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "false")
    write_entry()
    write_entry(make_entry(id="second-api", category="ai"))
    bad = write_entry(make_entry(id="broken-api", category="maps"))

    first = await nightly()
    apis_file = tmp_path / "public" / "api" / "apis.json"
    release_one = json.loads(apis_file.read_text())

    bad.write_text(yaml.safe_dump(make_entry(id="broken-api", category="maps", color="red")))
    second = await nightly()
    release_two = json.loads(apis_file.read_text())

    assert first["version"] != second["version"]
    assert release_one["meta"]["generated"] != release_two["meta"]["generated"]
    assert release_one["meta"]["version"].startswith("2.0.0+")
    assert release_two["apis"] == release_one["apis"]  # the broken file kept its last valid version
    assert [api["id"] for api in release_two["apis"]] == [
        "broken-api",
        "example-weather",
        "second-api",
    ]
    ai = json.loads((tmp_path / "public" / "api" / "categories" / "ai.json").read_text())
    assert [api["id"] for api in ai["apis"]] == ["second-api"]

    with Session(engine_for(settings_env["APIDIR_DATABASE_URL"])) as session:
        runs = session.exec(select(PipelineRun).order_by(PipelineRun.id)).all()
        releases = session.exec(select(ReleaseRow)).all()
    assert [run.state for run in runs] == ["completed", "completed"]
    assert runs[1].entries_invalid == 1 and runs[1].errors[0]["field"] == "color"
    assert runs[1].release_version == second["version"]
    assert {r.version for r in releases} == {first["version"], second["version"]}


async def test_nightly_probes_scores_and_publishes_every_entry(
    prefect_backend: None, write_entry: WriteEntry, settings_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Hosts under .invalid never resolve: the probes fail at DNS without leaving the machine.
    monkeypatch.setenv("APIDIR_PROBE_ATTEMPTS", "1")
    for index in range(2):
        base = f"https://api{index}.example.invalid"
        write_entry(make_entry(id=f"probed-{index}", baseUrl=base,
                               sampleRequest=f'curl "{base}/forecast"'))
    result = await nightly()
    # the result counts the ingest and names the first of each kind, never every id
    assert result["ingest"]["counts"] == {"added": 2, "updated": 0, "unchanged": 0,
                                          "retired": 0, "restored": 0, "invalid": 0,
                                          "renamed": 0}
    assert result["ingest"]["named"]["added"] == ["probed-0", "probed-1"]
    published = json.loads((tmp_path / "public" / "api" / "apis.json").read_text())
    for api in published["apis"]:
        assert api["status"]["state"] == "unreachable"
        assert api["status"]["checkedAt"] is not None
        # the shares, with what they are counted from: one run's two targets, on one day
        assert api["uptime"] == {
            "last1d": 0.0, "last7d": 0.0, "last30d": 0.0,
            "evidence": {window: {"probes": 2, "succeeded": 0, "days": 1}
                         for window in ("last1d", "last7d", "last30d")}}
        score = api["builderScore"]
        # never reached, on one day alone: too few probes for Latency, a provisional grade
        assert score["latency"] is None and score["provisional"] is True
        assert score["rubric"] and score["label"].endswith("% builder-friendly")
        assert score["evidence"]["latency"]["last7d"]["samples"] == 0
        assert score["reasons"]["latency"]
    with Session(engine_for(settings_env["APIDIR_DATABASE_URL"])) as session:
        run = session.get(PipelineRun, result["run"])
        probes = session.exec(select(ProbeRow).where(ProbeRow.run_id == run.id)).all()
    # 4 targets, each failing twice: the run counts 4 conclusions and keeps all 8 looks
    assert run.probes == 4 and len(probes) == 8 and not run.network_suspect
    assert {p.error_class for p in probes} == {"dns"}
    assert sorted((p.confirmation, p.failure_class) for p in probes) == [
        (False, None)] * 4 + [(True, "dead")] * 4
    assert {api["status"]["failure"] for api in published["apis"]} == {"dead"}


async def test_the_hand_over_file_goes_whether_the_run_completes_or_fails_after_scoring(
    prefect_backend: None, write_entry: WriteEntry, settings_env: dict[str, str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APIDIR_PROBE_ENABLED", "false")
    monkeypatch.setenv("APIDIR_STAGE_RETRIES", "0")
    write_entry()
    completed = await nightly()
    assert not list(handover_dir().glob(f"run-{completed['run']}-presented-*"))

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the release folder should be\n")
    monkeypatch.setenv("APIDIR_OUTPUT_DIR", str(blocked))
    with pytest.raises(StageFailed, match="publish stage failed"):
        await nightly()
    with Session(engine_for(settings_env["APIDIR_DATABASE_URL"])) as session:
        failed = session.exec(select(PipelineRun).order_by(PipelineRun.id.desc())).first()
    assert failed.state == "failed" and failed.message.startswith("publish stage failed")
    assert not list(handover_dir().glob(f"run-{failed.id}-presented-*"))
    assert blocked.read_text() == "a file where the release folder should be\n"
