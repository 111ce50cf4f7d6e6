"""Domain events as Prefect events, so operators hang their own automations on them
(a page on a failed run, a ticket when an entry goes down): `apidir.run.failed`,
`apidir.run.network-suspect`, `apidir.run.entries-left-out` and `apidir.entry.state-changed`."""

from __future__ import annotations

from collections.abc import Sequence

from prefect.events import emit_event

from pipeline.judging.changes import Change
from pipeline.store.tables import utc_text

RUN_FAILED = "apidir.run.failed"
RUN_NETWORK_SUSPECT = "apidir.run.network-suspect"
RUN_ENTRIES_LEFT_OUT = "apidir.run.entries-left-out"
ENTRY_STATE_CHANGED = "apidir.entry.state-changed"


def _run_resource(flow: str, run_id: int | None) -> dict[str, str]:
    return {"prefect.resource.id": f"apidir.run.{run_id}", "prefect.resource.name": flow,
            "prefect.resource.role": "apidir-run"}


def emit_run_event(event: str, flow: str, run_id: int | None, message: str | None) -> None:
    """One run event: the run's record as the resource, what happened as the payload."""
    emit_event(event=event, resource=_run_resource(flow, run_id),
               payload={"flow": flow, "run": run_id, "message": message})


def emit_state_changes(flow: str, run_id: int | None, changes: Sequence[Change]) -> None:
    """One event per entry whose presented state changed, the run as a related resource."""
    for change in changes:
        emit_event(
            event=ENTRY_STATE_CHANGED,
            resource={"prefect.resource.id": f"apidir.entry.{change.entry_id}",
                      "prefect.resource.name": change.name},
            related=[_run_resource(flow, run_id)],
            payload={"entry": change.entry_id, "from": change.from_state, "to": change.to_state,
                     "direction": change.direction, "at": utc_text(change.at)},
        )
