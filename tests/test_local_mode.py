"""`apidir run` in Prefect's local mode, as processes: the temporary server it starts ends with
it, however it ends, and leaves its output alone; SIGTERM ends it in one line."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO, WriteEntry
from tests.test_cli_user_errors import sqlite_env

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")

# A bound on every wait below, so that a process that never ends fails the test instead of
# hanging it; no test depends on how fast anything is.
PATIENCE = 120.0


def children(pid: int) -> list[int]:
    """The processes `pid` started, from every one of its threads (Linux: /proc)."""
    found = []
    for thread in os.listdir(f"/proc/{pid}/task"):
        found += map(int, Path(f"/proc/{pid}/task/{thread}/children").read_text().split())
    return found


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (reaped, or a zombie left to its new parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until(done: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + PATIENCE
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def read_to_end(output: int) -> bytes | None:
    """What is left to read on the pipe `output`, once it reaches end-of-file (every writer
    gone); None if it does not within PATIENCE."""
    read, deadline = b"", time.monotonic() + PATIENCE
    while (left := deadline - time.monotonic()) > 0:
        if select.select([output], [], [], left)[0]:
            if not (piece := os.read(output, 65536)):
                return read
            read += piece
    return None


@contextmanager
def run_stopped_in_its_flow(env: dict[str, str], **options: object
                            ) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`apidir run` with its output (standard output and error) to one pipe, stopped
    (SIGSTOP) once its flow has begun, its temporary server answering; with that server's
    process id. Whatever is left of either is killed at the end."""
    run = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run"], cwd=REPO,
                           env=os.environ | env | {"APIDIR_PROBE_ENABLED": "false"},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
                           **options)  # type: ignore[call-overload]
    server = None
    try:
        said = b""
        while b"Beginning flow run" not in said:
            line = run.stdout.readline()
            assert line, f"the run ended before its flow began: {said.decode()}"
            said += line
        run.send_signal(signal.SIGSTOP)  # it cannot finish before the test is ready
        servers = [pid for pid in children(run.pid)
                   if "prefect.server.api.server" in command_line(pid)]
        assert len(servers) == 1, [command_line(pid) for pid in children(run.pid)]
        server = servers[0]
        yield run, server
    finally:
        run.kill()
        run.wait()
        if server is not None and not gone(server):
            os.kill(server, signal.SIGKILL)


def test_a_killed_run_takes_its_temporary_server_with_it(
    tmp_path: Path, data_dir: Path, write_entry: WriteEntry
) -> None:
    """`kill -9` of a run leaves no temporary server behind (Prefect stops it at exit, which
    a killed process never reaches), and the server does not hold the run's output open:
    `apidir run | tee log` ends when the run does."""
    write_entry()
    with run_stopped_in_its_flow(sqlite_env(tmp_path, data_dir)) as (run, server):
        run.kill()
        run.wait()
        assert read_to_end(run.stdout.fileno()) is not None, "the run's output never ended"
        assert wait_until(lambda: gone(server)), f"left running: {command_line(server)}"


@pytest.mark.parametrize("ignored", [False, True], ids=["default", "ignored-by-the-caller"])
def test_sigterm_ends_a_run_in_one_line_with_its_server(
    tmp_path: Path, data_dir: Path, write_entry: WriteEntry, ignored: bool
) -> None:
    """SIGTERM (a service manager, `kill`) ends a run as Ctrl-C does: one line, the shell's
    status for the signal (128 + 15), the temporary server stopped. Prefect's flow turns the
    signal into its TerminationSignal, then re-sends it to the handler it found: the default
    one killed the run where it stood, its server left running; one the caller ignores made
    the TerminationSignal escape as a traceback."""
    write_entry()
    caller = (lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)) if ignored else None
    with run_stopped_in_its_flow(sqlite_env(tmp_path, data_dir),
                                 preexec_fn=caller) as (run, server):
        run.send_signal(signal.SIGTERM)
        run.send_signal(signal.SIGCONT)
        said = read_to_end(run.stdout.fileno())
        assert said is not None, "the run's output never ended"
        assert run.wait() == 143, said.decode()
        lines = said.decode().splitlines()
        assert "apidir: terminated" in lines
        assert [line for line in lines if line.startswith("apidir:")] == ["apidir: terminated"]
        assert "Traceback" not in said.decode()
        assert gone(server)
