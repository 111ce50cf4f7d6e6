"""The probe stage in shards: targets split by host, each shard a Prefect task in a process of
its own, every shard writing its probes into the same database.

One event loop in one Python process tops out at one core, some 1,500 probes a second on
loopback (figures in docs/scaling.md); shards spread the probing over processes through the
flow's task runner, a `ProcessPoolTaskRunner` (another runner, such as prefect-dask's, would
spread the same tasks over a cluster). No host is in two shards, so each shard's prober keeps
its hosts' politeness alone. The run's counts and its network-suspect flag are taken over
all shards together.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import wait
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.task_runners import ProcessPoolTaskRunner
from prefect.utilities.annotations import quote

from pipeline.history import ProbeTally, add_probes, close_probe_run, plan_targets
from pipeline.probe import probe_all
from pipeline.settings import Settings
from pipeline.shards import Shard, split_by_host
from pipeline.store import PipelineRun, active_entries, engine_for, session_scope


class ShardsFailedError(RuntimeError):
    """Some shards failed after their retries; the others' probes are stored and counted."""


@dataclass(frozen=True)
class ShardReport:
    """What one shard did, and in which process."""

    index: int
    hosts: frozenset[str]
    process_id: int
    seconds: float  # probing and storing, without the process's start
    peak_rss_mib: float  # of the process, so far
    tally: ProbeTally


def peak_rss_mib() -> float:
    """This process's peak resident memory. VmHWM, since getrusage's maximum survives the
    fork and exec that start a pool process, and would report the parent's."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return int(kib) / 1024


@contextmanager
def api_for_workers() -> Iterator[None]:
    """Point the shard processes at this process's Prefect API. With no PREFECT_API_URL set,
    Prefect runs a temporary server for this process alone; left so, every shard process
    would start one of its own (some 20 s each, and their runs would not show here)."""
    from prefect.server.api.server import SubprocessASGIServer

    server = None if PREFECT_API_URL.value() else SubprocessASGIServer()
    if server is None or not server.running:
        yield
        return
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield


@task(
    name="probe-shard",
    task_run_name="probe-shard-{shard.index}",
    cache_policy=NO_CACHE,
    retries=1,
    retry_delay_seconds=10,
)
async def probe_shard(settings: Settings, run_id: int, shard: Shard) -> ShardReport:
    """Probe one shard's targets as coroutines of this task, then store its rows in one commit
    (so a retried shard never leaves half its rows behind)."""
    started = time.perf_counter()
    results = await probe_all(shard.targets, settings.probe_settings())
    with session_scope(engine_for(settings.database_url)) as session:
        tally = add_probes(session, run_id, results)
    seconds = time.perf_counter() - started
    hosts = shard.hosts
    get_run_logger().info(
        "shard %d: %d URLs of %d hosts in %.1f s: %s",
        shard.index, tally.probes, len(hosts), seconds, dict(sorted(tally.outcomes.items())),
    )
    return ShardReport(shard.index, hosts, os.getpid(), seconds, peak_rss_mib(), tally)


@flow(name="probe-shards", task_runner=ProcessPoolTaskRunner())
async def probe_in_shards(run_id: int) -> list[ShardReport]:
    """Plan every published entry's targets, probe them in shards, then count the run.

    The settings come from the environment, never as a parameter: Prefect's server keeps
    every flow run's parameters, and the database URL may carry a password.
    """
    settings = Settings()
    engine = engine_for(settings.database_url)
    with session_scope(engine) as session:
        targets = plan_targets(session, active_entries(session))
    shards = split_by_host(targets, settings.probe_shards)
    with api_for_workers():
        # quote(): Prefect would otherwise walk every target looking for futures.
        futures = [probe_shard.submit(settings, run_id, quote(shard)) for shard in shards]
    await asyncio.to_thread(wait, futures)  # the flow's event loop stays free meanwhile
    outcomes = [future.result(raise_on_failure=False) for future in futures]
    reports = [outcome for outcome in outcomes if isinstance(outcome, ShardReport)]
    tally = sum((report.tally for report in reports), ProbeTally())
    with session_scope(engine) as session:
        run = session.get(PipelineRun, run_id)
        close_probe_run(session, run, tally)
    logger = get_run_logger()
    logger.info("probed %d URLs in %d shards: %s", tally.probes, len(shards),
                dict(sorted(tally.outcomes.items())))
    if run.network_suspect:
        logger.warning("most probes failed to connect at once: run flagged network-suspect, "
                       "published statuses keep the last trusted run")
    failed = [shard.index for shard, outcome in zip(shards, outcomes, strict=True)
              if not isinstance(outcome, ShardReport)]
    if failed:
        raise ShardsFailedError(f"probe shards {failed} of {len(shards)} failed: "
                                f"{outcomes[failed[0]]!r}")
    return reports


async def probe_sharded(run_id: int) -> list[ShardReport]:
    """The sharded probe stage on a pool of `probe_workers` processes (0: one per CPU)."""
    settings = Settings()
    workers = min(settings.probe_workers or os.cpu_count() or 1, settings.probe_shards)
    runner = ProcessPoolTaskRunner(max_workers=workers)
    return await probe_in_shards.with_options(task_runner=runner)(run_id)
