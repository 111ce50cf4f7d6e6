"""From `prefect.yaml` to a published release: a real Prefect server, work pool, deploy and worker.

The commands are the ones the README's "Run on a schedule" section gives an operator.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import jsonschema
import pytest

from tests.conftest import REPO
from tests.prefect_server import get_json, prefect, running_prefect_server

pytestmark = pytest.mark.prefect

@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`prefect server start` on a loopback port with its own home; the env to talk to it."""
    with running_prefect_server(tmp_path_factory.mktemp("prefect-server")) as env:
        yield env


def test_the_deployments_run_through_a_worker(
    prefect_server: dict[str, str], tmp_path: Path
) -> None:
    env = prefect_server
    api = env["PREFECT_API_URL"]
    prefect(env, "work-pool", "create", "apidir", "--type", "process")
    prefect(env, "--no-prompt", "deploy", "--all")

    nightly = get_json(f"{api}/deployments/name/nightly/nightly")
    assert nightly["schedules"][0]["schedule"]["cron"] == "0 3 * * *"
    assert nightly["schedules"][0]["schedule"]["timezone"] == "UTC"
    assert nightly["global_concurrency_limit"]["limit"] == 1
    assert nightly["work_pool_name"] == "apidir"
    backfill = get_json(f"{api}/deployments/name/backfill/backfill")
    assert backfill["schedules"] == []
    assert set(backfill["parameter_openapi_schema"]["required"]) == {"start", "end"}

    prefect(env, "deployment", "run", "nightly/nightly")
    worker_env = {
        **env,
        "APIDIR_DATABASE_URL": f"sqlite:///{tmp_path / 'apidir.db'}",
        "APIDIR_OUTPUT_DIR": str(tmp_path / "public"),
        "APIDIR_PROBE_ENABLED": "false",
    }
    prefect(worker_env, "worker", "start", "--pool", "apidir", "--run-once")

    published = json.loads((tmp_path / "public" / "api" / "apis.json").read_text())
    assert published["meta"]["totalAPIs"] == len(published["apis"]) >= 70
    releases = json.loads((tmp_path / "public" / "api" / "releases.json").read_text())
    assert releases["releases"][0]["version"] == published["meta"]["version"]

    today = published["meta"]["generated"][:10]
    prefect(env, "deployment", "run", "backfill/backfill", "--param", f"start={today}",
            "--param", f"end={today}", "--param", 'categories=["weather"]')
    prefect(worker_env, "worker", "start", "--pool", "apidir", "--run-once")
    republished = json.loads((tmp_path / "public" / "api" / "releases.json").read_text())
    assert [r["version"] for r in republished["releases"][1:]] == [published["meta"]["version"]]

    runs = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"{api}/flow_runs/filter", data=json.dumps({"limit": 10}).encode(),
        headers={"Content-Type": "application/json"}), timeout=10).read())
    completed = {run["deployment_id"] for run in runs if run["state_type"] == "COMPLETED"}
    assert completed == {nightly["id"], backfill["id"]}
    # both publishers went through the one global slot of the server
    publish_limit = get_json(f"{api}/v2/concurrency_limits/apidir-publish")
    assert publish_limit["limit"] == 1 and publish_limit["active_slots"] == 0


class HookRecorder(BaseHTTPRequestHandler):
    """A loopback webhook that records every JSON body POSTed to it."""

    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        HookRecorder.received.append(json.loads(self.rfile.read(length)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_missed_night_automation_calls_the_webhook(prefect_server: dict[str, str]) -> None:
    """`apidir automations apply` on a real server; with its window made short, Prefect itself
    finds no completed nightly and POSTs the documented `run_missed` alert."""
    from tests.test_alerts import documented_schema

    hook = ThreadingHTTPServer(("127.0.0.1", 0), HookRecorder)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    env = {**prefect_server, "APIDIR_ALERT_WEBHOOK_URL":
           f"http://127.0.0.1:{hook.server_address[1]}/hook"}
    api = env["PREFECT_API_URL"]

    def apidir(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def automations() -> list[dict]:
        return json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{api}/automations/filter", data=b"{}",
            headers={"Content-Type": "application/json"}), timeout=10).read())

    try:
        assert ("applied 2 automation(s): apidir-nightly-missed, apidir-probe-shard-zombie"
                in apidir("automations", "apply"))
        [applied] = [a for a in automations() if a["name"] == "apidir-nightly-missed"]
        assert applied["trigger"]["posture"] == "Proactive"
        assert applied["trigger"]["within"] == 93600
        assert applied["trigger"]["expect"] == ["prefect.flow-run.Completed"]
        assert applied["trigger"]["match_related"]["prefect.resource.name"] == "nightly"
        block = get_json(f"{api}/block_types/slug/webhook/block_documents/name/"
                         "apidir-alert-webhook")
        assert applied["actions"][0]["block_document_id"] == block["id"]
        assert "no nightly run completed in 26 hours" in applied["actions"][0]["payload"]
        [zombie] = [a for a in automations() if a["name"] == "apidir-probe-shard-zombie"]
        assert zombie["actions"][0]["message"] == (
            "no heartbeat for 10 minutes; the worker running this shard is gone")

        apidir("automations", "apply", "--within", "10")  # replaces it, with a short window
        assert [a["trigger"]["within"] for a in automations()] == [10, 10]
        deadline = time.monotonic() + 120
        while not HookRecorder.received and time.monotonic() < deadline:
            time.sleep(1)
        assert HookRecorder.received, "the automation never called the webhook"
        alert = HookRecorder.received[0]
        assert alert["event"] == "run_missed" and alert["flow"] == "nightly"
        # the message names the window that fired, not the file's
        assert alert["text"] == "API Directory: no nightly run completed in 10 s"
        assert alert["run"]["message"] == "no nightly run completed in 10 s"
        jsonschema.validate(alert, documented_schema(),
                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    finally:
        hook.shutdown()


def test_an_automation_window_is_said_in_words() -> None:
    from pipeline.operations.automations import window_words

    assert [window_words(s) for s in (93600, 3600, 600, 60, 90, 10, 7.5)] == [
        "26 hours", "1 hour", "10 minutes", "1 minute", "90 s", "10 s", "7.5 s"]


@pytest.mark.parametrize("definition", [
    {"name": "a", "trigger": "every night", "actions": []},
    {"name": "a", "trigger": {"type": "event", "within": 60}, "actions": ["call someone"]},
    {"name": "a", "actions": [{"type": "do-nothing", "message": "in {window}"}]},
])
def test_an_automation_not_as_written_is_refused_in_one_line(definition: dict) -> None:
    """A trigger or action of another shape than Prefect's is an AutomationError naming the
    automation, with a window asked for too: never a traceback from reading the window."""
    from pipeline.operations.automations import AutomationError, resolve

    with pytest.raises(AutomationError, match=r"^automation 'a': "):
        resolve(definition, {}, within=30)


def test_automations_apply_without_a_webhook_applies_the_shard_watch(
    prefect_server: dict[str, str],
) -> None:
    """The README's steps with the webhook left out: the shard watch needs none and is
    applied; the missed-night alert, which calls the webhook, is skipped in one warning line
    saying how to add it (the command used to refuse both)."""
    env = {key: value for key, value in prefect_server.items()
           if key != "APIDIR_ALERT_WEBHOOK_URL"}
    api = env["PREFECT_API_URL"]

    def automation_ids() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for automation in json.loads(urllib.request.urlopen(urllib.request.Request(
                f"{api}/automations/filter", data=b"{}",
                headers={"Content-Type": "application/json"}), timeout=10).read()):
            found.setdefault(automation["name"], set()).add(automation["id"])
        return found

    before = automation_ids()
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "automations", "apply"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "applied 1 automation(s): apidir-probe-shard-zombie"
    assert done.stderr.splitlines() == [
        "apidir: warning: no alert webhook, so apidir-nightly-missed not applied: set "
        "APIDIR_ALERT_WEBHOOK_URL or save the Prefect Secret block 'apidir-alert-webhook', "
        "then run `apidir automations apply` again"]
    after = automation_ids()
    [zombie] = after["apidir-probe-shard-zombie"]
    assert zombie not in before.get("apidir-probe-shard-zombie", set())  # created anew
    # one applied earlier with a webhook is left as it was
    assert after.get("apidir-nightly-missed") == before.get("apidir-nightly-missed")
