"""Pricing and Depth, which an entry's curated content alone decides, kept in the store.

They are judged when the content is stored (the ingest stage) and read back by the score and
rollup stages as long as the content hash and the rubric they were judged by still hold; an
entry whose stored ones are missing or stale is judged from its content there and then, so
the scores never depend on whether the ingest stage filled them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

import orjson
from sqlalchemy import Text, bindparam, cast, or_, update
from sqlmodel import Session, col, select

from pipeline.judging.score import RUBRIC_VERSION, ContentScores
from pipeline.store.tables import EVERY_ENTRY, EntryRow, EntrySpan, active_entry_ids

_CHUNK = 1_000  # entries whose content is loaded at once


def _stale() -> object:
    """Entries whose stored content scores are missing, of older content or another rubric."""
    return or_(col(EntryRow.scored_hash).is_(None),
               col(EntryRow.scored_hash) != col(EntryRow.content_hash),
               col(EntryRow.scored_rubric).is_(None),
               col(EntryRow.scored_rubric) != RUBRIC_VERSION)


def _judged(session: Session, ids: list[str]) -> Iterator[tuple[str, str, ContentScores]]:
    """(id, content hash, content scores) of `ids`, judged from their content, a chunk at a
    time so that memory holds a chunk of contents, never the catalogue's."""
    for start in range(0, len(ids), _CHUNK):
        statement = select(EntryRow.id, EntryRow.content_hash, EntryRow.content).where(
            col(EntryRow.id).in_(ids[start : start + _CHUNK]))
        for entry_id, digest, content in session.exec(statement):
            yield entry_id, digest, ContentScores.of(content)


def store_content_scores(session: Session) -> int:
    """Judge and store the content scores of every entry whose stored ones are missing or
    stale (new or changed content, a new rubric); how many were judged. Committed."""
    ids = sorted(session.exec(select(EntryRow.id).where(_stale())))
    rows = [{"entry_id": entry_id, "scores": scores.stored(), "digest": digest}
            for entry_id, digest, scores in _judged(session, ids)]
    if rows:
        table = EntryRow.__table__
        session.execute(
            update(table).where(table.c.id == bindparam("entry_id")).values(
                content_scores=bindparam("scores"), scored_hash=bindparam("digest"),
                scored_rubric=RUBRIC_VERSION),
            rows)
    session.commit()
    return len(rows)


def content_scores(session: Session, entry_ids: Collection[str] | None = None,
                   span: EntrySpan = EVERY_ENTRY) -> dict[str, ContentScores]:
    """The content scores of the active entries (in `span`; or of those of them in
    `entry_ids`), by id: read back where stored and current, else judged from the content
    (nothing is written)."""
    statement = select(EntryRow.id, cast(EntryRow.content_scores, Text)).where(
        col(EntryRow.retired_at).is_(None), col(EntryRow.content_scores).is_not(None),
        span.holds(EntryRow.id))
    wanted = None if entry_ids is None else set(entry_ids)
    scores = {
        entry_id: ContentScores.from_stored(orjson.loads(stored))
        for entry_id, stored in session.connection().execute(statement.where(~_stale())).all()
        if wanted is None or entry_id in wanted
    }
    missing = sorted(entry_id for entry_id in active_entry_ids(session, span)
                     if entry_id not in scores and (wanted is None or entry_id in wanted))
    scores.update((entry_id, judged) for entry_id, _, judged in _judged(session, missing))
    return scores


def judged_content_scores(session: Session, entry_ids: Collection[str]) -> dict[str, ContentScores]:
    """The content scores of `entry_ids`, retired or not, judged from their content (those the
    store does not hold are passed over): for the few entries a past day's rollup holds that
    `content_scores`, of the active entries, leaves out."""
    return {entry_id: judged for entry_id, _, judged in _judged(session, sorted(entry_ids))}
