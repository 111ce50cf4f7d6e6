"""Index page weight: the bytes the index page and everything it fetches on load weigh, at
10,000 entries, against the size of the full dataset.

    python -m bench.page_weight [--size 10000] [--runs 7] [--workdir var/bench]

A synthetic catalogue (`bench.synthetic`) is ingested into a SQLite file, given a synthetic
probe history of `--runs` nightly runs (`bench.catalogue`), scored, and published with its
pages as the nightly flow publishes it. The release is served on loopback and Chromium
(Debian's package, driven by Playwright) opens the index; every response until the list is
shown and the network is idle is counted, as sent (no compression) and gzipped as the hosts
send text (level 6).
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.catalogue import stage_history, stage_ingest
from bench.synthetic import write_catalogue
from tests.static_host import run_other_origin

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
BASE_URL = "https://directory.example"


def publish_catalogue(root: Path, database_url: str, output: Path) -> dict[str, Any]:
    """Score the stored catalogue from its history and publish it with pages into `output`."""
    from sqlmodel import Session

    from pipeline.catalogue.entries import load_categories
    from pipeline.operations.stages import score_entries_now
    from pipeline.release.publish import publish_release
    from pipeline.settings import Settings
    from pipeline.store.tables import engine_for, utcnow

    settings = Settings(data_dir=root, database_url=database_url, output_dir=output)
    presented = score_entries_now(settings, utcnow())
    started = time.perf_counter()
    with Session(engine_for(database_url)) as session:
        release = publish_release(session, output, BASE_URL, load_categories(
            settings.categories_file), utcnow(), presented, pages=True).release
        published = release.total_apis
    return {"published": published, "seconds": time.perf_counter() - started}


def index_load(base_url: str, profile: Path) -> dict[str, Any]:
    """Every response Chromium receives while it opens the index and shows the list."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update"],
        )
        try:
            page = context.new_page()
            responses = []
            page.on("response", lambda response: responses.append(response))
            started = time.perf_counter()
            page.goto(f"{base_url}/index.html")
            page.wait_for_selector("#filters", state="visible")
            shown = time.perf_counter() - started
            page.wait_for_load_state("networkidle")
            cards = page.locator("#api-list > li").count()
            counted = page.locator("#result-count").inner_text()
            loaded = [(urlsplit(r.url).path.lstrip("/"), r.status, r.body()) for r in responses]
        finally:
            context.close()
    return {"responses": loaded, "shown_s": shown, "cards": cards, "count_line": counted}


def packed(data: bytes) -> int:
    return len(gzip.compress(data, compresslevel=6, mtime=0))


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7, help="nightly runs of probe history")
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "bench")
    args = parser.parse_args()
    if not CHROMIUM.is_file():
        raise SystemExit(f"bench.page_weight: no Chromium at {CHROMIUM}; "
                         "`make bench` installs Debian's chromium package")
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    root = workdir / f"weight-catalogue-{args.size}"
    database = workdir / f"weight-store-{args.size}.db"
    output = workdir / f"weight-public-{args.size}"
    for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        path.unlink(missing_ok=True)
    url = f"sqlite:///{database}"
    print(f"index page weight: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    write_catalogue(REPO / "data", root, args.size)
    stage_ingest(root, url)
    stage_history(url, args.runs)
    release = publish_catalogue(root, url, output)
    print(f"published {release['published']:,} entries with pages in {release['seconds']:.1f} s")

    with run_other_origin(output) as base_url:  # a plain file server on loopback
        load = index_load(base_url, workdir / "weight-chromium-profile")
    failed = [(path, status) for path, status, _ in load["responses"] if status >= 400]
    if failed:
        raise SystemExit(f"bench.page_weight: the index's requests failed: {failed}")
    print(f"\nthe index at {release['published']:,} entries: list shown "
          f"{load['shown_s'] * 1000:.0f} ms after navigation ({load['cards']} cards drawn, "
          f"\"{load['count_line']}\")")
    print(f"  {'resource':<40} {'bytes':>12} {'gzip':>12}")
    total = total_packed = 0
    for path, _, body in load["responses"]:
        total += len(body)
        total_packed += packed(body)
        print(f"  {path or '(root)':<40} {len(body):>12,} {packed(body):>12,}")
    print(f"  {'page weight (all of the above)':<40} {total:>12,} {total_packed:>12,}")
    full = (output / "api" / "apis.json").read_bytes()
    print(f"  {'api/apis.json (the full dataset)':<40} {len(full):>12,} {packed(full):>12,}")
    print(f"  page weight / full dataset: {total / len(full):.1%} as sent, "
          f"{total_packed / packed(full):.1%} gzipped")
    search = (output / "api" / "search.json").stat().st_size
    print(f"  api/search.json: {search / release['published']:.0f} bytes an entry; "
          f"the full dataset: {len(full) / release['published']:.0f}")
    categories = sorted((output / "categories").glob("*.html"))
    cards = sum(path.stat().st_size for path in categories)
    print(f"  every card rendered into HTML once (the {len(categories)} category pages): "
          f"{cards:,} bytes")


if __name__ == "__main__":
    main()
