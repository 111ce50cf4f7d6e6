"""Probe shards as flow runs of a deployment, picked up by Prefect workers on any machine of its
work pool: start one flow run per shard with only the run and the shard's index as parameters
(the targets wait in the store), then wait for all of them to end.

The waiting polls the Prefect API, one request a round for every shard at once, and sleeps in
between: the waiting flow's event loop stays free and no worker slot spins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import arun_deployment
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL

from pipeline.operations.stages import first_line

POLL_SECONDS = 2.0
PAGE = 200  # flow runs read in one request (the server's default limit)
DEPLOY_COMMAND = "prefect deploy --name probe-shard"


class ShardDeploymentError(RuntimeError):
    """The shards' deployment cannot be run: no Prefect server, or no such deployment."""


async def start_shard_runs(deployment: str, run_id: int, count: int) -> list[FlowRun]:
    """One flow run of `deployment` per shard, a subflow of the calling flow run; each keyed
    by run and shard, so starting them again returns the same flow runs."""
    api = PREFECT_API_URL.value()
    if not api:
        raise ShardDeploymentError(
            f"APIDIR_PROBE_DEPLOYMENT={deployment} needs a Prefect server whose workers run "
            "the shards: set PREFECT_API_URL (or unset APIDIR_PROBE_DEPLOYMENT)")
    runs = []
    for shard in range(count):
        try:
            runs.append(await arun_deployment(
                deployment, parameters={"run_id": run_id, "shard": shard}, timeout=0,
                flow_run_name=f"probe-shard-{shard}",
                idempotency_key=f"apidir-run-{run_id}-shard-{shard}"))
        except ObjectNotFound:
            raise ShardDeploymentError(
                f"no deployment {deployment} on the Prefect server at {api}: run "
                f"`{DEPLOY_COMMAND}` in the checkout (or unset APIDIR_PROBE_DEPLOYMENT)"
            ) from None
    return runs


async def wait_for_runs(ids: Sequence[UUID], poll: float = POLL_SECONDS) -> list[FlowRun]:
    """The flow runs `ids` once every one has ended (completed, failed, crashed, cancelled);
    a run retried by its flow has not ended until its last attempt has."""
    logger = get_run_logger()
    ended_before = -1
    async with get_client() as client:
        while True:
            runs: list[FlowRun] = []
            for start in range(0, len(ids), PAGE):
                runs += await client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids[start:start + PAGE])),
                    limit=PAGE)
            ended = sum(1 for run in runs if run.state is not None and run.state.is_final())
            if ended != ended_before:
                logger.info("probe shards on workers: %d of %d ended", ended, len(ids))
                ended_before = ended
            if ended == len(ids):
                return runs
            await asyncio.sleep(poll)


def shard_of(run: FlowRun) -> int:
    return int(run.parameters["shard"])


def run_failures(runs: Sequence[FlowRun]) -> dict[int, str]:
    """How each shard's flow run that did not complete ended, by shard index, in one line."""
    failures = {}
    for run in runs:
        if run.state is None or run.state.is_completed():
            continue
        message = first_line(run.state.message or "", None)
        attempts = f"{run.run_count} attempt{'s' if run.run_count != 1 else ''}"
        failures[shard_of(run)] = (f"flow run {run.name} ended {run.state.name} after "
                                   f"{attempts}: {message or 'no message'}")
    return failures
