"""The probe stage in shards: targets split by host, each shard a Prefect task in a process of
its own, every shard writing its probes into the same database. Wiring only: the stage's work
is in `pipeline/operations/stages.py`.

One event loop in one Python process tops out at one core, some 1,500 probes a second on
loopback (figures in docs/scaling.md); shards spread the probing over processes through the
flow's task runner, a `ProcessPoolTaskRunner` (another runner, such as prefect-dask's, would
spread the same tasks over a cluster). No host is in two shards, so each shard's prober keeps
its hosts' politeness alone. The run's counts and its network-suspect flag are taken over
all shards together.
"""

from __future__ import annotations

import asyncio

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.task_runners import ProcessPoolTaskRunner
from prefect.utilities.annotations import quote

from pipeline.operations import stages
from pipeline.operations.runs import api_for_workers
from pipeline.probing.shards import Shard
from pipeline.settings import Settings


@task(
    name="probe-shard",
    task_run_name="probe-shard-{shard.index}",
    cache_policy=NO_CACHE,
    retries=1,
    retry_delay_seconds=10,
)
async def probe_shard(settings: Settings, run_id: int, shard: Shard) -> stages.ShardReport:
    """Probe one shard's targets as coroutines of this task, then store its rows in one commit."""
    report = await stages.probe_shard(settings, run_id, shard)
    get_run_logger().info(
        "shard %d: %d URLs of %d hosts in %.1f s: %s",
        shard.index, report.tally.probes, len(report.hosts), report.seconds,
        dict(sorted(report.tally.outcomes.items())),
    )
    return report


@flow(name="probe-shards", task_runner=ProcessPoolTaskRunner())
async def probe_in_shards(run_id: int) -> list[stages.ShardReport]:
    """Plan every published entry's targets, probe them in shards, then count the run.

    The settings come from the environment, never as a parameter: Prefect's server keeps
    every flow run's parameters, and the database URL may carry a password. The caller sets
    the number of processes with `with_options(task_runner=...)`.
    """
    settings = Settings()
    shards = stages.plan_shards(settings)
    with api_for_workers():
        # quote(): Prefect would otherwise walk every target looking for futures.
        futures = [probe_shard.submit(settings, run_id, quote(shard)) for shard in shards]
    await asyncio.to_thread(wait, futures)  # the flow's event loop stays free meanwhile
    outcomes = [future.result(raise_on_failure=False) for future in futures]
    reports, probed = stages.close_shards(settings, run_id, shards, outcomes)
    get_run_logger().info("probed %d URLs in %d shards: %s", probed.probes, len(shards),
                          probed.outcomes)
    return reports
