"""Prefect's local mode as the product runs it: with no PREFECT_API_URL, Prefect starts a
temporary server for the process, and waits for it 20 s by default. A cold start takes about
that on two busy cores, so a run that would have worked failed before its first stage; the
product waits longer, unless the operator set the wait. Nor does the temporary server send
Prefect's telemetry, as under `make run`: its heartbeat, failing on a busy new server's
database, printed a traceback among a run's lines. No Prefect import here: the command line
sets these before Prefect reads its settings."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

STARTUP_WAIT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_WAIT_SECONDS = "120"
TELEMETRY = "PREFECT_SERVER_ANALYTICS_ENABLED"


def patient_startup(environ: MutableMapping[str, str] = os.environ) -> None:
    """The product's wait for the temporary server, and no telemetry from it, where the
    operator set neither."""
    environ.setdefault(STARTUP_WAIT, STARTUP_WAIT_SECONDS)
    environ.setdefault(TELEMETRY, "false")


def started_too_late(error: BaseException) -> bool:
    """Whether `error` is Prefect's temporary server not answering within its wait."""
    return isinstance(error, RuntimeError) and str(error).startswith(
        "Timed out while attempting to connect to ephemeral Prefect API server")


def too_late_line(environ: MutableMapping[str, str] = os.environ) -> str:
    """What to tell the operator when the temporary server did not start in time."""
    return (f"Prefect's temporary server did not start within "
            f"{environ.get(STARTUP_WAIT, '20')} s; set {STARTUP_WAIT} higher, or "
            "PREFECT_API_URL to a running Prefect server")
