"""Pricing and Depth kept in the store (SQLite and PostgreSQL): judged once per content and
rubric, read back while both hold, judged again from the content when either changed, and
equal to what the content gives whether stored or not."""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel import Session, select

from pipeline.judging.content_scores import content_scores, store_content_scores
from pipeline.judging.score import RUBRIC_VERSION, ContentScores
from pipeline.operations import stages
from pipeline.settings import Settings
from pipeline.store.tables import EntryRow, active_entries, engine_for, session_scope, start_run
from tests.conftest import WriteEntry, make_entry

IDS = ("alpha", "beta", "gamma")


def judged_from_content(session: Session) -> dict[str, ContentScores]:
    return {row.id: ContentScores.of(row.content) for row in active_entries(session)}


def stored_pricing(session: Session, entry_id: str) -> int:
    return session.exec(select(EntryRow.content_scores).where(EntryRow.id == entry_id)
                        ).one()["pricing"]["value"]


def test_stored_scores_are_read_back_and_stale_ones_judged_again(
        write_entry: WriteEntry, ingested_store) -> None:
    for entry_id in IDS:
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    expected = judged_from_content(session)
    assert content_scores(session) == expected  # nothing stored yet: judged from the content
    assert session.exec(select(EntryRow.scored_hash)).all() == [None] * 3  # and not written

    assert store_content_scores(session) == 3
    assert store_content_scores(session) == 0  # all current: nothing judged again
    assert content_scores(session) == expected
    assert content_scores(session, {"beta"}) == {"beta": expected["beta"]}
    row = session.get(EntryRow, "alpha")
    assert (row.scored_hash, row.scored_rubric) == (row.content_hash, RUBRIC_VERSION)

    # What is stored is what is read: a mark put in the store comes back as it is.
    marked = row.content_scores | {"pricing": row.content_scores["pricing"] | {"value": 1}}
    session.execute(update(EntryRow).where(EntryRow.id == "alpha").values(content_scores=marked))
    session.commit()
    assert content_scores(session)["alpha"].pricing.value == 1

    # Another content hash or another rubric: judged again from the content, then stored.
    session.execute(update(EntryRow).where(EntryRow.id == "alpha").values(content_hash="other"))
    session.execute(update(EntryRow).where(EntryRow.id == "beta").values(scored_rubric="1.0.0"))
    session.commit()
    assert content_scores(session) == expected
    assert stored_pricing(session, "alpha") == 1  # reading never writes
    assert store_content_scores(session) == 2
    assert stored_pricing(session, "alpha") == expected["alpha"].pricing.value


def test_a_changed_entry_is_judged_on_its_new_content(
        write_entry: WriteEntry, ingested_store) -> None:
    write_entry(make_entry(id="alpha"))
    session = ingested_store()
    store_content_scores(session)
    before = content_scores(session)["alpha"]
    write_entry(make_entry(id="alpha", hasFreeTier=None, pricing=None))
    session = ingested_store()
    after = content_scores(session)["alpha"]
    assert after == judged_from_content(session)["alpha"]
    assert after.pricing.value is None and before.pricing.value is not None
    assert store_content_scores(session) == 1
    assert content_scores(session)["alpha"] == after


def test_the_ingest_stage_stores_them(write_entry: WriteEntry, settings_env) -> None:
    for entry_id in IDS:
        write_entry(make_entry(id=entry_id))
    settings = Settings()
    with session_scope(engine_for(settings.database_url)) as session:
        run_id = start_run(session, "nightly").id
    stages.ingest_entries(settings, run_id)
    with session_scope(engine_for(settings.database_url)) as session:
        rows = session.exec(select(EntryRow)).all()
        assert {row.id for row in rows} == set(IDS)
        assert all(row.scored_hash == row.content_hash for row in rows)
        assert content_scores(session) == judged_from_content(session)
        assert store_content_scores(session) == 0
