"""Prefect's local mode as the product runs it: with no PREFECT_API_URL, Prefect starts a
temporary server for the process, and waits for it 20 s by default. A cold start takes about
that on two busy cores, so a run that would have worked failed before its first stage; the
product waits longer, unless the operator set the wait. Nor does the temporary server send
Prefect's telemetry, as under `make run`: its heartbeat, failing on a busy new server's
database, printed a traceback among a run's lines. No Prefect import at the top: the command
line sets these before Prefect reads its settings.

The temporary server is tethered to the command (`tether_temporary_server`): Prefect stops it
at exit, which a killed command (`kill -9`, the out-of-memory killer) never reaches, and it
shared the command's standard output, so a server left behind kept `apidir run | tee log`
waiting for ever. Run as a script, this module is the server's side of the tether."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any

STARTUP_WAIT = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
STARTUP_WAIT_SECONDS = "120"
TELEMETRY = "PREFECT_SERVER_ANALYTICS_ENABLED"
# The temporary server's output, in PREFECT_HOME beside its database; kept to about this size.
SERVER_LOG = "temporary-server.log"
SERVER_LOG_BYTES = 1_000_000
# How often the server looks whether the command that started it is still there, and how long
# it gives itself to stop once it is not.
PARENT_WATCH_SECONDS = 1.0
ORPHAN_STOP_SECONDS = 10.0


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
            f"{environ.get(STARTUP_WAIT, '20')} s (its output: {server_log()}); set "
            f"{STARTUP_WAIT} higher, or PREFECT_API_URL to a running Prefect server")


def server_log() -> Path:
    """Where the temporary server's output goes: PREFECT_HOME, where its database is."""
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home) / SERVER_LOG


def tether_temporary_server() -> None:
    """Have Prefect start its temporary server, when it needs one, as a child that stops when
    this process is gone, with its output in `server_log()` rather than on this process's
    standard output and error. Prefect's own launch is kept, its arguments and environment
    included; only its `subprocess.Popen` is this module's (`launch_tethered`)."""
    from prefect.settings import get_current_settings

    if get_current_settings().api.url:  # a Prefect server of the operator's: none started
        return
    from prefect.server.api import server

    launcher = getattr(server, "SubprocessASGIServer", None)
    prefects_launch = getattr(launcher, "_run_uvicorn_command", None)
    if prefects_launch is None or not hasattr(server, "subprocess") \
            or getattr(prefects_launch, "tethered", False):
        return  # a Prefect that starts its server otherwise: it is started as Prefect does

    def launch_tethered(self: Any) -> subprocess.Popen[Any]:
        prefects_subprocess = server.subprocess
        server.subprocess = SimpleNamespace(**{**vars(subprocess), "Popen": popen_tethered})
        try:
            return prefects_launch(self)
        finally:
            server.subprocess = prefects_subprocess

    launch_tethered.tethered = True  # type: ignore[attr-defined]
    launcher._run_uvicorn_command = launch_tethered  # type: ignore[method-assign]


def popen_tethered(args: list[str], **options: Any) -> subprocess.Popen[Any]:
    """Start Prefect's `python -m uvicorn …` server as this module run as a script, told this
    process's id to watch (`serve_until_orphaned`), its output appended to `server_log()`.
    A command line of another shape (a later Prefect's) is started as it is, still away from
    this process's output."""
    if args[1:3] == ["-m", "uvicorn"]:  # -P: this module's folder is not put on the path
        args = [args[0], "-P", __file__, str(os.getpid()), *args[3:]]
    with open_server_log(server_log()) as output:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=output,
                                stderr=subprocess.STDOUT, **options)


def open_server_log(log: Path) -> IO[bytes]:
    """The server log to append to, headed with when and for which process; the last one set
    aside as `<log>.1` once it has grown past SERVER_LOG_BYTES. A log that cannot be written
    (a read-only home) is no reason to fail the run: the output is dropped then."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        if log.exists() and log.stat().st_size > SERVER_LOG_BYTES:
            log.replace(log.with_name(f"{log.name}.1"))
        output = log.open("ab")
    except OSError:
        return open(os.devnull, "wb")
    output.write(f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC: temporary server of process "
                 f"{os.getpid()}\n".encode())
    output.flush()
    return output


def serve_until_orphaned(parent: int, uvicorn_arguments: list[str]) -> None:
    """Run uvicorn here as `python -m uvicorn` would, and stop it once `parent` is no longer
    this process's parent: it died, and the system gave this process another. Watching the
    parent works on every system; Linux's PR_SET_PDEATHSIG would fire when the thread that
    started the server ends, and Prefect starts it from whichever thread first needs it."""
    threading.Thread(target=stop_when_orphaned, args=(parent,), name="orphan-watch",
                     daemon=True).start()
    from uvicorn.main import main

    main(uvicorn_arguments, prog_name="uvicorn")


def stop_when_orphaned(parent: int) -> None:
    """Wait while `parent` is this process's parent; then stop the server as Prefect does
    (SIGTERM: uvicorn shuts down in order), and end the process if that did not."""
    while os.getppid() == parent:
        time.sleep(PARENT_WATCH_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_STOP_SECONDS)
    os._exit(1)


if __name__ == "__main__":
    serve_until_orphaned(int(sys.argv[1]), sys.argv[2:])
