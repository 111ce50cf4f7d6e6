"""The `apidir` command: run the pipeline, validate entries, publish, print the contract."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

from pipeline.catalog import CategoryError, load_categories, read_catalog
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
def publish() -> None:
    """Publish the stored entries as a new release now, without ingesting or probing."""
    from pipeline.publish import publish_release
    from pipeline.store import engine_for, session_scope, utcnow

    settings = Settings()
    categories = load_categories(settings.categories_file)
    with session_scope(engine_for(settings.database_url)) as session:
        release = publish_release(
            session, settings.output_dir, settings.base_url, categories, utcnow()
        )
    typer.echo(f"published release {release.version} with {release.total_apis} entries")


@app.command()
def openapi() -> None:
    """Print the OpenAPI 3.1 document of the public interface."""
    from pipeline.openapi import render_openapi

    sys.stdout.write(render_openapi())


if __name__ == "__main__":
    app()
