"""What one stage of a run hands to the next when it is large (the presented values of every
entry: hundreds of megabytes at 100,000 entries) goes through a file, never as a Prefect
task's result or parameter: Prefect records those in its events and walks them looking for
futures, and its server refuses events of a few megabytes.

A hand-over file is written as the score stage reaches each entry and read back an entry at a
time as the release is published, so neither stage holds every entry's presented values (some
2 GB at 100,000 entries). It holds, a line each: a header (where the last two lines start);
each entry's values; each entry's figures for the run's record (`entry_figure`), which the
run's record reads alone; and the index, a line each: where each entry's line starts, and
the states and verdicts the publisher records for every entry at once."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import BaseModel, TypeAdapter

from pipeline.contract import Lifecycle
from pipeline.judging.changes import CheckedState
from pipeline.judging.health import RunVerdict
from pipeline.judging.present import EntryValues, WrittenValues, checked_state
from pipeline.operations.report import entry_figure

HEADER_BYTES = 64  # the first line, written blank and filled in once the last lines are placed
COPIED_AT_ONCE = 1 << 20  # bytes of a part's lines copied at a time as parts are joined
WRITTEN_AT_ONCE = 1 << 20  # bytes of entries' lines buffered before they are written
ENTRY = TypeAdapter(EntryValues)
VERDICTS = TypeAdapter(dict[str, RunVerdict])


def handover_dir() -> Path:
    """The folder of the runs' hand-over files: private to this user, under the system's
    temporary folder (`TMPDIR`), since a hand-over lives no longer than its run."""
    folder = Path(tempfile.gettempdir()) / f"apidir-handover-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def save_presented(values: Iterable[tuple[str, EntryValues]], run_id: int | None) -> Path:
    """Write each entry's `values` (by id, as they come) to a new file (of run `run_id`) and
    return its path (small enough to be a task's result)."""
    descriptor, name = _new_file(run_id)
    try:
        _write(descriptor, values)
    except BaseException:  # a stage that fails mid-way leaves no half file behind
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _new_file(run_id: int | None) -> tuple[int, str]:
    return tempfile.mkstemp(
        prefix="presented-" if run_id is None else f"run-{run_id}-presented-", suffix=".json",
        dir=handover_dir())


def _write(descriptor: int, values: Iterable[tuple[str, EntryValues]]) -> None:
    offsets: dict[str, int] = {}
    states: dict[str, tuple[str, datetime | None]] = {}
    verdicts: dict[str, RunVerdict] = {}
    figures: dict[str, dict[str, Any]] = {}
    # The offsets counted here, not asked of the file: a buffered file's `tell` asks the
    # system each time (an lseek an entry), and a large buffer writes a span's 140 MB in some
    # 140 calls rather than one an entry.
    with os.fdopen(descriptor, "wb", buffering=WRITTEN_AT_ONCE) as file:
        at = file.write(b" " * (HEADER_BYTES - 1) + b"\n")
        for entry_id, entry in values:
            offsets[entry_id] = at
            at += file.write(_entry_line(entry))
            if entry.status is not None:
                states[entry_id] = _state_form(entry.status)
            if entry.verdict is not None:
                verdicts[entry_id] = entry.verdict
            if entry.status is not None or entry.score is not None:
                figures[entry_id] = entry_figure(entry.status, entry.score)
        _write_last_lines(file, orjson.dumps(figures), orjson.dumps(offsets),
                          orjson.dumps(states), VERDICTS.dump_json(verdicts))


def _state_form(status: Any) -> tuple[str, Any]:
    """What the index records of an entry's status: its state and check time, the time as
    orjson writes the moment (`+00:00`, not `Z`). A JSON form's UTC text is rewritten as
    that, not parsed into a moment to be written again (100,000 times a night)."""
    if isinstance(status, dict):
        checked = status["checkedAt"]
        if checked is None:
            return status["state"], None
        if checked.endswith("Z"):
            return status["state"], checked[:-1] + "+00:00"
    return tuple(checked_state(status))  # orjson: no named tuples


def _entry_line(entry: EntryValues) -> bytes:
    """An entry's line: its values but the lifecycle, as pydantic would write `EntryValues`,
    written by orjson (a third of the cost: most values are in their JSON form already; a
    model among them is dumped by pydantic, times as `Z`)."""
    return orjson.dumps(
        {"status": entry.status, "score": entry.score, "uptime": entry.uptime,
         "endpoints": entry.endpoints, "verdict": entry.verdict, "https": entry.https,
         "cors": entry.cors},
        default=_model_form, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_UTC_Z
        | orjson.OPT_APPEND_NEWLINE)


def _model_form(value: Any) -> Any:
    """What orjson does not write itself: a model, in its JSON form."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not a presented value")


def _write_last_lines(file: IO[bytes], figures: bytes, offsets: bytes, states: bytes,
                      verdicts: bytes) -> None:
    """The figures and the index (each a JSON object) after the entries' lines, and the header
    placing them."""
    at_figures = file.tell()
    file.write(figures + b"\n")
    at_index = file.tell()
    file.write(b"%s\n%s\n%s\n" % (offsets, states, verdicts))
    file.seek(0)
    file.write(orjson.dumps({"figures": at_figures, "index": at_index}))


def join_presented(parts: Iterable[Path], run_id: int | None) -> Path:
    """One hand-over file (of run `run_id`) holding the entries of the hand-over files `parts`,
    in their order, as `save_presented` would have written them at once: each part's lines
    are copied as they are, and its figures, states and verdicts joined as JSON text, never
    parsed (some 0.5 s at 100,000 entries, on the score stage's path); only the offsets are
    read, to be shifted."""
    descriptor, name = _new_file(run_id)
    offsets: dict[str, int] = {}
    figures: list[bytes] = []
    states: list[bytes] = []
    verdicts: list[bytes] = []
    try:
        with os.fdopen(descriptor, "wb") as joined:
            joined.write(b" " * (HEADER_BYTES - 1) + b"\n")
            for part in parts:
                with part.open("rb") as file:
                    at_figures = orjson.loads(file.readline())["figures"]
                    shift = joined.tell() - HEADER_BYTES
                    _copy_lines(file, joined, at_figures - HEADER_BYTES, part)
                    last = [file.readline().rstrip(b"\n") for _ in range(4)]
                if not all(last):
                    raise ValueError(f"{part}: a hand-over file cut short")
                part_figures, part_offsets, part_states, part_verdicts = last
                figures.append(part_figures)
                states.append(part_states)
                verdicts.append(part_verdicts)
                offsets.update((entry_id, at + shift)
                               for entry_id, at in orjson.loads(part_offsets).items())
            _write_last_lines(joined, _joined_objects(figures), orjson.dumps(offsets),
                              _joined_objects(states), _joined_objects(verdicts))
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _copy_lines(file: IO[bytes], joined: IO[bytes], length: int, part: Path) -> None:
    """`length` bytes of `file` from where it stands, appended to `joined`: by the kernel where
    it can (not through this process's memory), else a piece at a time."""
    joined.flush()
    source, target, copied = file.tell(), joined.tell(), 0
    try:
        while copied < length:
            step = os.copy_file_range(file.fileno(), joined.fileno(), length - copied,
                                      source + copied, target + copied)
            if not step:
                raise ValueError(f"{part}: a hand-over file cut short")
            copied += step
    except (AttributeError, OSError):  # not on this system, or not between these files
        file.seek(source + copied)
        joined.seek(target + copied)
        while copied < length:
            piece = file.read(min(length - copied, COPIED_AT_ONCE))
            if not piece:
                raise ValueError(f"{part}: a hand-over file cut short") from None
            joined.write(piece)
            copied += len(piece)
    file.seek(source + length)
    joined.seek(target + length)


def _joined_objects(objects: Iterable[bytes]) -> bytes:
    """JSON objects of disjoint keys, as orjson writes them (no space around their braces),
    joined into one in their order: the text orjson writes for the merged object."""
    members = [text[1:-1] for text in objects if text[1:-1]]
    return b"{" + b",".join(members) + b"}"


def _line_at(file: IO[bytes], key: str) -> Any:
    """The line of a hand-over file that its header places under `key`, parsed."""
    file.seek(0)
    file.seek(orjson.loads(file.readline())[key])
    return orjson.loads(file.readline())


class HandedOver:
    """The presented values a stage saved to a file (`PresentedValues`), each entry's read
    when the publisher reaches it."""

    def __init__(self, file: IO[bytes]) -> None:
        self._file, self._offsets = file, _line_at(file, "index")
        self.states = {
            entry_id: CheckedState(state, None if at is None else datetime.fromisoformat(at))
            for entry_id, (state, at) in orjson.loads(file.readline()).items()
        }
        self.verdicts = VERDICTS.validate_json(file.readline())
        self.lifecycles: dict[str, Lifecycle] = {}

    def _saved_line(self, entry_id: str) -> bytes | None:
        """The entry's line of values as saved; None for an entry not handed over."""
        offset = self._offsets.get(entry_id)
        if offset is None:
            return None
        self._file.seek(offset)
        return self._file.readline()

    def entry(self, entry_id: str) -> EntryValues:
        line = self._saved_line(entry_id)
        values = EntryValues() if line is None else ENTRY.validate_json(line)
        values.lifecycle = self.lifecycles.get(entry_id)
        return values

    def published(self, entry_id: str) -> WrittenValues:
        """The entry's values as saved, in their JSON form (`WrittenValues`)."""
        line, lifecycle = self._saved_line(entry_id), self.lifecycles.get(entry_id)
        if line is None:
            return WrittenValues(lifecycle=lifecycle)
        saved = orjson.loads(line)
        endpoints = saved["endpoints"]
        return WrittenValues(
            status=saved["status"], score=saved["score"], uptime=saved["uptime"],
            endpoints=None if endpoints is None else {
                int(position): status for position, status in endpoints.items()},
            https=saved["https"], cors=saved["cors"], lifecycle=lifecycle)

    def items(self) -> Iterator[tuple[str, EntryValues]]:
        """Every entry's values, in the order they were saved."""
        return ((entry_id, self.entry(entry_id)) for entry_id in self._offsets)


@contextmanager
def handed_over(path: Path) -> Iterator[HandedOver]:
    """The presented values a stage saved to `path`, read while the context lasts."""
    with path.open("rb") as file:
        yield HandedOver(file)


def load_entry_figures(path: Path) -> dict[str, dict[str, Any]]:
    """The entries' figures a stage saved to `path` with the presented values, read alone."""
    with path.open("rb") as file:
        return _line_at(file, "figures")


def discard(path: Path | None) -> None:
    """Remove a hand-over file once its run no longer needs it; a missing one is fine."""
    if path is not None:
        path.unlink(missing_ok=True)
