"""Probe shards kept in the store, for shards that run as flow runs on workers of any machine.

The run plans its shards once and stores each one's targets; a worker reads its shard by run
and index (flow-run parameters stay small, and the targets never pass through the
orchestrator), probes, and commits its probe rows together with the shard's `finished_at`.
Only the first commit of a shard counts: a shard retried or run twice stores its probes once.
Once the run has ended its shards are read no more: the next sharded run deletes them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Row, delete, func, update
from sqlmodel import Session, col, select

from pipeline.probing.probe import ProbeTarget
from pipeline.probing.shards import Shard
from pipeline.store.history import ProbeTally
from pipeline.store.tables import PipelineRun, ProbeShardRow, insert_rows, utcnow


class ShardPlanError(ValueError):
    """A shard's stored targets are missing or unreadable: probing it again will not help."""


def save_shards(session: Session, run_id: int, shards: Sequence[Shard]) -> None:
    """Store what each shard of the run must probe (committed by the caller), after deleting
    the shards of every run that has ended (`drop_ended_shards`)."""
    drop_ended_shards(session)
    if shards:
        insert_rows(session, ProbeShardRow.__table__, [
            {"run_id": run_id, "shard": shard.index, "connect_failures": 0,
             "targets": [[t.url, t.entry_id, t.endpoint_id] for t in shard.targets],
             "linked_hosts": sorted(shard.linked)}
            for shard in shards
        ])


def drop_ended_shards(session: Session) -> int:
    """Delete the shards (targets and figures) of every run that is no longer running; their
    count. A night's targets, as large as its plan, are read only while it runs: a retried
    or repeated shard finds them, and a night run again is a new run that plans its own. A
    run's shards stay until the next sharded night plans, for a look at where and how long
    they ran."""
    ended = select(PipelineRun.id).where(PipelineRun.state != "running")
    return session.execute(delete(ProbeShardRow).where(
        col(ProbeShardRow.run_id).in_(ended))).rowcount


def _target(item: Any) -> ProbeTarget:
    url, entry_id, endpoint_id = item
    if not isinstance(url, str) or not isinstance(entry_id, str | None) or (
            endpoint_id is not None and type(endpoint_id) is not int):
        raise TypeError(f"not a target: {item!r}")
    return ProbeTarget(url, entry_id, endpoint_id)


def _host(item: Any) -> str:
    if not isinstance(item, str):
        raise TypeError(f"not a host: {item!r}")
    return item


def load_shard(session: Session, run_id: int, index: int) -> tuple[Shard, ProbeShardRow]:
    """The shard's targets as the run stored them, and its row."""
    row = session.get(ProbeShardRow, (run_id, index))
    if row is None:
        raise ShardPlanError(f"run {run_id} stored no probe shard {index}")
    try:
        targets = tuple(_target(item) for item in row.targets)
        linked = frozenset(_host(item) for item in row.linked_hosts or ())
    except (TypeError, ValueError) as error:
        raise ShardPlanError(f"probe shard {index} of run {run_id} has unreadable targets: "
                             f"{error}") from error
    shards = session.exec(select(func.count()).select_from(ProbeShardRow)
                          .where(ProbeShardRow.run_id == run_id)).one()
    return Shard(index, targets, linked, shards), row


def start_shard(session: Session, run_id: int, index: int, flow_run_id: str | None,
                started_at: datetime) -> bool:
    """Note where and since when the shard runs (this process, the orchestrator's flow run),
    for a look at it while it runs; committed. A shard finished meanwhile is left as it stored
    itself. Whether it was noted."""
    noted = session.execute(
        update(ProbeShardRow)
        .where(col(ProbeShardRow.run_id) == run_id, col(ProbeShardRow.shard) == index,
               col(ProbeShardRow.finished_at).is_(None))
        .values(host=socket.gethostname(), pid=os.getpid(), started_at=started_at,
                flow_run_id=flow_run_id)
    )
    session.commit()
    return noted.rowcount == 1


def finish_shard(session: Session, run_id: int, index: int, tally: ProbeTally, seconds: float,
                 cpu_seconds: float, peak_rss_mib: float, started_at: datetime,
                 flow_run_id: str | None = None) -> bool:
    """Mark the shard finished with its counts, where and since when it ran, in the caller's
    transaction (beside its probe rows); False when it was finished already, by an earlier run
    of it."""
    done = session.execute(
        update(ProbeShardRow)
        .where(col(ProbeShardRow.run_id) == run_id, col(ProbeShardRow.shard) == index,
               col(ProbeShardRow.finished_at).is_(None))
        .values(finished_at=utcnow(), seconds=seconds, cpu_seconds=cpu_seconds,
                peak_rss_mib=peak_rss_mib,
                outcomes=dict(tally.outcomes), connect_failures=tally.connect_failures,
                host=socket.gethostname(), pid=os.getpid(), started_at=started_at,
                flow_run_id=flow_run_id)
    )
    return done.rowcount == 1


# What the run reads back of a finished shard: all but its targets, which may be large.
FINISH_COLUMNS = ("shard", "host", "pid", "seconds", "cpu_seconds", "peak_rss_mib",
                  "outcomes", "connect_failures")


def finished_shards(session: Session, run_id: int) -> dict[int, Row[Any]]:
    """The run's shards that stored their probes, by index (the FINISH_COLUMNS of each)."""
    statement = select(*(getattr(ProbeShardRow, name) for name in FINISH_COLUMNS)).where(
        ProbeShardRow.run_id == run_id, col(ProbeShardRow.finished_at).is_not(None))
    return {row.shard: row for row in session.exec(statement)}


def stored_tally(row: Row[Any] | ProbeShardRow) -> ProbeTally:
    return ProbeTally(outcomes=dict(row.outcomes or {}), connect_failures=row.connect_failures)
