"""nginx (Debian's package) serving 200 "ok" on many loopback addresses, for the benchmarks.

One listening socket per address (127.0.x.y), all on one port, so every address is
a distinct host to a client. Everything nginx writes (config, pid, logs, temp
folders) stays in a temporary folder; the server stops when the block ends.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONFIG = """
worker_processes {workers};
worker_rlimit_nofile {files};
pid {root}/nginx.pid;
error_log {root}/error.log warn;
daemon off;
events {{ worker_connections {connections}; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    keepalive_requests 100000;
    server {{
{listen}
        location / {{ default_type text/plain; return 200 "ok"; }}
    }}
}}
"""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def nginx_on(hosts: list[str], workers: int = 1, connections: int = 8192) -> Iterator[int]:
    """Run nginx on every address of `hosts` (loopback only); yields the port."""
    if not all(host.startswith("127.") for host in hosts):
        raise ValueError("the benchmark server listens on loopback addresses only")
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise SystemExit("nginx is not installed (make bench installs Debian's package)")
    port = free_port(hosts[0])
    with tempfile.TemporaryDirectory(prefix="apidir-bench-nginx-") as folder:
        root = Path(folder)
        listen = "\n".join(f"        listen {host}:{port} backlog=4096;" for host in hosts)
        config = CONFIG.format(root=root, workers=workers, files=len(hosts) + connections * 2,
                               connections=connections, listen=listen)
        (root / "nginx.conf").write_text(config)
        server = subprocess.Popen(
            [binary, "-p", str(root), "-c", str(root / "nginx.conf")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while not (_accepts(hosts[0], port) and _accepts(hosts[-1], port)):
                if server.poll() is not None:
                    raise SystemExit(f"nginx stopped: {server.stderr.read().decode()[-500:]}")
                if time.monotonic() > deadline:
                    raise SystemExit("nginx did not start within 30 s")
                time.sleep(0.05)
            yield port
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
