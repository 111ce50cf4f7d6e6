"""A throwaway PostgreSQL server for the tests, from the distribution's own binaries.

`initdb` makes a fresh cluster in a folder, `pg_ctl` starts it on a free loopback port
(TCP only, no Unix socket, trust authentication, durability off: it is thrown away) and
stops it at the end. PostgreSQL refuses to run as root, so as root every command runs
as the `postgres` system user the Debian package creates (else `nobody`).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

SERVER_OPTIONS = (
    "-c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
)


def postgres_bin_dir() -> Path | None:
    """The newest `/usr/lib/postgresql/<major>/bin` with initdb, else the folder of pg_ctl."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1].parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).resolve().parent if pg_ctl else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_user() -> str | None:
    """Who runs the server: the current user, or a system user when that is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


class PostgresServer:
    """One cluster in `folder`; `start()` returns the URL of its `postgres` database."""

    def __init__(self, folder: Path, bin_dir: Path) -> None:
        self.folder = folder.absolute()
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.bin_dir = bin_dir
        self.user = server_user()
        self.port = 0

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr}{log}")

    def start(self) -> str:
        self.stop()  # a server left over by a killed run would hold the folder
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        if self.user is not None:
            shutil.chown(self.folder, self.user)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-locale")
        self.port = free_port()
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", f"-p {self.port} {SERVER_OPTIONS}", "start")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """Stop the folder's server, if one runs: the pid file of a server whose process is
        gone (killed with its run, or the machine restarted) is nothing to stop, and `pg_ctl`
        would fail on it."""
        if _server_alive(self.data / "postmaster.pid"):
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


def _server_alive(pid_file: Path) -> bool:
    """Whether the process `pid_file` names (its first line) still runs."""
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
        os.kill(pid, 0)
    except (OSError, ValueError):  # no file, no such process, or a file cut short
        return False
    return True


@contextmanager
def running_server(folder: Path) -> Iterator[str | None]:
    """A server's URL for the block's length; None when no PostgreSQL is installed."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        yield None
        return
    server = PostgresServer(folder, bin_dir)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


# CREATE DATABASE options of a collation that ignores punctuation, as glibc's en_US.UTF-8 does:
# it sorts `openai` before `open-meteo`, against their code points.
PUNCTUATION_IGNORED = (
    "LOCALE_PROVIDER icu ICU_LOCALE 'en-u-ka-shifted' LOCALE 'C' TEMPLATE template0")


@contextmanager
def scratch_database(server_url: str, options: str = "") -> Iterator[str]:
    """A new, empty database on the server for the block's length (made with `options` of
    CREATE DATABASE, such as its collation), then dropped."""
    name = f"apidir_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}" {options}'))
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            # FORCE: engines cached for the URL may still hold idle connections.
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

