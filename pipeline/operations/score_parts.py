"""The score stage over a large catalogue, one span of the entries per core: each span's
entries are presented (`present_each`) in a worker process of its own, reading only their own
rows, into a hand-over file of their own, and the files are joined in the spans' order.

An entry's presented values depend on its own evidence alone (its probes, its rollups, its
content scores), so a span's are those the whole stage would give it; the stage's CPU (some
30 s at 100,000 entries, all in Python) is spread over the cores, and each process holds the
evidence of its span alone. This module is what a worker process imports: the store and the
judging, never Prefect."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sqlmodel import Session

from pipeline.judging.present import present_each
from pipeline.operations.handover import discard, join_presented, save_presented
from pipeline.processes import paused_garbage_collection, worker_count, worker_pool
from pipeline.store.tables import EntrySpan, engine_for, entry_spans, session_scope

# The fewest entries a span is given: below twice this a catalogue is presented in this one
# process. A worker forked from a warm server (`stages.warm_workers`, as a run starts) costs
# little to start, but one from a cold server imports the stage first (some 2 s).
SPAN_ENTRIES = 10_000


def hand_over_presented(database_url: str, as_of: datetime, origin: str, run_id: int | None,
                        workers: int | None = None, span_entries: int = SPAN_ENTRIES) -> Path:
    """Every published entry's presented values as of `as_of`, in one hand-over file (of run
    `run_id`): presented here alone, or a span of at least `span_entries` entries in each of
    up to `workers` worker processes (default: one per usable core, up to 8).

    No span is presented here: this process holds what its caller imported (a flow's Prefect,
    the release: some 100-170 MiB more than a worker forked from the warm server), and a span's
    evidence on top of that made it the stage's largest process by as much. It waits, and
    joins the workers' files."""
    with (
        paused_garbage_collection(),
        session_scope(engine_for(database_url)) as session,
    ):
        spans = entry_spans(session, workers or worker_count(), span_entries)
        if len(spans) == 1:
            return _saved_span(session, as_of, origin, spans[0], run_id)
    parts: list[Path] = []
    failed: BaseException | None = None
    try:
        with worker_pool(len(spans)) as pool:
            done = [pool.submit(present_span, database_url, as_of, origin, span)
                    for span in spans]
            for span_done in done:  # every worker's file is taken, to be removed whatever happens
                try:
                    parts.append(span_done.result())
                except Exception as error:  # the first failure is the stage's
                    failed = failed or error
        if failed is not None:
            raise failed
        return join_presented(parts, run_id)
    finally:
        for part in parts:
            discard(part)


def present_span(database_url: str, as_of: datetime, origin: str, span: EntrySpan) -> Path:
    """The presented values of the entries in `span`, in a hand-over file of their own: run in
    a worker process."""
    with (
        paused_garbage_collection(),
        session_scope(engine_for(database_url)) as session,
    ):
        return _saved_span(session, as_of, origin, span, None)


def _saved_span(session: Session, as_of: datetime, origin: str, span: EntrySpan,
                run_id: int | None) -> Path:
    """The presented values of the entries in `span`, saved to a hand-over file."""
    return save_presented(present_each(session, as_of, origin, span), run_id)
