"""The store after weeks of nights: a night's shard plan goes once a later night plans."""

from __future__ import annotations

import pytest
from sqlmodel import func, select

from pipeline.settings import Settings
from pipeline.store.tables import (
    ProbeShardRow,
    finish_run,
    start_run,
)
from tests.conftest import WriteEntry, make_entry


def several_hosts(write_entry: WriteEntry, count: int) -> None:
    for n in range(count):
        base = f"https://api{n}.example.com"
        write_entry(make_entry(id=f"hosted-{n}", baseUrl=base, sampleRequest=f'curl "{base}/x"'))


def test_a_nights_shard_plan_goes_once_a_later_night_plans(
    database_url: str, write_entry: WriteEntry, settings_env: dict[str, str],
    ingested_store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each sharded night stores its targets by shard; once the night has ended they are read
    no more, and the next night's plan deletes them: after many nights the table holds the
    running night's shards alone. A night still running keeps its own."""
    from pipeline.operations import stages
    from pipeline.store.shards import load_shard

    several_hosts(write_entry, 6)
    monkeypatch.setenv("APIDIR_PROBE_SHARDS", "3")
    session = ingested_store()
    settings = Settings()

    def stored() -> dict[int, int]:
        rows = session.exec(select(ProbeShardRow.run_id, func.count()).group_by(
            ProbeShardRow.run_id)).all()
        session.commit()
        return dict(rows)

    for night in range(8):
        run = start_run(session, "nightly")
        shards = stages.store_shard_plan(settings, run.id)
        assert len(shards) == 3 and stored() == {run.id: 3}
        assert load_shard(session, run.id, 2)[0].targets == shards[2].targets
        finish_run(session, run, "failed" if night % 3 else "completed")

    still = start_run(session, "nightly")  # a night that goes on while the next one plans
    stages.store_shard_plan(settings, still.id)
    after = start_run(session, "backfill")
    stages.store_shard_plan(settings, after.id)
    assert stored() == {still.id: 3, after.id: 3}
    finish_run(session, still, "completed")
    finish_run(session, after, "completed")
    last = start_run(session, "nightly")
    stages.store_shard_plan(settings, last.id)
    assert stored() == {last.id: 3}


