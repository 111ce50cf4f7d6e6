"""Probe shards as Prefect tasks in processes of this machine, in Prefect's process pool, with
what the pool alone does not give a night: a shard whose process died is run again, and the
processes stop when the night does.

A process that dies (killed, out of memory) breaks the whole pool: every shard in it fails
with BrokenProcessPool, its own retries never run, and the pool takes no more work. So the
shards whose process died are run once more, each in a fresh pool of one process, so that a
process dying again fails its own shard alone; the shards that stored their probes before
keep them (a stored shard is not probed again). And the pool, shut down, waits for every
shard to end: a night stopped (its time limit, a cancel) kills the processes first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from prefect import Task
from prefect.futures import PrefectFuture
from prefect.task_runners import ProcessPoolTaskRunner

from pipeline.operations.runs import api_for_workers

log = logging.getLogger(__name__)


class ShardProcessDied(RuntimeError):
    """A shard's process ended abruptly (killed, out of memory) on each of its attempts."""


async def run_in_processes(task: Task[..., Any], calls: Sequence[dict[str, Any]],
                           workers: int) -> list[object]:
    """`task` once for each of `calls` (its parameters) in `workers` processes: each one's
    result, else its error; a call whose process died is run once more in a process of its
    own, and one that died then too gives ShardProcessDied."""
    outcomes = await _in_one_pool(task, calls, workers)
    died = [at for at, outcome in enumerate(outcomes) if isinstance(outcome, BrokenProcessPool)]
    if died:
        log.warning("a probe shard's process ended abruptly (killed, or out of memory): "
                    "running the %d shards it stopped again, each in a process of its own",
                    len(died))
        slots = asyncio.Semaphore(workers)

        async def alone(call: dict[str, Any]) -> object:
            async with slots:
                return (await _in_one_pool(task, [call], 1))[0]

        again = await asyncio.gather(*(alone(calls[at]) for at in died))
        for at, outcome in zip(died, again, strict=True):
            outcomes[at] = ShardProcessDied(
                "its process ended abruptly (killed, or out of memory) on each of its 2 "
                "attempts") if isinstance(outcome, BrokenProcessPool) else outcome
    return outcomes


async def _in_one_pool(task: Task[..., Any], calls: Sequence[dict[str, Any]],
                       workers: int) -> list[object]:
    """`task` for each of `calls` in one fresh pool of `workers` processes; a call whose
    process died (or whose pool broke under it) gives its BrokenProcessPool. If the wait is
    stopped, the processes are killed before the pool is let go."""
    with ProcessPoolTaskRunner(max_workers=workers) as runner:
        with api_for_workers():
            futures = [runner.submit(task, call) for call in calls]
        try:  # in a thread: the flow's event loop stays free meanwhile
            return await asyncio.to_thread(_outcomes, futures)
        except BaseException:
            kill_processes(runner)
            raise


def _outcomes(futures: Sequence[PrefectFuture[Any]]) -> list[object]:
    """Each future's result or error, once it has ended; a broken pool's too."""
    outcomes: list[object] = []
    for future in futures:
        try:
            outcomes.append(future.result(raise_on_failure=False))
        except BrokenProcessPool as died:
            outcomes.append(died)
    return outcomes


def kill_processes(runner: ProcessPoolTaskRunner) -> None:
    """Kill the pool's processes now: shutting the pool down would wait for each shard to end
    (hours, on a night over its time limit), and the pool has no public way to stop work that
    runs before Python 3.14's `kill_workers`."""
    executor = getattr(runner, "_executor", None)
    if executor is None:
        return
    if hasattr(executor, "kill_workers"):
        executor.kill_workers()
        return
    for process in list((getattr(executor, "_processes", None) or {}).values()):
        process.kill()
