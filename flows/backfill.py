"""The backfill flow: recompute daily rollups and scores over a date range, then republish.

Run by hand when the rubric changed or nightly runs were missed. Each day is
computed from the stored probe history as it stood at the end of that day, so a
second run over the same range writes the same rows.
"""

from __future__ import annotations

import asyncio
from datetime import date
from pathlib import Path
from typing import Any

from prefect import flow

from flows.nightly import RUN_TIMEOUT, probe, publish, rollup, score
from pipeline.judging.evidence import days_between
from pipeline.operations.handover import discard
from pipeline.operations.report import LISTED
from pipeline.operations.runs import (
    alert_crash,
    close_failed_run,
    complete_run,
    fail_run,
    open_run,
    report_left_out,
    report_network_suspect,
    run_stage,
    with_retries,
)
from pipeline.operations.stages import (
    Selection,
    changes_of_run,
    refuse_pruned_days,
    warm_workers,
)
from pipeline.settings import Settings
from pipeline.store.tables import utcnow


@flow(name="backfill", on_crashed=[alert_crash], on_failure=[close_failed_run],
      timeout_seconds=RUN_TIMEOUT)
async def backfill(
    start: date,
    end: date,
    entries: list[str] | None = None,
    categories: list[str] | None = None,
    reprobe: bool = False,
) -> dict[str, Any]:
    """Recompute the rollups of every day from `start` to `end` (both included) for the chosen
    entries (default: all), then republish the current release; `reprobe` probes them first."""
    days = days_between(start, end)
    settings = Settings()
    # What the operator named is checked before the run is opened: a typo is refused with no
    # run recorded and no one alerted.
    selection = Selection(tuple(entries or ()), tuple(categories or ()))
    await run_stage("select", asyncio.to_thread(refuse_pruned_days, settings, days))
    chosen = await run_stage("select", asyncio.to_thread(selection.entry_ids, settings))
    warm_workers()
    run_id = await open_run(settings, "backfill")
    presented: Path | None = None
    try:  # the hand-over file goes however the run ends
        try:
            if reprobe:
                await run_stage("probe",
                                with_retries(probe, settings)(settings, run_id, selection))
                await run_stage("probe", report_network_suspect(settings, "backfill", run_id))
            rows = await run_stage(
                "rollup", with_retries(rollup, settings)(settings, days, selection, run_id))
            now = utcnow()
            presented = await run_stage("score", score(settings, run_id, now))
            version = await run_stage(
                "publish", with_retries(publish, settings)(settings, run_id, presented, now)
            )
        except Exception as exc:
            await fail_run(settings, run_id, exc, "backfill")
            raise
        run = await complete_run(settings, run_id, presented,
                                 changes_of_run(settings, run_id), None)
    finally:
        discard(presented)
    await report_left_out(settings, "backfill", run_id)  # told as the completed run it is
    return {
        "run": run_id,
        "days": [day.isoformat() for day in days],
        "chosen": None if chosen is None else len(chosen),  # None: every entry
        "entries": None if chosen is None else chosen[:LISTED],
        "rows": rows,
        "version": version,
        "published": run.entries_published,
    }


if __name__ == "__main__":
    import sys

    first, last = (date.fromisoformat(arg) for arg in sys.argv[1:3])
    print(asyncio.run(backfill(first, last)))
