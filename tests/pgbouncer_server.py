"""A throwaway PgBouncer in front of the tests' PostgreSQL server, from the distribution's
binary (the Debian package `pgbouncer`; its own service is never used).

It listens on a free loopback port (TCP only), lets every user of its auth file in without a
password (`auth_type = trust`, as the server behind it does on loopback), pools by session, and
routes every database name to the same one of the server. PgBouncer refuses to run as root, as
PostgreSQL does, so as root it runs as the same system user (its own `-u`); its config, auth
file, log (what it writes to stderr, with no `logfile` set) and pid file live in a folder of
their own, which goes when it stops.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.postgres_server import free_port, server_user
from tests.static_host import wait_for_port

PGBOUNCER = "/usr/sbin/pgbouncer"
STOP_SECONDS = 10.0


def _config(server_port: int, port: int, folder: Path, ignored: str) -> str:
    """pgbouncer.ini: every database of the server at `server_port`, by session pooling, and
    the startup parameters `ignored` lets through ("" refuses every one it does not track)."""
    return "\n".join([
        "[databases]",
        f"* = host=127.0.0.1 port={server_port}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {folder / 'users.txt'}",
        "pool_mode = session",
        "max_client_conn = 200",
        "default_pool_size = 100",
        f"ignore_startup_parameters = {ignored}",
        f"pidfile = {folder / 'pgbouncer.pid'}",
        "",
    ])


@contextmanager
def running_pgbouncer(folder: Path, database_url: str, ignored: str = "options") -> Iterator[str]:
    """`database_url` (a database of the tests' server) reached through a PgBouncer started
    for the block's length in a folder of its own under `folder`, letting through the startup
    parameters `ignored` names; stopped at the end, leaving no process and no folder."""
    url = make_url(database_url)
    home = folder.absolute() / f"test-pgbouncer-{uuid.uuid4().hex[:12]}"
    home.mkdir(parents=True)
    port = free_port()
    (home / "users.txt").write_text(f'"{url.username}" ""\n')
    (home / "pgbouncer.ini").write_text(_config(url.port or 5432, port, home, ignored))
    user = server_user()
    command = [PGBOUNCER, str(home / "pgbouncer.ini")]
    if user is not None:
        shutil.chown(home, user)
        command[1:1] = ["-u", user]
    log = home / "pgbouncer.log"
    with log.open("wb") as stderr:
        bouncer = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for_port(port, bouncer, log)
        yield url.set(port=port).render_as_string(hide_password=False)
    finally:
        bouncer.terminate()
        try:
            bouncer.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            bouncer.kill()
            bouncer.wait()
        shutil.rmtree(home, ignore_errors=True)
