"""Prober throughput on loopback: hosts x paths, with and without politeness.

    python -m bench.probe [--hosts 1000 --paths 10 --per-host-interval 0.5 ...]

One aiohttp server (in a child process, so it does not share the prober's event
loop) listens on `--hosts` loopback addresses 127.0.x.y, one socket each, same
port; every address is a distinct host to the prober. The prober runs with
allow_private=True (loopback) twice: "unbounded" (no per-host interval, no
per-host limit) and "polite" (the given limits). Only 127.0.0.0/8 is used.
Bounded: at most --max-seconds per run, then it stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import resource
import ssl
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path

from aiohttp import web

from pipeline.probing.probe import ProbeResult, ProbeSettings, ProbeTarget, probe_all


def addresses(count: int) -> list[str]:
    """127.0.1.1, 127.0.1.2, ... 127.0.1.250, 127.0.2.1, ...: avoids 127.0.0.x and .0/.255."""
    if count > 250 * 254:
        raise SystemExit("at most 63500 hosts")
    return [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(count)]


def raise_open_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            print(f"warning: open-file limit {target} < {needed} wanted", file=sys.stderr)


RETRY_AFTER = 1  # seconds a 429 of the loopback server asks the prober to wait


def serve(
    hosts: list[str],
    ready: Connection,
    served: Synchronized,
    delays: dict[str, float] | None = None,
    answers: dict[str, tuple[float, int]] | None = None,
    tls_folder: Path | None = None,
) -> None:
    """Child process: answer 'ok' on every address until terminated, after the address's
    delay in `delays` (seconds) if it has one. With `answers`, the request's host name picks
    (delay, HTTP status) instead, so one address serves many hosts (a 429 carries
    Retry-After). With `tls_folder`, HTTPS with its cert.pem and key.pem."""
    raise_open_file_limit(len(hosts) + 4096)
    delays = delays or {}
    context = None
    if tls_folder is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(tls_folder / "cert.pem", tls_folder / "key.pem")

    async def handle(request: web.BaseRequest) -> web.Response:
        status, headers = 200, {}
        if answers is not None:
            delay, status = answers.get(request.host.split(":")[0], (0.0, 200))
            if status == 429:
                headers["Retry-After"] = str(RETRY_AFTER)
        else:
            delay = delays.get(request.transport.get_extra_info("sockname")[0])
        if delay:
            await asyncio.sleep(delay)
        served.value += 1
        return web.Response(status=status, headers=headers, text="ok")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = web.Server(handle, access_log=None)
        port = 0
        for host in hosts:  # the first bind picks the port, the others share it
            listener = await loop.create_server(server, host, port, backlog=1024, ssl=context)
            port = listener.sockets[0].getsockname()[1]
        ready.send(port)
        await asyncio.Event().wait()

    asyncio.run(main())


async def probe_wall(
    targets: list[ProbeTarget], settings: ProbeSettings, max_seconds: float
) -> tuple[float, list[ProbeResult]] | None:
    """Wall time and results of one `probe_all` run; None if it ran past `max_seconds`."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(max_seconds):
            results = await probe_all(targets, settings)
    except TimeoutError:
        return None
    return time.perf_counter() - started, results


def outcomes(results: list[ProbeResult]) -> dict[str, int]:
    """Count of results by outcome (unreachable ones by error class)."""
    return dict(Counter(r.outcome if r.outcome != "unreachable" else r.error_class
                        for r in results))


async def run(name: str, targets: list[ProbeTarget], settings: ProbeSettings,
              max_seconds: float) -> None:
    measured = await probe_wall(targets, settings, max_seconds)
    if measured is None:
        print(f"{name:>9}: stopped after {max_seconds:.0f} s (--max-seconds)")
        return
    wall, results = measured
    totals = sorted(r.total_ms for r in results if r.total_ms is not None)
    p50 = statistics.median(totals) if totals else float("nan")
    p99 = totals[int(len(totals) * 0.99) - 1] if totals else float("nan")
    print(
        f"{name:>9}: {len(results)} probes in {wall:6.2f} s = {len(results) / wall:7.0f} probes/s"
        f"  (total_ms p50 {p50:.1f}, p99 {p99:.1f}; {outcomes(results)})"
    )


@contextmanager
def loopback_server(
    hosts: list[str],
    delays: dict[str, float] | None = None,
    answers: dict[str, tuple[float, int]] | None = None,
    tls_folder: Path | None = None,
) -> Iterator[tuple[int, Synchronized]]:
    """`serve` in a child process (not sharing the prober's event loop): (port, served count)."""
    receive, send = mp.Pipe(duplex=False)
    served = mp.Value("q", 0, lock=False)
    server = mp.Process(target=serve, args=(hosts, send, served, delays, answers, tls_folder),
                        daemon=True)
    server.start()
    try:
        if not receive.poll(60):
            raise SystemExit("the server did not start")
        yield receive.recv(), served
    finally:
        server.terminate()
        server.join(10)


def loopback_settings(
    args: argparse.Namespace, timeout: float, attempts: int
) -> ProbeSettings:
    """The prober's settings from the shared options, for loopback hosts: the network guard
    is turned off on purpose (`allow_private`), as it is for the tests."""
    return ProbeSettings(
        allow_private=True,
        global_concurrency=args.global_concurrency,
        per_host_concurrency=args.per_host_concurrency,
        per_host_interval=args.per_host_interval,
        connect_timeout=timeout,
        total_timeout=timeout,
        max_attempts=attempts,
    )


def add_load_arguments(parser: argparse.ArgumentParser, paths: int, max_seconds: float) -> None:
    """The options every probe benchmark shares: hosts x paths, the limits, the bound."""
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--paths", type=int, default=paths, help="URLs per host")
    parser.add_argument("--global-concurrency", type=int, default=64)
    parser.add_argument("--per-host-concurrency", type=int, default=2)
    parser.add_argument("--per-host-interval", type=float, default=0.5)
    parser.add_argument("--max-seconds", type=float, default=max_seconds, help="bound per run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(parser, paths=10, max_seconds=300)
    args = parser.parse_args()

    hosts = addresses(args.hosts)
    raise_open_file_limit(args.global_concurrency * 4 + 1024)
    with loopback_server(hosts) as (port, served):
        targets = [
            ProbeTarget(f"http://{host}:{port}/p{path}", endpoint_id=path)
            for host in hosts
            for path in range(args.paths)
        ]
        base = ProbeSettings(
            allow_private=True,
            global_concurrency=args.global_concurrency,
            max_attempts=1,
        )
        print(
            f"{args.hosts} hosts x {args.paths} paths = {len(targets)} probes, "
            f"global concurrency {args.global_concurrency}"
        )
        unbounded = replace(base, per_host_concurrency=0, per_host_interval=0.0)
        polite = replace(
            base,
            per_host_concurrency=args.per_host_concurrency,
            per_host_interval=args.per_host_interval,
        )
        asyncio.run(run("unbounded", targets, unbounded, args.max_seconds))
        print(
            f"{'polite':>9}: per-host concurrency {args.per_host_concurrency}, "
            f"interval {args.per_host_interval} s "
            f"(floor {(args.paths - 1) * args.per_host_interval:.1f} s by the interval alone)"
        )
        asyncio.run(run("polite", targets, polite, args.max_seconds))
        print(f"server answered {served.value} requests")


if __name__ == "__main__":
    main()
