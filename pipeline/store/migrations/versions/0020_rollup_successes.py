"""Each day's rollup counts its successful probes apart from its answers, and keeps the times
of the successful ones alone: an answer that is a failure (404/410, a bot challenge, 429, 5xx)
is no longer up time, nor a Latency sample. Uptime and Latency read past days from here.

Filled here: every row's count of successes is its count of answers, which it is wherever
no answer of the day was a failure. Where one was, on a day whose raw probes are still
stored, the entry's and its URLs' successes, timed successful probes and percentiles are
counted again from the day's probes (the few entries that answered with a failure, read a
day at a time); the day's scores stay as they were recorded. A day whose raw probes were
pruned keeps its old figures: its answers stand for its successes. The days' kept evidence
is dropped: it held the answers, and the rollup stage keeps it again from the rows.

What it costs: one update of every rollup row (at 100,000 entries, some 3 million entry rows
and 15 million URL rows a month), one pass over each day's probes through the index on their
check time to find the entries that answered with a failure, and those entries' probes of the
day read again: no entry is scored again, and no day is rolled up again.

Going back drops the count and the kept evidence; the times and percentiles counted again
stay those of the successful probes.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import numpy as np
import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

# The answers the prober classed as failures at this revision (`probe.FAILED_REASONS`).
FAILED_REASONS = ("not_found", "bot_challenge", "rate_limited", "server_error")
IN_LIST = 1_000  # entries asked at a time

rolled_day = sa.table("rolled_day", sa.column("day", sa.Date),
                      sa.column("probes_pruned", sa.Boolean),
                      sa.column("evidence_entries", sa.Text),
                      sa.column("evidence", sa.LargeBinary))
entry_rollup = sa.table("daily_entry", sa.column("day", sa.Date), sa.column("entry_id", sa.String),
                        sa.column("responses", sa.Integer), sa.column("successes", sa.Integer),
                        sa.column("timed_ms", sa.JSON), sa.column("p50_ms", sa.Float),
                        sa.column("p90_ms", sa.Float))
endpoint_rollup = sa.table("daily_endpoint", sa.column("day", sa.Date),
                           sa.column("entry_id", sa.String), sa.column("url", sa.String),
                           sa.column("responses", sa.Integer),
                           sa.column("successes", sa.Integer), sa.column("p50_ms", sa.Float),
                           sa.column("p90_ms", sa.Float))
probe = sa.table("probe", sa.column("id", sa.Integer), sa.column("run_id", sa.Integer),
                 sa.column("entry_id", sa.String), sa.column("url", sa.String),
                 sa.column("checked_at", sa.DateTime(timezone=True)),
                 sa.column("outcome", sa.String), sa.column("reason", sa.String),
                 sa.column("total_ms", sa.Float))
run = sa.table("pipeline_run", sa.column("id", sa.Integer),
               sa.column("network_suspect", sa.Boolean))


def upgrade() -> None:
    for table in ("daily_entry", "daily_endpoint"):
        op.add_column(table, sa.Column("successes", sa.Integer(), nullable=False,
                                       server_default="0"))
    bind = op.get_bind()
    for rollup in (entry_rollup, endpoint_rollup):
        bind.execute(rollup.update().where(rollup.c.responses > 0)
                     .values(successes=rollup.c.responses))
    bind.execute(rolled_day.update().values(evidence=None, evidence_entries=None))
    pruned = set(bind.execute(sa.select(rolled_day.c.day).where(rolled_day.c.probes_pruned))
                 .scalars())
    answered = bind.execute(sa.select(entry_rollup.c.day).distinct()
                            .where(entry_rollup.c.responses > 0)).scalars()
    for day in sorted(set(answered) - pruned):
        _count_again(bind, day)


def downgrade() -> None:
    op.get_bind().execute(rolled_day.update().values(evidence=None, evidence_entries=None))
    # Dropped in place (SQLite 3.35 on), as 0017's columns are.
    op.drop_column("daily_endpoint", "successes")
    op.drop_column("daily_entry", "successes")


def _chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(ids), IN_LIST):
        yield ids[start : start + IN_LIST]


def _count_again(bind: sa.Connection, day: date) -> None:
    """Count `day`'s figures again for the entries with an answer that is a failure: from the
    day's trusted probes, each target's last of a run (a confirmation replaces the first look
    it checked), as the rollup stage reads them."""
    start = datetime.combine(day, time.min, tzinfo=UTC)
    of_day = (probe.c.checked_at >= start,
              probe.c.checked_at <= start + timedelta(days=1, microseconds=-1))
    failing = sorted(bind.execute(sa.select(probe.c.entry_id).distinct().where(
        *of_day, probe.c.outcome != "unreachable", probe.c.reason.in_(FAILED_REASONS)))
        .scalars())
    untrusted = sa.select(run.c.id).where(run.c.network_suspect.is_not(False))
    for chunk in _chunks(failing):
        rows = bind.execute(
            sa.select(probe.c.run_id, probe.c.entry_id, probe.c.url, probe.c.outcome,
                      probe.c.reason, probe.c.total_ms)
            .where(*of_day, probe.c.run_id.not_in(untrusted), probe.c.entry_id.in_(chunk))
            .order_by(probe.c.id))
        concluded = {(run_id, entry_id, url): (outcome, reason, ms)
                     for run_id, entry_id, url, outcome, reason, ms in rows}
        by_entry: dict[str, list[Any]] = defaultdict(lambda: [0, []])
        by_url: dict[tuple[str, str], list[Any]] = defaultdict(lambda: [0, []])
        for (_, entry_id, url), (outcome, reason, ms) in concluded.items():
            for figures in (by_entry[entry_id], by_url[(entry_id, url)]):
                if outcome != "unreachable" and reason not in FAILED_REASONS:
                    figures[0] += 1
                    if ms is not None:
                        figures[1].append(float(ms))
        if by_entry:
            bind.execute(entry_rollup.update().where(
                entry_rollup.c.day == day, entry_rollup.c.entry_id == sa.bindparam("entry"))
                .values(successes=sa.bindparam("counted"), timed_ms=sa.bindparam("timed"),
                        p50_ms=sa.bindparam("p50"), p90_ms=sa.bindparam("p90")),
                [{"entry": entry_id, "counted": successes, "timed": sorted(timed),
                  **_percentiles(timed)} for entry_id, (successes, timed) in by_entry.items()])
            bind.execute(endpoint_rollup.update().where(
                endpoint_rollup.c.day == day, endpoint_rollup.c.entry_id == sa.bindparam("entry"),
                endpoint_rollup.c.url == sa.bindparam("target"))
                .values(successes=sa.bindparam("counted"), p50_ms=sa.bindparam("p50"),
                        p90_ms=sa.bindparam("p90")),
                [{"entry": entry_id, "target": url, "counted": successes, **_percentiles(timed)}
                 for (entry_id, url), (successes, timed) in by_url.items()])


def _percentiles(timed: list[float]) -> dict[str, float | None]:
    """p50 and p90 of the times (linear between order statistics), to a thousandth."""
    if not timed:
        return {"p50": None, "p90": None}
    p50, p90 = np.quantile(np.array(timed), [0.5, 0.9])
    return {"p50": round(float(p50), 3), "p90": round(float(p90), 3)}
