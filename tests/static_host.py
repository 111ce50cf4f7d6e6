"""Real static hosts on loopback for the tests: nginx with the shipped site config, `apidir serve`,
and a plain file server for pages that stand for a consumer's site on another origin.

nginx runs unprivileged in the foreground with its prefix, temp folders, pid file and logs
in a scratch folder; the site config is `deploy/nginx/apidir.conf` itself, wrapped in a
minimal main config, with only its `listen` and `root` lines pointed at the test's port
and release folder.
"""

from __future__ import annotations

import functools
import getpass
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import REPO
from tests.postgres_server import free_port

SITE_CONFIG = REPO / "deploy" / "nginx" / "apidir.conf"
MIME_TYPES = Path("/etc/nginx/mime.types")


def nginx_binary() -> str:
    """The nginx executable; `make test` installs the Debian package when it is missing."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if not found or not MIME_TYPES.is_file():
        raise RuntimeError("nginx is not installed: run `make test`, which installs it")
    return found


def wait_for_port(port: int, process: subprocess.Popen, log: Path | None = None) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            detail = log.read_text() if log and log.exists() else ""
            raise RuntimeError(f"server exited with {process.returncode}: {detail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after 20 s")


def site_config(root: Path, port: int) -> str:
    """The shipped site config with its `listen` and `root` lines set for this run."""
    text = SITE_CONFIG.read_text()
    text, listens = re.subn(r"(?m)^(\s*)listen\s+[^;]+;", rf"\1listen 127.0.0.1:{port};", text)
    text, roots = re.subn(r"(?m)^(\s*)root\s+[^;]+;", rf"\1root {root};", text)
    text, maps = re.subn(r"(?m)^(\s*)include\s+/srv/apidir/public/", rf"\1include {root}/", text)
    if (listens, roots, maps) != (1, 1, 1):
        raise RuntimeError(f"{SITE_CONFIG}: expected one listen, one root and one include of "
                           "the release's renamed addresses")
    return text


def main_config(work: Path) -> str:
    # As root, nginx hands requests to a worker of another user unless told otherwise.
    user = f"user {getpass.getuser()};\n" if os.geteuid() == 0 else ""
    temp = "".join(
        f"    {kind}_temp_path {work / 'temp' / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        f"{user}worker_processes 1;\ndaemon off;\npid {work / 'nginx.pid'};\n"
        f"error_log {work / 'error.log'} warn;\n"
        "events { worker_connections 64; }\n"
        "http {\n"
        f"    include {MIME_TYPES};\n"
        "    default_type application/octet-stream;\n"
        f"    access_log {work / 'access.log'};\n"
        f"{temp}"
        f"    include {work / 'apidir.conf'};\n"
        "}\n"
    )


def checked_nginx(root: Path, work: Path, port: int) -> list[str]:
    """The nginx command serving `root` on `port` with the shipped site config beside
    Debian's mime.types, once `nginx -t` passed it with no warning (a warning an operator's
    `nginx -t` would show them too)."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "temp").mkdir(exist_ok=True)
    (work / "apidir.conf").write_text(site_config(root, port))
    (work / "nginx.conf").write_text(main_config(work))
    command = [nginx_binary(), "-p", str(work), "-c", str(work / "nginx.conf")]
    check = subprocess.run([*command, "-t"], capture_output=True, text=True)
    if check.returncode != 0 or "[warn]" in check.stderr:
        raise RuntimeError(f"nginx -t failed or warned:\n{check.stderr}")
    return command


@contextmanager
def run_nginx(root: Path, work: Path) -> Iterator[str]:
    """nginx serving `root` on a free loopback port; yields its base URL."""
    port = free_port()
    command = checked_nginx(root, work, port)
    process = subprocess.Popen(command, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, process, work / "error.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def run_serve(root: Path, work: Path, prefix: Sequence[str] = ()) -> Iterator[str]:
    """`apidir serve` on the release folder, as a real process (its command after `prefix`);
    yields its base URL."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = work / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "pipeline.cli", "serve", "--dir", str(root),
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=output, stderr=subprocess.STDOUT, cwd=REPO,
        )
        try:
            wait_for_port(port, process, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=10)


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def run_other_origin(root: Path) -> Iterator[str]:
    """A plain file server for `root` on a loopback port of its own (another origin than the
    hosts above), with no headers of the release; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(QuietFiles, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
