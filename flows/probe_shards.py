"""The probe stage in shards: targets split by host and stored by shard, each shard a Prefect
task in a process of its own reading its targets from the store and writing its probes into
the same database. Wiring only: the stage's work is in `pipeline/operations/stages.py`, the
processes' in `pipeline/operations/shard_processes.py`.

One event loop in one Python process tops out at one core, some 1,500 probes a second on
loopback (figures in docs/scaling.md); shards spread the probing over processes through
Prefect's `ProcessPoolTaskRunner`. No host is in two shards, and hosts joined by an
earlier redirect are in one, so each shard's prober keeps its hosts' politeness alone; a host
a new redirect leads to is shared politely (docs/scaling.md). The run's counts and its
network-suspect flag are taken over all shards together.

With `APIDIR_PROBE_DEPLOYMENT` set, the shards are flow runs of the `probe-shard` deployment
instead, picked up by Prefect workers on any machine of its work pool: the run stores each
shard's targets, starts one flow run per shard with only (run, shard) as parameters, waits
for all of them, and counts the run from what the shards stored.
"""

from __future__ import annotations

import asyncio

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run as current_flow_run

from pipeline.operations import shard_processes, shard_runs, stages
from pipeline.operations.runs import transient_failure
from pipeline.settings import Settings

# A shard's flow run on a worker: retried like a stage, bounded like a run. Read where the
# module is loaded: the worker's environment, for a shard's run.
SHARD_SETTINGS = Settings()


@task(
    name="probe-shard",
    task_run_name="probe-shard-{shard}",
    cache_policy=NO_CACHE,
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=transient_failure,
)
async def probe_shard(settings: Settings, run_id: int, shard: int) -> stages.ShardReport:
    """Probe the shard the run stored under `shard` as coroutines of this task, then store its
    rows in one commit (once: a retry finds them stored)."""
    report = await stages.probe_stored_shard(settings, run_id, shard)
    get_run_logger().info("shard %d: %s", shard, report.summary())
    return report


@flow(name="probe-shards")
async def probe_in_shards(run_id: int) -> list[stages.ShardReport]:
    """Plan every published entry's targets and store them by shard, probe the shards in
    processes of Prefect's process pool (`shard_processes`), then count the run.

    The targets reach the shards' processes through the store, as they reach workers, never
    as task parameters. The settings come from the environment, never as a parameter:
    Prefect's server keeps every flow run's parameters, and the database URL may carry a
    password.
    """
    settings = Settings()
    shards = await asyncio.to_thread(stages.store_shard_plan, settings, run_id)
    calls = [{"settings": settings, "run_id": run_id, "shard": shard.index} for shard in shards]
    outcomes = await shard_processes.run_in_processes(probe_shard, calls,
                                                      stages.shard_workers(settings))
    reports, probed = stages.close_shards(settings, run_id, shards, outcomes)
    get_run_logger().info("probed %d URLs in %d shards: %s", probed.probes, len(shards),
                          probed.outcomes)
    return reports


@flow(
    name="probe-shard",
    flow_run_name="probe-shard-{shard}",
    retries=SHARD_SETTINGS.stage_retries,
    retry_delay_seconds=SHARD_SETTINGS.retry_delay,
    timeout_seconds=SHARD_SETTINGS.run_timeout,
)
async def probe_stored_shard(run_id: int, shard: int) -> None:
    """Probe shard `shard` of run `run_id` on whichever worker took it: its targets come from
    the store and its probes go back there, once, with where it ran and what it counted."""
    report = await stages.probe_stored_shard(Settings(), run_id, shard, current_flow_run.id)
    get_run_logger().info("shard %d of run %d: %s", shard, run_id, report.summary())


@flow(name="probe-shards-on-workers")
async def probe_on_workers(run_id: int) -> list[stages.ShardReport]:
    """Plan the shards and store their targets, run each as a flow run of the deployment
    `APIDIR_PROBE_DEPLOYMENT` on the workers of its pool, wait for all, then count the run.
    A shard that failed after its retries fails this flow, naming it, once the others ended."""
    settings = Settings()
    shards = await asyncio.to_thread(stages.store_shard_plan, settings, run_id)
    night = await asyncio.to_thread(stages.night_of, settings, run_id)
    runs = await shard_runs.start_shard_runs(settings.probe_deployment, run_id, night,
                                             len(shards))
    ended = await shard_runs.wait_for_runs([run.id for run in runs])
    outcomes = stages.stored_shard_outcomes(settings, run_id, shards,
                                            shard_runs.run_failures(ended))
    reports, probed = stages.close_shards(settings, run_id, shards, outcomes)
    get_run_logger().info("probed %d URLs in %d shards on workers: %s", probed.probes,
                          len(shards), probed.outcomes)
    return reports
