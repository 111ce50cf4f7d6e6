"""Ingest: the curated entry files into the store, idempotently.

A valid file upserts its entry; an invalid one leaves the stored version as it
was (so one bad edit never unpublishes an API); an entry whose file is gone is
retired, never deleted.

Built for large catalogues: what is stored is read once as (id, hash, state)
columns, new entries and their endpoints go in as bulk inserts, and only changed
or restored entries take the row-by-row path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from operator import attrgetter
from pathlib import Path

from sqlalchemy import bindparam, insert, update
from sqlmodel import Session, col, select

from pipeline.catalogue.entries import CatalogReport, paused_garbage_collection
from pipeline.catalogue.spool import CHUNK, EntrySpool, StoredEntry
from pipeline.store.tables import EndpointRow, EntryEvent, EntryRow, utcnow


class EmptyCatalogError(RuntimeError):
    """No entry file was found: refusing to retire the whole catalogue."""


@dataclass
class IngestSummary:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    errors: list[dict[str, object]] = field(default_factory=list)


def _sync_endpoints(session: Session, entry: StoredEntry) -> None:
    """Match the endpoint rows to the entry's list: update, add, deactivate."""
    rows = {
        (row.method, row.path): row
        for row in session.exec(select(EndpointRow).where(EndpointRow.entry_id == entry.id))
    }
    for method, path, description, position in entry.endpoints:
        row = rows.get((method, path)) or EndpointRow(entry_id=entry.id, method=method, path=path)
        row.description, row.position, row.active = description, position, True
        session.add(row)
    listed = {(method, path) for method, path, *_ in entry.endpoints}
    for key, row in rows.items():
        if key not in listed and row.active:
            row.active = False
            session.add(row)


def _update(session: Session, entry: StoredEntry, now: datetime, file_hash: str | None) -> None:
    """Rewrite a stored entry (changed, moved or back from retirement) and its endpoints."""
    row = session.get(EntryRow, entry.id)
    row.category, row.name, row.content = entry.category, entry.name, entry.content
    row.content_hash, row.source_file, row.updated_at = entry.digest, str(entry.source), now
    row.file_hash = file_hash
    row.retired_at = None
    session.add(row)
    session.flush()
    _sync_endpoints(session, entry)


def _insert_new(session: Session, new: list[StoredEntry], now: datetime,
                file_hashes: Mapping[Path, str]) -> None:
    """Bulk-insert new entries, then their endpoints (one statement each, many rows)."""
    if not new:
        return
    # Core inserts on the tables (not ORM bulk saves): one executemany each, no ORM bookkeeping.
    session.execute(insert(EntryRow.__table__), [
        {"id": entry.id, "category": entry.category, "name": entry.name,
         "content": entry.content, "content_hash": entry.digest, "source_file": str(entry.source),
         "first_seen_at": now, "updated_at": now, "retired_at": None,
         "file_hash": file_hashes.get(entry.source)}
        for entry in new
    ])
    endpoints = [
        {"entry_id": entry.id, "method": method, "path": path, "description": description,
         "position": position, "active": True}
        for entry in new for method, path, description, position in entry.endpoints
    ]
    if endpoints:
        session.execute(insert(EndpointRow.__table__), endpoints)


def ingest_catalog(
    session: Session, report: CatalogReport, now: datetime | None = None,
    run_id: int | None = None, spool: EntrySpool | None = None,
) -> IngestSummary:
    """Store every valid entry of `report`, keep invalid ones as stored, retire the vanished;
    each entry added, restored or retired is an event of the catalogue's history.

    `spool`: the valid entries, read into it (`read_catalog(keep=spool.keep)`) rather than
    held in `report.entries`; stored a chunk at a time. One transaction either way: committed
    once everything is stored, so a failure part way leaves the store as it was."""
    if not report.files:
        raise EmptyCatalogError("no entry files found; refusing to retire every stored entry")
    with paused_garbage_collection():
        return _ingest(session, report, now or utcnow(), run_id, spool)


def _chunks(report: CatalogReport, spool: EntrySpool | None) -> Iterator[list[StoredEntry]]:
    """The valid entries of the report (by id) and of the spool (as read), in chunks."""
    held = sorted(report.entries.items(), key=lambda item: item[1].id)
    for start in range(0, len(held), CHUNK):
        yield [StoredEntry.of(path, entry) for path, entry in held[start : start + CHUNK]]
    if spool is not None:
        yield from spool.chunks(report.withdrawn)


def _ingest(session: Session, report: CatalogReport, now: datetime, run_id: int | None,
            spool: EntrySpool | None) -> IngestSummary:
    summary = IngestSummary(
        invalid=sorted(report.invalid_ids()), errors=[asdict(p) for p in report.problems]
    )
    # Plain rows (no ORM results, no dates parsed): this runs over every stored entry.
    stored = {
        entry_id: (digest, retired, source_file)
        for entry_id, digest, retired, source_file in session.connection().execute(
            select(EntryRow.id, EntryRow.content_hash, col(EntryRow.retired_at).is_not(None),
                   EntryRow.source_file)
        )
    }
    present = set(report.unchanged.values()) | report.invalid_ids()
    for chunk in _chunks(report, spool):
        new: list[StoredEntry] = []
        rehashed: list[dict[str, object]] = []  # same content, new file bytes (a comment, say)
        for entry in sorted(chunk, key=attrgetter("id")):
            present.add(entry.id)
            known = stored.get(entry.id)
            if known is None:
                new.append(entry)
                summary.added.append(entry.id)
            elif known != (entry.digest, False, str(entry.source)):
                (summary.restored if known[1] else summary.updated).append(entry.id)
                _update(session, entry, now, report.digests.get(entry.source))
            else:
                summary.unchanged.append(entry.id)
                rehashed.append({"entry_id": entry.id,
                                 "file_hash": report.digests.get(entry.source)})
        _insert_new(session, new, now, report.digests)
        if rehashed and report.digests:
            session.execute(
                update(EntryRow.__table__)
                .where(EntryRow.__table__.c.id == bindparam("entry_id"))
                .values(file_hash=bindparam("file_hash")),
                rehashed,
            )
    for ids in (summary.added, summary.updated, summary.restored):
        ids.sort()
    summary.unchanged = sorted([*summary.unchanged, *report.unchanged.values()])
    summary.retired = sorted(
        entry_id for entry_id, (_, retired, _) in stored.items()
        if not retired and entry_id not in present
    )
    for start in range(0, len(summary.retired), 500):  # bounded IN lists
        chunk = summary.retired[start : start + 500]
        session.execute(
            update(EntryRow).where(col(EntryRow.id).in_(chunk)).values(retired_at=now)
        )
    _record_events(session, summary, now, run_id)
    session.commit()
    return summary


def _record_events(session: Session, summary: IngestSummary, now: datetime,
                   run_id: int | None) -> None:
    """The catalogue's history: an entry added (or back from retirement), an entry retired."""
    events = [
        {"entry_id": entry_id, "kind": kind, "at": now, "run_id": run_id}
        for kind, ids in (("added", summary.added + summary.restored),
                          ("retired", summary.retired))
        for entry_id in ids
    ]
    if events:
        session.execute(insert(EntryEvent.__table__), events)


def stored_file_hashes(session: Session) -> dict[str, str]:
    """The file hash of every published entry, by its source file: what need not be parsed."""
    statement = select(EntryRow.source_file, EntryRow.file_hash).where(
        col(EntryRow.retired_at).is_(None), col(EntryRow.file_hash).is_not(None))
    return dict(session.connection().execute(statement).all())
