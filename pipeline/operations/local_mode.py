"""Prefect's local mode as the product runs it: with no PREFECT_API_URL, Prefect starts a
temporary server for the process, and waits for it 20 s by default. A cold start takes about
that on two busy cores, so a run that would have worked failed before its first stage; the
product waits longer, unless the operator set the wait. No Prefect import here: the command
line sets this before Prefect reads its settings."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

STARTUP_WAIT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_WAIT_SECONDS = "120"


def patient_startup(environ: MutableMapping[str, str] = os.environ) -> None:
    """The product's wait for the temporary server, where the operator set none."""
    environ.setdefault(STARTUP_WAIT, STARTUP_WAIT_SECONDS)


def started_too_late(error: BaseException) -> bool:
    """Whether `error` is Prefect's temporary server not answering within its wait."""
    return isinstance(error, RuntimeError) and str(error).startswith(
        "Timed out while attempting to connect to ephemeral Prefect API server")


def too_late_line(environ: MutableMapping[str, str] = os.environ) -> str:
    """What to tell the operator when the temporary server did not start in time."""
    return (f"Prefect's temporary server did not start within "
            f"{environ.get(STARTUP_WAIT, '20')} s; set {STARTUP_WAIT} higher, or "
            "PREFECT_API_URL to a running Prefect server")
