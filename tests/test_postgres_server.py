"""The tests' own PostgreSQL server harness: a folder a killed run left behind is reused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.postgres_server import PostgresServer


def test_a_pid_file_of_a_server_that_is_gone_is_nothing_to_stop(tmp_path: Path) -> None:
    """A server killed with its run (or a machine restarted) leaves `postmaster.pid` naming a
    process that no longer runs: stopping it before a new start succeeds and leaves the file
    to be cleared, where `pg_ctl stop` failed and so every PostgreSQL test of the session."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    data = tmp_path / "data"
    data.mkdir()
    (data / "postmaster.pid").write_text(f"{gone.stdout.strip()}\n{data}\n")
    PostgresServer(tmp_path, Path("/nonexistent-bin")).stop()  # no program is run for it
    assert (data / "postmaster.pid").exists()
