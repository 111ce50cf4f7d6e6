"""The run's summary at scale: the entries table lists a small catalogue whole and, beyond
its bound, the entries most worth a look (changed, then failing), and the report says so and
where every entry is published; the run's record reads the entries' figures alone."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime

from pipeline.contract import (
    BUILDER_SCORE_EXAMPLES,
    UPTIME_EXAMPLE,
    BuilderScore,
    Status,
    Uptime,
)
from pipeline.judging.changes import Change
from pipeline.judging.present import Presented
from pipeline.operations.handover import discard, load_entry_figures, save_presented
from pipeline.operations.report import entry_figures, entry_table, run_report
from pipeline.store.tables import PipelineRun

CHECKED = datetime(2026, 11, 24, 2, 30, tzinfo=UTC)
STATES = {
    "a-live": "live",
    "b-down": "unreachable",
    "c-auth": "online",
    "d-live": "live",
    "e-flipped": "live",
}


def figures() -> dict[str, dict]:
    statuses = {
        entry_id: Status(
            state=state, checked_at=CHECKED, http_status=None if state == "unreachable" else 200
        )
        for entry_id, state in STATES.items()
    }
    scores = {
        entry_id: BuilderScore.model_validate(BUILDER_SCORE_EXAMPLES[0]) for entry_id in STATES
    }
    return entry_figures(statuses, scores)


def test_a_small_catalogue_is_listed_whole_with_each_entrys_figures() -> None:
    categories = {entry_id: "weather" for entry_id in [*STATES, "f-new"]}
    rows = entry_table(categories, figures())
    assert {row["entry"]: row["state"] for row in rows} == {**STATES, "f-new": "unchecked"}
    row = next(row for row in rows if row["entry"] == "a-live")
    score = BUILDER_SCORE_EXAMPLES[0]
    assert row == {
        "entry": "a-live",
        "category": "weather",
        "state": "live",
        "httpStatus": 200,
        "responseTimeMs": None,
        "checkedAt": "2026-11-24T02:30:00Z",  # as the published documents write it
        "grade": score["grade"],
        "percent": score["percent"],
        "pricing": score["pricing"],
        "latency": score["latency"],
        "depth": score["depth"],
    }


def test_an_entrys_figures_are_the_same_from_its_values_as_models_or_in_their_json_form() -> None:
    """The score stage hands over a status and a builder score in their JSON form; the
    in-memory path may hold models. The run's record shows the same figures either way."""
    model = BuilderScore.model_validate(BUILDER_SCORE_EXAMPLES[0])
    status = Status(state="live", checked_at=CHECKED, http_status=200)
    json_form = {"a": model.model_dump(mode="json", by_alias=True)}
    status_form = {"a": status.model_dump(mode="json")}
    assert entry_figures({"a": status}, json_form) == entry_figures({"a": status}, {"a": model})
    assert entry_figures(status_form, json_form) == entry_figures({"a": status}, {"a": model})
    assert entry_figures(status_form, {})["a"]["checkedAt"] == "2026-11-24T02:30:00Z"
    assert entry_figures({"a": status}, json_form)["a"]["grade"] == model.grade
    assert entry_figures({}, json_form)["a"]["state"] == "unchecked"


def test_beyond_its_bound_the_table_lists_changes_then_failures() -> None:
    categories = {entry_id: "weather" for entry_id in [*STATES, "f-new"]}
    flipped = Change("e-flipped", "E", "unreachable", "live", CHECKED)
    rows = entry_table(categories, figures(), [flipped], limit=4)
    assert [row["entry"] for row in rows] == ["e-flipped", "b-down", "c-auth", "f-new"]


def test_the_report_counts_states_and_says_what_the_table_holds() -> None:
    run = PipelineRun(id=7, flow="nightly", state="completed")
    dataset = "https://apis.example/api/apis.json"
    report = run_report(run, figures(), table=(4, 6, dataset))
    assert "| live | 3 |" in report and "| unreachable | 1 |" in report
    assert "The `nightly-entries` table lists 4 of 6 entries" in report
    assert dataset in report
    whole = run_report(run, figures(), table=(6, 6, dataset))
    assert "The `nightly-entries` table lists every entry;" in whole


def test_the_run_record_reads_the_entries_figures_alone_from_the_hand_over() -> None:
    statuses = {"a-live": Status(state="live", http_status=200, checked_at=CHECKED)}
    scores = {"a-live": BuilderScore.model_validate(BUILDER_SCORE_EXAMPLES[0])}
    scores["b-scored"] = scores["a-live"]  # scored, never probed
    uptimes = {"c-neither": Uptime.model_validate(UPTIME_EXAMPLE).model_dump(mode="json")}
    presented = Presented(statuses=statuses, scores=scores, uptimes=uptimes)
    path = save_presented(presented.items(), run_id=7)
    try:
        assert load_entry_figures(path) == entry_figures(statuses, scores)
        assert list(load_entry_figures(path)) == ["a-live", "b-scored"]
    finally:
        discard(path)


def test_a_large_night_is_summed_up_within_bounds() -> None:
    """A first night of 100,000 new entries, as many state changes and validation errors: the
    report names the first of each and counts the rest (Prefect refuses an event over 1.5 MB)."""
    from pipeline.catalogue.ingest import IngestSummary
    from pipeline.operations.report import LISTED, IngestBrief

    many = 100_000
    added = [f"api-{n:06d}" for n in range(many)]
    changes = [Change(entry_id, "E", "unchecked", "live", CHECKED) for entry_id in added]
    errors = [{"file": f"data/entries/ai/{entry_id}.yaml", "line": 3, "entry": entry_id,
               "field": "name", "rule": "missing-required-field", "message": "missing"}
              for entry_id in added]
    run = PipelineRun(id=8, flow="nightly", state="completed", errors=errors)
    unchanged = [f"old-{n:06d}" for n in range(many)]
    brief = IngestBrief.of(IngestSummary(added=added, unchanged=unchanged))
    assert len(json.dumps(asdict(brief))) < 20_000  # the ingest task's result, at any size
    assert brief.counts["unchanged"] == many and "unchanged" not in brief.named
    report = run_report(run, figures(), changes, brief)
    assert len(report.encode()) < 100_000
    assert f"- Updated: 0; unchanged: {many:,}" in report
    assert f"`api-{LISTED - 1:06d}` and {many - LISTED:,} more" in report
    assert f"`api-{LISTED:06d}`" not in report
    assert f"… and {many - LISTED:,} more: every change is published in `api/changes.json`." in (
        report)
    assert f"… and {many - LISTED:,} more: `apidir validate` lists every one." in report
    assert f"## State changes since the previous run ({many})" in report
    assert f"## Validation errors ({many})" in report


def test_the_report_says_which_entries_the_release_left_out() -> None:
    from pipeline.release.publish import LeftOut

    left_out = LeftOut("b-down", (("baseUrl", "holds U+00E9, which a URL must percent-encode "
                                               "(%C3%A9)"),), "data/entries/ai/b-down.yaml")
    run = PipelineRun(id=3, flow="nightly", started_at=CHECKED, state="completed",
                      release_version="2.0.0+20261124.1", entries_published=4,
                      errors=[left_out.problem()])
    report = run_report(run, figures())
    assert ("**Left out of the release:** 1 stored entries the release's check refused (rule "
            "`release-contract` below); every other entry is published. Fix their files."
            in report)
    assert ("| data/entries/ai/b-down.yaml |  | b-down | baseUrl | release-contract | field "
            "baseUrl: holds "
            "U+00E9, which a URL must percent-encode (%C3%A9); left out of the release |"
            in report)


def test_the_report_lists_the_runs_that_ended_unjudged_since_the_previous_one(
    write_entry, ingested_store,
) -> None:
    """A run that failed or crashed before its probes were judged stored probes that count
    nowhere: the next completed run's report lists each one ended since the previous
    completed run of its flow (of any flow: a backfill's too), with the probes it stored and
    its record's line, newest first; those told by an earlier report, those judged and those
    completed are not listed. Beyond its bound the list counts the rest."""
    from datetime import timedelta

    from pipeline.operations.report import UnjudgedRuns, unjudged_since_previous
    from pipeline.probing.probe import ProbeResult
    from pipeline.store.history import add_probes

    write_entry()
    session = ingested_store()

    def ended(flow: str, state: str, hours: int, judged: bool = False,
              message: str | None = None) -> PipelineRun:
        at = CHECKED + timedelta(hours=hours)
        run = PipelineRun(flow=flow, state=state, started_at=at - timedelta(minutes=30),
                          finished_at=at, judged_at=at if judged else None, message=message)
        session.add(run)
        session.commit()
        run.last_run_at_end = run.id  # ended before the next one started
        session.commit()
        return run

    told = ended("nightly", "failed", -2, message="ingest stage failed: told before")
    before = ended("nightly", "completed", -1, judged=True)
    failed = ended("nightly", "failed", 1, message="ingest stage failed: EmptyCatalogError: …")
    crashed = ended("backfill", "crashed", 2,
                    message="abandoned: the process running it (pid 4242 on h) is gone")
    url = "https://api.example.com/v1/forecast"
    add_probes(session, crashed.id, [ProbeResult(
        url=url, entry_id="example-weather", endpoint_id=None, checked_at=CHECKED,
        outcome="unreachable", reason=None, error_class="refused", http_status=None,
        total_ms=None, dns_ms=None, connect_ms=None, ttfb_ms=None, final_url=None,
        attempts=1, redirects=0, error="refused")] * 3)
    session.commit()
    ended("nightly", "failed", 3, judged=True, message="publish stage failed: judged first")
    ended("backfill", "completed", 4)
    run = ended("nightly", "completed", 5, judged=True)

    unjudged = unjudged_since_previous(session, run)
    assert unjudged.count == 2
    assert [(listed.id, stored) for listed, stored in unjudged.listed] == [
        (crashed.id, 3), (failed.id, 0)]
    report = run_report(run, figures(), unjudged=unjudged)
    assert "## Runs ended unjudged since the previous completed run (2)" in report
    assert (f"| {crashed.id} | backfill | crashed | 2026-11-24 04:00 UTC | 2026-11-24 04:30 UTC "
            f"| 3 | abandoned: the process running it (pid 4242 on h) is gone |") in report
    assert f"| {failed.id} | nightly | failed |" in report
    assert "told before" not in report

    first = unjudged_since_previous(session, before, limit=1)
    assert (first.count, [listed.id for listed, _ in first.listed]) == (1, [told.id])
    bounded = run_report(run, figures(), unjudged=unjudged_since_previous(session, run, 1))
    assert "… and 1 more: every run is in the store's `pipeline_run` table." in bounded
    calm = run_report(run, figures(), unjudged=UnjudgedRuns([], 0))
    assert ("## Runs ended unjudged since the previous completed run (0)\n\nEvery run that "
            "ended since then was judged.") in calm


def test_the_runs_ended_unjudged_are_ordered_by_their_ids_not_by_machines_clocks(
    write_entry, ingested_store,
) -> None:
    """The previous completed run ended on a machine whose clock ran an hour ahead: a backfill
    started after it on a machine of true time, which failed before that run's stamped end, is
    listed all the same (by the clocks alone it fell before the window, and no report told
    it). A run started before it and closed after it (reaped, or closed by hand) is listed by
    its end; one that ended before it was told by its report and is not listed again."""
    from datetime import timedelta

    from pipeline.operations.report import unjudged_since_previous
    from pipeline.store.tables import finish_run, start_run

    write_entry()
    session = ingested_store()

    def clocked(run: PipelineRun, started: int, finished: int) -> PipelineRun:
        """`run` as the clocks of the machines that started and ended it stamped it."""
        run.started_at = CHECKED + timedelta(minutes=started)
        run.finished_at = CHECKED + timedelta(minutes=finished)
        session.commit()
        return run

    told = start_run(session, "backfill")
    reaped = start_run(session, "nightly")
    finish_run(session, told, "failed")
    previous = start_run(session, "nightly")
    finish_run(session, previous, "completed")
    behind = start_run(session, "backfill")
    finish_run(session, behind, "failed")
    finish_run(session, reaped, "crashed")  # closed long after the previous run
    run = start_run(session, "nightly")
    finish_run(session, run, "completed")
    clocked(told, -30, -20)
    clocked(reaped, -10, 300)
    clocked(previous, 0, 70)  # its clock an hour ahead: it ended at 10 true
    clocked(behind, 20, 30)  # after it, on a machine of true time
    clocked(run, 1440, 1500)

    unjudged = unjudged_since_previous(session, run)
    assert sorted(listed.id for listed, _ in unjudged.listed) == [reaped.id, behind.id]
    assert unjudged.count == 2 and told.id not in [listed.id for listed, _ in unjudged.listed]


def test_a_run_started_before_the_previous_one_is_placed_by_the_store_not_by_its_clock(
    write_entry, ingested_store,
) -> None:
    """Runs started before the previous completed run, closed by machines whose clocks
    disagree with its own: one closed after it, stamped by a clock an hour behind, is listed
    (no report told it); one closed before it, stamped by a clock an hour ahead, is not listed
    again (the previous run's report told it)."""
    from datetime import timedelta

    from pipeline.operations.report import unjudged_since_previous
    from pipeline.store.tables import claim_run_end, finish_run, start_run

    write_entry()
    session = ingested_store()
    told, untold = start_run(session, "backfill"), start_run(session, "backfill")
    finish_run(session, told, "failed", "probe stage failed: told before")
    previous = start_run(session, "nightly")
    finish_run(session, previous, "completed")
    told_by_previous = unjudged_since_previous(session, previous)
    assert claim_run_end(session, untold, "crashed", "abandoned: closed by hand")
    run = start_run(session, "nightly")
    finish_run(session, run, "completed")
    ended = previous.finished_at
    told.finished_at = ended + timedelta(minutes=50)  # its clock an hour ahead
    untold.finished_at = ended - timedelta(minutes=50)  # its closer's an hour behind
    session.commit()

    assert [listed.id for listed, _ in told_by_previous.listed] == [told.id]
    unjudged = unjudged_since_previous(session, run)
    assert [listed.id for listed, _ in unjudged.listed] == [untold.id]
    assert unjudged.count == 1
