"""The `apidir` command: run the pipeline, validate entries, publish, print the contract."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict, replace
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from pipeline.catalogue.entries import CategoryError, load_categories, read_catalog
from pipeline.probing.probe import (
    ProbeResult,
    ProbeSettings,
    ProbeTarget,
    probe_all,
    probe_targets_for,
)
from pipeline.settings import Settings

app = typer.Typer(
    help="API Directory: curate, probe, score and publish the catalogue.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def run() -> None:
    """Run the nightly pipeline once, here, in Prefect's local mode."""
    from flows.nightly import nightly

    result = asyncio.run(nightly())
    typer.echo(
        f"published release {result['version']} with {result['published']} entries "
        f"to {Settings().output_dir}/"
    )
    invalid = result["ingest"]["invalid"]
    if invalid:
        typer.echo(
            f"{len(invalid)} invalid entry file(s) kept their last valid version: "
            f"{', '.join(invalid)} (see `apidir validate`)",
            err=True,
        )


@app.command()
def backfill(
    start: Annotated[datetime, typer.Argument(formats=["%Y-%m-%d"], help="First day (UTC).")],
    end: Annotated[datetime, typer.Argument(formats=["%Y-%m-%d"], help="Last day, included.")],
    entry: Annotated[
        list[str] | None, typer.Option(help="Only this entry id (repeatable).")
    ] = None,
    category: Annotated[
        list[str] | None, typer.Option(help="Only this category's entries (repeatable).")
    ] = None,
    reprobe: Annotated[bool, typer.Option(help="Probe the chosen entries first.")] = False,
) -> None:
    """Recompute the daily rollups and scores of each day in a range, then republish."""
    from flows.backfill import backfill as backfill_flow

    result = asyncio.run(
        backfill_flow(start.date(), end.date(), entries=entry, categories=category,
                      reprobe=reprobe)
    )
    typer.echo(
        f"rolled up {len(result['days'])} days ({result['rows']} rows); "
        f"published release {result['version']} with {result['published']} entries"
    )


@app.command()
def validate(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Entry files or folders (default: every entry under the data folder)."),
    ] = None,
) -> None:
    """Check entry files and report every problem at once; exit status 0 only when all is valid."""
    settings = Settings()
    problems: list[str] = []
    try:
        load_categories(settings.categories_file)
    except CategoryError as exc:
        problems.append(str(exc))
    report = read_catalog(paths or [settings.entries_dir], settings.entries_dir)
    problems.extend(str(p) for p in report.problems)
    if not report.files:
        problems.append(
            f"no entry files found under {', '.join(map(str, paths or [settings.entries_dir]))}"
        )
    for line in problems:
        typer.echo(line, err=True)
    files = len(report.files)
    if problems:
        typer.echo(f"{len(problems)} problem(s) in {files} file(s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"{files} entry file(s) valid")


@app.command()
def probe(
    urls: Annotated[list[str] | None, typer.Argument(help="URLs to probe.")] = None,
    entry: Annotated[list[str] | None, typer.Option(
        "--entry", "-e", help="Probe this entry's targets (repeatable).")] = None,
    allow_private: Annotated[bool, typer.Option(
        "--allow-private", help="Turn the network guard off: private addresses allowed.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON lines.")] = False,
) -> None:
    """Probe entries or URLs now and print each result; nothing is stored."""
    settings = Settings()
    targets = [ProbeTarget(url) for url in urls or []]
    if entry:
        report = read_catalog([settings.entries_dir], settings.entries_dir)
        by_id = {e.id: e for e in report.entries.values()}
        for entry_id in entry:
            found = by_id.get(entry_id)
            if found is None:
                typer.echo(f"no valid entry {entry_id!r} under {settings.entries_dir}", err=True)
                raise typer.Exit(2)
            endpoints = [(i, e.method or "GET", e.path or "/")
                         for i, e in enumerate(found.endpoints or [])]
            planned, skipped = probe_targets_for(found.base_url, endpoints, entry_id=entry_id)
            targets.extend(planned)
            for index, reason in skipped:
                typer.echo(f"{entry_id}: not probed: {endpoints[index][1]} {endpoints[index][2]}"
                           f" ({reason})", err=True)
    if not targets:
        typer.echo("name at least one URL or --entry ID", err=True)
        raise typer.Exit(2)
    probe_settings = settings.probe_settings()
    if allow_private:
        probe_settings = replace(probe_settings, allow_private=True)
    results = asyncio.run(_probe_with_progress(targets, probe_settings))
    for result in results:
        typer.echo(json.dumps(_result_dict(result)) if as_json else _result_line(result))


async def _probe_with_progress(
    targets: list[ProbeTarget], probe_settings: ProbeSettings
) -> list[ProbeResult]:
    """Run the probes with a progress bar on the terminal (standard error)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("probing", total=len({t.url for t in targets}))
        return await probe_all(targets, probe_settings, on_result=lambda _: bar.advance(task))


def _result_dict(result: ProbeResult) -> dict[str, object]:
    data = asdict(result)
    data["checked_at"] = result.checked_at.isoformat()
    return data


def _result_line(result: ProbeResult) -> str:
    detail = result.reason or result.error_class or ""
    code = result.http_status if result.http_status is not None else "---"
    took = f"{result.total_ms:.0f} ms" if result.total_ms is not None else "no response"
    who = f"{result.entry_id}: " if result.entry_id else ""
    extra = f" ({result.error})" if result.error and result.outcome == "unreachable" else ""
    return f"{who}{result.outcome:<11} {code} {took:>12}  {detail:<16} {result.url}{extra}"


@app.command()
def publish() -> None:
    """Score the stored entries from their probe history and publish a new release now,
    without ingesting or probing."""
    from pipeline.operations.stages import publish_now, score_entries_now
    from pipeline.store.tables import utcnow

    settings = Settings()
    now = utcnow()
    presented = score_entries_now(settings, now)
    release, changes = publish_now(settings, presented, now)
    typer.echo(f"published release {release.version} with {release.total_apis} entries"
               + (f"; {len(changes)} state changes" if changes else ""))


@app.command()
def serve(
    folder: Annotated[Path | None, typer.Option(
        "--dir", help="Release folder (default: the output folder).")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Preview the published release locally with the headers its static host sends."""
    from pipeline.release.serve import serve_release

    folder = folder or Settings().output_dir
    if not folder.is_dir():
        typer.echo(f"{folder}: no published release here (run `apidir run` first)", err=True)
        raise typer.Exit(2)
    typer.echo(f"serving {folder}/ at http://{host}:{port}/ (Ctrl+C stops)")
    serve_release(folder, host, port)


@app.command()
def openapi() -> None:
    """Print the OpenAPI 3.1 document of the public interface."""
    from pipeline.release.openapi import render_openapi

    sys.stdout.write(render_openapi())


if __name__ == "__main__":
    app()
