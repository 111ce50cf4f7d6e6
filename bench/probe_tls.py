"""The prober's own cost on many HTTPS hosts: CPU per URL, peak memory, open files.

    python -m bench.probe_tls [--hosts 3000 --paths 2 --per-host-interval 0.5 ...]
    python -m bench.probe_tls --mix --hosts 3000 --paths 3 [--timeout 3]

Every host is a name `host-NNNNNN.example.net` that the fake DNS of the tests sends to one
loopback HTTPS server (`bench.probe`'s, in a child process, with a wildcard certificate the
prober is told to trust), so each host is a TLS connection of its own, as on the internet.
The server answers at once: the figures are the prober's work, not waiting. Printed: the
wall, the prober process's CPU per URL, its peak RSS (VmHWM, from the start of the run) and
the most file descriptors it had open (sampled every 50 ms).

With `--mix`, the hosts behave as the nightly bench's fake internet (`bench.nightly`): each
answers after its own latency (20-800 ms, log-uniform) with 200 or a share of 401/403/404/429,
a few hang and a few refuse; retries and the confirmations of failures run as in production.
The CPU per URL is then the prober's own on the night's mix, without the flow around it.
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

from bench.makespan import HANG_SECONDS, draw_hosts
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
REFUSING_ADDRESS = "127.0.0.2"  # nothing listens here: connections are refused


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
    parser.add_argument(
        "--mix", action="store_true", help="the nightly bench's mix of answers, hangs and refusals"
    )
    parser.add_argument("--timeout", type=float, default=15.0, help="per attempt (--mix)")
    parser.add_argument("--hang-share", type=float, default=0.005, help="of hosts (--mix)")
    parser.add_argument("--refuse-share", type=float, default=0.005, help="of hosts (--mix)")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    from tests.fake_internet import FakeDNS, self_signed_context

    names = [f"host-{index:06d}.example.net" for index in range(args.hosts)]
    raise_open_file_limit(args.hosts * 2 + 4096)
    with tempfile.TemporaryDirectory() as folder:
        tls = Path(folder)
        self_signed_context(tls, "*.example.net", lifetime=timedelta(hours=2))
        answers, addresses = {name: (0.0, 200) for name in names}, {}
        if args.mix:
            from bench.nightly import STATUS_SHARES

            hosts = draw_hosts(names, args.hang_share, args.refuse_share, args.seed, STATUS_SHARES)
            answers = {
                host.address: (HANG_SECONDS if host.kind == "hangs" else host.latency, host.status)
                for host in hosts
                if host.kind != "refuses"
            }
            addresses = {host.address: REFUSING_ADDRESS for host in hosts if host.kind == "refuses"}
        with loopback_server([SERVER_ADDRESS], answers=answers, tls_folder=tls) as (port, _):
            dns = FakeDNS(
                {name: [[addresses.get(name, SERVER_ADDRESS)]] for name in names}, port=port
            )
            netguard.DefaultResolver = lambda: dns
            production = ProbeSettings()
            settings = ProbeSettings(
                allow_private=True,  # loopback, on purpose, as in the tests
                global_concurrency=args.global_concurrency,
                per_host_concurrency=args.per_host_concurrency,
                per_host_interval=args.per_host_interval,
                ca_file=str(tls / "cert.pem"),
                max_attempts=production.max_attempts if args.mix else 1,
                connect_timeout=min(production.connect_timeout, args.timeout),
                total_timeout=args.timeout,
                confirm_failures=args.mix,
            )
            targets = [
                ProbeTarget(f"https://{name}/p{path}")
                for name in names
                for path in range(args.paths)
            ]
            reset_peak_rss(os.getpid())
            before = cpu_seconds()
            with FileWatch() as files:
                measured = asyncio.run(probe_wall(targets, settings, args.max_seconds))
            cpu = cpu_seconds() - before
    if measured is None:
        raise SystemExit(f"stopped after {args.max_seconds:.0f} s (--max-seconds)")
    wall, results = measured
    print(
        f"{args.hosts} HTTPS hosts{' (mix)' if args.mix else ''} x {args.paths} paths = "
        f"{len(targets)} URLs, {len(results)} results; global "
        f"{args.global_concurrency}, per host {args.per_host_concurrency}, interval "
        f"{args.per_host_interval} s; outcomes {outcomes(results)}"
    )
    print(
        f"wall {wall:.1f} s; CPU {cpu:.1f} s = {cpu / len(targets) * 1000:.3f} ms per URL "
        f"({cpu / len(results) * 1000:.3f} per result); "
        f"peak RSS {peak_rss_mib():.0f} MiB; most open files {files.most}"
    )


if __name__ == "__main__":
    main()
