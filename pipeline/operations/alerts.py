"""Alerts: a JSON POST to the operator's webhook when a run fails or crashes, publishes without
entries its check refused, or entries change.

The payload (documented in `docs/alerts.md`) carries a `text` line too, so chat
webhooks that read only `text` (Slack, Mattermost, Rocket.Chat) show something useful.
An alert that cannot be delivered is logged, never turned into a failed run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import aiohttp

from pipeline.judging.changes import Change
from pipeline.store.tables import PipelineRun, utc_text, utcnow

AlertEvent = Literal["run_failed", "run_crashed", "run_network_suspect", "entries_left_out",
                     "state_changed"]
ALERT_VERSION = "1"
_log = logging.getLogger(__name__)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else utc_text(moment)


def _text(event: AlertEvent, flow: str, changes: Sequence[Change], message: str | None) -> str:
    if event != "state_changed":
        verb = {"run_failed": "failed", "run_crashed": "crashed",
                "run_network_suspect": "is network-suspect",
                "entries_left_out": "published without entries its check refused"}[event]
        first = (message or "no message").splitlines()[0]  # one line, whatever the message
        return f"API Directory: {flow} run {verb}: {first}"
    down = sum(1 for change in changes if change.direction == "down")
    up = sum(1 for change in changes if change.direction == "up")
    listed = ", ".join(f"{c.name} {c.from_state}→{c.to_state}" for c in changes[:10])
    more = f" and {len(changes) - 10} more" if len(changes) > 10 else ""
    return f"API Directory: {len(changes)} state changes ({down} down, {up} up): {listed}{more}"


def alert_payload(
    event: AlertEvent,
    flow: str,
    run: PipelineRun | None = None,
    changes: Sequence[Change] = (),
    message: str | None = None,
    flow_run_id: str | None = None,
    sent_at: datetime | None = None,
) -> dict[str, Any]:
    """The JSON body of one alert."""
    return {
        "alertVersion": ALERT_VERSION,
        "event": event,
        "flow": flow,
        "text": _text(event, flow, changes, message),
        "run": {
            "id": run.id if run else None,
            "flowRunId": flow_run_id,
            "state": run.state if run else None,
            "startedAt": _iso(run.started_at) if run else None,
            "finishedAt": _iso(run.finished_at) if run else None,
            "release": run.release_version if run else None,
            "message": message if message is not None else (run.message if run else None),
        },
        "changes": [change.document() | {"direction": change.direction} for change in changes],
        "sentAt": _iso(sent_at or utcnow()),
    }


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    attempts: int
    status: int | None = None
    error: str | None = None


def stalled(timeout: float) -> str:
    """Why an attempt that timed out failed: the seconds it waited, and the setting bounding
    them (the error's own text is empty)."""
    return f"no answer within {timeout:g} s (APIDIR_ALERT_TIMEOUT bounds each attempt)"


async def send_alert(
    url: str | None, payload: dict[str, Any], timeout: float = 10.0, attempts: int = 3,
    backoff: float = 1.0,
) -> Delivery:
    """POST `payload` to `url`; retries connection errors and 5xx/429 with exponential backoff."""
    if not url:
        return Delivery(False, 0, error="no webhook configured")
    status: int | None = None
    error: str | None = None
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(timeout=client_timeout) as session:
        for attempt in range(1, attempts + 1):
            try:
                async with session.post(url, json=payload) as response:
                    status, error = response.status, None
                    if response.status < 300:
                        return Delivery(True, attempt, status)
                    if response.status != 429 and response.status < 500:
                        break
                    error = f"HTTP {response.status}"
            except TimeoutError:  # before ClientError: aiohttp's, most of them without words
                status, error = None, stalled(timeout)
            except aiohttp.ClientError as exc:
                status, error = None, f"{type(exc).__name__}: {exc}"
            if attempt < attempts:
                await asyncio.sleep(backoff * 2 ** (attempt - 1))
    return not_delivered(payload.get("event"), error or f"HTTP {status}", attempt, status)


def not_delivered(event: object, error: str, attempts: int = 0,
                  status: int | None = None) -> Delivery:
    """An alert that did not reach the webhook, logged: it never fails the run that sent it,
    so the log (and a failed run's command line) is where the operator learns of it."""
    _log.warning("alert %s not delivered to the webhook: %s", event, error)
    return Delivery(False, attempts, status, error)
