"""Ingest: the curated entry files into the store, idempotently.

A valid file upserts its entry; an invalid one leaves the stored version as it
was (so one bad edit never unpublishes an API); an entry whose file is gone is
retired, never deleted. An entry renamed (its file renamed, the old id in its `formerIds`)
takes over its former id's stored entry: every row of that id's history is moved to the new
id, in the ingest's transaction; where the new id has a history of its own, on a key both
hold its own row is kept, and a day both were rolled up on is its own whole (`_take_over`).

Built for large catalogues: what is stored is read once as (id, hash, state)
columns, new entries and their endpoints go in as bulk inserts, and changed or
restored entries as bulk updates, a chunk of entries at a time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from operator import attrgetter

from sqlalchemy import bindparam, case, delete, exists, func, update
from sqlmodel import Session, SQLModel, col, select

from pipeline.catalogue.entries import CatalogReport, KnownFile
from pipeline.catalogue.spool import CHUNK, EntrySpool, StoredEntry
from pipeline.processes import paused_garbage_collection
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EndpointRow,
    EntryEvent,
    EntryLifecycle,
    EntryRow,
    EntryState,
    ProbeRow,
    RolledDay,
    StateChange,
    as_utc,
    day_bounds,
    in_lists,
    insert_rows,
    rename_halves,
    rename_news,
    utcnow,
)


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
    # "old → new": entries that took over the stored entry of a former id (`formerIds`)
    renamed: list[str] = field(default_factory=list)
    errors: list[dict[str, object]] = field(default_factory=list)


def _update_changed(session: Session, changed: list[StoredEntry], now: datetime,
                    report: CatalogReport) -> None:
    """Rewrite stored entries (changed, moved or back from retirement) and match their
    endpoint rows to their lists (update, add, deactivate): one statement a kind of change
    for many rows, since a catalogue-wide edit changes every entry at once. An entry whose
    base address changed holds the new one from `now` (`base_url_since`), compared in the
    statement with the stored one: nothing of every entry is read for it."""
    if not changed:
        return
    entries, endpoints = EntryRow.__table__, EndpointRow.__table__
    session.execute(
        update(entries).where(entries.c.id == bindparam("entry_id")).values(
            base_url_since=case((entries.c.base_url != bindparam("new_base_url"),
                                 bindparam("new_time")), else_=entries.c.base_url_since),
            category=bindparam("new_category"), name=bindparam("new_name"),
            content=bindparam("new_content"), content_hash=bindparam("new_hash"),
            source_file=bindparam("new_source"), updated_at=bindparam("new_time"),
            file_hash=bindparam("new_file_hash"), file_stat=bindparam("new_file_stat"),
            successor=bindparam("new_successor"), base_url=bindparam("new_base_url"),
            former_ids=bindparam("new_former_ids"), retired_at=None),
        [{"entry_id": entry.id, "new_category": entry.category, "new_name": entry.name,
          "new_content": entry.content, "new_hash": entry.digest,
          "new_source": report.stored_name(str(entry.source)), "new_time": now,
          "new_file_hash": report.digests.get(str(entry.source)),
          "new_file_stat": report.stats.get(str(entry.source)),
          "new_successor": entry.successor, "new_base_url": entry.content["baseUrl"],
          "new_former_ids": _joined(entry.former_ids)}
         for entry in changed],
    )
    stored: dict[str, dict[tuple[str, str], tuple[int, bool]]] = defaultdict(dict)
    ids = [entry.id for entry in changed]
    for chunk in in_lists(ids):
        rows = session.connection().execute(
            select(endpoints.c.entry_id, endpoints.c.method, endpoints.c.path, endpoints.c.id,
                   endpoints.c.active)
            .where(endpoints.c.entry_id.in_(chunk)))
        for entry_id, method, path, row_id, active in rows:
            stored[entry_id][method, path] = (row_id, active)
    kept, added, dropped = [], [], []
    for entry in changed:
        rows_of_entry, listed = stored.get(entry.id, {}), set()
        for method, path, description, position in entry.endpoints:
            listed.add((method, path))
            known = rows_of_entry.get((method, path))
            values = {"new_description": description, "new_position": position}
            if known is None:
                added.append({"entry_id": entry.id, "method": method, "path": path,
                              "description": description, "position": position,
                              "active": True})
            else:
                kept.append({"row_id": known[0], **values})
        dropped += [{"row_id": row_id} for key, (row_id, active) in rows_of_entry.items()
                    if active and key not in listed]
    by_row = endpoints.c.id == bindparam("row_id")
    if kept:
        session.execute(update(endpoints).where(by_row).values(
            description=bindparam("new_description"), position=bindparam("new_position"),
            active=True), kept)
    if dropped:
        session.execute(update(endpoints).where(by_row).values(active=False), dropped)
    if added:
        insert_rows(session, endpoints, added)


def _joined(former_ids: tuple[str, ...]) -> str | None:
    """Former ids as their column keeps them: joined by commas (ids hold none)."""
    return ",".join(former_ids) or None


def _insert_new(session: Session, new: list[StoredEntry], now: datetime,
                report: CatalogReport, first_seen: dict[str, datetime] | None = None) -> None:
    """Bulk-insert new entries, then their endpoints (one statement each, many rows);
    `first_seen`: entries first seen before (renamed), inserted without endpoints, whose rows
    are to be taken over from their former id."""
    if not new:
        return
    first_seen = first_seen or {}
    # Inserts on the tables (not ORM bulk saves): one executemany each, no ORM bookkeeping.
    insert_rows(session, EntryRow.__table__, [
        {"id": entry.id, "category": entry.category, "name": entry.name,
         "content": entry.content, "content_hash": entry.digest,
         "source_file": report.stored_name(str(entry.source)),
         "first_seen_at": first_seen.get(entry.id, now), "updated_at": now,
         "retired_at": None, "file_hash": report.digests.get(str(entry.source)),
         "file_stat": report.stats.get(str(entry.source)), "successor": entry.successor,
         "base_url": entry.content["baseUrl"], "former_ids": _joined(entry.former_ids)}
        for entry in new
    ])
    new = [entry for entry in new if entry.id not in first_seen]
    endpoints = [
        {"entry_id": entry.id, "method": method, "path": path, "description": description,
         "position": position, "active": True}
        for entry in new for method, path, description, position in entry.endpoints
    ]
    if endpoints:
        insert_rows(session, EndpointRow.__table__, endpoints)


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
    moves: list[tuple[str, str]] = []  # (former id, the id taking over its stored entry)
    news: dict[str, str] = {}  # what each former id's rename tells a reader (`rename_news`)
    taken = 0  # the moves made so far
    listed: dict[str, str] = {}  # the base address each id taking over another's lists
    for chunk in _chunks(report, spool):
        new: list[StoredEntry] = []
        changed: list[StoredEntry] = []
        # same content, new file bytes (a comment, say) or a new stat
        rehashed: list[dict[str, object]] = []
        takers: list[StoredEntry] = []  # renamed: new ids with no stored entry of their own
        for entry in sorted(chunk, key=attrgetter("id")):
            present.add(entry.id)
            known = stored.get(entry.id)
            # newest first: of two former ids' rows on one key, the nearer the new id's is kept
            formers = [former for former in reversed(entry.former_ids)
                       if former in stored and former != entry.id]
            if formers:
                listed[entry.id] = entry.content["baseUrl"]
            for number, former in enumerate(formers):
                moves.append((former, entry.id))
                # the new id told added once, if it was not published; the former told retired
                # if it was published until now (not retired long ago, with its own event)
                news[former] = rename_news(not number and (known is None or known[1]),
                                           not stored[former][1])
                del stored[former]  # taken over, not retired
                summary.renamed.append(f"{former} → {entry.id}")
            if known is None and formers:
                takers.append(entry)
                changed.append(entry)
            elif known is None:
                new.append(entry)
                summary.added.append(entry.id)
            elif known != (entry.digest, False, report.stored_name(str(entry.source))):
                (summary.restored if known[1] else summary.updated).append(entry.id)
                changed.append(entry)
            else:
                summary.unchanged.append(entry.id)
                if report.digests:
                    rehashed.append(_file_columns(entry.id, str(entry.source), report))
        _insert_new(session, new, now, report)
        _take_over(session, takers, moves[taken:], now, report, listed)
        taken = len(moves)
        _update_changed(session, changed, now, report)
        _update_file_columns(session, rehashed)
    _rename_in_rolled_days(session, moves)
    # Files found unchanged by their hash, whose stat is new (touched, copied, or settled).
    _update_file_columns(session, [_file_columns(entry_id, name, report)
                                   for name, entry_id in report.unchanged.items()
                                   if name in report.stats])
    for ids in (summary.added, summary.updated, summary.restored):
        ids.sort()
    summary.unchanged = sorted([*summary.unchanged, *report.unchanged.values()])
    summary.retired = sorted(
        entry_id for entry_id, (_, retired, _) in stored.items()
        if not retired and entry_id not in present
    )
    for chunk in in_lists(summary.retired):
        session.execute(
            update(EntryRow).where(col(EntryRow.id).in_(chunk)).values(retired_at=now)
        )
    _record_events(session, summary, now, run_id, moves, news)
    session.commit()
    return summary


# Every table holding rows of an entry's history, by its `entry_id` column.
HISTORY_TABLES = (EndpointRow, ProbeRow, DailyEntryRollup, DailyEndpointRollup, StateChange,
                  EntryState, EntryLifecycle, EntryEvent)
# Those whose rows were published as they are (in `api/changes.json`): a row moved to a taker
# keeps the id it was about (`former_id`), to be published as it was, never as the taker's.
TOLD_TABLES = (StateChange, EntryEvent)
# Those whose rows are one per entry and key (beyond `entry_id`): where a former id and the id
# taking it over both have a row of one key, the taker's own is kept. (A day both were rolled
# up on is the taker's whole: `_drop_shared_days`.)
KEYED_TABLES: tuple[tuple[type[SQLModel], tuple[str, ...]], ...] = (
    (EndpointRow, ("method", "path")), (EntryState, ()), (EntryLifecycle, ()))


def _take_over(session: Session, takers: list[StoredEntry], moves: list[tuple[str, str]],
               now: datetime, report: CatalogReport, listed: Mapping[str, str]) -> None:
    """Each former id of `moves` (former, taker; a taker's nearest former first) passes its
    stored entry to the taker: every row of its history moved to the taker, its own row
    deleted, and the taker first seen when the earliest of them was, so scores, uptime and
    lifecycle go on as if the id had always been the new one; its events and state changes
    join the taker's history, each still telling of the id it was about (`TOLD_TABLES`), as
    it was published before. `takers`: the new ids with no stored entry yet, inserted first
    (without endpoints: they are the former's).

    A taker that has a history of its own (`formerIds` added after it was ingested) keeps it:
    on a key both hold (a state, an endpoint's method and path) its own row wins, and the
    former's probes of that endpoint become probes of the taker's; a day both were rolled up
    on is the taker's own, its rollups and the probes behind them (`_drop_shared_days`).
    A former's probes of another base address than the one its taker lists (`listed`) are of
    an address the taker moved from now (`_moved_since`).

    Rows are moved rather than an alias kept for every read: a rename costs a few indexed
    statements a table for its own rows, where an alias would be joined into every night's
    reads of 100,000 entries."""
    if not moves:
        return
    entry_table = EntryRow.__table__
    ids = sorted({entry_id for move in moves for entry_id in move})
    first_seen: dict[str, datetime] = {}
    addresses: dict[str, tuple[str | None, datetime | None]] = {}  # stored: (base, since)
    for chunk in in_lists(ids):
        for entry_id, seen, base_url, since in session.connection().execute(
                select(entry_table.c.id, entry_table.c.first_seen_at, entry_table.c.base_url,
                       entry_table.c.base_url_since).where(entry_table.c.id.in_(chunk))):
            first_seen[entry_id] = as_utc(seen)
            addresses[entry_id] = (base_url, since and as_utc(since))
    earliest: dict[str, datetime] = {}
    for former, taker in moves:
        earliest[taker] = min(earliest.get(taker, first_seen[former]), first_seen[former])
    _insert_new(session, takers, now, report,
                {entry.id: earliest[entry.id] for entry in takers})
    earlier = [{"taker": taker, "seen": seen} for taker, seen in earliest.items()
               if taker in first_seen and seen < first_seen[taker]]
    if earlier:
        session.execute(update(entry_table).where(entry_table.c.id == bindparam("taker"))
                        .values(first_seen_at=bindparam("seen")), earlier)
    moved = _moved_since(moves, addresses, listed, now)
    if moved:
        session.execute(update(entry_table).where(entry_table.c.id == bindparam("taker"))
                        .values(base_url_since=bindparam("since")), moved)
    fresh = {entry.id for entry in takers}  # nothing of their own for a first former to meet
    for number, batch in enumerate(_rounds(moves)):
        _move_history(session, batch, [move for move in batch
                                       if number or move[1] not in fresh])
    session.execute(delete(entry_table).where(entry_table.c.id == bindparam("former")),
                    [{"former": former} for former, _ in moves])


def _moved_since(moves: list[tuple[str, str]],
                 stored: Mapping[str, tuple[str | None, datetime | None]],
                 listed: Mapping[str, str], now: datetime) -> list[dict[str, object]]:
    """Since when each taker of `moves` holds the base address it lists (`listed`), where its
    history taken over says: a former id's probes of another base address (`stored`: each
    id's base address and since when) are of an address moved from `now`, those of the same
    one count from when it held it; the latest of them and the taker's own. The ingest's
    update of a taker that had a stored entry of its own then compares its own address."""
    since: dict[str, datetime] = {}
    for former, taker in moves:
        base_url, held = stored[former]
        moved = now if base_url is not None and base_url != listed[taker] else held
        own = since.get(taker, stored.get(taker, (None, None))[1])
        if moved is not None and (own is None or moved > own):
            since[taker] = moved
    return [{"taker": taker, "since": moment} for taker, moment in since.items()]


def _rounds(moves: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    """`moves` in batches naming each taker once, its moves in their order: a batch is moved
    with one statement a table, and a taker's nearer former is moved in before its older."""
    rounds: list[list[tuple[str, str]]] = []
    seen: dict[str, int] = defaultdict(int)
    for former, taker in moves:
        if seen[taker] == len(rounds):
            rounds.append([])
        rounds[seen[taker]].append((former, taker))
        seen[taker] += 1
    yield from rounds


def _move_history(session: Session, batch: list[tuple[str, str]],
                  merging: list[tuple[str, str]]) -> None:
    """Every history row of each former id of `batch` (former, taker; a taker once) moved to
    its taker, but, of `merging` (those whose taker has rows already), those on a key the
    taker's own rows hold (`KEYED_TABLES`): deleted, once what points at a former's endpoint
    points at the taker's of its method and path. (The daily tables are read whole for each
    statement of a former: a plain rename spares them these.)"""
    if merging:
        _drop_shared_days(session, merging)
        _join_endpoints(session, merging)
        for model, keys in KEYED_TABLES:
            table = model.__table__
            mine = table.alias("mine")
            session.execute(delete(table).where(
                table.c.entry_id == bindparam("former"),
                exists().where(mine.c.entry_id == bindparam("taker"),
                               *(mine.c[key] == table.c[key] for key in keys))),
                [{"former": former, "taker": taker} for former, taker in merging])
    moves = [{"former": former, "taker": taker} for former, taker in batch]
    for model in HISTORY_TABLES:
        table, values = model.__table__, {"entry_id": bindparam("taker")}
        if model in TOLD_TABLES:  # each row still tells of the id it was about
            values["former_id"] = func.coalesce(table.c.former_id, bindparam("former"))
        session.execute(update(table).where(table.c.entry_id == bindparam("former"))
                        .values(values), moves)


def _drop_shared_days(session: Session, merging: list[tuple[str, str]]) -> None:
    """Of each day both a former id and its taker (of `merging`) were rolled up on, the
    former's rollups (its entry's and its URLs') and raw probes deleted: the taker's own
    rollups stand for the day, and a day rolled up again (a backfill) counts the probes they
    count, not both ids'. The day's other probes, and days only the former was rolled up on,
    join the taker."""
    days, mine = DailyEntryRollup.__table__, DailyEntryRollup.__table__.alias("mine")
    shared = []
    for former, taker in merging:
        statement = select(days.c.day).where(
            days.c.entry_id == former,
            exists().where(mine.c.entry_id == taker, mine.c.day == days.c.day))
        for (day,) in session.connection().execute(statement):
            start, end = day_bounds(day)
            shared.append({"former": former, "rolled": day, "start": start, "end": end})
    if not shared:
        return
    probes = ProbeRow.__table__
    session.execute(delete(probes).where(
        probes.c.entry_id == bindparam("former"), probes.c.checked_at >= bindparam("start"),
        probes.c.checked_at <= bindparam("end")), shared)
    for table in (DailyEntryRollup.__table__, DailyEndpointRollup.__table__):
        session.execute(delete(table).where(table.c.entry_id == bindparam("former"),
                                            table.c.day == bindparam("rolled")), shared)


def _join_endpoints(session: Session, batch: list[tuple[str, str]]) -> None:
    """The probes and endpoint rollups of a former id's endpoint that has the method and path
    of one of its taker's (of `batch`: former, taker) made the taker's endpoint's."""
    endpoints = EndpointRow.__table__
    taker_of = dict(batch)
    rows = session.connection().execute(
        select(endpoints.c.entry_id, endpoints.c.method, endpoints.c.path, endpoints.c.id)
        .where(endpoints.c.entry_id.in_([*taker_of, *taker_of.values()]))).all()
    own = {(entry_id, method, path): row_id for entry_id, method, path, row_id in rows
           if entry_id not in taker_of}
    joined = [{"former": entry_id, "old": row_id, "new": own[key]}
              for entry_id, method, path, row_id in rows if entry_id in taker_of
              and (key := (taker_of[entry_id], method, path)) in own]
    if not joined:
        return
    for model in (ProbeRow, DailyEndpointRollup):
        table = model.__table__
        session.execute(update(table).where(table.c.entry_id == bindparam("former"),
                                            table.c.endpoint_id == bindparam("old"))
                        .values(endpoint_id=bindparam("new")), joined)


def _rename_in_rolled_days(session: Session, moves: list[tuple[str, str]]) -> None:
    """The former ids of `moves` (former, taker) in the entries each rolled day's kept evidence
    names (`RolledDay`), as their takers, in place: the score stage reads a past day's evidence
    by those names. A day that named a former and its taker both keeps no evidence: its rows
    (the taker's kept) are read instead, and the nightly upkeep keeps it again from them
    (`rollup.keep_missing_evidence`). One pass over the days, whatever the moves."""
    if not moves:
        return
    renamed = dict(moves)
    table = RolledDay.__table__
    rewritten, dropped = [], []
    statement = (select(table.c.day, table.c.evidence_entries)
                 .where(table.c.evidence_entries.is_not(None))
                 .execution_options(yield_per=1))
    for day, entries in session.connection().execute(statement):
        padded = f",{entries},"
        if any(f",{former}," in padded for former in renamed):
            named = [renamed.get(entry_id, entry_id) for entry_id in entries.split(",")]
            if len(set(named)) < len(named):
                dropped.append({"rolled": day})
            else:
                rewritten.append({"rolled": day, "named": ",".join(named)})
    by_day = table.c.day == bindparam("rolled")
    if rewritten:
        session.execute(update(table).where(by_day).values(evidence_entries=bindparam("named")),
                        rewritten)
    if dropped:
        session.execute(update(table).where(by_day).values(evidence_entries=None,
                                                          evidence=None), dropped)


def _file_columns(entry_id: str, source: str, report: CatalogReport) -> dict[str, object]:
    return {"entry_id": entry_id, "new_file_hash": report.digests.get(source),
            "new_file_stat": report.stats.get(source)}


def _update_file_columns(session: Session, rows: list[dict[str, object]]) -> None:
    """What is stored of entries' files, for entries whose content is unchanged."""
    if rows:
        entries = EntryRow.__table__
        session.execute(update(entries).where(entries.c.id == bindparam("entry_id")).values(
            file_hash=bindparam("new_file_hash"), file_stat=bindparam("new_file_stat")), rows)


def _record_events(session: Session, summary: IngestSummary, now: datetime,
                   run_id: int | None, renames: list[tuple[str, str]],
                   news: Mapping[str, str]) -> None:
    """The catalogue's history: an entry added (or back from retirement), an entry retired,
    an entry renamed (`renames`: former id, taker; the taker's event, naming the former, and
    what of it is news: `news`, by former id). An entry back from retirement by a rename is
    told added by its rename."""
    told = {taker for former, taker in renames if "added" in rename_halves(news[former])}
    events = [
        {"entry_id": entry_id, "kind": kind, "at": now, "run_id": run_id, "from_value": None,
         "to_value": None}
        for kind, ids in (("added", summary.added + summary.restored),
                          ("retired", summary.retired))
        for entry_id in ids if entry_id not in told
    ]
    events += [{"entry_id": taker, "kind": "renamed", "at": now, "run_id": run_id,
                "from_value": former, "to_value": news[former]} for former, taker in renames]
    if events:
        insert_rows(session, EntryEvent.__table__, events)


def stored_files(session: Session) -> dict[str, KnownFile]:
    """The file hash, stat, named successor and former ids of every published entry, by its
    source file's stored name (`CatalogReport.stored_name`): what need not be read or parsed
    (from the compared columns' index alone)."""
    statement = select(EntryRow.source_file, EntryRow.file_hash, EntryRow.file_stat,
                       EntryRow.successor, EntryRow.former_ids).where(
        col(EntryRow.retired_at).is_(None), col(EntryRow.file_hash).is_not(None))
    return {source: KnownFile(digest, stat, successor, tuple((former or "").split(",")) if former
                              else ())
            for source, digest, stat, successor, former in session.connection().execute(statement)}


def still_stored_as_read(report: CatalogReport, read_with: Mapping[str, KnownFile],
                         stored: Mapping[str, KnownFile]) -> bool:
    """Whether every file `report` did not parse again, since `read_with` (the store as read
    before) held it unchanged, is still held so by `stored` (the store now): if another run
    changed one of them meanwhile (retired it, renamed it, stored other bytes of it), what the
    report says of it no longer holds and the files must be read again."""
    return all(read_with.get(name) == stored.get(name)
               for name in map(report.stored_name, report.unchanged))
