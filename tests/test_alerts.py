"""Alerts: the documented payloads, delivered to a webhook receiver on loopback, with retries."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import jsonschema
import pytest
import pytest_asyncio

from pipeline.judging.changes import Change
from pipeline.operations.alerts import alert_payload, send_alert
from pipeline.store.tables import PipelineRun
from tests.conftest import REPO
from tests.webhook import WebhookReceiver

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)
RUN = PipelineRun(id=7, flow="nightly", started_at=T0, finished_at=T0, state="completed",
                  release_version="2.0.0+20261121.1")
CHANGES = [
    Change("example-weather", "Example Weather", "live", "unreachable", T0),
    Change("other-maps", "Other Maps", "unreachable", "online", T0),
    Change("third-ai", "Third AI", "online", "live", T0),
]


@pytest_asyncio.fixture(loop_scope="function")
async def receiver() -> AsyncIterator[WebhookReceiver]:
    hook = await WebhookReceiver().start()
    yield hook
    await hook.close()


def documented_schema() -> dict:
    """The payload schema as published in docs/alerts.md (the fenced json block)."""
    text = (REPO / "docs" / "alerts.md").read_text(encoding="utf-8")
    block = text.split("```json schema\n", 1)[1].split("```", 1)[0]
    return json.loads(block)


def test_state_change_payload() -> None:
    payload = alert_payload("state_changed", "nightly", RUN, CHANGES, flow_run_id="abc",
                            sent_at=T0)
    assert payload["event"] == "state_changed" and payload["flow"] == "nightly"
    assert [c["direction"] for c in payload["changes"]] == ["down", "up", "changed"]
    assert payload["changes"][0] == {"entry": "example-weather", "name": "Example Weather",
                                     "from": "live", "to": "unreachable",
                                     "at": "2026-11-21T03:00:00Z", "direction": "down"}
    assert payload["run"] == {"id": 7, "flowRunId": "abc", "state": "completed",
                              "startedAt": "2026-11-21T03:00:00Z",
                              "finishedAt": "2026-11-21T03:00:00Z",
                              "release": "2.0.0+20261121.1", "message": None}
    assert payload["text"].startswith("API Directory: 3 state changes (1 down, 1 up)")
    assert "Example Weather live→unreachable" in payload["text"]
    jsonschema.validate(payload, documented_schema())


def test_failure_payloads() -> None:
    failed = alert_payload("run_failed", "backfill", RUN, message="ingest stage failed: boom",
                           sent_at=T0)
    assert failed["text"] == "API Directory: backfill run failed: ingest stage failed: boom"
    assert failed["run"]["message"] == "ingest stage failed: boom" and failed["changes"] == []
    crashed = alert_payload("run_crashed", "nightly", None, message="killed", sent_at=T0)
    assert crashed["run"]["id"] is None and crashed["text"].endswith("run crashed: killed")
    for payload in (failed, crashed):
        jsonschema.validate(payload, documented_schema())


def test_an_entries_left_out_payload_has_a_one_line_text_and_a_line_per_entry() -> None:
    message = ("2 stored entries left out of release 2.0.0+20261121.1, which its check "
               "refused; fix their files:\n"
               "entry a (data/entries/ai/a.yaml): field baseUrl: holds U+00E9, which a URL must "
               "percent-encode (%C3%A9); left out of the release\n"
               "entry b (data/entries/ai/b.yaml): field docsUrl: holds a '%' not followed by two "
               "hex digits: write a '%' itself as %25; left out of the release")
    payload = alert_payload("entries_left_out", "nightly", RUN, message=message, sent_at=T0)
    assert payload["text"] == (
        "API Directory: nightly run published without entries its check refused: 2 stored "
        "entries left out of release 2.0.0+20261121.1, which its check refused; fix their "
        "files:")
    assert payload["run"]["message"].splitlines()[1:] == message.splitlines()[1:]
    assert payload["run"]["state"] == "completed"
    jsonschema.validate(payload, documented_schema())


async def test_an_alert_reaches_the_webhook_as_json(receiver: WebhookReceiver) -> None:
    payload = alert_payload("state_changed", "nightly", RUN, CHANGES, sent_at=T0)
    delivery = await send_alert(receiver.url, payload)
    assert (delivery.delivered, delivery.attempts, delivery.status) == (True, 1, 204)
    assert receiver.received == [payload]
    assert receiver.content_types == ["application/json"]


async def test_server_errors_are_retried_with_backoff(receiver: WebhookReceiver) -> None:
    receiver.statuses = [503, 429]
    delivery = await send_alert(receiver.url, {"event": "run_failed"}, backoff=0.01)
    assert (delivery.delivered, delivery.attempts) == (True, 3)
    assert len(receiver.received) == 3


async def test_a_client_error_is_not_retried(receiver: WebhookReceiver) -> None:
    receiver.statuses = [404]
    delivery = await send_alert(receiver.url, {"event": "run_failed"}, backoff=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.status) == (False, 1, 404)


async def test_an_unreachable_webhook_is_reported_not_raised() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    delivery = await send_alert(f"http://127.0.0.1:{port}/hook", {"event": "x"}, attempts=2,
                                backoff=0.01)
    assert (delivery.delivered, delivery.attempts, delivery.status) == (False, 2, None)
    assert "ClientConnectorError" in delivery.error


async def test_a_webhook_that_never_answers_is_told_with_the_seconds_waited() -> None:
    """aiohttp's timeout has no words of its own: it was logged as `TimeoutError: `."""
    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
        delivery = await send_alert(url, {"event": "x"}, timeout=0.2, attempts=1)
    assert (delivery.delivered, delivery.attempts, delivery.status) == (False, 1, None)
    assert delivery.error == "no answer within 0.2 s (APIDIR_ALERT_TIMEOUT bounds each attempt)"


async def test_no_webhook_configured_sends_nothing() -> None:
    delivery = await send_alert(None, {"event": "x"})
    assert (delivery.delivered, delivery.attempts) == (False, 0)


def test_the_alert_timeout_is_the_documented_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """README and docs/alerts.md name APIDIR_ALERT_TIMEOUT: the setting of that name bounds
    each attempt."""
    from pipeline.settings import Settings

    monkeypatch.setenv("APIDIR_ALERT_TIMEOUT", "2.5")
    assert Settings().alert_timeout == 2.5
