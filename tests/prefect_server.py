"""A real `prefect server start` on a free loopback port with a home of its own, and the
`prefect` command line pointed at it, as an operator runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.postgres_server import free_port

PREFECT = str(Path(sys.executable).with_name("prefect"))


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def post_json(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def stop(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """Terminate a process started by a test, killing it if it will not go."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)


@contextmanager
def running_prefect_server(home: Path) -> Iterator[dict[str, str]]:
    """The server for the block's length; yields the environment that talks to it."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = (home / "server.log").open("wb")
    server = subprocess.Popen(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                get_json(f"http://127.0.0.1:{port}/api/health")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((home / "server.log").read_text()[-2000:]) from None
                time.sleep(0.5)
        yield env
    finally:
        stop(server)
        log.close()


def prefect(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    """Run `prefect ARGS` in the checkout; its output, after asserting it succeeded."""
    done = subprocess.run([PREFECT, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr
