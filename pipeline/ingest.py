"""Ingest: the curated entry files into the store, idempotently.

A valid file upserts its entry; an invalid one leaves the stored version as it
was (so one bad edit never unpublishes an API); an entry whose file is gone is
retired, never deleted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from sqlmodel import Session, select

from pipeline.catalog import CatalogReport, EntryFile
from pipeline.store import EndpointRow, EntryRow, content_hash, utcnow


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


def _upsert(
    session: Session, entry: EntryFile, source: Path, now: datetime, summary: IngestSummary
) -> None:
    content = entry.content()
    digest = content_hash(content)
    row = session.get(EntryRow, entry.id)
    if row is None:
        row = EntryRow(
            id=entry.id,
            category=entry.category,
            name=entry.name,
            content=content,
            content_hash=digest,
            source_file=str(source),
            first_seen_at=now,
            updated_at=now,
        )
        summary.added.append(entry.id)
    elif row.content_hash != digest or row.retired_at is not None or row.source_file != str(source):
        (summary.restored if row.retired_at is not None else summary.updated).append(entry.id)
        row.category, row.name, row.content = entry.category, entry.name, content
        row.content_hash, row.source_file, row.updated_at = digest, str(source), now
        row.retired_at = None
    else:
        summary.unchanged.append(entry.id)
        return
    session.add(row)
    session.flush()
    _sync_endpoints(session, entry)


def ingest_catalog(
    session: Session, report: CatalogReport, now: datetime | None = None
) -> IngestSummary:
    """Store every valid entry of `report`, keep invalid ones as stored, retire the vanished."""
    if not report.files:
        raise EmptyCatalogError("no entry files found; refusing to retire every stored entry")
    now = now or utcnow()
    summary = IngestSummary(
        invalid=sorted(report.invalid_ids()), errors=[asdict(p) for p in report.problems]
    )
    for path, entry in sorted(report.entries.items(), key=lambda item: item[1].id):
        _upsert(session, entry, path, now, summary)
    present = {entry.id for entry in report.entries.values()} | report.invalid_ids()
    for row in session.exec(select(EntryRow).where(EntryRow.retired_at.is_(None))):
        if row.id not in present:
            row.retired_at = now
            session.add(row)
            summary.retired.append(row.id)
    session.commit()
    return summary
