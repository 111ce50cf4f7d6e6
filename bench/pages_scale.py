"""Publish with pages at scale: the wall and peak RSS of a release of N entries published
with its reader pages, Markdown and sitemap, against the JSON release alone.

    python -m bench.pages_scale [--sizes 10000 100000] [--workdir var/bench-pages]

The entries are those of the test release (`tests/site_release.py`: the curated catalogue,
scored from a probe history), copied with new ids and names up to N, and each given 30 days
of synthetic daily figures for its trend chart. Every run is a fresh process that streams the
entries into `stream_release` as `publish_release` does (the JSON, the release history, then
`write_site`), twice into the same output folder: the second run replaces a live release of
the same entries, as a nightly does (its entry pages are spliced: only their nightly parts
are drawn again, `spliced` counts them). Peak RSS is the process's high-water mark (VmHWM), also
for each step apart (writing the JSON, the pages, validating and swapping); the largest
worker process's is printed apart. CPU is the process's and its workers' (user and system);
the pages' CPU an entry is that of `write_site` divided by the entries.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from datetime import date
from pathlib import Path
from typing import Any

import orjson

from bench.catalogue import (
    children_cpu,
    peak_rss_mb,
    reset_peak_rss,
    warmed_workers,
    workers_usage,
)

REPO = Path(__file__).resolve().parent.parent
DAYS = 30


class SyntheticTrends(Mapping[str, list[Any]]):
    """30 days of figures for any entry as `entry_trends` reads them (`sent_days`), made when
    asked (the bench holds none of them)."""

    def __init__(self, last_day: date) -> None:
        self.last = last_day.toordinal()

    def __getitem__(self, entry_id: str) -> list[Any]:
        seed = sum(map(ord, entry_id))
        return [
            (self.last - (DAYS - 1 - n), 24, 24 - (seed + n) % 3, 80.0 + (seed * 7 + n * 13) % 400)
            for n in range(DAYS)
        ]

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 1  # not empty: `write_site` takes an empty mapping for no trends at all


def template_entries(workdir: Path) -> list[dict[str, Any]]:
    """The published entries of the test release, kept as JSON under `workdir`."""
    kept = workdir / "templates.json"
    if not kept.exists():
        sys.path.insert(0, str(REPO / "tests"))  # as pytest has it: the tests' own modules
        from tests.site_release import publish_sample_release

        with tempfile.TemporaryDirectory() as folder:
            release = publish_sample_release(Path(folder))
            full = orjson.loads((release.folder / "api" / "apis.json").read_bytes())
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(orjson.dumps(full["apis"]))
    return orjson.loads(kept.read_bytes())


def copied_entries(templates: list[dict[str, Any]], size: int) -> Iterator[dict[str, Any]]:
    """`size` entries in id order, each a template with a new id and name; a successor its
    lifecycle names is the copy of that template in the same round, or in the first round
    past the last one (so every link it makes leads to a page of the release)."""
    count = len(templates)
    serials = {template["id"]: serial for serial, template in enumerate(templates)}

    def copied_id(serial: int) -> str:
        return f"{templates[serial % count]['id']}-{serial:06d}"

    for entry_id, serial in sorted((copied_id(n), n) for n in range(size)):
        entry = dict(templates[serial % count])
        entry["id"], entry["name"] = entry_id, f"{entry['name']} {serial}"
        successor = (entry.get("lifecycle") or {}).get("successor")
        if successor in serials:
            copy = serial - serial % count + serials[successor]
            lifecycle = dict(entry["lifecycle"])
            lifecycle["successor"] = copied_id(copy if copy < size else serials[successor])
            entry["lifecycle"] = lifecycle
        yield entry


def run_publish(workdir: Path, size: int, pages: bool) -> dict[str, Any]:
    """One publish in this process (the `stage` command): figures as a dict."""
    from pipeline.catalogue.entries import load_categories
    from pipeline.release import publish
    from pipeline.store.tables import utcnow

    templates = template_entries(workdir)
    categories = load_categories(REPO / "data" / "categories.yaml")
    output = workdir / f"public-{size}-{'pages' if pages else 'json'}"
    base_url = "https://directory.example"
    now = utcnow()
    version = publish.next_version(output, now.date())
    trends = SyntheticTrends(now.date())
    clock: dict[str, float] = {}
    peaks: dict[str, float] = {}

    def complete(staging: Path, meta: dict[str, Any], counts: Mapping[str, int]) -> None:
        clock["json"] = time.perf_counter() - started
        clock["json_cpu"] = cpu_seconds() - cpu_started
        peaks["json"] = peak_rss_mb()
        summary = publish.release_summary(meta, counts, {}, categories)
        publish.write_history(staging, summary, [], meta, [], [], base_url, pages)
        if pages:
            reset_peak_rss()
            clock["site_from"], clock["site_cpu_from"] = time.perf_counter(), cpu_seconds()
            drawn = publish.write_site(staging, base_url, trends, previous=output)
            clock["spliced"] = drawn.spliced
            clock["site"] = time.perf_counter() - clock.pop("site_from")
            clock["site_cpu"] = cpu_seconds() - clock.pop("site_cpu_from")
            peaks["site"] = peak_rss_mb()
        reset_peak_rss()

    warmed_workers()  # as the nightly flow starts them first
    reset_peak_rss()
    started, cpu_started = time.perf_counter(), cpu_seconds()
    total = publish.stream_release(
        output, copied_entries(templates, size), categories, version, now, base_url, complete
    )
    peaks["validate"] = peak_rss_mb()
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu_started
    workers_mb = workers_usage().peak_rss_mib
    return {
        "size": total,
        "pages": pages,
        "seconds": seconds,
        "cpu": cpu,
        "peak_rss_mb": max(peaks.values()),
        "peaks_mb": peaks,
        "worker_peak_rss_mb": workers_mb,
        **clock,
    }


def cpu_seconds() -> float:
    """User and system CPU of this process and of its workers that have ended."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_cpu()


def measure(workdir: Path, size: int, pages: bool) -> dict[str, Any]:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.pages_scale",
            "stage",
            str(workdir),
            str(size),
            "pages" if pages else "json",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["stage"]:
        workdir, size, kind = sys.argv[2:5]
        print(json.dumps(run_publish(Path(workdir), int(size), kind == "pages")))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "bench-pages")
    parser.add_argument("--kinds", nargs="+", choices=("json", "pages"), default=["json", "pages"])
    parser.add_argument("--runs", type=int, default=2, help="publishes of each kind, one by one")
    args = parser.parse_args()
    workdir = args.workdir.absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    template_entries(workdir)
    print(
        f"{'entries':>8} {'publish':>11} {'run':>3} {'wall':>7} {'CPU':>7} {'JSON part':>15} "
        f"{'pages part':>15} {'pages/entry':>11} {'peak RSS':>9} "
        f"{'JSON/pages/validate':>19} {'worker':>8} {'spliced':>8}"
    )
    for size in args.sizes:
        for pages in [kind == "pages" for kind in args.kinds]:
            shutil.rmtree(
                workdir / f"public-{size}-{'pages' if pages else 'json'}", ignore_errors=True
            )
            for run in range(1, args.runs + 1):
                figures = measure(workdir, size, pages)
                site, per_entry, spliced = f"{'':>15}", f"{'':>11}", f"{'':>8}"
                if "site" in figures:
                    site = f"{figures['site']:5.1f}s/{figures['site_cpu']:5.1f}s CPU"
                    per_entry = f"{figures['site_cpu'] / size * 1000:8.2f} ms"
                    spliced = f"{figures['spliced']:>8,}"
                peaks = "/".join(
                    f"{figures['peaks_mb'].get(step, 0):.0f}"
                    for step in ("json", "site", "validate")
                )
                print(
                    f"{size:>8,} {'with pages' if pages else 'JSON only':>11} {run:>3} "
                    f"{figures['seconds']:6.1f}s {figures['cpu']:6.1f}s "
                    f"{figures['json']:5.1f}s/{figures['json_cpu']:5.1f}s CPU {site} "
                    f"{per_entry} {figures['peak_rss_mb']:5.0f} MiB {peaks:>15} MiB "
                    f"{figures['worker_peak_rss_mb']:4.0f} MiB {spliced}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
