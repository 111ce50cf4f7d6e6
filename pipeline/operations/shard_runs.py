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

import anyio
from prefect import get_client, get_run_logger
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import arun_deployment
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL
from prefect.states import Cancelled, Cancelling

from pipeline.operations.stages import first_line

POLL_SECONDS = 2.0
PAGE = 200  # flow runs read in one request (the server's default limit)
DEPLOY_COMMAND = "prefect deploy --name probe-shard"


class ShardDeploymentError(RuntimeError):
    """The shards' deployment cannot be run: no Prefect server, or no such deployment."""


async def start_shard_runs(deployment: str, run_id: int, night: str, count: int
                           ) -> list[FlowRun]:
    """One flow run of `deployment` per shard, a subflow of the calling flow run; each keyed
    by the night (`stages.night_of`) and shard, so starting them again that night returns the same
    flow runs, and no other night ever gets them."""
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
                idempotency_key=f"apidir-run-{run_id}-{night}-shard-{shard}"))
        except ObjectNotFound:
            raise ShardDeploymentError(
                f"no deployment {deployment} on the Prefect server at {api}: run "
                f"`{DEPLOY_COMMAND}` in the checkout (or unset APIDIR_PROBE_DEPLOYMENT)"
            ) from None
    return runs


async def wait_for_runs(ids: Sequence[UUID], poll: float = POLL_SECONDS) -> list[FlowRun]:
    """The flow runs `ids` once every one has ended (completed, failed, crashed, cancelled);
    a run retried by its flow has not ended until its last attempt has. If the wait itself
    is stopped (the night's time limit, a cancellation), the runs not yet ended are cancelled
    first: no worker goes on probing for a night that is over."""
    logger = get_run_logger()
    ended_before = -1
    async with get_client() as client:
        try:
            while True:
                runs = await _read_runs(client, ids)
                ended = sum(1 for run in runs if _ended(run))
                if ended != ended_before:
                    logger.info("probe shards on workers: %d of %d ended", ended, len(ids))
                    ended_before = ended
                if ended == len(ids):
                    return runs
                await asyncio.sleep(poll)
        except BaseException:
            with anyio.CancelScope(shield=True):  # Prefect's time limit cancels every await
                await cancel_runs(client, ids, "the night waiting for this shard stopped")
            raise


async def _read_runs(client: PrefectClient, ids: Sequence[UUID]) -> list[FlowRun]:
    runs: list[FlowRun] = []
    for start in range(0, len(ids), PAGE):
        runs += await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids[start:start + PAGE])),
            limit=PAGE)
    return runs


def _ended(run: FlowRun) -> bool:
    return run.state is not None and run.state.is_final()


async def cancel_runs(client: PrefectClient, ids: Sequence[UUID], why: str) -> int:
    """Cancel the flow runs `ids` that have not ended: one a worker runs is set Cancelling, so
    its worker stops the process; one no worker took yet is Cancelled at once. Their count."""
    cancelled = 0
    for run in await _read_runs(client, ids):
        if _ended(run):
            continue
        taken = run.state is not None and (run.state.is_running() or run.state.is_pending())
        state = Cancelling(message=why) if taken else Cancelled(message=why)
        await client.set_flow_run_state(run.id, state, force=True)
        cancelled += 1
    return cancelled


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
