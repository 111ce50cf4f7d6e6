"""Probe makespan under a realistic mix, against the lower bound the limits allow.

    python -m bench.makespan [--hosts 1000 --paths 5 --hang-share 0.03 --refuse-share 0.03]
    python -m bench.makespan --paths-up-to 10   # each host 1 to 10 URLs, drawn

A loopback delay server (aiohttp, in a child process) answers each host 127.0.x.y
after that host's latency, drawn log-uniformly from 20-800 ms; some hosts hang
(answer long after the timeout) and some refuse (no listener on the address).
The prober runs with its production-like limits (global concurrency, per-host
concurrency and interval, timeout, retries) and the wall is printed against the
lower bound those limits allow:

- the busiest host's serial time: its request starts (retries included) spaced by
  the interval, at most per-host-concurrency requests at a time;
- the total work (every request's least duration) divided by the global concurrency;
- one hanging probe: timeout x attempts plus the shortest backoff between attempts.

The failures are confirmed by a second look once every first look is done (the prober's
default), so the bound is the first looks' floor plus the second looks' floor: those of the
hosts that hang or refuse, each of their URLs once more.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from bench.probe import (
    RETRY_AFTER,
    add_load_arguments,
    addresses,
    loopback_server,
    loopback_settings,
    outcomes,
    probe_wall,
    raise_open_file_limit,
)
from pipeline.probing.probe import ProbeSettings, ProbeTarget

GOAL = 1.3  # wall within 1.3x of the lower bound
HANG_SECONDS = 600.0  # a hanging host answers long after any timeout (the server is stopped first)


@dataclass(frozen=True)
class Host:
    address: str  # an address, or a host name that the fake DNS resolves
    kind: str  # "answers", "limited" (429 with Retry-After), "hangs", "refuses"
    latency: float  # seconds, for hosts that answer
    status: int = 200  # what an answering host answers


def draw_hosts(names: list[str], hang_share: float, refuse_share: float, seed: int,
               statuses: dict[int, float] | None = None) -> list[Host]:
    """Each host's behaviour: hanging, refusing, or answering after a latency drawn
    log-uniformly from 20-800 ms, with the share of hosts in `statuses` answering that
    HTTP status (429: rate limited, with Retry-After) and the rest 200."""
    rng = random.Random(seed)
    hosts = []
    for name in names:
        draw = rng.random()
        kind, status = "answers", 200
        if draw < hang_share:
            kind = "hangs"
        elif draw < hang_share + refuse_share:
            kind = "refuses"
        else:
            threshold = hang_share + refuse_share
            for code, share in (statuses or {}).items():
                threshold += share
                if draw < threshold:
                    kind, status = ("limited" if code == 429 else "answers"), code
                    break
        latency = math.exp(rng.uniform(math.log(0.020), math.log(0.800)))
        hosts.append(Host(name, kind, latency, status))
    return hosts


def requests_of(host: Host, settings: ProbeSettings) -> tuple[int, float]:
    """(requests per probe, least duration of each): a hanging or rate-limited host's probe
    is retried."""
    if host.kind == "answers":
        return 1, host.latency
    if host.kind == "refuses":
        return 1, 0.0  # refused at once, and a refusal is not retried
    if host.kind == "limited":
        return settings.max_attempts, host.latency
    return settings.max_attempts, settings.total_timeout


def probe_cost(host: Host, settings: ProbeSettings) -> float:
    """The least time one probe of `host` takes: its requests plus the shortest waits between
    them (the backoff, or the Retry-After a rate-limited host asks for)."""
    attempts, duration = requests_of(host, settings)
    if host.kind == "limited":
        wait = (attempts - 1) * min(RETRY_AFTER, settings.retry_after_cap)
    else:
        wait = sum(settings.backoff_base * 2 ** (n - 1) / 2 for n in range(1, attempts))
    return attempts * duration + wait


def host_serial_time(host: Host, paths: int, settings: ProbeSettings) -> float:
    """The least time all probes of one host take. Politeness applies per request (a retry
    waits for its turn, a backoff holds no slot): request starts spaced by the interval, at
    most per-host-concurrency requests at a time, and no probe shorter than `probe_cost`."""
    attempts, duration = requests_of(host, settings)
    requests = paths * attempts
    by_interval = (requests - 1) * settings.per_host_interval + duration
    per_host = settings.per_host_concurrency or requests
    by_concurrency = math.ceil(requests / per_host) * duration
    return max(by_interval, by_concurrency, probe_cost(host, settings))


def lower_bound(hosts: list[Host], paths: int | list[int],
                settings: ProbeSettings) -> dict[str, float]:
    """The three floors; the run cannot end before the largest. `paths` is the URLs of every
    host, or of each host in turn."""
    counts = [paths] * len(hosts) if isinstance(paths, int) else paths
    work = sum(count * attempts * duration for count, (attempts, duration)
               in zip(counts, (requests_of(h, settings) for h in hosts), strict=True))
    return {
        "busiest host": max(host_serial_time(h, count, settings)
                            for h, count in zip(hosts, counts, strict=True)),
        "work / global": work / settings.global_concurrency,
        "timeout x attempts": max(probe_cost(h, settings) for h in hosts),
    }


def phased_bound(first: Sequence[tuple[Host, int]], second: Sequence[tuple[Host, int]],
                 settings: ProbeSettings) -> tuple[dict[str, float], float]:
    """The floors of a run whose failures get their second look once every first look is
    done: the first looks' (each host with its URLs), then the second looks' (each failing
    host with its URLs looked at again); the run's floor is the largest of each, added."""
    bound = lower_bound([host for host, _ in first], [count for _, count in first], settings)
    floor = max(bound.values())
    if second:
        again = lower_bound([host for host, _ in second], [count for _, count in second],
                            settings)
        bound |= {f"then second looks: {name}": value for name, value in again.items()}
        floor += max(again.values())
    return bound, floor


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # figures show as they come, also in a log
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(parser, paths=5, max_seconds=300)
    parser.add_argument("--hang-share", type=float, default=0.03)
    parser.add_argument("--refuse-share", type=float, default=0.03)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--attempts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--paths-up-to", type=int, default=0,
                        help="each host 1 to this many URLs, drawn (instead of --paths)")
    args = parser.parse_args()

    hosts = draw_hosts(addresses(args.hosts), args.hang_share, args.refuse_share, args.seed)
    settings = loopback_settings(args, args.timeout, args.attempts)
    listening = [h.address for h in hosts if h.kind != "refuses"]
    delays = {h.address: HANG_SECONDS if h.kind == "hangs" else h.latency for h in hosts}
    raise_open_file_limit(args.global_concurrency * 4 + 1024)
    with loopback_server(listening, delays) as (port, _served):
        rng = random.Random(args.seed)
        paths = ([rng.randint(1, args.paths_up_to) for _ in hosts] if args.paths_up_to
                 else [args.paths] * len(hosts))
        targets = [ProbeTarget(f"http://{h.address}:{port}/p{path}")
                   for h, count in zip(hosts, paths, strict=True) for path in range(count)]
        measured = asyncio.run(probe_wall(targets, settings, args.max_seconds))
    if measured is None:
        raise SystemExit(f"stopped after {args.max_seconds:.0f} s (--max-seconds)")
    wall, results = measured
    kinds = {kind: sum(h.kind == kind for h in hosts) for kind in ("answers", "hangs", "refuses")}
    looked = list(zip(hosts, paths, strict=True))
    failing = [(h, count) for h, count in looked if h.kind in ("hangs", "refuses")]
    bound, floor = phased_bound(looked, failing if settings.confirm_failures else [], settings)
    shape = f"1-{args.paths_up_to}" if args.paths_up_to else str(args.paths)
    print(f"{args.hosts} hosts x {shape} paths = {len(targets)} probes; hosts {kinds}; "
          f"latency 20-800 ms log-uniform")
    print(f"limits: global {args.global_concurrency}, per host {args.per_host_concurrency}, "
          f"interval {args.per_host_interval} s, timeout {args.timeout} s x {args.attempts} "
          f"attempts, backoff base {settings.backoff_base} s")
    print(f"outcomes: {outcomes(results)}")
    print("lower bound: " + ", ".join(f"{name} {value:.2f} s" for name, value in bound.items()))
    verdict = "met" if wall <= floor * GOAL else "NOT met"
    print(f"wall {wall:.2f} s vs bound {floor:.2f} s = {wall / floor:.2f}x "
          f"(goal <= {GOAL}x: {verdict})")


if __name__ == "__main__":
    main()
