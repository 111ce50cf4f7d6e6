"""What one stage of a run hands to the next when it is large (the presented values of every
entry: tens of megabytes at 100,000 entries) goes through a file, never as a Prefect task's
result or parameter: Prefect records those in its events and walks them looking for futures,
and its server refuses events of a few megabytes.

A hand-over file holds two JSON documents, one a line: first each entry's figures for the
run's record (`entry_figures`), then the presented values. The run's record reads the first
line alone, rather than reading and validating every entry's scores and health again."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any, get_type_hints

import orjson
from pydantic import TypeAdapter

from pipeline.judging.present import Presented
from pipeline.operations.report import entry_figures

PRESENTED = TypeAdapter(Presented)
# Each field's own adapter: the presented values are written a field at a time, so the
# file's text is never one buffer in memory (some 250 MB at 100,000 entries) beside them.
_FIELDS = {name: TypeAdapter(kind) for name, kind in get_type_hints(Presented).items()}


def handover_dir() -> Path:
    """The folder of the runs' hand-over files: private to this user, under the system's
    temporary folder (`TMPDIR`), since a hand-over lives no longer than its run."""
    folder = Path(tempfile.gettempdir()) / f"apidir-handover-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def save_presented(presented: Presented, run_id: int) -> Path:
    """Write `presented` (after its entries' figures) to a new file of run `run_id` and return
    its path (small enough to be a task's result)."""
    descriptor, name = tempfile.mkstemp(
        prefix=f"run-{run_id}-presented-", suffix=".json", dir=handover_dir())
    with os.fdopen(descriptor, "wb") as file:
        file.write(orjson.dumps(entry_figures(presented.statuses, presented.scores)))
        file.write(b"\n")
        for number, field in enumerate(dataclasses.fields(presented)):
            file.write(b"{" if number == 0 else b",")
            file.write(b'"%s":' % field.name.encode())
            file.write(_FIELDS[field.name].dump_json(getattr(presented, field.name)))
        file.write(b"}")
    return Path(name)


def load_presented(path: Path) -> Presented:
    """The presented values a stage saved to `path`."""
    with path.open("rb") as file:
        file.readline()  # the entries' figures
        return PRESENTED.validate_json(file.read())


def load_entry_figures(path: Path) -> dict[str, dict[str, Any]]:
    """The entries' figures a stage saved to `path` with the presented values, read alone."""
    with path.open("rb") as file:
        return orjson.loads(file.readline())


def discard(path: Path | None) -> None:
    """Remove a hand-over file once its run no longer needs it; a missing one is fine."""
    if path is not None:
        path.unlink(missing_ok=True)
