"""The nightly's store upkeep: the days ended rolled up, their evidence kept, raw probes past
the limit pruned. Its own module, free of Prefect, so a worker process forked for it (the
night runs it beside the probe stage: `roll_up_night_aside`) starts without Prefect's imports."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date

from sqlmodel import Session

from pipeline import processes
from pipeline.judging import rollup
from pipeline.judging.rollup import PRUNED_DAYS_A_NIGHT, RolledUp, days_to_roll, roll_up_days
from pipeline.processes import paused_garbage_collection
from pipeline.settings import Settings
from pipeline.store.locks import StoreWork, store_lock
from pipeline.store.tables import engine_for, session_scope, utcnow


@contextmanager
def rolling_up(settings: Settings, run_id: int | None) -> Iterator[Session]:
    """A session on the store holding its rollup lock (`store_lock`): two runs rolling up the
    same day (a backfill during the nightly) take turns instead of both inserting its rows,
    and a day's probes are never pruned while another run rolls it up. Each of its commits
    checks first that the lock is still held."""
    engine = engine_for(settings.database_url)
    with (store_lock(engine, StoreWork.rollup, run_id, settings.store_lock_timeout,
                     settings.store_lock_keepalive) as held,
          session_scope(engine, held) as session):
        yield session


def roll_up_ended(settings: Settings, day: date, run_id: int | None = None) -> list[RolledUp]:
    """The nightly of `day`'s rollups: of the days ended and not rolled up yet
    (`days_to_roll`), chosen once the rollup lock is held, so a run that waited for another's
    finds the days that run rolled up done instead of rolling them up again."""
    with paused_garbage_collection(), rolling_up(settings, run_id) as session:
        return roll_up_days(session, days_to_roll(session, day, utcnow()))


def keep_missing_evidence(settings: Settings, run_id: int | None = None) -> list[date]:
    """Keep the rollup evidence of the days the score stage reads that were rolled up before
    it was kept with them (`rollup.keep_missing_evidence`); the days kept."""
    with paused_garbage_collection(), rolling_up(settings, run_id) as session:
        return rollup.keep_missing_evidence(session, utcnow().date())


def prune_probes(settings: Settings, run_id: int | None = None) -> list[tuple[date, int]]:
    """Delete the raw probes older than `APIDIR_PROBES_KEPT_DAYS` of the days rolled up
    (`rollup.prune_probes`), if a limit is set; (day, probes deleted) of each day pruned."""
    if not settings.probes_kept_days:
        return []
    with rolling_up(settings, run_id) as session:
        return rollup.prune_probes(session, utcnow().date(), settings.probes_kept_days,
                                   at_most=PRUNED_DAYS_A_NIGHT)


@dataclass(frozen=True)
class NightRollup:
    """What a night's upkeep did: the days rolled up, the days whose evidence it kept, and
    (day, probes deleted) of each day whose raw probes it pruned."""

    rolled: list[RolledUp]
    kept: list[date]
    pruned: list[tuple[date, int]]


def after_rolling_up(settings: Settings, rolled: list[RolledUp],
                     run_id: int | None = None) -> NightRollup:
    """The rollups `rolled` with the upkeep that follows any rollup of a run: the missing
    evidence kept, the raw probes past the limit pruned."""
    return NightRollup(rolled, keep_missing_evidence(settings, run_id),
                       prune_probes(settings, run_id))


def roll_up_night(settings: Settings, day: date, run_id: int | None = None) -> NightRollup:
    """The nightly of `day`'s upkeep, in turn: the days ended rolled up, their missing evidence
    kept, the raw probes past the limit pruned. It reads and writes only days that ended and
    their rollups, never the night's own probes, nor what the probe stage plans from (the
    latest day's probes, which pruning keeps): so it may run while the night probes."""
    return after_rolling_up(settings, roll_up_ended(settings, day, run_id), run_id)


def roll_up_night_aside(settings: Settings, day: date, run_id: int | None = None) -> NightRollup:
    """`roll_up_night` in a worker process of its own (`processes.in_own_process`): beside the
    probe stage it takes a core of its own rather than the flow's interpreter lock, and its
    memory's high-water mark is not the flow's."""
    return processes.in_own_process(roll_up_night, settings, day, run_id)
