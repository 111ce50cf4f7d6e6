"""The prober's own cost on many HTTPS hosts: CPU per URL, peak memory, open files.

    python -m bench.probe_tls [--hosts 3000 --paths 2 --per-host-interval 0.5 ...]

Every host is a name `host-NNNNNN.example.net` that the fake DNS of the tests sends to one
loopback HTTPS server (`bench.probe`'s, in a child process, with a wildcard certificate the
prober is told to trust), so each host is a TLS connection of its own, as on the internet.
The server answers at once: the figures are the prober's work, not waiting. Printed: the
wall, the prober process's CPU per URL, its peak RSS (VmHWM, from the start of the run) and
the most file descriptors it had open (sampled every 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import threading
from datetime import timedelta
from pathlib import Path

from bench.probe import (
    add_load_arguments,
    loopback_server,
    outcomes,
    probe_wall,
    raise_open_file_limit,
)
from bench.processes import reset_peak_rss
from pipeline.probing import netguard
from pipeline.probing.probe import ProbeSettings, ProbeTarget

SERVER_ADDRESS = "127.0.0.1"


class FileWatch:
    """The most file descriptors this process holds at once, sampled in a thread."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FileWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.most = max(self.most, len(os.listdir("/proc/self/fd")))


def peak_rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) / 1024


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(parser, paths=2, max_seconds=600)
    parser.set_defaults(hosts=3000)
    args = parser.parse_args()
    from tests.fake_internet import FakeDNS, self_signed_context

    names = [f"host-{index:06d}.example.net" for index in range(args.hosts)]
    raise_open_file_limit(args.hosts * 2 + 4096)
    with tempfile.TemporaryDirectory() as folder:
        tls = Path(folder)
        self_signed_context(tls, "*.example.net", lifetime=timedelta(hours=2))
        answers = {name: (0.0, 200) for name in names}
        with loopback_server([SERVER_ADDRESS], answers=answers, tls_folder=tls) as (port, _):
            dns = FakeDNS({name: [[SERVER_ADDRESS]] for name in names}, port=port)
            netguard.DefaultResolver = lambda: dns
            settings = ProbeSettings(
                allow_private=True,  # loopback, on purpose, as in the tests
                global_concurrency=args.global_concurrency,
                per_host_concurrency=args.per_host_concurrency,
                per_host_interval=args.per_host_interval,
                ca_file=str(tls / "cert.pem"),
                max_attempts=1,
            )
            targets = [ProbeTarget(f"https://{name}/p{path}")
                       for name in names for path in range(args.paths)]
            reset_peak_rss(os.getpid())
            before = cpu_seconds()
            with FileWatch() as files:
                measured = asyncio.run(probe_wall(targets, settings, args.max_seconds))
            cpu = cpu_seconds() - before
    if measured is None:
        raise SystemExit(f"stopped after {args.max_seconds:.0f} s (--max-seconds)")
    wall, results = measured
    print(f"{args.hosts} HTTPS hosts x {args.paths} paths = {len(targets)} probes; global "
          f"{args.global_concurrency}, per host {args.per_host_concurrency}, interval "
          f"{args.per_host_interval} s; outcomes {outcomes(results)}")
    print(f"wall {wall:.1f} s; CPU {cpu:.1f} s = {cpu / len(targets) * 1000:.2f} ms per URL; "
          f"peak RSS {peak_rss_mib():.0f} MiB; most open files {files.most}")


if __name__ == "__main__":
    main()
