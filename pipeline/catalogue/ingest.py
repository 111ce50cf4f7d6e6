"""Ingest: the curated entry files into the store, idempotently.

A valid file upserts its entry; an invalid one leaves the stored version as it
was (so one bad edit never unpublishes an API); an entry whose file is gone is
retired, never deleted.

Built for large catalogues: what is stored is read once as (id, hash, state)
columns, new entries and their endpoints go in as bulk inserts, and only changed
or restored entries take the row-by-row path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import bindparam, insert, update
from sqlmodel import Session, col, select

from pipeline.catalogue.entries import CatalogReport, EntryFile, paused_garbage_collection
from pipeline.store.tables import EndpointRow, EntryEvent, EntryRow, content_hash, utcnow


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


def _sync_endpoints(session: Session, entry: EntryFile) -> None:
    """Match the endpoint rows to the entry's list: update, add, deactivate."""
    rows = {
        (row.method, row.path): row
        for row in session.exec(select(EndpointRow).where(EndpointRow.entry_id == entry.id))
    }
    listed: set[tuple[str, str]] = set()
    for position, endpoint in enumerate(entry.endpoints or []):
        key = (endpoint.method or "GET", endpoint.path or "/")
        if key in listed:
            continue
        listed.add(key)
        row = rows.get(key) or EndpointRow(entry_id=entry.id, method=key[0], path=key[1])
        row.description, row.position, row.active = endpoint.description, position, True
        session.add(row)
    for key, row in rows.items():
        if key not in listed and row.active:
            row.active = False
            session.add(row)


def _update(
    session: Session, entry: EntryFile, content: dict, digest: str, source: Path, now: datetime,
    file_hash: str | None,
) -> None:
    """Rewrite a stored entry (changed, moved or back from retirement) and its endpoints."""
    row = session.get(EntryRow, entry.id)
    row.category, row.name, row.content = entry.category, entry.name, content
    row.content_hash, row.source_file, row.updated_at = digest, str(source), now
    row.file_hash = file_hash
    row.retired_at = None
    session.add(row)
    session.flush()
    _sync_endpoints(session, entry)


def _endpoint_rows(entry: EntryFile) -> list[dict[str, object]]:
    """The endpoint rows of a new entry: first of each (method, path), in listed order."""
    rows: dict[tuple[str, str], dict[str, object]] = {}
    for position, endpoint in enumerate(entry.endpoints or []):
        key = (endpoint.method or "GET", endpoint.path or "/")
        if key not in rows:
            rows[key] = {"entry_id": entry.id, "method": key[0], "path": key[1],
                         "description": endpoint.description, "position": position,
                         "active": True}
    return list(rows.values())


def _insert_new(session: Session, new: list[tuple[EntryFile, dict, str, Path]],
                now: datetime, file_hashes: Mapping[Path, str]) -> None:
    """Bulk-insert new entries, then their endpoints (one statement each, many rows)."""
    if not new:
        return
    # Core inserts on the tables (not ORM bulk saves): one executemany each, no ORM bookkeeping.
    session.execute(insert(EntryRow.__table__), [
        {"id": entry.id, "category": entry.category, "name": entry.name, "content": content,
         "content_hash": digest, "source_file": str(source), "first_seen_at": now,
         "updated_at": now, "retired_at": None, "file_hash": file_hashes.get(source)}
        for entry, content, digest, source in new
    ])
    endpoints = [row for entry, *_ in new for row in _endpoint_rows(entry)]
    if endpoints:
        session.execute(insert(EndpointRow.__table__), endpoints)


def ingest_catalog(
    session: Session, report: CatalogReport, now: datetime | None = None,
    run_id: int | None = None,
) -> IngestSummary:
    """Store every valid entry of `report`, keep invalid ones as stored, retire the vanished;
    each entry added, restored or retired is an event of the catalogue's history."""
    if not report.files:
        raise EmptyCatalogError("no entry files found; refusing to retire every stored entry")
    with paused_garbage_collection():
        return _ingest(session, report, now or utcnow(), run_id)


def _ingest(session: Session, report: CatalogReport, now: datetime,
            run_id: int | None) -> IngestSummary:
    summary = IngestSummary(
        invalid=sorted(report.invalid_ids()), errors=[asdict(p) for p in report.problems]
    )
    stored = {
        entry_id: (digest, retired_at is not None, source_file)
        for entry_id, digest, retired_at, source_file in session.exec(
            select(EntryRow.id, EntryRow.content_hash, EntryRow.retired_at, EntryRow.source_file)
        )
    }
    new: list[tuple[EntryFile, dict, str, Path]] = []
    rehashed: list[dict[str, object]] = []  # same content, new file bytes (a comment, say)
    for path, entry in sorted(report.entries.items(), key=lambda item: item[1].id):
        content = entry.content()
        digest = content_hash(content)
        known = stored.get(entry.id)
        if known is None:
            new.append((entry, content, digest, path))
            summary.added.append(entry.id)
        elif known != (digest, False, str(path)):
            (summary.restored if known[1] else summary.updated).append(entry.id)
            _update(session, entry, content, digest, path, now, report.digests.get(path))
        else:
            summary.unchanged.append(entry.id)
            rehashed.append({"entry_id": entry.id, "file_hash": report.digests.get(path)})
    summary.unchanged = sorted([*summary.unchanged, *report.unchanged.values()])
    _insert_new(session, new, now, report.digests)
    if rehashed and report.digests:
        session.execute(
            update(EntryRow.__table__)
            .where(EntryRow.__table__.c.id == bindparam("entry_id"))
            .values(file_hash=bindparam("file_hash")),
            rehashed,
        )
    present = ({entry.id for entry in report.entries.values()} | set(report.unchanged.values())
               | report.invalid_ids())
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
    return dict(session.exec(statement).all())
